//! The interleaved K-quant kernels (q4_kr8 / q6_kr8 / iq4_xsr8 / iq4_nlr8) on every path against the scalar
//! reference (`kr8ref`), bit for bit: integer sums and float operations are the reference's on each
//! lane.

use super::actq::QuantizedActs;
use super::dispatch::{available_paths, table_for};
use super::tests::sample;
use super::{reference, Mat};
use crate::format::DType;

const DTYPES: [DType; 4] = [DType::Q4KR8, DType::Q6KR8, DType::Iq4XsR8, DType::Iq4NlR8];

/// Every row range of `rows` tried: whole, ragged at either end, inside one group.
fn ranges(rows: usize) -> Vec<std::ops::Range<usize>> {
    vec![0..rows, 3..rows, 0..rows - 5, 9..13, 8..16]
}

#[test]
fn int8_products_are_the_reference_bit_for_bit_on_every_path() {
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    // 352 = 11 blocks of 32: iq4_nlr8 only (the others' blocks are 256).
    for (rows, cols) in [(16, 256), (24, 512), (72, 1024), (24, 352)] {
        // Outlier weights and activations: the widest scales and quants.
        let mut wf = sample(rows * cols, 5);
        wf.iter_mut().step_by(97).for_each(|v| *v *= 40.0);
        for n in [1, 2, 3, 4, 5, 7, 8, 9, 17, 70] {
            let mut x = sample(n * cols, n as u64 + 3);
            x.iter_mut().step_by(61).for_each(|v| *v = v.signum() * 25.0);
            let mut xa = QuantizedActs::default();
            xa.quantize_with(super::actq::quantize_blocks, &x, n, cols);
            for dtype in DTYPES.into_iter().filter(|d| cols % d.block() == 0) {
                let bytes = dtype.encode(&wf, cols);
                let w = Mat::new(dtype, rows, cols, &bytes).unwrap();
                let dot = reference::row(dtype).dot_i8.unwrap();
                for path in available_paths() {
                    let gemv = table_for(path).unwrap().mat(dtype).gemv_i8.unwrap();
                    for r in ranges(rows) {
                        let want: Vec<f32> = (0..n)
                            .flat_map(|t| r.clone().map(move |i| (t, i)))
                            .map(|(t, i)| dot(w, i, &xa, t))
                            .collect();
                        let mut got = vec![f32::NAN; n * r.len()];
                        gemv(w, r.clone(), &xa, n, &mut got);
                        assert_eq!(bits(&got), bits(&want), "{path:?} {dtype} {rows}x{cols} n {n} rows {r:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn the_simd_paths_take_the_int8_kernel_at_every_row_count() {
    for path in available_paths().into_iter().filter(|&p| p != super::CpuPath::Generic) {
        for dtype in DTYPES {
            assert!(table_for(path).unwrap().mat(dtype).int8_at_any_n, "{path:?} {dtype}");
        }
    }
}
