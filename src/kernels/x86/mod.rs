//! x86-64 kernels. Each function is compiled for AVX2 + FMA + F16C with `#[target_feature]`
//! and reached only through the table below, which exists only when cpuid reports all three:
//! the library itself is built for the baseline x86-64 target.

mod actq;
mod gemv;
mod qdot;
mod qgroup;
mod tile;

use super::simd::{CpuPath, Table};

static AVX2: Table = Table {
    path: CpuPath::Avx2,
    dot_f32: gemv::dot_f32,
    dot_f16: gemv::dot_f16,
    dot_bf16: gemv::dot_bf16,
    gemv: gemv::gemv,
    gemv_i8: qdot::gemv_i8,
    widen: tile::widen,
    tile: tile::tile,
    axpy: gemv::axpy,
    quantize: actq::quantize_blocks,
};

/// True when this CPU runs the AVX2 path.
pub fn has_avx2() -> bool {
    std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
}

/// The AVX2 table, when this CPU supports it.
pub fn table() -> Option<&'static Table> {
    has_avx2().then_some(&AVX2)
}
