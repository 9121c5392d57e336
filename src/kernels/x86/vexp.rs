//! The softmax rows' scale-and-maximum and exp-and-sum and the MLPs' gated activations (`kernels::vexp`) compiled for
//! AVX2 and for AVX-512: the same source and operation order as the portable path's, eight or
//! sixteen lanes per instruction, the same bits (no fused multiply-add: Rust does not contract).

/// See `table::ExpSumFn`.
pub fn exp_sum(xs: &mut [f32], m: f32) -> f32 {
    // SAFETY: reached only through the x86 tables, whose CPUs have AVX2.
    unsafe { exp_sum_avx2(xs, m) }
}

#[target_feature(enable = "avx2")]
unsafe fn exp_sum_avx2(xs: &mut [f32], m: f32) -> f32 {
    crate::kernels::vexp::exp_sum_body(xs, m)
}

/// See `table::ScaleMaxFn`.
pub fn scale_max(xs: &mut [f32], scale: f32, m: f32) -> f32 {
    // SAFETY: reached only through the x86 tables, whose CPUs have AVX2.
    unsafe { scale_max_avx2(xs, scale, m) }
}

#[target_feature(enable = "avx2")]
unsafe fn scale_max_avx2(xs: &mut [f32], scale: f32, m: f32) -> f32 {
    crate::kernels::vexp::scale_max_body(xs, scale, m)
}

/// See `table::GatedFn`.
pub fn gated(g: &mut [f32], u: &[f32], act: crate::kernels::table::Gate) {
    // SAFETY: reached only through the x86 tables, whose CPUs have AVX2.
    unsafe { gated_avx2(g, u, act) }
}

#[target_feature(enable = "avx2")]
unsafe fn gated_avx2(g: &mut [f32], u: &[f32], act: crate::kernels::table::Gate) {
    crate::kernels::vexp::gated_body(g, u, act)
}

/// See `table::ExpSumFn` (the AVX-512 tables).
pub fn exp_sum_512(xs: &mut [f32], m: f32) -> f32 {
    // SAFETY: reached only through the AVX-512 tables, whose CPUs have AVX-512 F.
    unsafe { exp_sum_avx512(xs, m) }
}

#[target_feature(enable = "avx2,avx512f")]
unsafe fn exp_sum_avx512(xs: &mut [f32], m: f32) -> f32 {
    crate::kernels::vexp::exp_sum_body(xs, m)
}

/// See `table::ScaleMaxFn` (the AVX-512 tables).
pub fn scale_max_512(xs: &mut [f32], scale: f32, m: f32) -> f32 {
    // SAFETY: reached only through the AVX-512 tables, whose CPUs have AVX-512 F.
    unsafe { scale_max_avx512(xs, scale, m) }
}

#[target_feature(enable = "avx2,avx512f")]
unsafe fn scale_max_avx512(xs: &mut [f32], scale: f32, m: f32) -> f32 {
    crate::kernels::vexp::scale_max_body(xs, scale, m)
}

/// See `table::GatedFn` (the AVX-512 tables).
pub fn gated_512(g: &mut [f32], u: &[f32], act: crate::kernels::table::Gate) {
    // SAFETY: reached only through the AVX-512 tables, whose CPUs have AVX-512 F.
    unsafe { gated_avx512(g, u, act) }
}

#[target_feature(enable = "avx2,avx512f")]
unsafe fn gated_avx512(g: &mut [f32], u: &[f32], act: crate::kernels::table::Gate) {
    crate::kernels::vexp::gated_body(g, u, act)
}
