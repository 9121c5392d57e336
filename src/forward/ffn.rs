//! The gated MLP used by experts, shared experts and dense layers:
//! y = down · act(gate · x, up · x) over a batch of rows, where act is SwiGLU (silu(g) ⊙ u) or
//! GPT-OSS's clamped variant, and GPT-OSS's routed experts add a bias after each projection.

use crate::kernels::{self, Kernels};
use crate::model::{ExpertAct, MlpWeights};
use rayon::prelude::*;

/// Elements per task of a parallel activation.
const ACT_CHUNK: usize = 1 << 15;

/// y ([n, hidden]) = MLP(x ([n, hidden])); the widths come from the bound matrices (gate and
/// up [ffn, hidden], down [hidden, ffn]).
pub fn mlp(k: &Kernels, w: &MlpWeights<'_>, x: &[f32], n: usize, y: &mut [f32]) {
    let ffn = w.gate.rows();
    let mut g = vec![0f32; n * ffn];
    let mut u = vec![0f32; n * ffn];
    k.matmul(w.gate, x, n, &mut g);
    k.matmul(w.up, x, n, &mut u);
    if let Some(b) = &w.bias {
        kernels::add_bias_row(&mut g, b.gate, b.row);
        kernels::add_bias_row(&mut u, b.up, b.row);
    }
    // The activation, element by element: over the pool in chunks when it is large (a dense
    // layer's prefill), so it does not leave the other threads waiting.
    let act = |(g, u): (&mut [f32], &[f32])| match w.act {
        ExpertAct::Silu => kernels::swiglu(g, u),
        ExpertAct::ClampedSwiglu { alpha, limit } => kernels::clamped_swiglu(g, u, alpha as f32, limit as f32),
    };
    if crate::threads::current() > 1 && g.len() > ACT_CHUNK {
        g.par_chunks_mut(ACT_CHUNK).zip(u.par_chunks(ACT_CHUNK)).for_each(act);
    } else {
        act((&mut g, &u));
    }
    k.matmul(w.down, &g, n, y);
    if let Some(b) = &w.bias {
        kernels::add_bias_row(&mut y[..n * w.down.rows()], b.down, b.row);
    }
}
