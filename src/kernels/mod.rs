//! Math on bound matrices and slices: matrix products against stored weights, RMSNorm,
//! softmax, SwiGLU, vector dots for the KV cache. Imports nothing from the crate but the
//! format's dtype table and block layouts. Every kernel has a scalar reference (`reference`,
//! `generic`); the SIMD paths chosen at run time (`dispatch`) must agree with it within the
//! tolerances their tests name.
//!
//! Module map: `table` (the leaf: fn types, per-dtype kernel rows, a path's table) ← `generic`
//! (the portable path) ← `x86` (arch tables, registered over the portable rows) ← `dispatch`
//! (the choice, and `Kernels`) ← `gemm` (the product strategies; bf16 × bf16 products in
//! `gemm_bf16`, per-head products with f32 activations in `heads`), all splitting work with `par`
//! (tasks, per-thread buffers, blocking). `mat` is the operand type, `actq` the int8 activation
//! blocks and the activation modes (`actpanel`: the same in panels of 8 rows for the AVX-512
//! prefill kernels), `bf16act` the bf16 activations of bf16 weights, `reference` the scalar
//! specification, `amx` the AMX tiles (their GEMM over a tile model and the hardware).

mod actpanel;
pub mod actq;
mod amx;
pub mod bf16act;
mod delta;
mod dispatch;
mod gemm;
mod gemm_bf16;
mod generic;
mod heads;
mod kr8ref;
mod mat;
mod par;
#[cfg(test)]
mod q5r8;
pub mod reference;
mod rowwise;
mod table;
pub(crate) mod vexp;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use actq::QuantActivations;
pub use dispatch::{active_path, available_paths, path_note, Kernels};
pub use gemm::GEMM_MIN_ROWS;
pub use mat::Mat;
pub use table::{CpuPath, DeltaToken, Gate};

/// The activation rows of a product, [n, cols]: in place, or picked by index from a larger
/// matrix of rows of the same width (a MoE expert's tokens, read where they are instead of
/// gathered first).
#[derive(Clone, Copy, Debug)]
pub enum XRows<'a> {
    Dense(&'a [f32]),
    Picked { from: &'a [f32], rows: &'a [usize] },
}

impl XRows<'_> {
    /// Row i of n, `cols` wide.
    pub fn row(&self, i: usize, cols: usize) -> &[f32] {
        match *self {
            XRows::Dense(x) => &x[i * cols..(i + 1) * cols],
            XRows::Picked { from, rows } => &from[rows[i] * cols..(rows[i] + 1) * cols],
        }
    }

    /// The rows as one [n, cols] slice: itself, or copied into `buf`.
    pub fn dense<'b>(&'b self, n: usize, cols: usize, buf: &'b mut Vec<f32>) -> &'b [f32] {
        match *self {
            XRows::Dense(x) => x,
            XRows::Picked { .. } => {
                buf.clear();
                (0..n).for_each(|i| buf.extend_from_slice(self.row(i, cols)));
                buf
            }
        }
    }
}
pub(crate) use amx::attend as attend_tiles;
#[cfg(test)]
pub(crate) use amx::attend_tests::model_kernels as attend_model_kernels;
pub(crate) use table::{AttendTiles, CachedRows, Operand, TransposeFn, MR, NR};

pub use rowwise::{
    add_bias, add_bias_row, layernorm, rmsnorm, rmsnorm_inplace, rmsnorm_inplace_shifted, rmsnorm_shifted,
};

/// In-place softmax of one row.
pub fn softmax(x: &mut [f32]) {
    reference::softmax(x);
}

/// In-place softmax of one row with a sink logit in the denominator (`reference::softmax_with_sink`).
pub fn softmax_with_sink(x: &mut [f32], sink: f32) {
    reference::softmax_with_sink(x, sink);
}

#[cfg(test)]
mod kr8_tests;
#[cfg(test)]
mod q5r8_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod tiled_tests;

/// Register this thread's kernel buffers with the C library now (part of
/// `threads::prepare_thread`, which says why).
pub(crate) fn prepare_thread() {
    amx::prepare_thread();
    gemm::prepare_thread();
    gemm_bf16::prepare_thread();
    heads::prepare_thread();
    par::prepare_thread();
}
