//! The Gated DeltaNet token mixer of one layer over a batch (Qwen3-Next
//! `Qwen3NextGatedDeltaNet.forward`): projections over all rows at once; then per sequence the
//! causal depthwise conv (SiLU) continuing from its conv state, the per-head inputs of the delta
//! rule (l2-normalised q and k, β = sigmoid(b), g = −exp(A_log)·softplus(a + dt_bias)), and the
//! rule itself — chunked for several new tokens, recurrent for one, as transformers runs them —
//! advancing the sequence's state; finally the gated RMSNorm (plain gain · norm(o) · silu(z)) per
//! value head and the output projection over all rows. The projections' rows were de-grouped by
//! the converter to [q; k; v; z] and [b; a] (value heads in transformers' order).

use super::delta_rule::{self, HeadRun};
use super::lanes::{Lane, Scratch};
use crate::kernels::reference::silu;
use crate::kernels::{Kernels, Mat};
use crate::model::{Config, DeltaInProj, DeltaNetConfig, DeltaNetWeights};
use rayon::prelude::*;

/// out = delta_net(xn) of layer `layer` for the n rows of every lane, advancing each lane's state.
pub fn delta_net(
    c: &Config,
    kern: &Kernels,
    w: &DeltaNetWeights<'_>,
    out: Mat<'_>,
    layer: usize,
    lanes: &mut [Lane<'_>],
    b: &mut Scratch,
) {
    let Some(d) = c.delta_net else { unreachable!("the loader builds DeltaNet layers only with `c.delta_net`") };
    let n = lanes.last().map_or(0, |s| s.rows.end);
    let (conv_w, vd) = (d.conv_dim(), d.value_dim());
    // [q k v z] and [b a] of every row: q k v of row t at t·qkv_stride, z at z_at + t·z_stride.
    let xn = &b.xn[..n * c.hidden_size];
    let (qkv_stride, z_at, z_stride) = match w.in_proj {
        DeltaInProj::Fused(qkvz) => {
            kern.matmuls(xn, n, &mut [(qkvz, &mut b.dn_qkvz[..]), (w.in_ba, &mut b.dn_ba[..])]);
            (conv_w + vd, conv_w, conv_w + vd)
        }
        DeltaInProj::Split { qkv, z } => {
            let (qkv_out, z_out) = b.dn_qkvz[..n * (conv_w + vd)].split_at_mut(n * conv_w);
            kern.matmuls(xn, n, &mut [(qkv, qkv_out), (z, z_out), (w.in_ba, &mut b.dn_ba[..])]);
            (conv_w, n * conv_w, vd)
        }
    };
    for lane in lanes.iter_mut() {
        let Some(state) = lane.rec.layer_write(layer) else {
            unreachable!("a session holds a recurrent state for every DeltaNet layer of its model")
        };
        let rows = lane.rows.clone();
        let mixed = &mut b.dn_mixed[rows.start * d.conv_dim()..rows.end * d.conv_dim()];
        // mixed = silu(conv(q k v)), continuing from the conv state (from `state.from` on the
        // call's first write) and leaving the new one in `state.to`.
        let x = &b.dn_qkvz[rows.start * qkv_stride..rows.end * qkv_stride];
        conv(&d, &w.conv, x, qkv_stride, state.from.map(|f| &f.conv[..]), &mut state.to.conv, mixed);
        let ba = &b.dn_ba[rows.start * 2 * d.n_v_heads..rows.end * 2 * d.n_v_heads];
        let core = &mut b.dn_core[rows.start * vd..rows.end * vd];
        let run = Heads { d: &d, w, kern, mixed, ba };
        run.all(state.from.map(|f| &f.delta[..]), &mut state.to.delta, core);
    }
    // o = w ⊙ rmsnorm(o) ⊙ silu(z) per value head, then out = o·W_outᵀ.
    let eps = c.rms_norm_eps as f32;
    for t in 0..n {
        let z = &b.dn_qkvz[z_at + t * z_stride..][..vd];
        let o = &mut b.dn_core[t * vd..(t + 1) * vd];
        for (oh, zh) in o.chunks_exact_mut(d.v_head_dim).zip(z.chunks_exact(d.v_head_dim)) {
            gated_norm(oh, zh, &w.norm, eps);
        }
    }
    kern.matmul(out, &b.dn_core[..n * vd], n, &mut b.out);
}

/// Causal depthwise conv of T rows (the first conv_dim columns of each `stride`-wide row of `x`)
/// with taps `w` [conv_dim, kernel], SiLU, into `out` [T, conv_dim]; the conv state [kernel-1,
/// conv_dim] (the inputs before the first row) is read from `from`, else from `state`, and
/// `state` becomes the last kernel-1 inputs.
fn conv(
    d: &DeltaNetConfig,
    w: &[f32],
    x: &[f32],
    stride: usize,
    from: Option<&[f32]>,
    state: &mut [f32],
    out: &mut [f32],
) {
    let (ch, kk) = (d.conv_dim(), d.conv_kernel);
    let t_new = x.len() / stride;
    // window = state rows, then the new rows: [(kernel-1) + T, conv_dim]
    let mut window = Vec::with_capacity((kk - 1 + t_new) * ch);
    window.extend_from_slice(from.unwrap_or(state));
    for row in x.chunks_exact(stride) {
        window.extend_from_slice(&row[..ch]);
    }
    for (t, o) in out.chunks_exact_mut(ch).enumerate() {
        for (c, oc) in o.iter_mut().enumerate() {
            let taps = &w[c * kk..(c + 1) * kk];
            let s: f32 = taps.iter().enumerate().map(|(j, &wj)| wj * window[(t + j) * ch + c]).sum();
            *oc = silu(s);
        }
    }
    state.copy_from_slice(&window[t_new * ch..]);
}

/// One lane's inputs to the delta rule of every value head: `mixed` [T, conv_dim] (q, k, v
/// after the conv), `ba` [T, 2·nv].
struct Heads<'a> {
    d: &'a DeltaNetConfig,
    w: &'a DeltaNetWeights<'a>,
    kern: &'a Kernels,
    mixed: &'a [f32],
    ba: &'a [f32],
}

impl Heads<'_> {
    /// Run every head over the T rows, the states [nv, dk, dv] read from `from` when given
    /// (else from `to`) and left in `to`; `core` [T, vd] receives the outputs.
    fn all(&self, from: Option<&[f32]>, to: &mut [f32], core: &mut [f32]) {
        let (dk, dv, nv) = (self.d.k_head_dim, self.d.v_head_dim, self.d.n_v_heads);
        let one_head = |(h, s): (usize, &mut [f32])| self.head(h, from.map(|f| &f[h * dk * dv..(h + 1) * dk * dv]), s);
        let per_head: Vec<Vec<f32>> = if crate::threads::current() > 1 {
            to.par_chunks_mut(dk * dv).enumerate().map(one_head).collect()
        } else {
            to.chunks_mut(dk * dv).enumerate().map(one_head).collect()
        };
        for (h, o) in per_head.iter().enumerate() {
            for (t, ot) in o.chunks_exact(dv).enumerate() {
                core[t * nv * dv + h * dv..t * nv * dv + (h + 1) * dv].copy_from_slice(ot);
            }
        }
    }

    /// Value head h over the T rows: its outputs [T, dv]; its state s [dk, dv] (read from
    /// `from` when given) advanced.
    fn head(&self, h: usize, from: Option<&[f32]>, s: &mut [f32]) -> Vec<f32> {
        let (d, w) = (self.d, self.w);
        let (dk, dv, nv) = (d.k_head_dim, d.v_head_dim, d.n_v_heads);
        let t_new = self.ba.len() / (2 * nv);
        let kh = h / (nv / d.n_k_heads);
        let scale = 1.0 / (dk as f32).sqrt();
        let (kd, ch) = (d.key_dim(), d.conv_dim());
        let mut q = Vec::with_capacity(t_new * dk);
        let mut k = Vec::with_capacity(t_new * dk);
        let mut v = Vec::with_capacity(t_new * dv);
        let (mut g, mut beta) = (Vec::with_capacity(t_new), Vec::with_capacity(t_new));
        for t in 0..t_new {
            let row = &self.mixed[t * ch..(t + 1) * ch];
            q.extend(l2norm(&row[kh * dk..(kh + 1) * dk]).map(|x| x * scale));
            k.extend(l2norm(&row[kd + kh * dk..kd + (kh + 1) * dk]));
            v.extend_from_slice(&row[2 * kd + h * dv..2 * kd + (h + 1) * dv]);
            let (bt, at) = (self.ba[t * 2 * nv + h], self.ba[t * 2 * nv + nv + h]);
            beta.push(1.0 / (1.0 + (-bt).exp()));
            g.push(-w.a_log[h].exp() * softplus(at + w.dt_bias[h]));
        }
        let run = HeadRun { q: &q, k: &k, v: &v, g: &g, beta: &beta };
        let mut o = vec![0f32; t_new * dv];
        if t_new == 1 {
            delta_rule::recurrent(self.kern, &run, from, s, &mut o);
        } else {
            if let Some(f) = from {
                s.copy_from_slice(f);
            }
            delta_rule::chunked(self.kern, &run, s, &mut o);
        }
        o
    }
}

/// x / sqrt(Σx² + 1e-6) (transformers' `l2norm`, FLA's convention).
fn l2norm(x: &[f32]) -> impl Iterator<Item = f32> + '_ {
    let inv = 1.0 / (x.iter().map(|v| v * v).sum::<f32>() + 1e-6).sqrt();
    x.iter().map(move |v| v * inv)
}

/// torch's softplus (β = 1, linear above 20).
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// o ← w ⊙ (o / sqrt(mean(o²) + eps)) ⊙ silu(z) (`Qwen3NextRMSNormGated`, norm before gate).
fn gated_norm(o: &mut [f32], z: &[f32], w: &[f32], eps: f32) {
    let inv = 1.0 / (o.iter().map(|v| v * v).sum::<f32>() / o.len() as f32 + eps).sqrt();
    for ((x, &zi), &wi) in o.iter_mut().zip(z).zip(w) {
        *x = wi * (*x * inv) * silu(zi);
    }
}
