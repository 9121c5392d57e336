//! The gated MLP used by experts, shared experts and dense layers:
//! y = down · act(gate · x, up · x) over a batch of rows, where act is SwiGLU (silu(g) ⊙ u) or
//! GPT-OSS's clamped variant, and GPT-OSS's routed experts add a bias after each projection.

use super::buffers::Buffers;
use crate::kernels::{self, Gate, Kernels, XRows};
use crate::model::{ExpertAct, MlpWeights};

/// y ([n, hidden]) = MLP(x ([n, hidden]), in place or picked by row); the widths come from the
/// bound matrices (gate and up [ffn, hidden], down [hidden, ffn]); the intermediates [n, ffn]
/// come from `bufs`.
pub fn mlp(k: &Kernels, bufs: &Buffers, w: &MlpWeights<'_>, x: XRows<'_>, n: usize, y: &mut [f32]) {
    let ffn = w.gate.rows();
    let gate = match w.act {
        ExpertAct::Silu => Gate::Silu,
        ExpertAct::ClampedSwiglu { alpha, limit } => Gate::Clamped { alpha: alpha as f32, limit: limit as f32 },
    };
    // The whole MLP in one call where the path joins it (the intermediate never in f32).
    if w.bias.is_none() && k.fused_mlp(x, n, [w.gate, w.up, w.down], gate, y) {
        return;
    }
    let (mut g, mut u) = (bufs.take(n * ffn), bufs.take(n * ffn));
    match &w.bias {
        // act(gate · x, up · x): x rounded (or quantised) once for both, joined as written
        // where the path can.
        None => k.gated_matmuls(x, n, w.gate, w.up, gate, &mut g, &mut u),
        Some(b) => {
            // Picked rows gathered into a pooled buffer (GPT-OSS's experts take this branch).
            let cols = w.gate.cols();
            let mut picked = bufs.take(if let XRows::Picked { .. } = x { n * cols } else { 0 });
            let x = x.dense(n, cols, &mut picked);
            k.matmuls(x, n, &mut [(w.gate, &mut g[..]), (w.up, &mut u[..])]);
            kernels::add_bias_row(&mut g, b.gate, b.row);
            kernels::add_bias_row(&mut u, b.up, b.row);
            k.gated(&mut g, &u, gate);
            bufs.give(picked);
        }
    }
    k.matmul(w.down, &g, n, y);
    if let Some(b) = &w.bias {
        kernels::add_bias_row(&mut y[..n * w.down.rows()], b.down, b.row);
    }
    bufs.give(g);
    bufs.give(u);
}
