//! q5_0's int8 products on every path: the q8r8 copy against its scalar specification
//! (`q5r8`), the products against the reference (`actq::dot_ggml_i8`) and, on whole groups of 8
//! rows, bit for bit against the q8r8 kernels on the reference copy.

use super::actq::{quantize_blocks, QuantizedActs};
use super::dispatch::{available_paths, table_for};
use super::q5r8::q5_0_as_q8r8;
use super::tests::sample;
use super::{reference, CpuPath, Mat};
use crate::format::blocks::q8_bytes;
use crate::format::DType;

/// q5_0 values with outliers (the widest scales next to small quants) and a zero block.
fn weights(rows: usize, cols: usize) -> Vec<u8> {
    let mut wf = sample(rows * cols, (rows * 7 + cols) as u64);
    wf.iter_mut().step_by(89).for_each(|v| *v *= 30.0);
    wf[cols..cols + 32].fill(0.0);
    DType::Q5_0.encode(&wf, cols)
}

/// The q8r8 copy of rows `rows` by the scalar specification, in u16 storage (the scales'
/// alignment).
fn reference_copy(w: &[u8], cols: usize, rows: std::ops::Range<usize>) -> Vec<u16> {
    let mut out = vec![0xAAAAu16; q8_bytes(rows.len() * cols) / 2];
    q5_0_as_q8r8(w, cols, rows, bytes_mut(&mut out));
    out
}

fn bytes(v: &[u16]) -> &[u8] {
    // SAFETY: u16 has no padding; the view covers the slice's initialised bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), v.len() * 2) }
}

fn bytes_mut(v: &mut [u16]) -> &mut [u8] {
    // SAFETY: as in `bytes`, and any byte values are valid u16 bits.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), v.len() * 2) }
}

#[test]
fn the_q8r8_copy_holds_the_same_values() {
    for (rows, cols) in [(8, 32), (24, 96), (16, 1408)] {
        let stored = weights(rows, cols);
        let w = Mat::new(DType::Q5_0, rows, cols, &stored).unwrap();
        for part in [0..rows, 8..rows] {
            let copy = reference_copy(&stored, cols, part.clone());
            let c = Mat::new(DType::Q8R8, part.len(), cols, bytes(&copy)).unwrap();
            let (mut want, mut got) = (vec![0f32; part.len() * cols], vec![0f32; part.len() * cols]);
            w.dequantize(part.start * cols, &mut want);
            c.dequantize(0, &mut got);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{rows}x{cols} rows {part:?}");
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_simd_copy_is_the_reference_copy_byte_for_byte() {
    if !super::x86::has_avx2() {
        return eprintln!("no AVX2: nothing to compare");
    }
    for (rows, cols) in [(8, 32), (24, 96), (32, 1408), (16, 10944)] {
        let stored = weights(rows, cols);
        let w = Mat::new(DType::Q5_0, rows, cols, &stored).unwrap();
        for part in [0..rows, 8..rows, rows - 8..rows] {
            let mut got = vec![0x5555u16; q8_bytes(part.len() * cols) / 2];
            super::x86::q5r8::copy_q8r8(w, part.clone(), bytes_mut(&mut got));
            assert!(got == reference_copy(&stored, cols, part.clone()), "{rows}x{cols} rows {part:?}");
        }
    }
}

/// Row ranges: whole, ragged at either end, inside one group, one group pair.
fn ranges(rows: usize) -> Vec<std::ops::Range<usize>> {
    vec![0..rows, 3..rows, 0..rows - 5, 9..13, 8..24]
}

#[test]
fn int8_products_match_the_reference_and_the_q8r8_kernels_on_every_path() {
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    let dot = reference::ROWS[DType::Q5_0.index()].dot_i8.unwrap();
    for (rows, cols) in [(29, 64), (45, 1408), (72, 288)] {
        let stored = weights(rows, cols);
        let w = Mat::new(DType::Q5_0, rows, cols, &stored).unwrap();
        let mut wr = vec![0f32; cols];
        for n in [1, 2, 7, 15, 16, 17, 31, 40, 70] {
            let mut x = sample(n * cols, n as u64 + 11);
            x.iter_mut().step_by(53).for_each(|v| *v = v.signum() * 20.0);
            let mut xa = QuantizedActs::default();
            xa.quantize_with(quantize_blocks, &x, n, cols);
            let mut xd = vec![0f32; n * cols];
            xa.dequantize(&mut xd);
            let mut per_path = Vec::new();
            for path in available_paths() {
                let t = table_for(path).unwrap();
                let gemv = t.mat(DType::Q5_0).gemv_i8.unwrap();
                for r in ranges(rows) {
                    let mut got = vec![f32::NAN; n * r.len()];
                    gemv(w, r.clone(), &xa, n, &mut got);
                    for (i, row) in r.clone().enumerate() {
                        w.row_to_f32(row, &mut wr);
                        for tok in 0..n {
                            let mag: f32 = wr.iter().zip(&xd[tok * cols..]).map(|(a, b)| (a * b).abs()).sum();
                            let want = dot(w, row, &xa, tok);
                            let g = got[tok * r.len() + i];
                            assert!(
                                (g - want).abs() <= 1e-6 * mag,
                                "{path:?} {rows}x{cols} n {n} rows {r:?} row {row} token {tok}: {g} vs {want}"
                            );
                        }
                    }
                    // The rows in whole groups of 8, at every n (copied or read in place): the
                    // q8r8 kernels of the path on the reference copy, bit for bit.
                    let (g0, g1) = (r.start.next_multiple_of(8), r.end / 8 * 8);
                    if path != CpuPath::Generic && g0 < g1 {
                        let copy = reference_copy(&stored, cols, g0..g1);
                        let c = Mat::new(DType::Q8R8, g1 - g0, cols, bytes(&copy)).unwrap();
                        let mut want = vec![0f32; n * (g1 - g0)];
                        (t.mat(DType::Q8R8).gemv_i8.unwrap())(c, 0..g1 - g0, &xa, n, &mut want);
                        for tok in 0..n {
                            let got_g = &got[tok * r.len() + g0 - r.start..tok * r.len() + g1 - r.start];
                            let want_g = &want[tok * (g1 - g0)..(tok + 1) * (g1 - g0)];
                            assert_eq!(bits(got_g), bits(want_g), "{path:?} {rows}x{cols} n {n} rows {r:?}");
                        }
                    }
                    per_path.push((path, r, got));
                }
            }
            // The SIMD paths agree bit for bit (AVX-512's q8r8 kernels are AVX2's bits).
            let simd: Vec<_> = per_path.iter().filter(|p| p.0 != CpuPath::Generic).collect();
            for (a, b) in simd.iter().zip(simd.iter().skip(ranges(rows).len())) {
                assert_eq!(bits(&a.2), bits(&b.2), "{:?} vs {:?} {rows}x{cols} n {n} rows {:?}", a.0, b.0, a.1);
            }
        }
    }
}

#[test]
fn the_simd_paths_take_the_int8_kernel_at_every_row_count() {
    for path in available_paths().into_iter().filter(|&p| p != CpuPath::Generic) {
        assert!(table_for(path).unwrap().mat(DType::Q5_0).int8_at_any_n, "{path:?}");
    }
}
