//! bf16r32 (`format::tiles`) on every path: the products, row ranges, single rows and widening of
//! a tile-ordered matrix against the same values stored row-major. Same bits wherever both
//! matrices meet the same kernels (float mode; the AMX product, which reads either order; the
//! paths without bf16 kernels); within the float tolerance of the exact sums where bf16 has
//! kernels bf16r32 does not take (AVX-512 BF16 without AMX).

use super::tests::{every_table, exact, sample, FLOAT_TOL};
use super::{Kernels, Mat, QuantActivations};
use crate::format::DType;

/// The same values ([rows, cols], from `seed`) as bf16 and as bf16r32 bytes.
pub(super) fn both(rows: usize, cols: usize, seed: u64) -> [Vec<u8>; 2] {
    let x = sample(rows * cols, seed);
    [DType::BF16.encode(&x, cols), DType::Bf16R32.encode(&x, cols)]
}

/// Whether `k` computes bf16 and bf16r32 weights with the same kernels (see the module comment).
fn same_kernels(k: &Kernels) -> bool {
    k.act() == QuantActivations::Float || k.table().bf16.is_none_or(|b| b.gemm.is_some())
}

fn check(what: &str, same: bool, got: &[f32], want: &[f32], exact_sums: Option<(&[f64], &[f64])>) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if same {
            assert_eq!(g.to_bits(), w.to_bits(), "{what}: output {i}: {g} vs bf16's {w}");
        } else if let Some((e, mag)) = exact_sums {
            let err = (f64::from(g) - e[i]).abs();
            assert!(err <= 2.0 * FLOAT_TOL * mag[i] + 1e-30, "{what}: output {i}: {g} vs exact {} ", e[i]);
        }
    }
}

#[test]
fn bf16r32_products_give_bf16_results_on_every_path_and_mode() {
    for mode in [QuantActivations::Reduced, QuantActivations::Float] {
        for (path, k) in every_table(mode) {
            let same = same_kernels(&k);
            for (rows, cols) in [(32, 32), (64, 96), (96, 2048), (32, 4096 + 64)] {
                let [b, t] = both(rows, cols, (rows + cols) as u64);
                let (wb, wt) =
                    (Mat::new(DType::BF16, rows, cols, &b).unwrap(), Mat::new(DType::Bf16R32, rows, cols, &t).unwrap());
                for n in [1, 2, 5, 16, 17, 33, 64] {
                    let x = sample(n * cols, n as u64);
                    let what = format!("{path} {mode:?} {rows}x{cols} n {n}");
                    let (mut yb, mut yt) = (vec![f32::NAN; n * rows], vec![f32::NAN; n * rows]);
                    k.matmul(wb, &x, n, &mut yb);
                    k.matmul(wt, &x, n, &mut yt);
                    let rounded: Vec<f32> = match mode {
                        QuantActivations::Reduced => x.iter().map(|&v| half::bf16::from_f32(v).to_f32()).collect(),
                        _ => x.clone(),
                    };
                    let (e, mag) = exact(wb, &rounded, n);
                    check(&what, same, &yt, &yb, Some((&e, &mag)));
                    // A ragged run of rows on the calling thread (groups cut at both ends).
                    let range = 5..rows - 3;
                    let (mut rb, mut rt) = (vec![f32::NAN; n * range.len()], vec![f32::NAN; n * range.len()]);
                    k.matvec_rows(wb, range.clone(), &x, n, &mut rb);
                    k.matvec_rows(wt, range.clone(), &x, n, &mut rt);
                    check(&format!("{what} rows {range:?}"), same, &rt, &rb, None);
                }
                let x = sample(cols, 7);
                for r in [0, 1, 31, rows - 1] {
                    assert_eq!(k.dot_row(wt, r, &x).to_bits(), k.dot_row(wb, r, &x).to_bits(), "{path} dot_row {r}");
                }
            }
        }
    }
}

#[test]
fn bf16r32_widens_to_the_row_major_values_on_every_path() {
    let (rows, cols) = (64, 320);
    let [b, t] = both(rows, cols, 3);
    let (wb, wt) = (Mat::new(DType::BF16, rows, cols, &b).unwrap(), Mat::new(DType::Bf16R32, rows, cols, &t).unwrap());
    for (path, k) in every_table(QuantActivations::Float) {
        let widen = |w: Mat<'_>| k.table().mat(w.dtype()).widen;
        for (range, k0, kc) in [(0..64, 0, 320), (7..40, 32, 256), (33..34, 40, 24)] {
            let (mut ob, mut ot) = (vec![f32::NAN; range.len() * kc], vec![f32::NAN; range.len() * kc]);
            widen(wb)(wb, range.clone(), k0, &mut ob);
            widen(wt)(wt, range.clone(), k0, &mut ot);
            assert!(ob.iter().zip(&ot).all(|(a, b)| a.to_bits() == b.to_bits()), "{path} widen {range:?} from {k0}");
        }
    }
}

#[test]
fn bf16r32_binds_only_whole_groups_of_rows_and_columns() {
    let t = DType::Bf16R32.encode(&sample(64 * 64, 1), 64);
    assert!(Mat::new(DType::Bf16R32, 64, 64, &t).is_ok());
    assert!(Mat::new(DType::Bf16R32, 32, 128, &t).is_ok(), "the same bytes as another whole shape");
    assert!(Mat::new(DType::Bf16R32, 128, 32, &t).is_ok());
    assert!(Mat::new(DType::Bf16R32, 16, 256, &t).unwrap_err().contains("row group"));
    assert!(Mat::new(DType::Bf16R32, 256, 16, &t).unwrap_err().contains("column group"));
}
