//! Self-attention of one layer over a batch of new tokens from one or more sequences: q/k/v
//! projections (+ bias), q/k RMSNorm (per head or over the whole projection) and optional
//! clipping over all rows at once; then per sequence RoPE at its own positions, KV-cache append
//! and causal (optionally sliding-window) GQA attention over its own cache; the output
//! projection again over all rows.
//! Mirrors `MixtralAttention` / `Qwen2MoeAttention` / `Qwen3MoeAttention` / `OlmoeAttention`.

use super::rope::Rope;
use crate::kernels::{self, Mat};
use crate::model::{Config, LayerWeights, QkNorm};
use crate::state::KvCache;
use rayon::prelude::*;
use std::ops::Range;

/// One sequence's share of the batch: its KV cache, the position of its first new token and
/// its rows of the batch (sequences are listed in row order, rows contiguous and ascending).
pub struct SeqKv<'s> {
    pub kv: &'s mut KvCache,
    pub pos0: usize,
    pub rows: Range<usize>,
}

/// Buffers the attention block works in (slices of the scratch), n rows each.
pub struct AttnBuffers<'s> {
    /// [n, hidden] normed input
    pub xn: &'s [f32],
    /// [n, rot_dim/2] RoPE cos and sin of each row's position
    pub cos: &'s [f32],
    pub sin: &'s [f32],
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

/// Run attention over the n rows of `b.xn` (the rows of every sequence in `seqs`), appending
/// each sequence's K/V to its cache.
pub fn attention(
    c: &Config,
    w: &LayerWeights<'_>,
    layer: usize,
    rope: &Rope,
    seqs: &mut [SeqKv<'_>],
    b: AttnBuffers<'_>,
) {
    let (h, hd) = (c.hidden_size, c.head_dim);
    let (nq, nkv) = (c.n_heads * hd, c.n_kv_heads * hd);
    let n = b.xn.len() / h;
    let eps = c.rms_norm_eps as f32;

    // Projections over all rows: q = xn·Wqᵀ (+bq), k, v likewise.
    kernels::matmul(w.wq.mat(), nq, h, b.xn, n, b.q);
    kernels::matmul(w.wk.mat(), nkv, h, b.xn, n, b.k);
    kernels::matmul(w.wv.mat(), nkv, h, b.xn, n, b.v);
    let (q, k, v) = (&mut b.q[..n * nq], &mut b.k[..n * nkv], &mut b.v[..n * nkv]);
    for (buf, bias) in [(&mut *q, &w.bq), (&mut *k, &w.bk), (&mut *v, &w.bv)] {
        if let Some(bias) = bias {
            kernels::add_bias(buf, bias.mat());
        }
    }
    // q/k normalisation (Qwen3: per head; OLMoE: whole projection), before RoPE.
    if c.qk_norm != QkNorm::None {
        if let (Some(qn), Some(kn)) = (&w.q_norm, &w.k_norm) {
            rmsnorm_heads(q, qn.mat(), eps);
            rmsnorm_heads(k, kn.mat(), eps);
        }
    }
    // OLMoE clip_qkv.
    if let Some(clip) = c.clip_qkv {
        let clip = clip as f32;
        for buf in [&mut *q, &mut *k, &mut *v] {
            buf.iter_mut().for_each(|x| *x = x.clamp(-clip, clip));
        }
    }
    // Per sequence: RoPE on every head of q and k at its positions, then append K/V to its cache.
    let half = rope.half();
    for s in seqs.iter_mut() {
        for t in s.rows.clone() {
            let (ct, st) = (&b.cos[t * half..(t + 1) * half], &b.sin[t * half..(t + 1) * half]);
            for head in q[t * nq..(t + 1) * nq].chunks_exact_mut(hd) {
                rope.apply(head, ct, st);
            }
            for head in k[t * nkv..(t + 1) * nkv].chunks_exact_mut(hd) {
                rope.apply(head, ct, st);
            }
            let p = s.pos0 + (t - s.rows.start);
            s.kv.write(layer, p, &k[t * nkv..(t + 1) * nkv], &v[t * nkv..(t + 1) * nkv]);
        }
    }

    // Attention: each (row, head) pair is independent; a row attends over its own sequence's
    // cache up to its own position.
    let window = c.layers[layer].sliding_window;
    let group = c.n_heads / c.n_kv_heads;
    let scale = 1.0 / (hd as f32).sqrt();
    let seqs: &[SeqKv<'_>] = seqs;
    let q: &[f32] = q;
    b.att[..n * nq].par_chunks_mut(hd).enumerate().for_each(|(idx, out)| {
        let (t, head) = (idx / c.n_heads, idx % c.n_heads);
        let s = &seqs[seqs.partition_point(|s| s.rows.end <= t)];
        let kv: &KvCache = s.kv;
        let p = s.pos0 + (t - s.rows.start);
        let lo = window.map(|w| (p + 1).saturating_sub(w)).unwrap_or(0);
        let qh = &q[t * nq + head * hd..t * nq + (head + 1) * hd];
        let kvh = head / group;
        let mut scores: Vec<f32> = (lo..=p).map(|j| kv.k_dot(layer, j, kvh, qh) * scale).collect();
        kernels::softmax(&mut scores);
        out.fill(0.0);
        for (j, &pj) in (lo..=p).zip(&scores) {
            kv.v_axpy(layer, j, kvh, pj, out);
        }
    });

    // Output projection over all rows.
    kernels::matmul(w.wo.mat(), h, nq, b.att, n, b.out);
}
