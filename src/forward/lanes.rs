//! What a forward step works on, shared by the step's plumbing (`step`) and the blocks: each
//! sequence's lane (its rows, KV cache and routing state) and the step's activation buffers.

use super::buffers::Buffers;
use super::router::RoutingMode;
use crate::error::Result;
use crate::model::Config;
use crate::rng::Rng;
use crate::session::{KvCache, RecurrentState, RouteRecord};
use std::ops::Range;

/// One sequence's share of a step: its rows of the batch (sequences are listed in row order,
/// rows contiguous and ascending), its KV cache and position, and its routing state.
pub struct Lane<'s> {
    pub kv: &'s mut KvCache,
    /// The DeltaNet layers' state (empty for attention-only models).
    pub rec: &'s mut RecurrentState,
    /// Position of the sequence's first new token.
    pub pos0: usize,
    pub rows: Range<usize>,
    pub top_k: usize,
    pub mode: RoutingMode,
    pub rng: &'s mut Rng,
    pub trace: Option<&'s mut Vec<RouteRecord>>,
}

/// Activation buffers of a step over n rows (the rows of every sequence), taken from `pool` and
/// given back to it when dropped.
pub struct Scratch<'p> {
    /// Where the buffers come from and go back to (the model's), for the blocks' own too.
    pub pool: &'p Buffers,
    /// [n, hidden] residual stream
    pub x: Vec<f32>,
    /// [n, hidden] normed input of a block
    pub xn: Vec<f32>,
    /// [n, n_heads·head_dim]
    pub q: Vec<f32>,
    /// [n, n_kv_heads·head_dim]
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    /// [n, n_heads·head_dim] attention output before the output projection
    pub att: Vec<f32>,
    /// [n, hidden] block output
    pub out: Vec<f32>,
    /// [n, rot_dim/2] RoPE cos and sin of each row's position
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
    /// MLA only (empty otherwise; `forward::mla`): [n, q_lora_rank] the low-rank queries
    pub q_low: Vec<f32>,
    /// [n, kv_lora_rank + qk_rope] each row's latent and rope key
    pub latent: Vec<f32>,
    /// [n, n_heads·(kv_lora_rank + qk_rope)] the absorbed queries
    pub q_abs: Vec<f32>,
    /// [n, n_heads·kv_lora_rank] attention outputs over latents
    pub att_lat: Vec<f32>,
    /// DeltaNet layers (empty otherwise): [n, 2·key_dim + 2·value_dim] projections q k v z,
    pub dn_qkvz: Vec<f32>,
    /// [n, 2·n_v_heads] projections b a,
    pub dn_ba: Vec<f32>,
    /// [n, conv_dim] conv output (q k v),
    pub dn_mixed: Vec<f32>,
    /// [n, value_dim] delta-rule output.
    pub dn_core: Vec<f32>,
}

impl<'p> Scratch<'p> {
    /// The buffers of a step of n rows, taken from `pool`, or `Error::OutOfMemory` (they grow
    /// with the input). Their contents are unspecified: every block writes what it reads later
    /// (the whole test suite passes with reused buffers filled with NaN).
    pub fn new(c: &Config, n: usize, pool: &'p Buffers) -> Result<Scratch<'p>> {
        let (h, q) = (c.hidden_size, c.n_heads * c.head_dim);
        // (k/v width, q_lora_rank, latent width, latent rank, attention output width)
        let (kv, q_low, lat, rank, att) = match &c.mla {
            Some(m) => {
                let lat = m.kv_lora_rank + m.qk_rope_head_dim;
                (0, m.q_lora_rank, lat, m.kv_lora_rank, q.max(c.n_heads * m.v_head_dim))
            }
            None => (c.n_kv_heads * c.head_dim, 0, 0, 0, q),
        };
        let dn = c.delta_net.filter(|_| c.n_delta_net_layers() > 0);
        let dn_width = |f: fn(&crate::model::DeltaNetConfig) -> usize| dn.as_ref().map_or(0, f);
        let buffer = |n: usize, width: usize| {
            pool.try_take(n.saturating_mul(width), &|| format!("activations of {n} rows × {width}"))
        };
        Ok(Scratch {
            pool,
            dn_qkvz: buffer(n, dn_width(|d| 2 * d.key_dim() + 2 * d.value_dim()))?,
            dn_ba: buffer(n, dn_width(|d| 2 * d.n_v_heads))?,
            dn_mixed: buffer(n, dn_width(|d| d.conv_dim()))?,
            dn_core: buffer(n, dn_width(|d| d.value_dim()))?,
            x: buffer(n, h)?,
            xn: buffer(n, h)?,
            q: buffer(n, q)?,
            k: buffer(n, kv)?,
            v: buffer(n, kv)?,
            att: buffer(n, att)?,
            out: buffer(n, h)?,
            cos: Vec::new(),
            sin: Vec::new(),
            q_low: buffer(n, q_low)?,
            latent: buffer(n, lat)?,
            q_abs: buffer(n, c.n_heads * lat)?,
            att_lat: buffer(n, c.n_heads * rank)?,
        })
    }
}

impl Drop for Scratch<'_> {
    /// Every buffer back to the pool (the residual stream too, unless taken).
    fn drop(&mut self) {
        let all = [
            &mut self.x,
            &mut self.xn,
            &mut self.q,
            &mut self.k,
            &mut self.v,
            &mut self.att,
            &mut self.out,
            &mut self.q_low,
            &mut self.latent,
            &mut self.q_abs,
            &mut self.att_lat,
            &mut self.dn_qkvz,
            &mut self.dn_ba,
            &mut self.dn_mixed,
            &mut self.dn_core,
        ];
        all.into_iter().for_each(|v| self.pool.give(std::mem::take(v)));
    }
}
