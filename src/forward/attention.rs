//! Self-attention of one layer over a batch of new tokens from one or more sequences: q/k/v
//! projections (+ bias), q/k RMSNorm (per head or over the whole projection) and optional
//! clipping over all rows at once; then per sequence RoPE at its own positions, KV-cache append
//! and causal (optionally sliding-window) GQA attention over its own cache; the output
//! projection (+ bias) again over all rows. GPT-OSS's attention sinks join each softmax.
//! Mirrors `MixtralAttention` / `Qwen2MoeAttention` / `Qwen3MoeAttention` / `OlmoeAttention`,
//! and `Qwen3NextAttention` (zero-centred q/k norms, the output × sigmoid(gate)),
//! `HunYuanMoEV1Attention` (per-head q/k norms after RoPE) and `Llama4TextAttention` (NoPE layers
//! whose queries take their position's temperature, a weightless q/k norm after RoPE on the others,
//! chunked attention: `LayerSpec::first_key`).

use super::gqa_attend::{self, Shape};
use super::lanes::{Lane, Scratch};
use super::rope::Rope;
use crate::kernels::{self, Kernels, Mat};
use crate::model::{AttnTemperature, AttnWeights, Config, GqaWeights, LayerWeights, QkNorm};

fn rmsnorm_heads(x: &mut [f32], w: Mat<'_>, shift: f32, eps: f32) {
    // x is [n, heads·dim] and w is [dim] (per head) or [heads·dim] (whole projection):
    // rmsnorm_inplace normalises consecutive chunks of w.len() either way.
    kernels::rmsnorm_inplace_shifted(x, w, shift, eps);
}

/// Attention over the n rows of `b.xn` (the rows of every sequence in `seqs`) into `b.out`,
/// appending each sequence's K/V to its cache.
pub fn attention(
    c: &Config,
    kern: &Kernels,
    lw: &LayerWeights<'_>,
    layer: usize,
    rope: &Rope,
    seqs: &mut [Lane<'_>],
    b: &mut Scratch,
) {
    let AttnWeights::Gqa(w) = &lw.attn else { unreachable!("Step::attention sends only GQA layers here") };
    let n = seqs.last().map_or(0, |s| s.rows.end);
    // q, k, v = xn·W{q,k,v}ᵀ (+ bias, q/k norm, clipping), over all rows at once.
    project_qkv(c, kern, w, n, b);
    // Per sequence: RoPE at its own positions, then K/V appended to its cache.
    rope_and_cache(c, layer, rope, w, seqs, b);
    // att = softmax(q·Kᵀ / √d)·V for each (row, head) over the row's own cache.
    attend(c, kern, lw, layer, seqs, b, n);
    // att ×= sigmoid(xn·W_gateᵀ) (Qwen3-Next's output gate; q is spent, its buffer takes the gate).
    if let Some(gate) = w.gate {
        kern.matmul(gate, &b.xn[..n * c.hidden_size], n, &mut b.q);
        let att = &mut b.att[..n * c.n_heads * c.head_dim];
        att.iter_mut().zip(&b.q).for_each(|(a, &g)| *a *= 1.0 / (1.0 + (-g).exp()));
    }
    // out = att·Woᵀ (+ bias), over all rows.
    kern.matmul(lw.wo, &b.att[..n * c.n_heads * c.head_dim], n, &mut b.out);
    if let Some(bo) = lw.bo {
        kernels::add_bias(&mut b.out[..n * c.hidden_size], bo);
    }
}

/// q, k, v ([n, heads·head_dim]) of the n rows of `b.xn`: projections, biases (Qwen2-MoE),
/// q/k RMSNorm before RoPE (Qwen3: per head; OLMoE: whole projection), clipping (OLMoE).
fn project_qkv(c: &Config, kern: &Kernels, w: &GqaWeights<'_>, n: usize, b: &mut Scratch) {
    let (nq, nkv) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
    let eps = c.rms_norm_eps as f32;
    let xn = &b.xn[..n * c.hidden_size];
    kern.matmuls(xn, n, &mut [(w.wq, &mut b.q[..]), (w.wk, &mut b.k[..]), (w.wv, &mut b.v[..])]);
    let (q, k, v) = (&mut b.q[..n * nq], &mut b.k[..n * nkv], &mut b.v[..n * nkv]);
    for (buf, bias) in [(&mut *q, &w.bq), (&mut *k, &w.bk), (&mut *v, &w.bv)] {
        if let Some(bias) = bias {
            kernels::add_bias(buf, *bias);
        }
    }
    if c.qk_norm != QkNorm::None && !c.qk_norm_after_rope {
        if let (Some(qn), Some(kn)) = (w.q_norm, w.k_norm) {
            rmsnorm_heads(q, qn, c.norm_offset as f32, eps);
            rmsnorm_heads(k, kn, c.norm_offset as f32, eps);
        }
    }
    if let Some(clip) = c.clip_qkv {
        let clip = clip as f32;
        for buf in [&mut *q, &mut *k, &mut *v] {
            buf.iter_mut().for_each(|x| *x = x.clamp(-clip, clip));
        }
    }
}

/// Values of q and k from which their rows' RoPE runs on the pool (a prefill's; a decode step's
/// rows stay on the calling thread).
const ROW_PAR_MIN_VALUES: usize = 1 << 16;

/// RoPE on every head of q and k at each row's position, then their per-head RMSNorm when it
/// follows RoPE (Hunyuan-MoE's weighted one, Llama-4's weightless one) — or, on Llama-4's NoPE
/// layers, neither, the queries scaled by their position's temperature instead — then each row's
/// K/V into its sequence's cache.
fn rope_and_cache(c: &Config, layer: usize, rope: &Rope, w: &GqaWeights<'_>, seqs: &mut [Lane<'_>], b: &mut Scratch) {
    let hd = c.head_dim;
    let (nq, nkv) = (c.n_heads * hd, c.n_kv_heads * hd);
    let half = rope.half();
    let post_norm = match (w.q_norm, w.k_norm) {
        (Some(qn), Some(kn)) if c.qk_norm_after_rope => Some((qn, kn)),
        _ => None,
    };
    let weightless = c.qk_norm == QkNorm::Weightless;
    let no_rope = c.layers[layer].no_rope;
    let (shift, eps) = (c.norm_offset as f32, c.rms_norm_eps as f32);
    // Each row's position, then every row on its own (on the pool for a prefill), then the
    // caches in order.
    let n = seqs.iter().map(|s| s.rows.end).max().unwrap_or(0);
    let mut pos = vec![0usize; n];
    for s in seqs.iter() {
        s.rows.clone().for_each(|t| pos[t] = s.pos0 + (t - s.rows.start));
    }
    let (cos, sin) = (&b.cos, &b.sin);
    let one = |(t, (qt, kt)): (usize, (&mut [f32], &mut [f32]))| {
        if no_rope {
            if let Some(temp) = c.attn_temperature {
                let f = temperature(temp, pos[t]);
                qt.iter_mut().for_each(|x| *x *= f);
            }
            return;
        }
        let (ct, st) = (&cos[t * half..(t + 1) * half], &sin[t * half..(t + 1) * half]);
        qt.chunks_exact_mut(hd).chain(kt.chunks_exact_mut(hd)).for_each(|head| rope.apply(head, ct, st));
        if let Some((qn, kn)) = post_norm {
            rmsnorm_heads(qt, qn, shift, eps);
            rmsnorm_heads(kt, kn, shift, eps);
        } else if weightless {
            qt.chunks_exact_mut(hd).chain(kt.chunks_exact_mut(hd)).for_each(|head| unit_rms(head, eps));
        }
    };
    let (q, k) = (&mut b.q[..n * nq], &mut b.k[..n * nkv]);
    if n * (nq + nkv) >= ROW_PAR_MIN_VALUES && crate::threads::current() > 1 {
        use rayon::prelude::*;
        q.par_chunks_exact_mut(nq).zip(k.par_chunks_exact_mut(nkv)).enumerate().for_each(one);
    } else {
        q.chunks_exact_mut(nq).zip(k.chunks_exact_mut(nkv)).enumerate().for_each(one);
    }
    for s in seqs.iter_mut() {
        for t in s.rows.clone() {
            s.kv.write(layer, pos[t], &b.k[t * nkv..(t + 1) * nkv], &b.v[t * nkv..(t + 1) * nkv]);
        }
    }
}

/// Llama-4's query scale at position p: ln(1 + floor((p + 1) / floor_scale)) · attn_scale + 1, in
/// f32 as `Llama4TextAttention` computes it.
fn temperature(t: AttnTemperature, p: usize) -> f32 {
    let steps = ((p as f32 + 1.0) / t.floor_scale as f32).floor();
    steps.ln_1p() * t.attn_scale as f32 + 1.0
}

/// x · rsqrt(mean(x²) + eps): RMSNorm without a weight (`Llama4TextWeightlessRMSNorm`).
fn unit_rms(x: &mut [f32], eps: f32) {
    let ss: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let inv = (1.0 / (ss / x.len() as f64 + f64::from(eps)).sqrt()) as f32;
    x.iter_mut().for_each(|v| *v *= inv);
}

/// att ([n, heads·head_dim]) = softmax(q·Kᵀ·scale (+ sink))·V for each (row, head) over the
/// row's own cache, from the layer's first key on (`gqa_attend`).
fn attend(
    c: &Config,
    kern: &Kernels,
    w: &LayerWeights<'_>,
    layer: usize,
    seqs: &[Lane<'_>],
    b: &mut Scratch,
    n: usize,
) {
    let spec = &c.layers[layer];
    let shape = Shape {
        head_dim: c.head_dim,
        n_heads: c.n_heads,
        group: c.n_heads / c.n_kv_heads,
        scale: c.scales.attention.map_or(1.0 / (c.head_dim as f32).sqrt(), |a| a as f32),
        first_key: &|p| spec.first_key(p),
        sinks: w.sinks.as_deref(),
    };
    gqa_attend::attend(kern, &shape, layer, seqs, &b.q, &mut b.att[..n * c.n_heads * c.head_dim], b.pool);
}
