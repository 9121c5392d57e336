//! `colibri_moe`: one MoE layer for firmware that needs nothing else. Expert e is a linear map,
//! a row-major [expert_sizes[e], hidden_size] matrix; the top_k largest gates are chosen (ties
//! to the lowest index), weighted by the softmax over the chosen gates, and summed.
//!
//! The weights are copied at init into one 64-byte-aligned buffer, each expert on its own line,
//! stored as f32, bf16 or q8 (`colibri_moe_storage`). A call splits the output rows into one
//! range per thread (`colibri_moe_params.n_threads`) and computes every chosen expert's rows of
//! a range on one thread: the first range on the calling thread, the others on the layer's
//! n_threads − 1 pool workers (layers with the same count share them), one fork-join per call
//! (`Pool::run_parts`). The input meets the weights in their own arithmetic (the `Reduced`
//! activation mode: bf16 products, int8 block products), which is what the stated error bounds
//! cover, whatever `COLIBRI_QUANT_ACT` says.

use super::handle::*;
use super::panic::{guard, guard_or, Failure};
use super::status::*;
use crate::format::DType;
use crate::kernels::{Kernels, Mat, QuantActivations};
use crate::threads::{self, Pool, ThreadOptions};
use std::sync::Arc;

/// How a layer stores its weights (`colibri_moe_init_with`). Frozen numbers.
#[allow(non_camel_case_types)]
pub type colibri_moe_storage = i32;
/// The weights as given (f32). What `colibri_moe_init` does.
pub const COLIBRI_MOE_F32: colibri_moe_storage = 0;
/// Weights rounded to bf16 (nearest even), half the bytes; the input is rounded to bf16 per call
/// and the products (exact) summed in f32. For every output r, with p_e the mixing weights and
/// hidden_size ≤ 65536: |Δoutput[r]| ≤ Σ_chosen p_e · Σ_i (2⁻⁷ · |W_e[r, i] · input[i]| +
/// 2⁻¹²⁶ · |W_e[r, i]|).
pub const COLIBRI_MOE_BF16: colibri_moe_storage = 1;
/// Weights block-quantised to int8 (q8: blocks of 32 per row with an f16 scale), about a quarter
/// of the bytes; hidden_size must be a multiple of 32. The input is quantised per call to int8
/// blocks of 32 (scale max|input_b| / 127) and each block product summed in integers. For every
/// output r: |Δoutput[r]| ≤ Σ_chosen p_e · Σ_blocks b ((max_b |W_e[r]| / 200 + 2⁻²⁴) ·
/// ‖input_b‖₁ + max_b |input| · (‖W_e[r]_b‖₁ / 100 + 2⁻²⁴)).
pub const COLIBRI_MOE_Q8: colibri_moe_storage = 2;

/// Options of `colibri_moe_init_params`. Fill with `colibri_moe_params_init`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct colibri_moe_params {
    /// sizeof(colibri_moe_params), set by colibri_moe_params_init.
    pub struct_size: u32,
    /// How the weights are stored: a COLIBRI_MOE_* value (default COLIBRI_MOE_F32).
    pub storage: colibri_moe_storage,
    /// Threads of a call, at most 1024: the calling thread and n_threads − 1 pool workers; 0
    /// (default) = one per physical core the process may run on. Layers with the same count
    /// share the workers, started by the first call (and again in a forked child).
    pub n_threads: u32,
}

impl Versioned for colibri_moe_params {
    const SIZES: &'static [usize] = &[std::mem::size_of::<colibri_moe_params>()];
}

impl Default for colibri_moe_params {
    fn default() -> Self {
        colibri_moe_params { struct_size: std::mem::size_of::<Self>() as u32, storage: COLIBRI_MOE_F32, n_threads: 0 }
    }
}

/// 64 bytes: the unit of the aligned weight copy.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

/// One expert in the copy.
struct Expert {
    /// First line.
    line: usize,
    rows: usize,
    dtype: DType,
}

/// A MoE layer (opaque to C).
pub struct colibri_moe {
    /// Every expert starts on a 64-byte line.
    lines: Vec<Line>,
    experts: Vec<Expert>,
    hidden: usize,
    top_k: usize,
    out_len: usize,
    /// Threads of a call (the caller and the pool's workers).
    threads: usize,
    /// The threads − 1 workers beside the caller (shared with the layers of the same thread
    /// count); None for one thread.
    pool: Option<Arc<Pool>>,
}

/// Largest total of weights accepted (2^32 values).
const MAX_WEIGHTS: usize = 1 << 32;

impl colibri_moe {
    /// Expert e bound as a matrix (its bytes were encoded for exactly this shape at init, so
    /// neither step fails; if one ever did, the call returns a status instead of panicking).
    fn mat(&self, e: usize) -> Result<Mat<'_>, Failure> {
        let x = &self.experts[e];
        let broken = || Failure::new(COLIBRI_STATUS_PANIC, format!("expert {e} no longer matches its shape"));
        let len = x.dtype.bytes_for((x.rows * self.hidden) as u64).ok_or_else(broken)? as usize;
        // SAFETY: Line is 64 plain bytes; the expert's `len` bytes lie inside the lines reserved
        // for it at init.
        let bytes = unsafe { std::slice::from_raw_parts(self.lines[x.line..].as_ptr().cast::<u8>(), len) };
        Mat::new(x.dtype, x.rows, self.hidden, bytes).map_err(|_| broken())
    }
}

fn invalid(msg: String) -> Failure {
    Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, msg)
}

/// Copy `n_experts` f32 expert matrices (expert e: expert_sizes[e] × hidden_size floats, one
/// after another in `expert_weights`) into a new layer choosing `top_k` experts per input.
/// `colibri_moe_init_with(…, COLIBRI_MOE_F32)`.
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
    // SAFETY: the caller's contract is colibri_moe_init_with's.
    unsafe {
        colibri_moe_init_with(moe_out, expert_weights, expert_sizes, n_experts, hidden_size, top_k, COLIBRI_MOE_F32)
    }
}

/// `colibri_moe_init` with the weights stored as `storage` (a COLIBRI_MOE_* value; the error
/// bound of each is documented with it), on the default thread count. Weights must be finite.
///
/// # Safety
/// As colibri_moe_init.
#[no_mangle]
pub unsafe extern "C" fn colibri_moe_init_with(
    moe_out: *mut *mut colibri_moe,
    expert_weights: *const f32,
    expert_sizes: *const i32,
    n_experts: i32,
    hidden_size: i32,
    top_k: i32,
    storage: colibri_moe_storage,
) -> colibri_status {
    let p = colibri_moe_params { storage, ..Default::default() };
    // SAFETY: the caller's contract is colibri_moe_init_params's; `p` is a valid struct.
    unsafe { colibri_moe_init_params(moe_out, expert_weights, expert_sizes, n_experts, hidden_size, top_k, &p) }
}

/// Fill `params` with the defaults (f32 storage, one thread per physical core). Thread-safe.
///
/// # Safety
/// `params` must be NULL or point to a writable colibri_moe_params.
#[no_mangle]
pub unsafe extern "C" fn colibri_moe_params_init(params: *mut colibri_moe_params) {
    guard_or((), || {
        if !params.is_null() {
            put(params, colibri_moe_params::default());
        }
    })
}

/// `colibri_moe_params_init` for a caller whose struct is `size` bytes (its header's
/// `sizeof(colibri_moe_params)`): writes only those bytes, struct_size = `size`. The header's
/// `colibri_moe_params_init(p)` is a macro calling this with `sizeof *(p)`, so a program keeps
/// working with later libraries whose struct has grown. BAD_STRUCT_SIZE (nothing written) for a
/// size this library was never published with. Thread-safe.
///
/// # Safety
/// `p` must be NULL or point to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn colibri_moe_params_init_sized(p: *mut colibri_moe_params, size: usize) -> colibri_status {
    guard(|| init_sized(p, size, "colibri_moe_params"))
}

/// `colibri_moe_init` with options (`params` may be NULL for the defaults): the storage of the
/// weights (`colibri_moe_init_with`) and the worker threads of a call. Weights must be finite.
///
/// # Safety
/// As colibri_moe_init; `params` NULL or a valid struct.
#[no_mangle]
pub unsafe extern "C" fn colibri_moe_init_params(
    moe_out: *mut *mut colibri_moe,
    expert_weights: *const f32,
    expert_sizes: *const i32,
    n_experts: i32,
    hidden_size: i32,
    top_k: i32,
    params: *const colibri_moe_params,
) -> colibri_status {
    guard(|| {
        if moe_out.is_null() {
            return Err(Failure::null("moe_out"));
        }
        let p = super::handle::params(params, colibri_moe_params::default(), "params")?;
        // The calling thread computes a share of every call: its kernel buffers are registered
        // now (`threads::prepare_thread` says why), on the thread that usually makes the calls.
        threads::prepare_thread();
        let storage = p.storage;
        let (threads, pool) = call_threads(p.n_threads)?;
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
        let dtype_of = |rows: usize| -> Result<DType, Failure> {
            match storage {
                COLIBRI_MOE_F32 => Ok(DType::F32),
                COLIBRI_MOE_BF16 => Ok(DType::BF16),
                COLIBRI_MOE_Q8 if !hidden.is_multiple_of(32) => {
                    Err(invalid(format!("q8 storage needs hidden_size a multiple of 32, not {hidden}")))
                }
                // The 8-row interleaved layout where the rows allow it (faster kernels).
                COLIBRI_MOE_Q8 if rows.is_multiple_of(8) => Ok(DType::Q8R8),
                COLIBRI_MOE_Q8 => Ok(DType::Q8),
                s => Err(invalid(format!("storage {s} (use a COLIBRI_MOE_* value)"))),
            }
        };
        dtype_of(8)?;
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
        if let Some(i) = src.iter().position(|v| !v.is_finite()) {
            return Err(invalid(format!("expert_weights[{i}] is NaN or infinite")));
        }
        let (mut lines, mut experts, mut at) = (Vec::new(), Vec::with_capacity(ne), 0usize);
        for &s in sizes {
            let (rows, n) = (s as usize, s as usize * hidden);
            let dtype = dtype_of(rows)?;
            let bytes = dtype.encode(&src[at..at + n], hidden);
            experts.push(Expert { line: lines.len(), rows, dtype });
            lines.extend(bytes.chunks(64).map(|c| {
                let mut line = Line([0; 64]);
                line.0[..c.len()].copy_from_slice(c);
                line
            }));
            at += n;
        }
        let out_len = sizes.iter().map(|&s| s as usize).max().unwrap_or(0);
        let moe = colibri_moe { lines, experts, hidden, top_k: top_k as usize, out_len, threads, pool };
        put(moe_out, Box::into_raw(Box::new(moe)));
        Ok(())
    })
}

/// The threads of a call for `n_threads` (0 = the physical cores) and the workers beside the
/// caller (None for one thread).
fn call_threads(n_threads: u32) -> Result<(usize, Option<Arc<Pool>>), Failure> {
    let threads = match n_threads as usize {
        0 => threads::physical_cores(),
        n if n > threads::MAX_THREADS => {
            return Err(invalid(format!("n_threads {n} outside 0..={}", threads::MAX_THREADS)));
        }
        n => n,
    };
    let pool = match threads {
        1 => None,
        n => Some(threads::shared(ThreadOptions { n_threads: n - 1, pin: false })?),
    };
    Ok((threads, pool))
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
        let mats = chosen
            .iter()
            .zip(&ex)
            .map(|(&e, &w)| Ok((m.mat(e)?, w / sum)))
            .collect::<Result<Vec<(Mat<'_>, f32)>, Failure>>()?;
        mix(m, &mats, x, out)
    })
}

/// out = Σ_j p_j · (W_j · x) over `mats` = [(W_j, p_j)] in order (rows past a shorter W_j add
/// nothing): one range of rows per thread, each a multiple of 8 rows (the interleaved row
/// group), every chosen expert's rows of the range computed on that thread — the first on the
/// calling thread, the others on the layer's workers.
fn mix(m: &colibri_moe, mats: &[(Mat<'_>, f32)], x: &[f32], out: &mut [f32]) -> Result<(), Failure> {
    let k = Kernels::new(QuantActivations::Reduced);
    let per = out.len().div_ceil(m.threads).next_multiple_of(8);
    let range = |(i, o): (usize, &mut [f32])| {
        let r0 = i * per;
        o.fill(0.0);
        let mut y = vec![0f32; o.len()];
        for &(w, p) in mats {
            let r1 = (r0 + o.len()).min(w.rows());
            if r0 < r1 {
                k.matvec_rows(w, r0..r1, x, 1, &mut y[..r1 - r0]);
                o.iter_mut().zip(&y[..r1 - r0]).for_each(|(o, &v)| *o += p * v);
            }
        }
    };
    match &m.pool {
        Some(pool) if out.len() > per => pool.run_parts(out.chunks_mut(per).enumerate(), range)?,
        _ => range((0, out)),
    }
    Ok(())
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
