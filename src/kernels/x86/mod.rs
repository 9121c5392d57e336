//! x86-64 kernels and their two tables. Each function is compiled for its instruction set with
//! `#[target_feature]` and reached only through a table that exists only when cpuid reports
//! every feature it needs: the library itself is built for the baseline x86-64 target.
//!
//! * `avx2` (AVX2 + FMA + F16C): starts from the portable rows and registers, per dtype, the
//!   kernels of gemv / qdot / qgroup / tile / actq / mxfp4 / mxfp4r8, and int8-activation ones for GGUF's
//!   q2_k … q6_k (kquant) and q8_0 / q4_0 / q4_1 / q5_0 / q5_1 / iq4_nl / iq4_xs (legacy), and
//!   the float-activation (widening) ones of those but q8_0 (widen).
//! * `avx512` (that, plus AVX-512 F/BW/VL and VNNI): starts from the AVX2 rows and replaces the
//!   int8 kernels of the interleaved block types with VNNI ones (`vnni`, `mxfp4r8`); where the CPU also has
//!   AVX-512 BF16, bf16 weights meet bf16 activations in `vdpbf16ps` kernels (`bf16`).
//! * `amx` (the default where it runs): the AVX-512 BF16 table with every bf16 product on AMX tiles at
//!   every activation-row count (`kernels::amx`), where cpuid has AMX-BF16 and Linux grants the tile state; where cpuid
//!   also has AMX-INT8, q8r8 / q4r8 int8 products on tiles from 32 activation rows.
//! * both: the interleaved K-quants q4_kr8 / q6_kr8 / iq4_xsr8 (and iq4_nlr8) take `kr8`'s int8
//!   kernels (one body per dtype, `vpmaddubsw` on AVX2, `vpdpbusd` on AVX-512 VNNI) at every
//!   activation-row count; GGUF's row-major q5_0 meets its activations as q8r8 does (`q5r8`: 8
//!   rows in place for decode, copied to q8r8 for the table's q8r8 kernels from 2 activation rows
//!   on).
//! * both: the GEMMs' write-back (results turned token-major) by 8 × 8 register transposes
//!   (`transpose`).

mod actq;
mod bf16;
mod delta;
mod gemv;
mod kquant;
mod kr8;
mod lanes;
mod legacy;
mod mxfp4;
mod mxfp4r8;
pub(super) mod q5r8;
mod qdot;
pub(super) mod qgroup;
mod qrows;
mod tile;
mod transpose;
mod tune;
mod vexp;
pub(super) mod vnni;
mod widen;

use super::generic;
use super::table::{Bf16Kernels, CpuPath, MatKernels, Table};
use crate::format::DType;

/// The AVX2 rows: every dtype has float-activation, int8-activation (block types) and widening
/// kernels; the interleaved block types take their int8 kernel at every row count.
const MATS: [MatKernels; DType::COUNT] = {
    let mut m = generic::MATS;
    m[DType::F32.index()] = float(gemv::gemv::<{ gemv::F32 }>, tile::widen_float::<{ gemv::F32 }>);
    m[DType::F16.index()] = float(gemv::gemv::<{ gemv::F16 }>, tile::widen_float::<{ gemv::F16 }>);
    m[DType::BF16.index()] = float(gemv::gemv::<{ gemv::BF16 }>, tile::widen_float::<{ gemv::BF16 }>);
    m[DType::Bf16R32.index()] = float(gemv::gemv_bf16r32, tile::widen_bf16r32);
    m[DType::Q8.index()] = MatKernels {
        gemv: gemv::gemv_quant::<false>,
        gemv_i8: Some(qdot::gemv_i8::<false>),
        widen: tile::widen_quant::<false>,
        int8_at_any_n: false,
    };
    m[DType::Q4.index()] = MatKernels {
        gemv: gemv::gemv_quant::<true>,
        gemv_i8: Some(qdot::gemv_i8::<true>),
        widen: tile::widen_quant::<true>,
        int8_at_any_n: false,
    };
    let grouped =
        MatKernels { gemv: qgroup::gemv, gemv_i8: Some(qgroup::gemv_i8), widen: qgroup::widen, int8_at_any_n: true };
    m[DType::Q8R8.index()] = grouped;
    m[DType::Q4R8.index()] = grouped;
    m[DType::Mxfp4.index()] =
        MatKernels { gemv: mxfp4::gemv, gemv_i8: Some(mxfp4::gemv_i8), widen: mxfp4::widen, int8_at_any_n: false };
    m[DType::Mxfp4R8.index()] =
        MatKernels { gemv: mxfp4r8::gemv, gemv_i8: Some(mxfp4r8::gemv_i8), widen: mxfp4r8::widen, int8_at_any_n: true };
    // GGUF's block types: int8-activation kernels for the K-quants of Q4_K_M files and the
    // common 32-element ones ...
    m[DType::Q2K.index()].gemv_i8 = Some(kquant::gemv_i8_q2k);
    m[DType::Q3K.index()].gemv_i8 = Some(kquant::gemv_i8_q3k);
    m[DType::Q4K.index()].gemv_i8 = Some(kquant::gemv_i8_q4k);
    m[DType::Q5K.index()].gemv_i8 = Some(kquant::gemv_i8_q5k);
    m[DType::Q6K.index()].gemv_i8 = Some(kquant::gemv_i8_q6k);
    m[DType::Q8_0.index()] = MatKernels {
        gemv: gemv::gemv_quant::<false>,
        gemv_i8: Some(legacy::gemv_i8::<{ legacy::Q8_0 }>),
        widen: tile::widen_quant::<false>,
        int8_at_any_n: false,
    };
    m[DType::Q4_0.index()].gemv_i8 = Some(legacy::gemv_i8::<{ legacy::Q4_0 }>);
    // q5_0 (Q4_K_M's rows whose width is not a multiple of 256): whole 8-row groups read in
    // place for one activation row, copied to q8r8 for the interleaved kernels from
    // REPACK_MIN_ROWS rows, ragged rows by the row-major kernel (`q5r8`).
    m[DType::Q5_0.index()].gemv_i8 = Some(q5r8::gemv_i8);
    m[DType::Q5_0.index()].int8_at_any_n = true;
    m[DType::Iq4Nl.index()].gemv_i8 = Some(legacy::gemv_i8::<{ legacy::IQ4_NL }>);
    m[DType::Q4_1.index()].gemv_i8 = Some(legacy::gemv_i8::<{ legacy::Q4_1 }>);
    m[DType::Q5_1.index()].gemv_i8 = Some(legacy::gemv_i8::<{ legacy::Q5_1 }>);
    m[DType::Iq4Xs.index()].gemv_i8 = Some(legacy::gemv_i8_iq4xs);
    // ... and their float-activation kernels: SIMD widening (`widen`).
    use crate::format::ggml::*;
    float_widen::<BlockQ4K>(&mut m[DType::Q4K.index()]);
    float_widen::<BlockQ6K>(&mut m[DType::Q6K.index()]);
    float_widen::<BlockQ5K>(&mut m[DType::Q5K.index()]);
    float_widen::<BlockQ3K>(&mut m[DType::Q3K.index()]);
    float_widen::<BlockQ2K>(&mut m[DType::Q2K.index()]);
    float_widen::<BlockIq4Xs>(&mut m[DType::Iq4Xs.index()]);
    float_widen::<BlockIq4Nl>(&mut m[DType::Iq4Nl.index()]);
    float_widen::<BlockQ5_0>(&mut m[DType::Q5_0.index()]);
    float_widen::<BlockQ5_1>(&mut m[DType::Q5_1.index()]);
    float_widen::<BlockQ4_0>(&mut m[DType::Q4_0.index()]);
    // q4_0 holds q4's blocks: q4's matrix-vector kernel (2.7× the widening one on MLA's rows of
    // 128 and 512, `cargo bench --bench kernels -- mla_heads_float`).
    m[DType::Q4_0.index()].gemv = gemv::gemv_quant::<true>;
    float_widen::<BlockQ4_1>(&mut m[DType::Q4_1.index()]);
    float_widen_kr8::<BlockQ4K>(&mut m[DType::Q4KR8.index()]);
    float_widen_kr8::<BlockQ6K>(&mut m[DType::Q6KR8.index()]);
    float_widen_kr8::<BlockIq4Xs>(&mut m[DType::Iq4XsR8.index()]);
    float_widen_kr8::<BlockIq4Nl>(&mut m[DType::Iq4NlR8.index()]);
    // The interleaved K-quants (`kr8`): int8 kernels meeting several activation rows per unpack.
    m[DType::Q4KR8.index()].gemv_i8 = Some(kr8::gemv_i8_q4k);
    m[DType::Q6KR8.index()].gemv_i8 = Some(kr8::gemv_i8_q6k);
    m[DType::Iq4XsR8.index()].gemv_i8 = Some(kr8::gemv_i8_iq4xs);
    m[DType::Q4KR8.index()].int8_at_any_n = true;
    m[DType::Q6KR8.index()].int8_at_any_n = true;
    m[DType::Iq4XsR8.index()].int8_at_any_n = true;
    m[DType::Iq4NlR8.index()].gemv_i8 = Some(kr8::gemv_i8_iq4nl);
    m[DType::Iq4NlR8.index()].int8_at_any_n = true;
    m
};

/// A GGUF block type's float-activation kernels: `widen`'s SIMD dequantisation.
const fn float_widen<B: widen::Widen>(k: &mut MatKernels) {
    k.gemv = widen::gemv::<B>;
    k.widen = widen::widen::<B>;
}

/// An interleaved K-quant's float-activation kernels: each block de-interleaved, then widened
/// as `float_widen`'s are.
const fn float_widen_kr8<B: widen::Widen + crate::format::kr8::Interleave>(k: &mut MatKernels) {
    k.gemv = widen::gemv_kr8::<B>;
    k.widen = widen::widen_kr8::<B>;
}

/// The AVX-512 rows: the AVX2 ones with VNNI int8 kernels for q8r8 / q4r8 / mxfp4r8 and the
/// interleaved K-quants, and 16-lane float-activation ones for row-major q8 / q8_0 / q4 / q4_0.
const MATS_512: [MatKernels; DType::COUNT] = {
    let mut m = MATS;
    m[DType::Q8R8.index()].gemv_i8 = Some(vnni::gemv_i8);
    m[DType::Q4R8.index()].gemv_i8 = Some(vnni::gemv_i8);
    m[DType::Mxfp4R8.index()].gemv_i8 = Some(mxfp4r8::gemv_i8_vnni);
    m[DType::Q5_0.index()].gemv_i8 = Some(q5r8::gemv_i8_vnni);
    m[DType::Q4KR8.index()].gemv_i8 = Some(kr8::gemv_i8_q4k_vnni);
    m[DType::Q6KR8.index()].gemv_i8 = Some(kr8::gemv_i8_q6k_vnni);
    m[DType::Iq4XsR8.index()].gemv_i8 = Some(kr8::gemv_i8_iq4xs_vnni);
    m[DType::Iq4NlR8.index()].gemv_i8 = Some(kr8::gemv_i8_iq4nl_vnni);
    // Float activations against row-major q8 / q8_0 / q4 / q4_0 blocks: 16 lanes.
    m[DType::Q8.index()].gemv = gemv::gemv_quant_512::<false>;
    m[DType::Q8_0.index()].gemv = gemv::gemv_quant_512::<false>;
    m[DType::Q4.index()].gemv = gemv::gemv_quant_512::<true>;
    m[DType::Q4_0.index()].gemv = gemv::gemv_quant_512::<true>;
    m
};

const fn float(gemv: super::table::GemvFn, widen: super::table::WidenFn) -> MatKernels {
    MatKernels { gemv, gemv_i8: None, widen, int8_at_any_n: false }
}

static AVX2: Table = Table {
    path: CpuPath::Avx2,
    mats: MATS,
    dot_f32: gemv::dot_f32,
    dot_f16: gemv::dot_f16,
    dot_bf16: gemv::dot_bf16,
    axpy_f32: gemv::axpy_f32,
    axpy_f16: gemv::axpy_f16,
    axpy_bf16: gemv::axpy_bf16,
    tile: tile::tile,
    tile_pair: None,
    transpose: transpose::transpose,
    scale_max: vexp::scale_max,
    exp_sum: vexp::exp_sum,
    gated: vexp::gated,
    quantize: actq::quantize_blocks,
    bf16: None,
    delta_step: delta::step_avx2,
    attend: None,
};

static AVX512: Table = Table {
    path: CpuPath::Avx512,
    mats: MATS_512,
    tile: tile::tile_512,
    tile_pair: Some(tile::tile_pair_512),
    scale_max: vexp::scale_max_512,
    exp_sum: vexp::exp_sum_512,
    gated: vexp::gated_512,
    delta_step: delta::step_avx512,
    ..AVX2
};

/// The AVX-512 table on a CPU that also has AVX-512 BF16: bf16 × bf16 products in `Reduced` mode.
static AVX512_BF16: Table =
    Table { bf16: Some(Bf16Kernels { gemv: bf16::gemv, tile: bf16::tile, gemm: None }), ..AVX512 };

/// The AVX-512 BF16 table whose bf16 products run on AMX tiles at every row count (`kernels::amx`;
/// its `gemv` and `tile` are then unused).
static AMX: Table = Table {
    path: CpuPath::Amx,
    bf16: Some(Bf16Kernels { gemv: bf16::gemv, tile: bf16::tile, gemm: Some(super::amx::hw::gemm) }),
    attend: Some(super::amx::hw::ATTEND),
    ..AVX512
};

/// The AMX table where cpuid also has AMX-INT8: q8r8 / q4r8 int8 products on tiles from
/// `amx::int8`'s row threshold (the VNNI kernel below it).
static AMX_INT8: Table = Table { mats: MATS_AMX, ..AMX };

/// The AVX-512 rows with the AMX-INT8 kernel for q8r8 / q4r8.
const MATS_AMX: [MatKernels; DType::COUNT] = {
    let mut m = MATS_512;
    m[DType::Q8R8.index()].gemv_i8 = Some(super::amx::hw::gemv_i8);
    m[DType::Q4R8.index()].gemv_i8 = Some(super::amx::hw::gemv_i8);
    m
};

/// True when this CPU runs the AVX2 path.
pub fn has_avx2() -> bool {
    std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
}

/// True when this CPU runs the AVX-512 path (AVX2's features, AVX-512 F/BW/VL and VNNI).
pub fn has_avx512() -> bool {
    has_avx2()
        && std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vl")
        && std::is_x86_feature_detected!("avx512vnni")
}

/// The AVX2 table, when this CPU supports it.
pub fn table() -> Option<&'static Table> {
    has_avx2().then_some(&AVX2)
}

/// The AMX table, when this CPU has AVX-512 BF16 and AMX-BF16 and Linux granted the tiles (with
/// the int8 rows when it also has AMX-INT8); otherwise why not.
pub fn table_amx() -> Result<&'static Table, String> {
    super::amx::hw::status().clone()?;
    match (table_512_bf16().is_some(), super::amx::hw::cpuid_has_amx_int8()) {
        (true, true) => Ok(&AMX_INT8),
        (true, false) => Ok(&AMX),
        _ => Err("this CPU lacks AVX-512 BF16 (the AMX path's other bf16 kernels)".into()),
    }
}

/// The AVX-512 table, when this CPU supports it: with the bf16 kernels when it has AVX-512 BF16
/// at the FMAs' rate (`tune::dpbf16_full_rate`), else bf16 weights widened for f32 FMAs.
pub fn table_512() -> Option<&'static Table> {
    match table_512_bf16() {
        Some(t) if tune::dpbf16_full_rate() => Some(t),
        _ => has_avx512().then_some(&AVX512),
    }
}

/// The AVX-512 table with the AVX-512 BF16 kernels, when this CPU has them (whatever their rate:
/// the tests run them wherever they can).
pub(crate) fn table_512_bf16() -> Option<&'static Table> {
    (has_avx512() && std::is_x86_feature_detected!("avx512bf16")).then_some(&AVX512_BF16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_avx512_path_takes_bf16_products_only_where_they_run_at_the_fmas_rate() {
        let bf16 = has_avx512() && std::is_x86_feature_detected!("avx512bf16");
        assert_eq!(table_512_bf16().is_some(), bf16);
        match table_512() {
            Some(t) => {
                assert!(has_avx512());
                // The bf16 kernels exactly where the CPU has them at full rate; the widening
                // float kernels otherwise.
                assert_eq!(t.bf16.is_some(), bf16 && tune::dpbf16_full_rate());
                assert_eq!(std::ptr::eq(t, &AVX512_BF16), t.bf16.is_some());
            }
            None => assert!(!has_avx512()),
        }
        // The AMX path keeps AVX-512 BF16's kernels whatever the AVX-512 path takes.
        if let Ok(t) = table_amx() {
            assert!(bf16 && t.bf16.is_some_and(|k| k.gemm.is_some()));
        }
    }
}
