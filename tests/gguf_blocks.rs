//! Contract: GGUF's block types are native dtypes that mean exactly what llama.cpp means. On
//! vectors llama.cpp made (tools/make_gguf_vectors.py: llama.cpp's own quantiser on a seeded
//! matrix, gguf-py's `gguf.quants.dequantize` of the result), for every type:
//! * the dtype at id 32 + ggml's type number is that type, and the bytes have its size;
//! * our dequantisation equals gguf-py's bit for bit;
//! * our reference encoder, given the same input, writes llama.cpp's bytes;
//! * a NaN/Inf in any f16 scale of a block is found and named by its block;
//! * the reference dots (f32 and int8 activations) agree with dequantise-then-dot.

use colibri::format::{find_nonfinite_in, DType, NonFinite};
use colibri::kernels::{Kernels, Mat, QuantActivations};
use std::path::PathBuf;

/// (file name, ggml type number) of every vector set.
const TYPES: [(&str, u32); 12] = [
    ("q4_0", 2),
    ("q4_1", 3),
    ("q5_0", 6),
    ("q5_1", 7),
    ("q8_0", 8),
    ("q2_k", 10),
    ("q3_k", 11),
    ("q4_k", 12),
    ("q5_k", 13),
    ("q6_k", 14),
    ("iq4_nl", 20),
    ("iq4_xs", 23),
];

struct Vectors {
    dtype: DType,
    rows: usize,
    cols: usize,
    blocks: Vec<u8>,
    deq: Vec<f32>,
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_blocks")
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// One type's vectors, with the checks that they hold what their name says.
fn load(name: &str, ggml_type: u32) -> Vectors {
    let b = std::fs::read(dir().join(format!("{name}.bin"))).unwrap();
    assert_eq!(&b[..4], b"GGBV", "{name}");
    assert_eq!(u32_at(&b, 4), ggml_type, "{name}.bin stores another ggml type");
    let (rows, cols) = (u32_at(&b, 8) as usize, u32_at(&b, 12) as usize);
    let dtype = DType::from_id(32 + ggml_type).unwrap_or_else(|| panic!("no dtype at id {}", 32 + ggml_type));
    assert_eq!(dtype.name(), name);
    let len = dtype.bytes_for((rows * cols) as u64).unwrap() as usize;
    assert_eq!(b.len(), 16 + len + 4 * rows * cols, "{name}: the blocks are not {name}'s size");
    Vectors { dtype, rows, cols, blocks: b[16..16 + len].to_vec(), deq: f32s(&b[16 + len..]) }
}

fn each(mut f: impl FnMut(&str, &Vectors)) {
    for (name, t) in TYPES {
        f(name, &load(name, t));
    }
}

#[test]
fn dequantisation_is_gguf_py_bit_for_bit() {
    each(|name, v| {
        let mut out = vec![0f32; v.rows * v.cols];
        v.dtype.dequantize(&v.blocks, v.cols, 0, &mut out);
        let bad = out.iter().zip(&v.deq).position(|(a, b)| a.to_bits() != b.to_bits());
        assert!(
            bad.is_none(),
            "{name}: element {bad:?}: {:?} vs gguf-py {:?}",
            bad.map(|i| out[i]),
            bad.map(|i| v.deq[i])
        );
        // A range starting at a later block, through the same entry point as the kernels.
        let m = Mat::new(v.dtype, v.rows, v.cols, &v.blocks).unwrap();
        let mut row = vec![0f32; v.cols];
        m.row_to_f32(v.rows - 1, &mut row);
        assert_eq!(row, v.deq[(v.rows - 1) * v.cols..], "{name}: last row");
    });
}

#[test]
fn the_reference_encoder_writes_llama_cpp_bytes() {
    let x = f32s(&std::fs::read(dir().join("x.f32")).unwrap());
    each(|name, v| {
        let ours = v.dtype.encode(&x, v.cols);
        assert_eq!(ours.len(), v.blocks.len(), "{name}");
        let bb = v.dtype.info().block_bytes as usize;
        let differ: Vec<usize> =
            (0..ours.len() / bb).filter(|&b| ours[b * bb..(b + 1) * bb] != v.blocks[b * bb..(b + 1) * bb]).collect();
        eprintln!("{name:7} {} of {} blocks as llama.cpp writes them", ours.len() / bb - differ.len(), ours.len() / bb);
        assert!(differ.is_empty(), "{name}: blocks {differ:?} differ from llama.cpp's");
    });
}

#[test]
fn a_bad_scale_is_found_in_every_block_type() {
    each(|name, v| {
        assert_eq!(find_nonfinite_in(v.dtype, &v.blocks, v.cols as u64), None, "{name}");
        let bb = v.dtype.info().block_bytes as usize;
        let nb = v.blocks.len() / bb;
        // Every f16 field of the last block, one at a time: those that are scales are found.
        let mut found = 0;
        for off in (0..bb).step_by(2) {
            let mut b = v.blocks.clone();
            b[(nb - 1) * bb + off..(nb - 1) * bb + off + 2].copy_from_slice(&0x7c00u16.to_le_bytes());
            if let Some(at) = find_nonfinite_in(v.dtype, &b, v.cols as u64) {
                assert_eq!(at, NonFinite::Scale(nb as u64 - 1), "{name} offset {off}");
                found += 1;
            }
        }
        // q4_1, q5_1 and the K-quants with a min have two f16 scales, the others one.
        let want = if matches!(name, "q4_1" | "q5_1" | "q2_k" | "q4_k" | "q5_k") { 2 } else { 1 };
        assert_eq!(found, want, "{name}: f16 scales found");
    });
}

#[test]
fn reference_dots_are_dequantise_then_dot() {
    // 1 activation row (decode), 5 and 40 (batched decode, prefill: q5_0's copies to q8r8, the
    // GEMM of the types without an int8 prefill kernel), over the rows repeated 8 times (whole
    // groups of 8 rows for the kernels that take them).
    for n in [1, 5, 40] {
        let x: Vec<f32> = (0..512 * n).map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 0.5).collect();
        each(|name, v| {
            let (rows, blocks) = (8 * v.rows, v.blocks.repeat(8));
            let m = Mat::new(v.dtype, rows, v.cols, &blocks).unwrap();
            let xs: Vec<f32> = (0..n).flat_map(|t| x[t * 512..t * 512 + v.cols].to_vec()).collect();
            for act in [QuantActivations::Float, QuantActivations::Reduced] {
                let k = Kernels::new(act);
                let mut y = vec![0f32; n * rows];
                k.matmul(m, &xs, n, &mut y);
                for (i, &yr) in y.iter().enumerate() {
                    let (t, r) = (i / rows, i % v.rows);
                    let (w, xt) = (&v.deq[r * v.cols..(r + 1) * v.cols], &xs[t * v.cols..(t + 1) * v.cols]);
                    let exact: f64 = w.iter().zip(xt).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
                    let mag: f64 = w.iter().zip(xt).map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs()).sum();
                    // f32 activations: float rounding only; int8: half an activation step per weight.
                    let tol = if act == QuantActivations::Float { 1e-5 * mag } else { 1.5e-2 * mag };
                    let err = (f64::from(yr) - exact).abs();
                    assert!(
                        err <= tol + 1e-30,
                        "{name} {act:?} n {n} token {t} row {r}: {yr} vs {exact} (err {err:e}, Σ|wx| {mag:e})"
                    );
                }
            }
        });
    }
}
