//! The plumbing of one forward step over a batch, so that the layer loop in `mod.rs` reads like
//! the math: which batch rows belong to which sequence, each sequence's attention and routing
//! state (borrowed from its session for the step), the activation buffers (owned by the step),
//! the kernels, and the MoE block's routing.

use super::attention::attention;
use super::delta_net::delta_net;
use super::experts;
use super::ffn::mlp;
use super::lanes::{Lane, Scratch};
use super::mla;
use super::rope::Rope;
use super::router::{self, Routes};
use super::rows::by_rows;
use super::sparsemixer;
use super::{Input, Sequence};
use crate::error::Result;
use crate::kernels::{self, Kernels, XRows};
use crate::model::{AttnWeights, Config, LayerWeights, MlpWeights, Model, MoeWeights, NormKind, NormWeights, Scoring};
use crate::session::RouteRecord;
use std::ops::Range;

/// A step in progress: the batch's rows embedded in `sc.x`, ready for the layers.
pub struct Step<'s> {
    pub c: &'s Config,
    pub k: Kernels,
    pub rope: Rope,
    pub sc: Scratch<'s>,
    pub lanes: Vec<Lane<'s>>,
    /// [n, n_experts] router logits of the current layer.
    gate: Vec<f32>,
    routes: Routes,
}

impl<'s> Step<'s> {
    /// Plan a step over the (already checked) batch of n rows: embed every sequence's input
    /// into x and fill each row's RoPE cos/sin at its own position (`call_end`: see
    /// `one_step`). Fails only when the step's buffers cannot be allocated, before any session
    /// is touched.
    pub fn new(
        model: &'s Model,
        batch: &'s mut [Sequence<'_>],
        n: usize,
        k: Kernels,
        call_end: Option<usize>,
    ) -> Result<Step<'s>> {
        let c = model.config();
        let h = c.hidden_size;
        let rope = Rope::new(c);
        let mut sc = Scratch::new(c, n, model.buffers())?;
        let mut lanes = Vec::with_capacity(batch.len());
        let mut row = 0;
        for q in batch.iter_mut() {
            let rows = row..row + q.input.len(h);
            row = rows.end;
            let s = &mut *q.session;
            // x = embed(tokens)
            let x = &mut sc.x[rows.start * h..rows.end * h];
            match q.input {
                Input::Tokens(ids) => by_rows(x, h, |t, xt| model.weights().embed.row_to_f32(ids[t] as usize, xt)),
                Input::Embeddings(e) => x.copy_from_slice(e),
            }
            if c.scales.embedding != 1.0 {
                let m = c.scales.embedding as f32;
                x.iter_mut().for_each(|v| *v *= m);
            }
            let end = call_end.unwrap_or(s.pos + rows.len());
            rope.extend_table(s.pos, rows.len(), end, &mut sc.cos, &mut sc.sin);
            let top_k = q.opts.routing.top_k.unwrap_or(c.moe.top_k); // validated by the checks
            let (kv, rec, rng, trace) = (&mut s.kv, &mut s.rec, &mut s.rng, s.trace.as_mut());
            lanes.push(Lane { kv, rec, pos0: s.pos, rows, top_k, mode: q.opts.routing.mode, rng, trace });
        }
        Ok(Step { c, k, rope, sc, lanes, gate: Vec::new(), routes: Routes::default() })
    }

    /// Rows in the step.
    fn n(&self) -> usize {
        self.lanes.last().map_or(0, |l| l.rows.end)
    }

    /// xn = norm(x) with parameters `w` (the family's `NormKind`).
    pub fn norm(&mut self, w: &NormWeights<'_>) {
        let nh = self.n() * self.c.hidden_size;
        norm_rows(self.c, w, &self.sc.x[..nh], &mut self.sc.xn[..nh]);
    }

    /// x += out (· the residual multiplier, when the family has one).
    pub fn residual(&mut self) {
        let nh = self.n() * self.c.hidden_size;
        let (x, out) = (&mut self.sc.x[..nh], &self.sc.out[..nh]);
        let m = self.c.scales.residual as f32;
        if m == 1.0 {
            x.iter_mut().zip(out).for_each(|(a, b)| *a += b);
        } else {
            x.iter_mut().zip(out).for_each(|(a, b)| *a += m * b);
        }
    }

    /// out = attention(xn) of layer `l`, appending each sequence's K/V (or MLA latent) to its
    /// cache.
    pub fn attention(&mut self, l: usize, lw: &LayerWeights<'_>) {
        match &lw.attn {
            AttnWeights::Gqa(_) => attention(self.c, &self.k, lw, l, &self.rope, &mut self.lanes, &mut self.sc),
            AttnWeights::Mla(_) => mla::attention(self.c, &self.k, lw, l, &self.rope, &mut self.lanes, &mut self.sc),
            // The DeltaNet linear attention, advancing each sequence's recurrent state.
            AttnWeights::DeltaNet(w) => delta_net(self.c, &self.k, w, lw.wo, l, &mut self.lanes, &mut self.sc),
        }
    }

    /// out = mlp(xn) (a dense layer).
    pub fn mlp(&mut self, w: &MlpWeights<'_>) {
        let n = self.n();
        mlp(&self.k, self.sc.pool, w, XRows::Dense(&self.sc.xn[..n * self.c.hidden_size]), n, &mut self.sc.out);
    }

    /// out = moe(xn) of layer `l`: router logits for every row at once; each sequence then
    /// chooses its experts with its own k, mode and RNG (recording them when traced); the chosen
    /// experts run once over all the rows that chose them.
    pub fn moe(&mut self, l: usize, mw: &MoeWeights<'_>) {
        let (n, h) = (self.n(), self.c.hidden_size);
        let xn = &self.sc.xn[..n * h];
        router::logits(&self.k, mw.router, xn, n, &mut self.gate);
        if let Some(b) = mw.router_bias {
            // GPT-OSS: logits = W·x + b, the bias counting for the choice and the weights.
            kernels::add_bias(&mut self.gate, b);
        }
        self.routes.clear();
        let e = mw.router.rows();
        let m = &self.c.moe;
        let rule = router::Rule {
            renormalise: m.norm_topk_prob,
            scoring: m.scoring,
            bias: mw.choice_bias.as_deref(),
            groups: m.groups,
            scale: m.routed_scaling as f32,
        };
        for lane in self.lanes.iter_mut() {
            let r = lane.rows.clone();
            let mut choice = router::Choice { k: lane.top_k, mode: lane.mode, rng: &mut *lane.rng };
            let gate = &self.gate[r.start * e..r.end * e];
            match m.scoring {
                Scoring::SparseMixer { jitter_eps } => {
                    sparsemixer::select(gate, e, jitter_eps, &mut choice, &mut self.routes)
                }
                _ => router::select(gate, e, &rule, &mut choice, &mut self.routes),
            }
            if let Some(trace) = lane.trace.as_deref_mut() {
                record(trace, &self.routes, r, l, lane.pos0);
            }
        }
        let out = &mut self.sc.out[..n * h];
        experts::moe(&self.k, self.sc.pool, mw, xn, &self.routes, m.weights_on_input, out);
    }

    /// End the layers: the residual stream [n, hidden] (give it back to the model's buffers
    /// when done with it); the other buffers go back now.
    pub fn into_residual(mut self) -> Vec<f32> {
        std::mem::take(&mut self.sc.x)
    }
}

/// y = norm(x) row by row ([n, hidden] both): RMSNorm, or LayerNorm with its bias.
pub fn norm_rows(c: &Config, w: &NormWeights<'_>, x: &[f32], y: &mut [f32]) {
    let eps = c.rms_norm_eps as f32;
    match (c.norm, w.bias) {
        (NormKind::LayerNorm, Some(b)) => kernels::layernorm(x, w.weight, b, eps, y),
        // Gain norm_offset + w (Qwen3-Next's zero-centred norms: 1 + w).
        _ => kernels::rmsnorm_shifted(x, w.weight, c.norm_offset as f32, eps, y),
    }
}

/// Append the routing of one sequence's rows `rows` (batch rows; positions from `pos0`).
fn record(trace: &mut Vec<RouteRecord>, routes: &Routes, rows: Range<usize>, layer: usize, pos0: usize) {
    let first = rows.start;
    for t in rows {
        let (experts, weights) = routes.row(t);
        trace.push(RouteRecord {
            position: pos0 + t - first,
            layer,
            experts: experts.to_vec(),
            weights: weights.to_vec(),
        });
    }
}
