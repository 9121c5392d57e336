//! The MoE block with batched contiguous dispatch: count tokens per expert, prefix-sum offsets,
//! gather each expert's rows, run every selected expert once over all its rows (its weights are
//! read once per step), scatter back weighted. Adds the Qwen2-MoE shared expert, scaled by
//! sigmoid(shared_expert_gate · x). Mirrors `MixtralSparseMoeBlock` / `Qwen2MoeSparseMoeBlock`.

use super::ffn::Mlp;
use super::router::Routes;
use crate::kernels;
use crate::model::{Config, MoeWeights};

/// out ([n, hidden]) = Σ_chosen w·expert(xn) (+ shared expert) for the n rows of `xn`. Each row
/// brings its own number of choices (`routes.row(t)`), so rows of sequences with different
/// top-k share one pass.
pub fn moe(c: &Config, mw: &MoeWeights<'_>, xn: &[f32], n: usize, routes: &Routes, out: &mut [f32]) {
    let (h, e_count, slots) = (c.hidden_size, c.moe.n_experts, routes.experts.len());
    debug_assert_eq!(routes.rows(), n);
    // Count and prefix-sum: slot ranges per expert.
    let mut offsets = vec![0usize; e_count + 1];
    for &e in &routes.experts {
        offsets[e as usize + 1] += 1;
    }
    for e in 0..e_count {
        offsets[e + 1] += offsets[e];
    }
    // Gather: slot → (token, weight), rows grouped by expert, tokens ascending within an expert.
    let mut fill = offsets.clone();
    let mut slot_token = vec![0usize; slots];
    let mut slot_weight = vec![0f32; slots];
    let mut gathered = vec![0f32; slots * h];
    for t in 0..n {
        let (experts, weights) = routes.row(t);
        for (&e, &wgt) in experts.iter().zip(weights) {
            let s = fill[e as usize];
            fill[e as usize] += 1;
            slot_token[s] = t;
            slot_weight[s] = wgt;
            gathered[s * h..(s + 1) * h].copy_from_slice(&xn[t * h..(t + 1) * h]);
        }
    }
    out[..n * h].fill(0.0);
    let mut y = vec![0f32; slots * h];
    // One pass per selected expert, in expert order (a fixed accumulation order per token).
    for e in 0..e_count {
        let (lo, hi) = (offsets[e], offsets[e + 1]);
        if lo == hi {
            continue;
        }
        let (Some(gate), Some(up), Some(down)) = (mw.gate.expert(e), mw.up.expert(e), mw.down.expert(e)) else {
            continue;
        };
        let mlp = Mlp { gate: gate.mat(), up: up.mat(), down: down.mat(), ffn: c.moe.expert_ffn, hidden: h };
        mlp.forward(&gathered[lo * h..hi * h], hi - lo, &mut y[lo * h..hi * h]);
        for s in lo..hi {
            let (t, wgt) = (slot_token[s], slot_weight[s]);
            for (o, &v) in out[t * h..(t + 1) * h].iter_mut().zip(&y[s * h..(s + 1) * h]) {
                *o += wgt * v;
            }
        }
    }
    if let Some(shared) = &mw.shared {
        let fs = c.moe.shared_expert_ffn;
        let mlp = Mlp { gate: shared.gate.mat(), up: shared.up.mat(), down: shared.down.mat(), ffn: fs, hidden: h };
        let mut ys = vec![0f32; n * h];
        mlp.forward(xn, n, &mut ys);
        for t in 0..n {
            let scale = match &mw.shared_gate {
                Some(g) => {
                    let z = kernels::dot_row(g.mat(), 0, h, &xn[t * h..(t + 1) * h]);
                    1.0 / (1.0 + (-z).exp())
                }
                None => 1.0,
            };
            for (o, &v) in out[t * h..(t + 1) * h].iter_mut().zip(&ys[t * h..(t + 1) * h]) {
                *o += scale * v;
            }
        }
    }
}
