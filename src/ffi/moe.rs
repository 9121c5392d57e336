//! `colibri_moe`: one MoE layer for firmware that needs nothing else. Expert e is a linear map,
//! a row-major [expert_sizes[e], hidden_size] float matrix; the top_k largest gates are chosen
//! (ties to the lowest index), weighted by the softmax over the chosen gates, and summed.

use super::handle::*;
use super::panic::{guard, guard_or, Failure};
use super::status::*;
use crate::kernels::{Kernels, Mat};

/// 64 bytes of floats: the unit of the aligned weight copy.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([f32; 16]);

/// A MoE layer (opaque to C).
pub struct colibri_moe {
    /// Every expert starts on a 64-byte line.
    lines: Vec<Line>,
    /// (first line, rows) per expert.
    experts: Vec<(usize, usize)>,
    hidden: usize,
    top_k: usize,
    out_len: usize,
}

/// Largest total of weights accepted (2^32 floats = 16 GiB).
const MAX_WEIGHTS: usize = 1 << 32;

impl colibri_moe {
    fn weights(&self, e: usize) -> &[f32] {
        let (first, rows) = self.experts[e];
        let n = rows * self.hidden;
        // SAFETY: Line is 16 contiguous f32 with no padding; the expert's rows·hidden floats
        // lie inside the lines reserved for it in `init`.
        unsafe { std::slice::from_raw_parts(self.lines[first..].as_ptr() as *const f32, n) }
    }
}

fn invalid(msg: String) -> Failure {
    Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, msg)
}

/// Copy `n_experts` expert matrices (expert e: expert_sizes[e] × hidden_size floats, one after
/// another in `expert_weights`) into a new layer choosing `top_k` experts per input.
///
/// # Safety
/// `expert_weights` readable for Σ expert_sizes[e]·hidden_size floats; `expert_sizes` for
/// n_experts ints; `moe_out` writable.
#[no_mangle]
pub unsafe extern "C" fn colibri_moe_init(
    moe_out: *mut *mut colibri_moe,
    expert_weights: *const f32,
    expert_sizes: *const i32,
    n_experts: i32,
    hidden_size: i32,
    top_k: i32,
) -> colibri_status {
    guard(|| {
        if moe_out.is_null() {
            return Err(Failure::null("moe_out"));
        }
        if !(1..=65536).contains(&n_experts) {
            return Err(invalid(format!("n_experts {n_experts} outside 1..=65536")));
        }
        if hidden_size < 1 {
            return Err(invalid(format!("hidden_size {hidden_size} must be ≥ 1")));
        }
        if !(1..=n_experts).contains(&top_k) {
            return Err(invalid(format!("top_k {top_k} outside 1..={n_experts}")));
        }
        let (ne, hidden) = (n_experts as usize, hidden_size as usize);
        let sizes = slice(expert_sizes, ne, "expert_sizes")?;
        let mut total = 0usize;
        for (e, &s) in sizes.iter().enumerate() {
            if s < 1 {
                return Err(invalid(format!("expert_sizes[{e}] = {s} must be ≥ 1")));
            }
            total = (s as usize)
                .checked_mul(hidden)
                .and_then(|n| total.checked_add(n))
                .filter(|&t| t <= MAX_WEIGHTS)
                .ok_or_else(|| invalid("the experts hold too many weights".into()))?;
        }
        let src = slice(expert_weights, total, "expert_weights")?;
        let mut lines = Vec::new();
        let mut experts = Vec::with_capacity(ne);
        let mut at = 0usize;
        for &s in sizes {
            let n = s as usize * hidden;
            experts.push((lines.len(), s as usize));
            for chunk in src[at..at + n].chunks(16) {
                let mut line = Line([0.0; 16]);
                line.0[..chunk.len()].copy_from_slice(chunk);
                lines.push(line);
            }
            at += n;
        }
        let out_len = sizes.iter().map(|&s| s as usize).max().unwrap_or(0);
        let moe = colibri_moe { lines, experts, hidden, top_k: top_k as usize, out_len };
        put(moe_out, Box::into_raw(Box::new(moe)));
        Ok(())
    })
}

/// output (max(expert_sizes) floats) = Σ over the top_k largest `gates` (n_experts logits) of
/// softmax-over-chosen(gate) · (W_e · input (hidden_size floats)); an expert shorter than the
/// output contributes zeros past its size. Safe to call concurrently on one layer.
///
/// # Safety
/// `input` readable for hidden_size floats, `gates` for n_experts, `output` writable for
/// max(expert_sizes) floats.
#[no_mangle]
pub unsafe extern "C" fn colibri_moe_infer(
    moe: *const colibri_moe,
    input: *const f32,
    output: *mut f32,
    gates: *const f32,
) -> colibri_status {
    guard(|| {
        let m = borrow(moe, "moe")?;
        let x = slice(input, m.hidden, "input")?;
        let g = slice(gates, m.experts.len(), "gates")?;
        let out = slice_mut(output, m.out_len, "output")?;
        if let Some(i) = g.iter().position(|v| !v.is_finite()) {
            return Err(invalid(format!("gates[{i}] is NaN or infinite")));
        }
        // Top-k, ties to the lowest index (stable sort on descending gate).
        let mut order: Vec<usize> = (0..g.len()).collect();
        order.sort_by(|&a, &b| g[b].total_cmp(&g[a]));
        let chosen = &order[..m.top_k];
        let max = chosen.iter().map(|&e| g[e]).fold(f32::NEG_INFINITY, f32::max);
        let ex: Vec<f32> = chosen.iter().map(|&e| (g[e] - max).exp()).collect();
        let sum: f32 = ex.iter().sum();
        out.fill(0.0);
        let mut y = vec![0f32; m.out_len];
        for (&e, &w) in chosen.iter().zip(&ex) {
            let rows = m.experts[e].1;
            Kernels::default().matmul(Mat::f32s(m.weights(e), rows, m.hidden), x, 1, &mut y[..rows]);
            for (o, &v) in out[..rows].iter_mut().zip(&y[..rows]) {
                *o += (w / sum) * v;
            }
        }
        Ok(())
    })
}

/// Release a layer. NULL is a no-op.
///
/// # Safety
/// `moe` must be NULL or from colibri_moe_init, freed once.
#[no_mangle]
pub unsafe extern "C" fn colibri_moe_free(moe: *mut colibri_moe) {
    guard_or((), || {
        if !moe.is_null() {
            // SAFETY: from Box::into_raw in colibri_moe_init.
            drop(unsafe { Box::from_raw(moe) });
        }
    })
}
