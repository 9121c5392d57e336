//! Unit checks of the GGUF block module; tests/gguf_blocks.rs checks it against llama.cpp.

use super::*;
use crate::format::blocks::sample;

#[test]
fn nearest_int_rounds_half_to_even_like_ggml() {
    let cases = [(0.5, 0), (1.5, 2), (2.5, 2), (-0.5, 0), (-1.5, -2), (3.49, 3), (-7.51, -8), (0.0, 0)];
    for (v, want) in cases {
        assert_eq!(nearest_int(v), want, "{v}");
    }
}

/// Round trip through each encoder: every value within the type's step of the input.
fn round_trip<B: Block>(tol: f32) {
    let x: Vec<f32> = sample(4 * QK_K, 7);
    let bytes = quantize::<B>(&x);
    assert_eq!(bytes.len(), x.len() / B::QK * block_bytes::<B>());
    let mut y = vec![0f32; x.len()];
    dequantize::<B>(&bytes, 0, &mut y);
    let worst = x.iter().zip(&y).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst <= tol, "{}: worst error {worst}", std::any::type_name::<B>());
    // A later start reads the same blocks.
    let mut z = vec![0f32; x.len() - QK_K];
    dequantize::<B>(&bytes, QK_K, &mut z);
    assert_eq!(z, y[QK_K..]);
}

#[test]
fn every_encoder_round_trips_within_its_step() {
    round_trip::<BlockQ4_0>(0.15);
    round_trip::<BlockQ4_1>(0.08);
    round_trip::<BlockQ5_0>(0.07);
    round_trip::<BlockQ5_1>(0.04);
    round_trip::<BlockIq4Nl>(0.15);
    round_trip::<BlockQ2K>(0.4);
    round_trip::<BlockQ3K>(0.25);
    round_trip::<BlockQ4K>(0.1);
    round_trip::<BlockQ5K>(0.05);
    round_trip::<BlockQ6K>(0.03);
    round_trip::<BlockIq4Xs>(0.15);
}

#[test]
fn an_all_zero_input_encodes_to_zero_values() {
    fn zero<B: Block>() {
        let mut y = vec![1f32; B::QK];
        B::quantize(&vec![0f32; B::QK]).dequantize(&mut y);
        assert!(y.iter().all(|&v| v == 0.0), "{}: {y:?}", std::any::type_name::<B>());
    }
    zero::<BlockQ4_0>();
    zero::<BlockQ4_1>();
    zero::<BlockQ5_0>();
    zero::<BlockQ5_1>();
    zero::<BlockIq4Nl>();
    zero::<BlockQ2K>();
    zero::<BlockQ3K>();
    zero::<BlockQ4K>();
    zero::<BlockQ5K>();
    zero::<BlockQ6K>();
    zero::<BlockIq4Xs>();
}

#[test]
fn q4_k_scale_packing_round_trips() {
    // 6-bit pairs as ggml packs them: j < 4 in the low 6 bits, j ≥ 4 split over three bytes.
    let (ls, lm) = ([1u8, 63, 17, 32, 45, 2, 60, 33], [62u8, 0, 5, 31, 16, 63, 9, 48]);
    let mut p = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            (p[j], p[j + 4]) = (ls[j], lm[j]);
        } else {
            p[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4);
            p[j - 4] |= (ls[j] >> 4) << 6;
            p[j] |= (lm[j] >> 4) << 6;
        }
    }
    for j in 0..8 {
        assert_eq!(scale_min_k4(j, &p), (ls[j], lm[j]), "pair {j}");
    }
}

/// GGUF's Q8_0 and Q4_0 blocks hold colibri's q8 / q4 blocks (f16 scale; i8 quants, value
/// d·q; q4: element j in the low nibble of byte j, j + 16 in its high one, value d·(q − 8)):
/// their quants and scales moved into q8 / q4's two regions (all quants, then all scales)
/// dequantise to the same values bit for bit, for any quant bytes (−128 and every nibble).
#[test]
fn q8_0_and_q4_0_blocks_are_q8_and_q4_blocks() {
    use crate::format::DType;
    let (rows, cols) = (3, 128);
    let n = rows * cols / 32;
    let mut s = 0x1234_5678_9ABC_DEF1u64;
    for (gguf, colibri, bb) in [(DType::Q8_0, DType::Q8, 34), (DType::Q4_0, DType::Q4, 18)] {
        let mut bytes: Vec<u8> = (0..n * bb)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect();
        for (i, blk) in bytes.chunks_exact_mut(bb).enumerate() {
            blk[..2].copy_from_slice(&to_h(0.001 * (i as f32 - 5.5)));
        }
        let (scales, quants): (Vec<&[u8]>, Vec<&[u8]>) = bytes.chunks_exact(bb).map(|b| b.split_at(2)).unzip();
        let split: Vec<u8> = quants.concat().into_iter().chain(scales.concat()).collect();
        let (mut want, mut got) = (vec![0f32; rows * cols], vec![1f32; rows * cols]);
        gguf.dequantize(&bytes, cols, 0, &mut want);
        colibri.dequantize(&split, cols, 0, &mut got);
        assert!(want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()), "{gguf} as {colibri}");
    }
}
