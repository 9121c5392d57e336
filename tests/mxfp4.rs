//! Contract: colibri's MXFP4 is ggml's, bit for bit. The committed vectors of
//! tests/fixtures/mxfp4 (made by tools/make_mxfp4_vectors.py) hold gguf-py's dequantisation of
//! blocks with every E8M0 exponent, gguf-py's quantisation of f32 blocks, and transformers'
//! dequantisation of blocks in the HuggingFace GPT-OSS layout (which colibri repacks).

use colibri::format::{mxfp4, DType};
use std::path::PathBuf;

fn fixture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mxfp4").join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn dequantisation_is_gguf_py_bit_for_bit() {
    let blocks = fixture("ggml.bin");
    let want = f32s(&fixture("ggml_f32.bin"));
    assert_eq!(blocks.len() / mxfp4::BLOCK_BYTES * 32, want.len());
    assert!((0..=255u8).all(|e| blocks.chunks_exact(17).any(|b| b[0] == e)), "every exponent is covered");
    let mut got = vec![0f32; want.len()];
    DType::Mxfp4.dequantize(&blocks, want.len(), 0, &mut got);
    assert_eq!(bits(&got), bits(&want));
    // From an inner block on, as the kernels' widening asks.
    let mut tail = vec![0f32; want.len() - 64];
    DType::Mxfp4.dequantize(&blocks, want.len(), 64, &mut tail);
    assert_eq!(bits(&tail), bits(&want[64..]));
}

#[test]
fn reference_quantiser_is_gguf_py_byte_for_byte() {
    let x = f32s(&fixture("quant_in_f32.bin"));
    let want = fixture("quant_out.bin");
    assert_eq!(DType::Mxfp4.encode(&x, 32), want);
}

#[test]
fn huggingface_blocks_repack_to_transformers_values() {
    let (hf, scales, want) = (fixture("hf_blocks.bin"), fixture("hf_scales.bin"), f32s(&fixture("hf_f32.bin")));
    let mut ggml = Vec::new();
    for (b, &s) in hf.chunks_exact(16).zip(&scales) {
        ggml.extend(mxfp4::from_hf_block(b.try_into().unwrap(), s));
    }
    let mut got = vec![0f32; want.len()];
    DType::Mxfp4.dequantize(&ggml, want.len(), 0, &mut got);
    // Equal values; transformers' table has −0.0 for nibble 8 where ggml's has 0.
    assert_eq!(got, want);
    assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits() || *a == 0.0));
}

#[test]
fn the_nan_exponent_is_a_nonfinite_scale() {
    let mut blocks = DType::Mxfp4.encode(&[0.5f32; 64], 64);
    assert!(colibri::format::find_nonfinite_in(DType::Mxfp4, &blocks, 64).is_none());
    blocks[17] = 255;
    assert_eq!(
        colibri::format::find_nonfinite_in(DType::Mxfp4, &blocks, 64),
        Some(colibri::format::NonFinite::Scale(1))
    );
}
