//! The softmax rows' exp-and-sum and the MLPs' gated activations (`kernels::vexp`) compiled for
//! AVX2: the same source and operation order as the portable path's, eight lanes per
//! instruction, the same bits.

/// See `table::ExpSumFn`.
pub fn exp_sum(xs: &mut [f32], m: f32) -> f32 {
    // SAFETY: reached only through the x86 tables, whose CPUs have AVX2.
    unsafe { exp_sum_avx2(xs, m) }
}

#[target_feature(enable = "avx2")]
unsafe fn exp_sum_avx2(xs: &mut [f32], m: f32) -> f32 {
    crate::kernels::vexp::exp_sum_body(xs, m)
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
