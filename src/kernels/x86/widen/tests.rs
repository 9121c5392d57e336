//! The AVX2 widening of every GGUF block type (and of the interleaved K-quants) against the
//! reference dequantisation, bit for bit, on blocks of random bytes (every bit pattern of quants
//! and sub-scales is a valid block; the f16 scales are random finite values), through the AVX2
//! table's rows; its float-activation matrix-vector kernel against the exact f64 products.

use super::super::super::dispatch::table_for;
use super::super::super::table::CpuPath;
use super::super::super::Mat;
use crate::format::DType;

/// The dtypes this file widens.
const TYPES: [DType; 11] = [
    DType::Q4K,
    DType::Q6K,
    DType::Q5K,
    DType::Q3K,
    DType::Q2K,
    DType::Iq4Xs,
    DType::Iq4Nl,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q4_0,
    DType::Q4_1,
];

/// Byte offsets of each dtype's f16 scales inside a block (`Block::SCALES`).
fn scales(d: DType) -> &'static [usize] {
    use crate::format::ggml::*;
    match d {
        DType::Q4K => BlockQ4K::SCALES,
        DType::Q6K => BlockQ6K::SCALES,
        DType::Q5K => BlockQ5K::SCALES,
        DType::Q3K => BlockQ3K::SCALES,
        DType::Q2K => BlockQ2K::SCALES,
        DType::Iq4Xs => BlockIq4Xs::SCALES,
        DType::Iq4Nl => BlockIq4Nl::SCALES,
        DType::Q5_0 => BlockQ5_0::SCALES,
        DType::Q5_1 => BlockQ5_1::SCALES,
        DType::Q4_0 => BlockQ4_0::SCALES,
        _ => BlockQ4_1::SCALES,
    }
}

/// `blocks` blocks of dtype `d`: random bytes, each f16 scale a random finite value.
fn random_blocks(d: DType, blocks: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let bb = d.info().block_bytes as usize;
    let mut bytes: Vec<u8> = (0..blocks * bb).map(|_| next() as u8).collect();
    for blk in bytes.chunks_exact_mut(bb) {
        for &o in scales(d) {
            let v = half::f16::from_f32(((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.02);
            blk[o..o + 2].copy_from_slice(&v.to_bits().to_le_bytes());
        }
    }
    bytes
}

#[test]
fn every_gguf_block_type_widens_to_its_reference_values_bit_for_bit() {
    let Some(t) = table_for(CpuPath::Avx2) else { return };
    let (rows, cols) = (6, 1024);
    for (i, d) in TYPES.into_iter().enumerate() {
        let bytes = random_blocks(d, rows * cols / d.block(), i as u64 + 1);
        let w = Mat::new(d, rows, cols, &bytes).expect("binds");
        let mut want = vec![0f32; rows * cols];
        d.dequantize(&bytes, cols, 0, &mut want);
        for (k0, kc) in [(0, cols), (256, 512), (768, 256)] {
            for r in [0..rows, 2..5, 5..6] {
                let mut got = vec![f32::NAN; r.len() * kc];
                (t.mat(d).widen)(w, r.clone(), k0, &mut got);
                for (j, (g, row)) in got.chunks(kc).zip(r.clone()).enumerate() {
                    let exp = &want[row * cols + k0..row * cols + k0 + kc];
                    let same = g.iter().zip(exp).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{d}: row {row} ({j} of {r:?}) columns {k0}..{}", k0 + kc);
                }
            }
        }
    }
}

/// Rows widened and summed eight at a time (19 rows: two groups of eight and three alone) are the
/// exact product closely, and each row's result is the one it gets alone, bit for bit.
#[test]
fn the_float_activation_gemv_is_the_exact_product_closely() {
    let Some(t) = table_for(CpuPath::Avx2) else { return };
    let (rows, cols, n) = (19, 768, 3);
    let x: Vec<f32> = (0..n * cols).map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0).collect();
    for (i, d) in TYPES.into_iter().enumerate() {
        let bytes = random_blocks(d, rows * cols / d.block(), 100 + i as u64);
        let w = Mat::new(d, rows, cols, &bytes).expect("binds");
        let mut wv = vec![0f32; rows * cols];
        d.dequantize(&bytes, cols, 0, &mut wv);
        let mut got = vec![0f32; n * rows];
        (t.mat(d).gemv)(w, 0..rows, &x, n, &mut got);
        for r in 0..rows {
            let mut alone = vec![0f32; n];
            (t.mat(d).gemv)(w, r..r + 1, &x, n, &mut alone);
            for (tt, a) in alone.iter().enumerate() {
                assert_eq!(got[tt * rows + r].to_bits(), a.to_bits(), "{d}: row {r} act {tt} alone");
            }
        }
        for tt in 0..n {
            for r in 0..rows {
                let terms = wv[r * cols..(r + 1) * cols].iter().zip(&x[tt * cols..(tt + 1) * cols]);
                let (exact, mag) = terms.fold((0f64, 0f64), |(s, m), (a, b)| {
                    let p = f64::from(*a) * f64::from(*b);
                    (s + p, m + p.abs())
                });
                let err = (f64::from(got[tt * rows + r]) - exact).abs();
                assert!(err <= 4e-6 * mag, "{d}: row {r} act {tt}: {} vs {exact} (Σ|w·x| {mag})", got[tt * rows + r]);
            }
        }
    }
}

/// The interleaved K-quants (q4_kr8 / q6_kr8 / iq4_xsr8: random blocks of their row-major twins,
/// interleaved) widen to the reference's values bit for bit over row ranges starting and ending
/// inside 8-row groups, and their float-activation matrix-vector kernel is the exact product
/// closely.
#[test]
fn interleaved_k_quants_widen_to_their_reference_values_bit_for_bit() {
    let Some(t) = table_for(CpuPath::Avx2) else { return };
    let (rows, cols, n) = (16, 768, 2);
    let x: Vec<f32> = (0..n * cols).map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0).collect();
    let pairs = [
        (DType::Q4KR8, DType::Q4K),
        (DType::Q6KR8, DType::Q6K),
        (DType::Iq4XsR8, DType::Iq4Xs),
        (DType::Iq4NlR8, DType::Iq4Nl),
    ];
    for (i, (d, row_major)) in pairs.into_iter().enumerate() {
        let blocks = random_blocks(row_major, rows * cols / d.block(), 200 + i as u64);
        let bytes = crate::format::kr8::interleave(d, &blocks, cols).expect("whole groups");
        let w = Mat::new(d, rows, cols, &bytes).expect("binds");
        let mut want = vec![0f32; rows * cols];
        d.dequantize(&bytes, cols, 0, &mut want);
        for (k0, kc) in [(0, cols), (256, 256), (512, 256)] {
            for r in [0..rows, 3..13, 8..9, 15..16] {
                let mut got = vec![f32::NAN; r.len() * kc];
                (t.mat(d).widen)(w, r.clone(), k0, &mut got);
                for (g, row) in got.chunks(kc).zip(r.clone()) {
                    let exp = &want[row * cols + k0..row * cols + k0 + kc];
                    assert!(g.iter().zip(exp).all(|(a, b)| a.to_bits() == b.to_bits()), "{d}: row {row} k0 {k0}");
                }
            }
        }
        let mut got = vec![0f32; n * 11];
        (t.mat(d).gemv)(w, 3..14, &x, n, &mut got);
        for tt in 0..n {
            for r in 3..14 {
                let terms = want[r * cols..(r + 1) * cols].iter().zip(&x[tt * cols..(tt + 1) * cols]);
                let (exact, mag) = terms.fold((0f64, 0f64), |(s, m), (a, b)| {
                    let p = f64::from(*a) * f64::from(*b);
                    (s + p, m + p.abs())
                });
                let y = f64::from(got[tt * 11 + r - 3]);
                assert!((y - exact).abs() <= 4e-6 * mag, "{d}: row {r} act {tt}: {y} vs {exact} (Σ|w·x| {mag})");
            }
        }
    }
}
