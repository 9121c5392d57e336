//! Self-attention of one layer over a batch of new tokens: q/k/v projections (+ bias), q/k
//! RMSNorm (per head or over the whole projection), optional clipping, RoPE, KV-cache append,
//! causal (optionally sliding-window) GQA attention, output projection.
//! Mirrors `MixtralAttention` / `Qwen2MoeAttention` / `Qwen3MoeAttention` / `OlmoeAttention`.

use super::rope::Rope;
use crate::kernels::{self, Mat};
use crate::model::{Config, LayerWeights, QkNorm};
use crate::state::KvCache;
use rayon::prelude::*;

/// Buffers the attention block works in (slices of the session scratch), n tokens each.
pub struct AttnBuffers<'s> {
    /// [n, hidden] normed input
    pub xn: &'s [f32],
    /// [n, n_heads·head_dim]
    pub q: &'s mut [f32],
    /// [n, n_kv_heads·head_dim]
    pub k: &'s mut [f32],
    pub v: &'s mut [f32],
    /// [n, n_heads·head_dim]
    pub att: &'s mut [f32],
    /// [n, hidden] result
    pub out: &'s mut [f32],
}

fn rmsnorm_heads(x: &mut [f32], w: Mat<'_>, eps: f32) {
    // x is [n, heads·dim] and w is [dim] (per head) or [heads·dim] (whole projection):
    // rmsnorm_inplace normalises consecutive chunks of w.len() either way.
    kernels::rmsnorm_inplace(x, w, eps);
}

/// Run attention for `n` tokens at positions `pos0..pos0+n` of layer `layer`, appending their
/// K/V to `kv`. `cos`/`sin` are the RoPE tables of those positions.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    c: &Config,
    w: &LayerWeights<'_>,
    layer: usize,
    rope: &Rope,
    cos: &[f32],
    sin: &[f32],
    kv: &mut KvCache,
    pos0: usize,
    n: usize,
    b: AttnBuffers<'_>,
) {
    let (h, hd) = (c.hidden_size, c.head_dim);
    let (nq, nkv) = (c.n_heads * hd, c.n_kv_heads * hd);
    let eps = c.rms_norm_eps as f32;

    // Projections: q = xn·Wqᵀ (+bq), k, v likewise.
    kernels::matmul(w.wq.mat(), nq, h, b.xn, n, b.q);
    kernels::matmul(w.wk.mat(), nkv, h, b.xn, n, b.k);
    kernels::matmul(w.wv.mat(), nkv, h, b.xn, n, b.v);
    for (buf, bias) in [(&mut *b.q, &w.bq), (&mut *b.k, &w.bk), (&mut *b.v, &w.bv)] {
        if let Some(bias) = bias {
            kernels::add_bias(&mut buf[..], bias.mat());
        }
    }
    // q/k normalisation (Qwen3: per head; OLMoE: whole projection), before RoPE.
    if c.qk_norm != QkNorm::None {
        if let (Some(qn), Some(kn)) = (&w.q_norm, &w.k_norm) {
            rmsnorm_heads(&mut b.q[..n * nq], qn.mat(), eps);
            rmsnorm_heads(&mut b.k[..n * nkv], kn.mat(), eps);
        }
    }
    // OLMoE clip_qkv.
    if let Some(clip) = c.clip_qkv {
        let clip = clip as f32;
        for buf in [&mut *b.q, &mut *b.k, &mut *b.v] {
            buf[..].iter_mut().for_each(|x| *x = x.clamp(-clip, clip));
        }
    }
    // RoPE on every head of q and k.
    let half = rope.half();
    for t in 0..n {
        let (ct, st) = (&cos[t * half..(t + 1) * half], &sin[t * half..(t + 1) * half]);
        for head in b.q[t * nq..(t + 1) * nq].chunks_exact_mut(hd) {
            rope.apply(head, ct, st);
        }
        for head in b.k[t * nkv..(t + 1) * nkv].chunks_exact_mut(hd) {
            rope.apply(head, ct, st);
        }
        kv.write(layer, pos0 + t, &b.k[t * nkv..(t + 1) * nkv], &b.v[t * nkv..(t + 1) * nkv]);
    }

    // Attention: each (token, head) pair is independent.
    let window = c.layers[layer].sliding_window;
    let group = c.n_heads / c.n_kv_heads;
    let scale = 1.0 / (hd as f32).sqrt();
    let kv_ref: &KvCache = kv;
    let q: &[f32] = b.q;
    b.att[..n * nq].par_chunks_mut(hd).enumerate().for_each(|(idx, out)| {
        let (t, head) = (idx / c.n_heads, idx % c.n_heads);
        let p = pos0 + t;
        let lo = window.map(|w| (p + 1).saturating_sub(w)).unwrap_or(0);
        let qh = &q[t * nq + head * hd..t * nq + (head + 1) * hd];
        let kvh = head / group;
        let mut scores: Vec<f32> = (lo..=p).map(|j| kv_ref.k_dot(layer, j, kvh, qh) * scale).collect();
        kernels::softmax(&mut scores);
        out.fill(0.0);
        for (j, &pj) in (lo..=p).zip(&scores) {
            kv_ref.v_axpy(layer, j, kvh, pj, out);
        }
    });

    // Output projection.
    kernels::matmul(w.wo.mat(), h, nq, b.att, n, b.out);
}
