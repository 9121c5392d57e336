//! Contract: q4_kr8 / q6_kr8 / iq4_xsr8 / iq4_nlr8 (`colibri::format::kr8`) are GGUF's q4_k /
//! q6_k / iq4_xs / iq4_nl blocks re-laid-out, and q8r8 / q4r8 as the GGUF importer writes them
//! (`blocks::interleave_ggml_blocks`) GGUF's q8_0 / q4_0 blocks, nothing else. On the blocks llama.cpp's quantiser wrote
//! (tests/fixtures/gguf_blocks, made by tools/make_gguf_vectors.py) and gguf-py's
//! dequantisation of them:
//! * interleaving the rows and dequantising the interleaved matrix gives gguf-py's values bit
//!   for bit, through the dtype table and through `Mat` (any row);
//! * a NaN/Inf scale is found and named by its row-major block (the K-quants);
//! * the products on the path this process runs (`COLIBRI_CPU`), int8 and f32 activations,
//!   agree with dequantise-then-dot, and int8 ones equal the row-major dtype's up to rounding.

use colibri::format::{blocks, find_nonfinite_in, kr8, DType, NonFinite};
use colibri::kernels::{Kernels, Mat, QuantActivations};
use std::path::PathBuf;

struct Vectors {
    row_major: DType,
    rows: usize,
    cols: usize,
    blocks: Vec<u8>,
    deq: Vec<f32>,
}

fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize
}

/// The fixture's rows, repeated in the order `order` (16 rows: two whole groups).
fn load(name: &str, ggml_type: u32) -> Vectors {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_blocks");
    let b = std::fs::read(dir.join(format!("{name}.bin"))).unwrap();
    assert_eq!((&b[..4], u32_at(&b, 4)), (&b"GGBV"[..], ggml_type as usize), "{name}.bin");
    let (rows, cols) = (u32_at(&b, 8), u32_at(&b, 12));
    let row_major = DType::from_id(32 + ggml_type).unwrap();
    assert_eq!(row_major.name(), name);
    let len = row_major.bytes_for((rows * cols) as u64).unwrap() as usize;
    let rb = len / rows;
    let deq: Vec<f32> = b[16 + len..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let order: Vec<usize> = (0..16).map(|i| (i * 5 + 3) % rows).collect();
    Vectors {
        row_major,
        rows: 16,
        cols,
        blocks: order.iter().flat_map(|&r| b[16 + r * rb..16 + (r + 1) * rb].to_vec()).collect(),
        deq: order.iter().flat_map(|&r| deq[r * cols..(r + 1) * cols].to_vec()).collect(),
    }
}

/// The K-quants (`kr8`) and the 32-element types the importer interleaves (`blocks`).
const KQUANTS: &[(&str, u32, DType)] = &[
    ("q4_k", 12, DType::Q4KR8),
    ("q6_k", 14, DType::Q6KR8),
    ("iq4_xs", 23, DType::Iq4XsR8),
    ("iq4_nl", 20, DType::Iq4NlR8),
];
const ALL: &[(&str, u32, DType)] =
    &[KQUANTS[0], KQUANTS[1], KQUANTS[2], KQUANTS[3], ("q8_0", 8, DType::Q8R8), ("q4_0", 2, DType::Q4R8)];

/// Row-major GGUF blocks (rows of `cols`) as the importer interleaves them into `il`.
fn interleave(il: DType, rm: &[u8], cols: usize) -> Result<Vec<u8>, String> {
    if !matches!(il, DType::Q8R8 | DType::Q4R8) {
        return kr8::interleave(il, rm, cols);
    }
    let (mut qs, mut d) = (Vec::new(), Vec::new());
    blocks::interleave_ggml_blocks(rm, il.info().block_bytes as usize, cols / 32, &mut qs, &mut d)?;
    qs.extend(d);
    Ok(qs)
}

fn each(types: &[(&str, u32, DType)], mut f: impl FnMut(DType, &Vectors, &[u8])) {
    for &(name, t, il) in types {
        let v = load(name, t);
        assert_eq!((il.row_group(), il.info().block_bytes), (8, v.row_major.info().block_bytes), "{il}");
        if KQUANTS.iter().any(|k| k.2 == il) {
            assert_eq!((v.row_major.interleaved(), il.encoding()), (il, v.row_major));
        }
        let bytes = interleave(il, &v.blocks, v.cols).unwrap();
        assert_eq!(bytes.len(), v.blocks.len(), "{il}: same size as {name}");
        assert_ne!(bytes, v.blocks, "{il}: re-laid-out");
        f(il, &v, &bytes);
    }
}

#[test]
fn interleaved_dequantisation_is_gguf_py_bit_for_bit() {
    each(ALL, |il, v, bytes| {
        let mut out = vec![0f32; v.rows * v.cols];
        il.dequantize(bytes, v.cols, 0, &mut out);
        let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&out), bits(&v.deq), "{il}");
        let m = Mat::new(il, v.rows, v.cols, bytes).unwrap();
        let mut row = vec![0f32; v.cols];
        for r in [0, 5, 8, 15] {
            m.row_to_f32(r, &mut row);
            assert_eq!(bits(&row), bits(&v.deq[r * v.cols..(r + 1) * v.cols]), "{il} row {r}");
        }
        assert!(interleave(il, &v.blocks[..v.blocks.len() / 16 * 12], v.cols).is_err(), "12 rows");
        assert!(Mat::new(il, 12, v.cols, &bytes[..bytes.len() / 16 * 12]).is_err(), "12 rows bound");
    });
}

#[test]
fn a_bad_scale_is_found_by_its_row_major_block() {
    each(KQUANTS, |il, v, _| {
        let bb = il.info().block_bytes as usize;
        let nb = v.cols / il.block();
        // Row 11's second block: its d (q6_k: at 208; q4_k, iq4_xs, iq4_nl: at 0) turned to +Inf in the
        // row-major bytes.
        let at = (11 * nb + 1) * bb + if il == DType::Q6KR8 { 208 } else { 0 };
        let mut rm = v.blocks.clone();
        rm[at..at + 2].copy_from_slice(&0x7c00u16.to_le_bytes());
        let bad = kr8::interleave(il, &rm, v.cols).unwrap();
        assert_eq!(find_nonfinite_in(il, &bad, v.cols as u64), Some(NonFinite::Scale(11 * nb as u64 + 1)), "{il}");
        assert_eq!(find_nonfinite_in(il, &kr8::interleave(il, &v.blocks, v.cols).unwrap(), v.cols as u64), None);
    });
}

#[test]
fn products_are_dequantise_then_dot_on_this_path() {
    let x: Vec<f32> = (0..3 * 512).map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 0.5).collect();
    each(ALL, |il, v, bytes| {
        let m = Mat::new(il, v.rows, v.cols, bytes).unwrap();
        let rm = Mat::new(v.row_major, v.rows, v.cols, &v.blocks).unwrap();
        for act in [QuantActivations::Float, QuantActivations::Reduced] {
            let k = Kernels::new(act);
            for n in [1, 3] {
                let (mut y, mut y_rm) = (vec![0f32; n * v.rows], vec![0f32; n * v.rows]);
                k.matmul(m, &x[..n * v.cols], n, &mut y);
                k.matmul(rm, &x[..n * v.cols], n, &mut y_rm);
                for (i, (&a, &b)) in y.iter().zip(&y_rm).enumerate() {
                    let (t, r) = (i / v.rows, i % v.rows);
                    let (w, xt) = (&v.deq[r * v.cols..(r + 1) * v.cols], &x[t * v.cols..(t + 1) * v.cols]);
                    let exact: f64 = w.iter().zip(xt).map(|(&p, &q)| f64::from(p) * f64::from(q)).sum();
                    let mag: f64 = w.iter().zip(xt).map(|(&p, &q)| (f64::from(p) * f64::from(q)).abs()).sum();
                    // f32 activations: rounding only; int8: half an activation step per weight.
                    let tol = if act == QuantActivations::Float { 1e-5 * mag } else { 1.5e-2 * mag };
                    assert!((f64::from(a) - exact).abs() <= tol, "{il} {act:?} n {n} [{i}]: {a} vs {exact}");
                    // The same integers as the row-major kernels: only float order differs.
                    assert!((f64::from(a) - f64::from(b)).abs() <= 1e-5 * mag, "{il} {act:?} [{i}]: {a} vs {b}");
                }
            }
        }
    });
}
