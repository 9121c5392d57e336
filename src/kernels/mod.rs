//! Math on slices, nothing else: matrix products against stored weights, RMSNorm, softmax,
//! SwiGLU, RoPE. No imports from the rest of the crate. Every kernel has a scalar reference in
//! `reference.rs`; the SIMD paths chosen at run time (see `simd`) must agree with it within the
//! tolerances their tests name.

pub mod actq;
mod gemm;
mod generic;
pub mod quant;
pub mod reference;
mod simd;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use actq::{quant_activations, set_quant_activations, QuantActivations};
pub use gemm::{matmul, GEMM_MIN_ROWS};
pub use quant::{Layout, Q4, Q8};
pub use simd::{active_path, available_paths, path_note, CpuPath};

/// A row-major weight matrix as stored: [rows, cols] elements of one dtype.
#[derive(Clone, Copy, Debug)]
pub enum Mat<'a> {
    F32(&'a [f32]),
    /// IEEE binary16 bits.
    F16(&'a [u16]),
    /// bfloat16 bits.
    BF16(&'a [u16]),
    /// 8-bit blocks of 32 with f16 scales (see `quant`).
    Q8(Q8<'a>),
    /// 4-bit blocks of 32 with f16 scales (see `quant`).
    Q4(Q4<'a>),
}

impl Mat<'_> {
    /// Number of stored elements.
    pub fn len(&self) -> usize {
        match self {
            Mat::F32(w) => w.len(),
            Mat::F16(w) | Mat::BF16(w) => w.len(),
            Mat::Q8(q) => q.qs.len(),
            Mat::Q4(q) => q.qs.len() * 2,
        }
    }

    /// True for block matrices stored in 8-row interleaved groups.
    pub fn is_interleaved(&self) -> bool {
        match self {
            Mat::Q8(q) => q.layout != quant::Layout::Rows,
            Mat::Q4(q) => q.layout != quant::Layout::Rows,
            _ => false,
        }
    }

    /// True when the matrix holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hint the cache to start loading elements [k0, k1) of row `r` (`cols` per row). Only a
    /// hint: nothing is read, so any range is harmless; no effect off x86-64.
    #[inline]
    pub(crate) fn prefetch(&self, r: usize, cols: usize, k0: usize, k1: usize) {
        let e = r * cols + k0;
        // An interleaved block matrix keeps 8 rows' blocks together: the first row of a group
        // asks for all 8 (blocks k0/32 .. k1/32 of the group's units), the others for nothing.
        let grouped = |qs: *const u8, bb: usize, layout: quant::Layout| -> (*const u8, usize) {
            match layout {
                quant::Layout::Interleaved { nb } if r % quant::GROUP_ROWS == 0 => {
                    let unit = (r / quant::GROUP_ROWS * nb + k0 / quant::QK) * quant::GROUP_ROWS * bb;
                    (qs.wrapping_add(unit), (k1 - k0) / quant::QK * quant::GROUP_ROWS * bb)
                }
                quant::Layout::Interleaved { .. } => (qs, 0),
                quant::Layout::Rows => (qs.wrapping_add(e * bb / quant::QK), (k1 - k0) * bb / quant::QK),
            }
        };
        let (start, bytes): (*const u8, usize) = match self {
            Mat::F32(w) => (w.as_ptr().wrapping_add(e).cast(), (k1 - k0) * 4),
            Mat::F16(w) | Mat::BF16(w) => (w.as_ptr().wrapping_add(e).cast(), (k1 - k0) * 2),
            Mat::Q8(q) => grouped(q.qs.as_ptr().cast(), quant::QK, q.layout),
            Mat::Q4(q) => grouped(q.qs.as_ptr(), quant::QK / 2, q.layout),
        };
        #[cfg(target_arch = "x86_64")]
        for off in (0..bytes).step_by(64) {
            use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // SAFETY: a prefetch never faults and reads nothing architecturally.
            #[allow(unused_unsafe)]
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(off).cast())
            };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (start, bytes);
    }
}

/// Dot product of row `r` (length `cols`) of `w` with `x`.
#[inline]
pub fn dot_row(w: Mat<'_>, r: usize, cols: usize, x: &[f32]) -> f32 {
    let s = r * cols;
    match w {
        Mat::F32(w) => (simd::table().dot_f32)(&w[s..s + cols], x),
        Mat::F16(w) => (simd::table().dot_f16)(&w[s..s + cols], x),
        Mat::BF16(w) => (simd::table().dot_bf16)(&w[s..s + cols], x),
        Mat::Q8(_) | Mat::Q4(_) => {
            let mut y = [0f32];
            (simd::table().gemv)(w, cols, r..r + 1, x, 1, &mut y);
            y[0]
        }
    }
}

/// Σ a[i]·b[i] on the active path (f32 KV-cache rows, attention scores).
#[inline]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    (simd::table().dot_f32)(a, b)
}

/// y[i] += a · x[i] for a float vector x of y's length, on the active path.
#[inline]
pub fn axpy(a: f32, x: Mat<'_>, y: &mut [f32]) {
    (simd::table().axpy)(a, x, y)
}

/// Σ f16(a[i])·b[i] on the active path.
#[inline]
pub fn dot_f16(a: &[u16], b: &[f32]) -> f32 {
    (simd::table().dot_f16)(a, b)
}

/// Σ bf16(a[i])·b[i] on the active path.
#[inline]
pub fn dot_bf16(a: &[u16], b: &[f32]) -> f32 {
    (simd::table().dot_bf16)(a, b)
}

/// Row `r` of `w` widened to f32 into `out` (length `cols`): embedding lookup.
pub fn row_to_f32(w: Mat<'_>, r: usize, cols: usize, out: &mut [f32]) {
    let s = r * cols;
    match w {
        Mat::F32(w) => out.copy_from_slice(&w[s..s + cols]),
        Mat::F16(w) => out.iter_mut().zip(&w[s..s + cols]).for_each(|(o, &b)| *o = reference::f16_to_f32(b)),
        Mat::BF16(w) => out.iter_mut().zip(&w[s..s + cols]).for_each(|(o, &b)| *o = reference::bf16_to_f32(b)),
        Mat::Q8(q) => quant::dequantize_q8(q, s, &mut out[..cols]),
        Mat::Q4(q) => quant::dequantize_q4(q, s, &mut out[..cols]),
    }
}

/// Element `i` of a stored vector, widened to f32.
#[inline]
pub fn get(w: Mat<'_>, i: usize) -> f32 {
    match w {
        Mat::F32(w) => w[i],
        Mat::F16(w) => reference::f16_to_f32(w[i]),
        Mat::BF16(w) => reference::bf16_to_f32(w[i]),
        Mat::Q8(_) | Mat::Q4(_) => {
            let mut block = [0f32; quant::QK];
            row_to_f32(w, i / quant::QK, quant::QK, &mut block);
            block[i % quant::QK]
        }
    }
}

/// RMSNorm of each row of x ([n, dim], dim = w.len()) into y: y = x / sqrt(mean(x²) + eps) · w.
pub fn rmsnorm(x: &[f32], w: Mat<'_>, eps: f32, y: &mut [f32]) {
    let dim = w.len();
    let mut wf = [0f32; 256];
    if dim <= wf.len() {
        (0..dim).for_each(|i| wf[i] = get(w, i));
        for (xr, yr) in x.chunks_exact(dim).zip(y.chunks_exact_mut(dim)) {
            reference::rmsnorm_row(xr, &wf[..dim], eps, yr);
        }
    } else {
        let wf: Vec<f32> = (0..dim).map(|i| get(w, i)).collect();
        for (xr, yr) in x.chunks_exact(dim).zip(y.chunks_exact_mut(dim)) {
            reference::rmsnorm_row(xr, &wf, eps, yr);
        }
    }
}

/// In-place RMSNorm of each row of x ([n, dim]).
pub fn rmsnorm_inplace(x: &mut [f32], w: Mat<'_>, eps: f32) {
    let dim = w.len();
    let wf: Vec<f32> = (0..dim).map(|i| get(w, i)).collect();
    let mut tmp = vec![0f32; dim];
    for xr in x.chunks_exact_mut(dim) {
        reference::rmsnorm_row(xr, &wf, eps, &mut tmp);
        xr.copy_from_slice(&tmp);
    }
}

/// x[t, :] += b for every row t of x ([n, b.len()]).
pub fn add_bias(x: &mut [f32], b: Mat<'_>) {
    let dim = b.len();
    for row in x.chunks_exact_mut(dim) {
        row.iter_mut().enumerate().for_each(|(i, v)| *v += get(b, i));
    }
}

/// In-place softmax of one row.
pub fn softmax(x: &mut [f32]) {
    reference::softmax(x);
}

/// a[i] = silu(g[i]) · u[i] (SwiGLU), in place on `g`.
pub fn swiglu(g: &mut [f32], u: &[f32]) {
    for (gi, &ui) in g.iter_mut().zip(u) {
        *gi = reference::silu(*gi) * ui;
    }
}

#[cfg(test)]
mod tests;
