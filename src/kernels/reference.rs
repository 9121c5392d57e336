//! Scalar reference kernels: the specification every SIMD path is tested against.

/// bfloat16 bits → f32 (exact).
#[inline]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// binary16 bits → f32 (exact).
#[inline]
pub fn f16_to_f32(b: u16) -> f32 {
    half::f16::from_bits(b).to_f32()
}

/// Σ w[i]·x[i] with 8 partial sums in a fixed order (the order every path reproduces).
/// Multiply then add (no fused multiply-add: without the `fma` target feature `mul_add` is a
/// libm call, and the baseline build must not assume FMA).
pub fn dot_f32(w: &[f32], x: &[f32]) -> f32 {
    dot_by(w.len(), x, |i| w[i])
}

/// Σ bf16(w[i])·x[i].
pub fn dot_bf16(w: &[u16], x: &[f32]) -> f32 {
    dot_by(w.len(), x, |i| bf16_to_f32(w[i]))
}

/// Σ f16(w[i])·x[i].
pub fn dot_f16(w: &[u16], x: &[f32]) -> f32 {
    dot_by(w.len(), x, |i| f16_to_f32(w[i]))
}

#[inline]
fn dot_by(n: usize, x: &[f32], w: impl Fn(usize) -> f32) -> f32 {
    let mut acc = [0f32; 8];
    let full = n - n % 8;
    let mut i = 0;
    while i < full {
        for (l, a) in acc.iter_mut().enumerate() {
            *a += w(i + l) * x[i + l];
        }
        i += 8;
    }
    // Lanes folded as an 8-wide register is: halves added, then pairs, then the last two.
    let mut s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    for (j, &xj) in x.iter().enumerate().take(n).skip(full) {
        s += w(j) * xj;
    }
    s
}

/// One RMSNorm row: y = x · rsqrt(mean(x²) + eps) · w, the variance accumulated in f64.
pub fn rmsnorm_row(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let ss: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let inv = (1.0 / (ss / x.len() as f64 + f64::from(eps)).sqrt()) as f32;
    for ((yi, &xi), &wi) in y.iter_mut().zip(x).zip(w) {
        *yi = wi * (xi * inv);
    }
}

/// In-place numerically stable softmax (max subtracted; −inf entries get 0).
pub fn softmax(x: &mut [f32]) {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !m.is_finite() {
        let n = x.len() as f32;
        x.iter_mut().for_each(|v| *v = 1.0 / n);
        return;
    }
    let mut sum = 0f64;
    for v in x.iter_mut() {
        *v = (*v - m).exp();
        sum += f64::from(*v);
    }
    let inv = (1.0 / sum) as f32;
    x.iter_mut().for_each(|v| *v *= inv);
}

/// x · sigmoid(x).
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}
