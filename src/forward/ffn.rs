//! The gated MLP (SwiGLU) used by experts, shared experts and dense layers:
//! y = down · (silu(gate · x) ⊙ (up · x)), over a batch of rows.

use crate::kernels::{self, Mat};

/// One SwiGLU MLP's operands.
#[derive(Clone, Copy)]
pub struct Mlp<'a> {
    /// [ffn, hidden]
    pub gate: Mat<'a>,
    /// [ffn, hidden]
    pub up: Mat<'a>,
    /// [hidden, ffn]
    pub down: Mat<'a>,
    pub ffn: usize,
    pub hidden: usize,
}

impl Mlp<'_> {
    /// y ([n, hidden]) = MLP(x ([n, hidden])).
    pub fn forward(&self, x: &[f32], n: usize, y: &mut [f32]) {
        let mut g = vec![0f32; n * self.ffn];
        let mut u = vec![0f32; n * self.ffn];
        kernels::matmul(self.gate, self.ffn, self.hidden, x, n, &mut g);
        kernels::matmul(self.up, self.ffn, self.hidden, x, n, &mut u);
        kernels::swiglu(&mut g, &u);
        kernels::matmul(self.down, self.hidden, self.ffn, &g, n, y);
    }
}
