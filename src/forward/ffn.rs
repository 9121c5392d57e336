//! The gated MLP (SwiGLU) used by experts, shared experts and dense layers:
//! y = down · (silu(gate · x) ⊙ (up · x)), over a batch of rows.

use crate::kernels::{self, Kernels};
use crate::model::MlpWeights;

/// y ([n, hidden]) = MLP(x ([n, hidden])); the widths come from the bound matrices (gate and
/// up [ffn, hidden], down [hidden, ffn]).
pub fn mlp(k: &Kernels, w: &MlpWeights<'_>, x: &[f32], n: usize, y: &mut [f32]) {
    let ffn = w.gate.rows();
    let mut g = vec![0f32; n * ffn];
    let mut u = vec![0f32; n * ffn];
    k.matmul(w.gate, x, n, &mut g);
    k.matmul(w.up, x, n, &mut u);
    kernels::swiglu(&mut g, &u);
    k.matmul(w.down, &g, n, y);
}
