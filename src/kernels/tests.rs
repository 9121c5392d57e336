//! Every kernel path against the scalar reference and against exact (f64) sums, over shapes that
//! hit every tail: rows not a multiple of the row blocks, columns not a multiple of 8 (floats),
//! activation-row counts on both sides of the GEMM threshold.

use super::actq::{QuantActivations, QuantizedActs};
use super::dispatch::{available_paths, table_for, Kernels};
use super::gemm::GEMM_MIN_ROWS;
use super::par::MC;
use super::table::{CpuPath, Gate, Operand, Table, MR, NR};
use super::Mat;
use crate::format::DType;

/// Largest error allowed for a float-weight product, relative to Σ|w·x| of the output: f32
/// accumulation in a different order (8 lanes vs one chain per k) and fused vs separate rounding.
pub(super) const FLOAT_TOL: f64 = 2e-6;
/// The same for quantised weights with float activations: per-block partial sums add one rounding.
const QUANT_TOL: f64 = 4e-6;

/// n deterministic values in [-1, 1) (xorshift from `seed`).
pub(super) fn sample(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0
        })
        .collect()
}

/// The kernels of `path` in activation mode `mode`.
fn kernels(path: CpuPath, mode: QuantActivations) -> Kernels {
    Kernels::on(path, mode).expect("available")
}

/// Kernels in `mode` on every available path, named; with the AVX-512 BF16 table beside them
/// where this CPU has it but its AVX-512 path runs without it (`tune::dpbf16_full_rate`), so
/// that its bf16 kernels are tested wherever they can run.
pub(super) fn every_table(mode: QuantActivations) -> Vec<(String, Kernels)> {
    let mut all: Vec<(String, Kernels)> =
        available_paths().into_iter().map(|p| (format!("{p:?}"), kernels(p, mode))).collect();
    #[cfg(target_arch = "x86_64")]
    if let Some(t) = super::x86::table_512_bf16() {
        if !table_for(CpuPath::Avx512).is_some_and(|a| std::ptr::eq(a, t)) {
            all.push(("Avx512 with AVX-512 BF16".into(), super::dispatch::kernels_on(Table { ..*t }, mode)));
        }
    }
    all
}

/// A matrix in every stored dtype, built from the same f32 values: the float dtypes always,
/// the block dtypes when the columns are whole blocks (the interleaved ones when the rows are
/// also whole 8-row groups).
struct Stored {
    rows: usize,
    cols: usize,
    f32: Vec<f32>,
    f16: Vec<u16>,
    bf16: Vec<u16>,
    /// (dtype, stored bytes) of the block dtypes that fit the shape.
    blocks: Vec<(DType, Vec<u8>)>,
}

impl Stored {
    fn new(rows: usize, cols: usize, seed: u64) -> Stored {
        let f = sample(rows * cols, seed);
        // Every block dtype of the table that fits the shape (whole blocks: 32 elements, 256
        // for the K-quants; whole row groups).
        let fits = |d: DType| cols > 0 && cols.is_multiple_of(d.block()) && rows.is_multiple_of(d.row_group());
        let block_dtypes: Vec<(DType, bool)> =
            DType::ALL.iter().copied().filter(|d| d.is_quantized()).map(|d| (d, fits(d))).collect();
        Stored {
            rows,
            cols,
            f16: f.iter().map(|&v| half::f16::from_f32(v).to_bits()).collect(),
            bf16: f.iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect(),
            blocks: block_dtypes.iter().filter(|(_, fits)| *fits).map(|&(d, _)| (d, d.encode(&f, cols))).collect(),
            f32: f,
        }
    }

    fn mats(&self) -> Vec<(&'static str, Mat<'_>, f64)> {
        let (r, c) = (self.rows, self.cols);
        let mut m = vec![
            ("f32", Mat::f32s(&self.f32, r, c), FLOAT_TOL),
            ("f16", Mat::halves(DType::F16, &self.f16, r, c), FLOAT_TOL),
            ("bf16", Mat::halves(DType::BF16, &self.bf16, r, c), FLOAT_TOL),
        ];
        for (d, bytes) in &self.blocks {
            m.push((d.name(), Mat::new(*d, r, c, bytes).expect("a quantised matrix binds"), QUANT_TOL));
        }
        m
    }
}

/// Exact y = x·wᵀ in f64 from the stored (dequantised) values, and Σ|w·x| per output.
pub(super) fn exact(w: Mat<'_>, x: &[f32], n: usize) -> (Vec<f64>, Vec<f64>) {
    let (rows, cols) = (w.rows(), w.cols());
    let mut wr = vec![0f32; cols];
    let (mut y, mut mag) = (vec![0f64; n * rows], vec![0f64; n * rows]);
    for o in 0..rows {
        super::generic::widen(w, o, 0, &mut wr);
        for t in 0..n {
            for (a, b) in wr.iter().zip(&x[t * cols..(t + 1) * cols]) {
                y[t * rows + o] += f64::from(*a) * f64::from(*b);
                mag[t * rows + o] += (f64::from(*a) * f64::from(*b)).abs();
            }
        }
    }
    (y, mag)
}

fn check(path: CpuPath, rows: usize, cols: usize, n: usize) {
    let k = kernels(path, QuantActivations::Float);
    let s = Stored::new(rows, cols, (rows * 31 + cols * 7 + n) as u64);
    let x = sample(n * cols, 99 + n as u64);
    for (name, w, tol) in s.mats() {
        let (want, mag) = exact(w, &x, n);
        let mut y = vec![f32::NAN; n * rows];
        k.matmul(w, &x, n, &mut y);
        for i in 0..n * rows {
            let err = (f64::from(y[i]) - want[i]).abs();
            assert!(
                err <= tol * mag[i] + 1e-30,
                "{path:?} {name} rows {rows} cols {cols} n {n}: y[{i}] = {} vs exact {} (err {err:e}, Σ|wx| {:e})",
                y[i],
                want[i],
                mag[i]
            );
        }
    }
}

#[test]
fn matmul_matches_exact_sums_on_every_path() {
    for path in available_paths() {
        let shapes =
            [(1, 1), (3, 7), (5, 32), (13, 64), (17, 96), (MC + 7, 160), (2 * MC + 1, 288), (5, 256), (MC + 7, 512)];
        // Whole row groups of 8, for the interleaved block matrices.
        let grouped = [(8, 32), (24, 96), (MC + 8, 160)];
        for &(rows, cols) in shapes.iter().chain(&grouped) {
            // GEMV sizes, both sides of the switch, and GEMMs whose last panel is partial:
            // more than half full (full-width tile) and at most half full (half-width tile).
            let gemm = [GEMM_MIN_ROWS, GEMM_MIN_ROWS + NR / 2 + 3, GEMM_MIN_ROWS + NR + 3];
            for &n in [1, 2, 3, NR + 3, GEMM_MIN_ROWS - 1].iter().chain(&gemm) {
                check(path, rows, cols, n);
            }
        }
    }
}

/// A row's GEMM result does not depend on the tile width its panel took: the rows of a call
/// whose last panel is half-width match the same rows of a call where they sit in full tiles.
#[test]
fn gemm_rows_do_not_depend_on_tile_width() {
    let (rows, cols) = (MC + 7, 2 * 256 + 32);
    let w = sample(rows * cols, 11);
    let (short, long) = (GEMM_MIN_ROWS + 3, GEMM_MIN_ROWS + NR / 2 + 3);
    let x = sample(long * cols, 12);
    for path in available_paths() {
        let k = kernels(path, QuantActivations::Float);
        let mut y_short = vec![0f32; short * rows];
        let mut y_long = vec![0f32; long * rows];
        k.matmul(Mat::f32s(&w, rows, cols), &x[..short * cols], short, &mut y_short);
        k.matmul(Mat::f32s(&w, rows, cols), &x, long, &mut y_long);
        assert_eq!(y_short[..], y_long[..short * rows], "{path:?}");
    }
}

#[test]
fn long_rows_stay_within_tolerance() {
    for path in available_paths() {
        check(path, 9, 4096 + 32, 1);
        check(path, 9, 4096 + 32, 2 * NR);
    }
}

#[test]
fn widen_is_exact_on_every_path() {
    let s = Stored::new(16, 512, 5);
    for path in available_paths() {
        let t = table_for(path).expect("available");
        for (name, w, _) in s.mats() {
            // Ranges on the dtype's blocks (the K-quants' are 256 long).
            let ranges = [(0, 512), (32, 256), (480, 32), (256, 256)];
            for (k0, len) in ranges
                .into_iter()
                .filter(|&(k0, len)| (k0 + len) % w.dtype().block() == 0 && k0 % w.dtype().block() == 0)
            {
                // Single rows, whole row groups, and ranges starting or ending inside a group.
                for rows in [3..4, 8..9, 15..16, 0..16, 8..16, 3..13, 5..16] {
                    let (mut a, mut b) = (vec![0f32; len * rows.len()], vec![0f32; len * rows.len()]);
                    (t.mat(w.dtype()).widen)(w, rows.clone(), k0, &mut a);
                    super::generic::widen_rows(w, rows.clone(), k0, &mut b);
                    assert_eq!(a, b, "{path:?} {name} widen rows {rows:?} k0 {k0}");
                }
            }
        }
    }
}

#[test]
fn single_dots_agree_with_the_reference_closely() {
    for path in available_paths() {
        let t = table_for(path).expect("available");
        for len in [0, 1, 8, 13, 64, 1001] {
            let s = Stored::new(1, len, len as u64 + 3);
            let x = sample(len, 11);
            let mag: f64 = s.f32.iter().zip(&x).map(|(a, b)| f64::from(a * b).abs()).sum();
            let pairs = [
                ((t.dot_f32)(&s.f32, &x), super::reference::dot_f32(&s.f32, &x)),
                ((t.dot_f16)(&s.f16, &x), super::reference::dot_f16(&s.f16, &x)),
                ((t.dot_bf16)(&s.bf16, &x), super::reference::dot_bf16(&s.bf16, &x)),
            ];
            for (got, want) in pairs {
                assert!(
                    f64::from((got - want).abs()) <= FLOAT_TOL * mag + 1e-30,
                    "{path:?} len {len}: {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    // 296 rows: whole groups of 8, but not of the 64-row tasks.
    let s = Stored::new(296, 256, 8);
    let x = sample(20 * 256, 9);
    // Reduced mode: the int8 kernels (on avx512 the two-group ones over activation panels).
    for (path, mode) in
        available_paths().into_iter().flat_map(|p| [(p, QuantActivations::Float), (p, QuantActivations::Reduced)])
    {
        let k = kernels(path, mode);
        for (name, w, _) in s.mats() {
            for n in [1, 20] {
                let run = |threads: usize| {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
                    let mut y = vec![0f32; n * 296];
                    pool.install(|| k.matmul(w, &x, n, &mut y));
                    y
                };
                assert_eq!(run(1), run(3), "{path:?} {mode:?} {name} n {n}");
            }
        }
    }
}

/// Largest difference between a W8A8/W4A8 SIMD product and the integer reference, relative to
/// Σ|w·x|: the integer block sums are exact, only the float scaling and summation order differ.
const INT8_ORDER_TOL: f64 = 1e-6;

#[test]
fn int8_activation_products_match_the_integer_reference() {
    let generic = kernels(CpuPath::Generic, QuantActivations::Reduced);
    for path in available_paths() {
        let k = kernels(path, QuantActivations::Reduced);
        let shapes = [
            (1, 32),
            (5, 64),
            (13, 256),
            (70, 32 * 9),
            (9, 4096 + 32),
            (16, 256),
            (72, 32 * 9),
            (8, 4096 + 32),
            (7, 2048),
        ];
        for &(rows, cols) in &shapes {
            // 4 and 7: the interleaved kernels' four- and two-row passes; 70: past a block of 64
            // activation rows, and through the GEMM for the row-major layouts.
            for n in [1, 3, 4, 7, 70] {
                let s = Stored::new(rows, cols, (rows + cols) as u64);
                let x = sample(n * cols, 7);
                for (name, w, _) in s.mats().into_iter().filter(|m| m.1.dtype().is_quantized()) {
                    let (_, mag) = exact(w, &x, n);
                    let (mut want, mut got) = (vec![0f32; n * rows], vec![0f32; n * rows]);
                    generic.matmul(w, &x, n, &mut want);
                    k.matmul(w, &x, n, &mut got);
                    for i in 0..n * rows {
                        let err = f64::from((got[i] - want[i]).abs());
                        assert!(
                            err <= INT8_ORDER_TOL * mag[i] + 1e-30,
                            "{path:?} {name} {rows}x{cols} n {n}: {} vs {}",
                            got[i],
                            want[i]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn int8_activation_error_is_within_half_an_activation_step_per_weight() {
    let generic = kernels(CpuPath::Generic, QuantActivations::Reduced);
    let (rows, cols) = (8, 256);
    let s = Stored::new(rows, cols, 17);
    let x = sample(cols, 18);
    let mut xa = QuantizedActs::default();
    xa.quantize_with(generic.table().quantize, &x, 1, cols);
    for (name, w, _) in s.mats().into_iter().filter(|m| m.1.dtype().is_quantized()) {
        let (want, _) = exact(w, &x, 1);
        let mut got = vec![0f32; rows];
        generic.matmul(w, &x, 1, &mut got);
        let mut wr = vec![0f32; cols];
        for o in 0..rows {
            super::generic::widen(w, o, 0, &mut wr);
            // |Σ w·(x − dx·qx)| ≤ Σ |w| · dx/2, plus float rounding.
            let bound: f64 =
                wr.iter().enumerate().map(|(i, v)| f64::from(v.abs()) * f64::from(xa.d[i / 32]) * 0.5).sum();
            let err = (f64::from(got[o]) - want[o]).abs();
            assert!(err <= bound * 1.001 + 1e-6, "{name} row {o}: error {err:e} above bound {bound:e}");
        }
    }
}

/// y += a · x with the table's axpy for x's float dtype.
fn axpy(t: &Table, a: f32, x: Mat<'_>, y: &mut [f32]) {
    match x.dtype() {
        DType::F32 => (t.axpy_f32)(a, x.as_f32(), y),
        DType::F16 => (t.axpy_f16)(a, x.as_u16(), y),
        _ => (t.axpy_bf16)(a, x.as_u16(), y),
    }
}

/// A short x is refused on every path (no path may read past it or silently truncate).
#[test]
fn axpy_refuses_a_short_x_on_every_path() {
    for path in available_paths() {
        let t = table_for(path).expect("available");
        let (x, h) = (vec![1f32; 7], vec![0x3c00u16; 7]);
        for (name, x) in [("f32", Mat::f32s(&x, 1, 7)), ("f16", Mat::halves(DType::F16, &h, 1, 7))] {
            let r = std::panic::catch_unwind(|| {
                let mut y = vec![0f32; 8];
                axpy(t, 1.0, x, &mut y);
            });
            assert!(r.is_err(), "{path:?} {name} accepted 7 elements for 8 outputs");
        }
    }
}

#[test]
fn axpy_matches_the_reference_on_every_path() {
    for path in available_paths() {
        let t = table_for(path).expect("available");
        for len in [1, 8, 13, 128] {
            let s = Stored::new(1, len, len as u64);
            let y0 = sample(len, 3);
            for (name, x, tol) in s.mats().into_iter().filter(|m| !m.1.dtype().is_quantized()) {
                let (mut a, mut b) = (y0.clone(), y0.clone());
                axpy(t, 0.37, x, &mut a);
                axpy(&super::generic::GENERIC, 0.37, x, &mut b);
                for i in 0..len {
                    // One fused vs separate rounding per element.
                    assert!(
                        (a[i] - b[i]).abs() <= tol as f32 * (b[i].abs() + 1.0),
                        "{path:?} {name} {i}: {} vs {}",
                        a[i],
                        b[i]
                    );
                }
            }
        }
    }
}

#[test]
fn products_nested_in_parallel_tasks_are_correct() {
    // A worker waiting inside a product's parallel loop may run another task that multiplies:
    // per-thread buffers in use must not be shared or re-borrowed.
    use rayon::prelude::*;
    let s = Stored::new(200, 256, 21);
    let mats = s.mats();
    let x = sample(20 * 256, 22);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
    for (name, w, _) in mats {
        let alone: Vec<Vec<f32>> = [1usize, 20]
            .iter()
            .map(|&n| {
                let mut y = vec![0f32; n * 200];
                Kernels::default().matmul(w, &x, n, &mut y);
                y
            })
            .collect();
        let nested: Vec<Vec<Vec<f32>>> = pool.install(|| {
            (0..8)
                .into_par_iter()
                .map(|_| {
                    [1usize, 20]
                        .iter()
                        .map(|&n| {
                            let mut y = vec![0f32; n * 200];
                            Kernels::default().matmul(w, &x, n, &mut y);
                            y
                        })
                        .collect()
                })
                .collect()
        });
        for r in nested {
            assert_eq!(r, alone, "{name}: nested products differ");
        }
    }
}

/// Operands the kernels would read past cannot exist: binding refuses them, so no path ever
/// sees one (the kernels trust a bound `Mat`).
#[test]
fn malformed_quantised_operands_cannot_be_bound() {
    // 64 quants of 2 rows × 32 columns but a single scale.
    let mut short = vec![1u8; 64];
    short.extend_from_slice(&0x3c00u16.to_le_bytes());
    assert!(Mat::new(DType::Q8, 2, 32, &short).is_err(), "bound a q8 matrix missing a scale");
    // 5 rows × 32 columns labelled interleaved: the kernels would read whole 8-row units.
    let ragged = DType::Q4.encode(&[0.5; 5 * 32], 32);
    assert!(Mat::new(DType::Q4R8, 5, 32, &ragged).is_err(), "bound a ragged interleaved matrix");
    assert!(Mat::new(DType::Q4, 5, 32, &ragged).is_ok());
}

#[test]
fn a_row_product_is_the_same_bits_in_a_step_of_fewer_rows_than_the_gemm_switch() {
    // A decode step of several sequences (up to 15 rows: below every GEMM switch) gives each
    // sequence what a step of its row alone gives, on every path and dtype, in both activation
    // modes: batched serving equals one request at a time. Ragged columns for the float dtypes.
    for (rows, cols) in [(64, 1024), (24, 1000), (16, 4160)] {
        let s = Stored::new(rows, cols, 5);
        let x = sample(15 * cols, 6);
        for path in available_paths() {
            for mode in [QuantActivations::Float, QuantActivations::Reduced] {
                let k = kernels(path, mode);
                for (name, w, _) in s.mats() {
                    let alone: Vec<Vec<f32>> = (0..15)
                        .map(|t| {
                            let mut y = vec![0f32; rows];
                            k.matmul(w, &x[t * cols..(t + 1) * cols], 1, &mut y);
                            y
                        })
                        .collect();
                    for n in [2, 3, 4, 5, 8, 15] {
                        let mut y = vec![0f32; n * rows];
                        k.matmul(w, &x[..n * cols], n, &mut y);
                        for (t, yt) in y.chunks_exact(rows).enumerate() {
                            let same = yt.iter().zip(&alone[t]).all(|(a, b)| a.to_bits() == b.to_bits());
                            assert!(same, "{path:?} {mode:?} {name} {rows}×{cols}: row {t} of a {n}-row step");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn an_int8_row_result_does_not_depend_on_the_row_count() {
    // Decode (few rows) and prefill (GEMM) must agree on what a quantised product means.
    let (rows, cols) = (64, 1024);
    let s = Stored::new(rows, cols, 3);
    let x = sample(GEMM_MIN_ROWS * 2 * cols, 4);
    for path in available_paths() {
        let k = kernels(path, QuantActivations::Reduced);
        for (name, w, _) in s.mats().into_iter().filter(|m| m.1.dtype().is_quantized()) {
            let n = GEMM_MIN_ROWS * 2;
            let (mut y1, mut yn) = (vec![0f32; rows], vec![0f32; n * rows]);
            k.matmul(w, &x, 1, &mut y1);
            k.matmul(w, &x, n, &mut yn);
            let (_, mag) = exact(w, &x, 1);
            for i in 0..rows {
                let err = f64::from((y1[i] - yn[i]).abs());
                assert!(
                    err <= INT8_ORDER_TOL * mag[i],
                    "{path:?} {name} row {i}: alone {} vs in a batch {}",
                    y1[i],
                    yn[i]
                );
            }
        }
    }
}

#[test]
fn w4a8_is_exact_in_integers_even_with_outliers_and_biased_activations() {
    // One large weight per block, small others, all-positive activations: a float-side offset
    // correction would cancel badly here; the integer one must not.
    let (rows, cols) = (8, 4096);
    let mut wv = sample(rows * cols, 5).iter().map(|v| v * 0.01).collect::<Vec<_>>();
    for b in 0..rows * cols / 32 {
        wv[b * 32 + 7] = 3.0;
    }
    let x: Vec<f32> = sample(cols, 6).iter().map(|v| v.abs() + 0.5).collect();
    for layout in [DType::Q4, DType::Q4R8] {
        let bytes = layout.encode(&wv, cols);
        let w = Mat::new(layout, rows, cols, &bytes).expect("binds");
        let (_, mag) = exact(w, &x, 1);
        for mode in [QuantActivations::Reduced, QuantActivations::Float] {
            let mut want = vec![0f32; rows];
            kernels(CpuPath::Generic, mode).matmul(w, &x, 1, &mut want);
            let tol = if mode == QuantActivations::Reduced { INT8_ORDER_TOL } else { QUANT_TOL };
            for path in available_paths() {
                let mut got = vec![0f32; rows];
                kernels(path, mode).matmul(w, &x, 1, &mut got);
                for i in 0..rows {
                    let err = f64::from((got[i] - want[i]).abs());
                    assert!(
                        err <= tol * mag[i],
                        "{path:?} {layout:?} {mode:?} row {i}: {} vs {} ({:e})",
                        got[i],
                        want[i],
                        err / mag[i]
                    );
                }
            }
        }
    }
}

/// The interleaved kernels take whole row groups; any other row range (a single `dot_row`,
/// a range starting or ending inside a group) must still give every row's product.
#[test]
fn interleaved_products_take_any_row_range() {
    let (rows, cols) = (24, 96);
    let s = Stored::new(rows, cols, 31);
    let generic = table_for(CpuPath::Generic).expect("generic");
    // 1 and 4 activation rows: one kernel call per run of groups (decode); 3: the one-group
    // kernels group by group; 11: the AVX-512 two-group ones over panels of 8.
    for n in [1, 3, 4, 11] {
        let x = sample(n * cols, 32);
        let mut xa = QuantizedActs::default();
        xa.quantize_with(generic.quantize, &x, n, cols);
        for path in available_paths() {
            let t = table_for(path).expect("available");
            for (name, w, _) in s.mats().into_iter().filter(|m| m.0.ends_with("r8")) {
                let (_, mag) = exact(w, &x, n);
                let (ops, reference) = (t.mat(w.dtype()), generic.mat(w.dtype()));
                for range in [0..1, 5..6, 3..21, 8..16, 7..24, 0..24] {
                    let len = range.len();
                    for int8 in [false, true] {
                        let (mut got, mut want) = (vec![0f32; n * len], vec![0f32; n * len]);
                        if int8 {
                            (ops.gemv_i8.expect("int8 kernel"))(w, range.clone(), &xa, n, &mut got);
                            (reference.gemv_i8.expect("int8 kernel"))(w, range.clone(), &xa, n, &mut want);
                        } else {
                            (ops.gemv)(w, range.clone(), &x, n, &mut got);
                            (reference.gemv)(w, range.clone(), &x, n, &mut want);
                        }
                        for tok in 0..n {
                            for (i, r) in range.clone().enumerate() {
                                let (g, e) = (got[tok * len + i], want[tok * len + i]);
                                assert!(
                                    f64::from((g - e).abs()) <= QUANT_TOL * mag[tok * rows + r],
                                    "{path:?} {name} rows {range:?} n {n} int8 {int8}: row {r} token {tok}: {g} vs {e}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn nan_activations_propagate_in_int8_mode() {
    let s = Stored::new(8, 64, 9);
    let mut x = sample(64, 10);
    x[40] = f32::NAN;
    for path in available_paths() {
        let k = kernels(path, QuantActivations::Reduced);
        for (name, w, _) in s.mats().into_iter().filter(|m| m.1.dtype().is_quantized()) {
            let mut y = vec![0f32; 8];
            k.matmul(w, &x, 1, &mut y);
            assert!(y.iter().all(|v| v.is_nan()), "{path:?} {name}: NaN input gave {y:?}");
        }
    }
}

/// The activation quantiser gives the reference's bits on every path: ordinary blocks, exact
/// half-step ties (round half away from zero, which the vector rounding mode is not), zero,
/// NaN and infinite blocks.
#[test]
fn activation_quantiser_matches_the_reference_bit_for_bit() {
    let mut x = sample(32 * 40, 41);
    // Block 1: values that land exactly on ±k.5 steps (max 127 → d = 1).
    for (i, v) in x[32..64].iter_mut().enumerate() {
        *v = (i as f32 - 16.0) + 0.5;
    }
    x[63] = 127.0;
    x[64..96].fill(0.0); // block 2: all zero
    x[100] = f32::NAN; // block 3
    x[140] = f32::INFINITY; // block 4
    x[170] = f32::NEG_INFINITY; // block 5
    x[200] = -1e-30; // block 6: one tiny value
    x[224..256].fill(1e-38); // block 7: all tiny: d is subnormal and 1/d overflows
    x[256..288].iter_mut().enumerate().for_each(|(i, v)| *v = -1e-39 * (i as f32 + 1.0)); // block 8
    let nb = x.len() / 32;
    let want = {
        let (mut q, mut d, mut s) = (vec![0i8; x.len()], vec![0f32; nb], vec![0i32; nb]);
        super::actq::quantize_blocks(&x, &mut q, &mut d, &mut s);
        (q, d.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), s)
    };
    // −14.5 and 14.5 (elements 1 and 30 of block 1): half-to-even would give ∓14.
    assert_eq!((want.0[33], want.0[62]), (-15, 15), "ties round away from zero");
    assert!(want.0.iter().all(|&q| q != -128), "a quant of −128 breaks the W8A8 sign trick");
    assert!(want.0[224..288].iter().all(|&q| q == 0), "blocks whose 1/d overflows quantise to 0");
    for path in available_paths() {
        let t = table_for(path).expect("available");
        let (mut q, mut d, mut s) = (vec![0i8; x.len()], vec![0f32; nb], vec![0i32; nb]);
        (t.quantize)(&x, &mut q, &mut d, &mut s);
        assert_eq!(q, want.0, "{path:?} quants");
        assert_eq!(d.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.1, "{path:?} scales");
        assert_eq!(s, want.2, "{path:?} sums");
    }
}

/// The AVX-512 VNNI int8 kernels compute the AVX2 kernels' integer block sums and scale them in
/// the same float operations: their products are bit-identical, at every row count.
#[test]
fn vnni_int8_products_equal_avx2_bit_for_bit() {
    let (Some(avx2), Some(vnni)) = (
        Kernels::on(CpuPath::Avx2, QuantActivations::Reduced),
        Kernels::on(CpuPath::Avx512, QuantActivations::Reduced),
    ) else {
        eprintln!("vnni_int8_products_equal_avx2_bit_for_bit: this CPU lacks AVX-512 VNNI or AVX2: not run");
        return;
    };
    for (rows, cols) in [(8, 32), (24, 96), (72, 32 * 9), (16, 4096 + 32)] {
        let s = Stored::new(rows, cols, (rows * cols) as u64);
        for n in [1, 3, 4, 7, 8, 9, 15, 17, 70] {
            let x = sample(n * cols, n as u64 + 40);
            for (name, w, _) in s.mats().into_iter().filter(|m| m.1.dtype().is_quantized()) {
                let (mut a, mut b) = (vec![0f32; n * rows], vec![0f32; n * rows]);
                avx2.matmul(w, &x, n, &mut a);
                vnni.matmul(w, &x, n, &mut b);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "{name} {rows}x{cols} n {n}");
            }
        }
    }
}

/// `matmuls` over several matrices of one width (every dtype, two row counts) gives each one
/// `matmul`'s bits: the int8 activations (and their widened form) made once are the ones each
/// product would make.
#[test]
fn products_sharing_their_input_equal_separate_products_bit_for_bit() {
    let cols = 256;
    let (a, b) = (Stored::new(16, cols, 3), Stored::new(24, cols, 4));
    let all: Vec<Mat<'_>> = a.mats().into_iter().chain(b.mats()).map(|m| m.1).collect();
    // Only bf16 matrices: rounded (and packed) once for all of them.
    let bf16: Vec<Mat<'_>> = all.iter().copied().filter(|m| m.dtype() == DType::BF16).collect();
    assert_eq!(bf16.len(), 2);
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    for (path, mats) in available_paths().into_iter().flat_map(|p| [(p, &all), (p, &bf16)]) {
        for mode in [QuantActivations::Reduced, QuantActivations::Float] {
            let k = kernels(path, mode);
            // 5: the matrix-vector strategy; 40: the GEMM for the row-major block layouts.
            for n in [5, 17, 40] {
                let x = sample(n * cols, n as u64);
                let want: Vec<Vec<f32>> = mats
                    .iter()
                    .map(|&w| {
                        let mut y = vec![0f32; n * w.rows()];
                        k.matmul(w, &x, n, &mut y);
                        y
                    })
                    .collect();
                let mut got: Vec<Vec<f32>> = mats.iter().map(|w| vec![0f32; n * w.rows()]).collect();
                let mut products: Vec<(Mat<'_>, &mut [f32])> =
                    mats.iter().copied().zip(got.iter_mut().map(|y| &mut y[..])).collect();
                k.matmuls(&x, n, &mut products);
                for ((w, g), want) in mats.iter().zip(&got).zip(&want) {
                    assert_eq!(bits(g), bits(want), "{path:?} {mode:?} {} n {n}", w.dtype().name());
                }
            }
        }
    }
}

/// The activations as `Reduced` mode hands them to a bf16 weight: rounded to bf16, as f32.
fn rounded_bf16(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| f32::from_bits(u32::from(super::bf16act::round_bf16(v)) << 16)).collect()
}

/// Where bf16 products switch to the GEMM.
const BF16_FROM: usize = super::gemm_bf16::GEMM_MIN_ROWS_BF16;

#[test]
fn bf16_weights_meet_bf16_activations_in_reduced_mode_on_every_path() {
    // Odd and short rows take the float kernels on the rounded values; the rest the path's bf16
    // kernels where it has them: all are the exact products of the rounded values, summed in f32.
    let shapes = [(1, 32), (5, 64), (13, 256), (70, 290), (9, 4096 + 32), (8, 7), (17, 33), (296, 256)];
    for (path, k) in every_table(QuantActivations::Reduced) {
        for &(rows, cols) in &shapes {
            let s = Stored::new(rows, cols, (rows * 3 + cols) as u64);
            let w = Mat::halves(DType::BF16, &s.bf16, rows, cols);
            for n in [1, 2, 3, 4, 5, 8, BF16_FROM - 1, BF16_FROM, NR + 1, NR + 9, GEMM_MIN_ROWS, 70] {
                let x = sample(n * cols, 5 + n as u64);
                let (want, mag) = exact(w, &rounded_bf16(&x), n);
                let mut y = vec![f32::NAN; n * rows];
                k.matmul(w, &x, n, &mut y);
                for i in 0..n * rows {
                    let err = (f64::from(y[i]) - want[i]).abs();
                    assert!(
                        err <= FLOAT_TOL * mag[i] + 1e-30,
                        "{path:?} {rows}x{cols} n {n}: y[{i}] = {} vs {} (err {err:e})",
                        y[i],
                        want[i]
                    );
                }
            }
        }
    }
}

#[test]
fn reduced_mode_rounds_bf16_activations_and_float_mode_does_not() {
    let s = Stored::new(16, 64, 11);
    let w = Mat::halves(DType::BF16, &s.bf16, 16, 64);
    let x = sample(64, 12);
    for ((path, kr), (_, kf)) in
        every_table(QuantActivations::Reduced).into_iter().zip(every_table(QuantActivations::Float))
    {
        let (mut reduced, mut float) = (vec![0f32; 16], vec![0f32; 16]);
        kr.matmul(w, &x, 1, &mut reduced);
        kf.matmul(w, &x, 1, &mut float);
        let (exact_float, _) = exact(w, &x, 1);
        let (exact_rounded, _) = exact(w, &rounded_bf16(&x), 1);
        for i in 0..16 {
            let near = |y: f32, e: f64| (f64::from(y) - e).abs() < 1e-5;
            assert!(near(float[i], exact_float[i]) && near(reduced[i], exact_rounded[i]), "{path:?} row {i}");
        }
        assert_ne!(reduced, float, "{path:?}: the mode must reach bf16 products");
    }
}

#[test]
fn bf16_reduced_results_do_not_depend_on_the_thread_count_or_the_row_count() {
    let (rows, cols) = (296, 512);
    let s = Stored::new(rows, cols, 21);
    let w = Mat::halves(DType::BF16, &s.bf16, rows, cols);
    let n = BF16_FROM * 4 + 3;
    let x = sample(n * cols, 22);
    for (path, k) in every_table(QuantActivations::Reduced) {
        let run = |threads: usize, n: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
            let mut y = vec![0f32; n * rows];
            pool.install(|| k.matmul(w, &x, n, &mut y));
            y
        };
        for m in [1, 5, n] {
            assert_eq!(run(1, m), run(3, m), "{path:?} n {m}");
        }
        // Decode (matrix-vector) and prefill (GEMM) agree on a row up to summation order.
        let (alone, batch) = (run(2, 1), run(2, n));
        let (_, mag) = exact(w, &rounded_bf16(&x[..cols]), 1);
        for i in 0..rows {
            let err = f64::from((alone[i] - batch[i]).abs());
            assert!(err <= FLOAT_TOL * mag[i], "{path:?} row {i}: alone {} vs in a batch {}", alone[i], batch[i]);
        }
    }
}

#[test]
fn a_bf16_gemm_row_is_the_same_in_few_panels_and_in_many() {
    // The bf16 kernels' GEMM sums each output as one chain over k whatever the number of panels
    // of activation rows (one to four here): a panel alone or beside the next one in a tile, a
    // half-width last panel beside one or two whole ones (17, 35 and 53 rows: its 256-bit form),
    // the 8-row tile or a partial last one. Rows past one long
    // block (4096 + 64 columns), a partial last tile of weight rows (44 = 5 × 8 + 4) and a
    // partial last panel on both sides.
    let (rows, cols) = (44, 4096 + 64);
    let s = Stored::new(rows, cols, 31);
    let w = Mat::halves(DType::BF16, &s.bf16, rows, cols);
    let many = 3 * NR + 5;
    let x = sample(many * cols, 32);
    for (path, k) in every_table(QuantActivations::Reduced).into_iter().filter(|(_, k)| k.table().bf16.is_some()) {
        let mut b = vec![f32::NAN; many * rows];
        k.matmul(w, &x, many, &mut b);
        for few in [BF16_FROM, BF16_FROM + 1, 2 * NR + 3] {
            let mut a = vec![f32::NAN; few * rows];
            k.matmul(w, &x, few, &mut a);
            assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()), "{path:?}: rows differ at n {few}");
        }
    }
}

/// MXFP4 against int8 activations: the integer block sums and their accumulation order are the
/// reference's, so every path gives its bits, row-major (mxfp4) and interleaved (mxfp4r8: 1, 2,
/// 4 and 8 activation rows per pass, past a block of 64 activation rows, any row range).
#[test]
fn mxfp4_int8_products_are_the_reference_bit_for_bit() {
    let generic = kernels(CpuPath::Generic, QuantActivations::Reduced);
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    let shapes = [(3, 32, 1), (9, 256, 2), (17, 32 * 9, 5), (5, 64, 8), (7, 96, 11), (8, 32, 1), (16, 256, 3)];
    let shapes_r8 = [(24, 32 * 9, 8), (8, 96, 11), (16, 64, 70), (32, 2880, 15)];
    let cases = shapes.iter().map(|s| (DType::Mxfp4, s));
    let cases = cases.chain(shapes.iter().chain(&shapes_r8).filter(|s| s.0 % 8 == 0).map(|s| (DType::Mxfp4R8, s)));
    for path in available_paths() {
        let k = kernels(path, QuantActivations::Reduced);
        for (dtype, &(rows, cols, n)) in cases.clone() {
            let w = dtype.encode(&sample(rows * cols, 11), cols);
            let w = Mat::new(dtype, rows, cols, &w).unwrap();
            let x = sample(n * cols, 12);
            let (mut want, mut got) = (vec![0f32; n * rows], vec![0f32; n * rows]);
            if n < GEMM_MIN_ROWS {
                generic.matmul(w, &x, n, &mut want);
                k.matmul(w, &x, n, &mut got);
                assert_eq!(bits(&got), bits(&want), "{path:?} {dtype} {rows}x{cols} n {n}");
            }
            // Straight through the int8 kernels, every row range (starting and ending inside row
            // groups too).
            let mut xa = QuantizedActs::default();
            xa.quantize_with(table_for(CpuPath::Generic).expect("generic").quantize, &x, n, cols);
            let (ops, reference) = (table_for(path).expect("available").mat(dtype), generic_row(dtype));
            for range in [0..rows, 0..1, 5..6, 3..rows.saturating_sub(3), 7..rows]
                .into_iter()
                .filter(|r| r.start < r.end && r.end <= rows)
            {
                let (mut got, mut want) = (vec![0f32; n * range.len()], vec![0f32; n * range.len()]);
                (ops.gemv_i8.expect("int8 kernel"))(w, range.clone(), &xa, n, &mut got);
                (reference.gemv_i8.expect("int8 kernel"))(w, range.clone(), &xa, n, &mut want);
                assert_eq!(bits(&got), bits(&want), "{path:?} {dtype} {rows}x{cols} n {n} rows {range:?}");
            }
        }
    }
}

/// The generic path's kernels of `dtype`.
fn generic_row(dtype: DType) -> &'static super::table::MatKernels {
    table_for(CpuPath::Generic).expect("generic").mat(dtype)
}

const GPT_OSS_GATE: Gate = Gate::Clamped { alpha: 1.702, limit: 7.0 };

#[test]
fn gated_activations_on_a_pool_equal_one_thread() {
    let len = 5 * super::par::GATED_CHUNK / 2 + 3;
    let g: Vec<f32> = (0..len).map(|i| ((i * 7919) % 2001) as f32 * 0.01 - 10.0).collect();
    let u: Vec<f32> = (0..len).map(|i| ((i * 104729) % 1999) as f32 * 0.01 - 10.0).collect();
    let k = Kernels::new(QuantActivations::default());
    for gate in [Gate::Silu, GPT_OSS_GATE] {
        let (mut a, mut b) = (g.clone(), g.clone());
        k.gated(&mut a, &u, gate);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
        pool.install(|| {
            assert_eq!(crate::threads::current(), 2);
            k.gated(&mut b, &u, gate);
        });
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{gate:?} differs on the pool");
    }
}

/// The gated activations as their definitions say, in f64: silu(g) · u = g / (1 + e^−g) · u, and
/// GPT-OSS's (clamp(u, ±limit) + 1) · g' / (1 + e^(−alpha·g')) with g' = min(g, limit).
fn gated_f64(g: f32, u: f32, gate: Gate) -> f64 {
    let (g, u) = (f64::from(g), f64::from(u));
    match gate {
        Gate::Silu => g / (1.0 + (-g).exp()) * u,
        Gate::Clamped { alpha, limit } => {
            let (limit, gc) = (f64::from(limit), g.min(f64::from(limit)));
            (u.clamp(-limit, limit) + 1.0) * gc / (1.0 + (-gc * f64::from(alpha)).exp())
        }
    }
}

#[test]
fn gated_activations_match_their_definition_and_every_path_gives_the_same_bits() {
    // g over ±100 (both sides of the sigmoid's split, and where e^−g would overflow f32), u over ±10.
    let n = 20_011;
    let g: Vec<f32> = (0..n).map(|i| (i as f32 - 10_005.0) * 0.01).chain([1e-30, -1e-30, 0.0, -0.0]).collect();
    let u: Vec<f32> = (0..g.len()).map(|i| ((i * 104_729) % 1999) as f32 * 0.01 - 10.0).collect();
    for gate in [Gate::Silu, GPT_OSS_GATE] {
        let mut want = g.clone();
        super::vexp::gated(&mut want, &u, gate);
        for (i, (&got, (&gi, &ui))) in want.iter().zip(g.iter().zip(&u)).enumerate() {
            let exact = gated_f64(gi, ui, gate);
            // A few ulps of the result, plus what rounding alpha · g' to f32 moves e^(alpha · g')
            // by (half an ulp of the exponent, relative); where σ's exponential is below e^−87
            // (taken as 0), by at most |g| · (|u| + 1) · e^−87.
            let alpha = if let Gate::Clamped { alpha, .. } = gate { alpha } else { 0.0 };
            let rel = 1e-6 + f64::from((alpha * gi).abs()) * 6e-8;
            let underflow = f64::from(gi).abs() * (f64::from(ui).abs() + 1.0) * 1.7e-38;
            let err = (f64::from(got) - exact).abs();
            assert!(err <= rel * exact.abs() + underflow, "{gate:?} element {i} (g {gi}, u {ui}): {got} vs {exact}");
        }
        for path in available_paths() {
            let mut got = g.clone();
            (table_for(path).expect("available").gated)(&mut got, &u, gate);
            assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{path:?} {gate:?}");
        }
    }
    // NaN stays NaN, +∞ stays +∞.
    let mut special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
    super::vexp::gated(&mut special, &[1.0; 3], Gate::Silu);
    assert!(special[0].is_nan() && special[1] == f32::INFINITY, "{special:?}");
}

/// GGUF's q8_0 and q4_0 hold q8's and q4's blocks in another byte order (`qrows`): their widened
/// values are the same bits on every path, and so are q8_0's float-activation products (q8's
/// kernels on every path: the reference sums both alike), GEMV and GEMM.
#[test]
fn q8_0_and_q4_0_float_kernels_are_q8_and_q4_bit_for_bit() {
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    for (gguf, colibri) in [(DType::Q8_0, DType::Q8), (DType::Q4_0, DType::Q4)] {
        for (rows, cols) in [(3, 32), (13, 128), (MC + 7, 512), (5, 32 * 9)] {
            let stored = gguf.encode(&sample(rows * cols, 21), cols);
            let bb = gguf.info().block_bytes as usize;
            let (scales, quants): (Vec<&[u8]>, Vec<&[u8]>) = stored.chunks_exact(bb).map(|b| b.split_at(2)).unzip();
            let split: Vec<u8> = quants.concat().into_iter().chain(scales.concat()).collect();
            let a = Mat::new(gguf, rows, cols, &stored).expect("binds");
            let b = Mat::new(colibri, rows, cols, &split).expect("binds");
            for path in available_paths() {
                let t = table_for(path).expect("available");
                for (k0, kc, r) in [(0, cols, 0..rows), (cols - 32, 32, 1..rows), (0, 32, 2..3)] {
                    let (mut wa, mut wb) = (vec![0f32; kc * r.len()], vec![1f32; kc * r.len()]);
                    (t.mat(gguf).widen)(a, r.clone(), k0, &mut wa);
                    (t.mat(colibri).widen)(b, r.clone(), k0, &mut wb);
                    assert_eq!(bits(&wa), bits(&wb), "{path:?} {gguf} widen {rows}x{cols} rows {r:?} k0 {k0}");
                }
                if gguf != DType::Q8_0 {
                    continue;
                }
                let k = kernels(path, QuantActivations::Float);
                for n in [1, 2, 5, GEMM_MIN_ROWS + 3] {
                    let x = sample(n * cols, 22 + n as u64);
                    let (mut ya, mut yb) = (vec![0f32; n * rows], vec![1f32; n * rows]);
                    k.matmul(a, &x, n, &mut ya);
                    k.matmul(b, &x, n, &mut yb);
                    assert_eq!(bits(&ya), bits(&yb), "{path:?} q8_0 {rows}x{cols} n {n}");
                }
            }
        }
    }
}

/// Every x86 path's GEMM micro-tile gives the same bits (one fused multiply-add chain per output
/// in ascending k, whatever the register width), full and half-width panels.
#[test]
fn the_micro_tile_is_the_same_bits_on_every_simd_path() {
    let kc = 37;
    let (a, b, c0) = (sample(MR * kc, 21), sample(kc * NR, 22), sample(MR * 2 * NR, 23));
    let tiles: Vec<(CpuPath, Vec<f32>)> = available_paths()
        .into_iter()
        .filter(|p| *p != CpuPath::Generic)
        .map(|path| {
            let t = kernels(path, QuantActivations::Float).table().tile;
            let mut c = c0.clone();
            let (a, b) = (Operand::new(&a, kc), Operand::new(&b, NR));
            t(a, b, kc, &mut c, 2 * NR, NR);
            t(a, b, kc, &mut c[NR..], 2 * NR, NR / 2);
            (path, c)
        })
        .collect();
    for (path, c) in &tiles[1.min(tiles.len())..] {
        assert_eq!(c, &tiles[0].1, "{path:?} against {:?}", tiles[0].0);
    }
    assert_ne!(tiles.first().map(|t| &t.1), Some(&c0), "the tile wrote its outputs");
}

#[test]
fn every_path_rounds_and_packs_bf16_activations_with_the_same_bits() {
    use super::bf16act::{round_bf16, Bf16Acts};
    // Values with NaN payloads, infinities, subnormals and ties among ordinary ones; row counts
    // with and without a partial last panel; an odd number of pairs.
    let (cols, specials) =
        (70, [f32::NAN, -f32::NAN, f32::from_bits(0x7F80_0001), f32::INFINITY, 1e-40, f32::from_bits(0x3F81_8000)]);
    for n in [1, 15, 16, 33, 48] {
        let mut x = sample(n * cols, 40 + n as u64);
        let len = x.len();
        for (i, v) in specials.iter().enumerate() {
            x[(i * 37) % len] = *v;
        }
        let want_bits: Vec<u16> = x.iter().map(|&v| round_bf16(v)).collect();
        for path in available_paths() {
            let t = table_for(path).expect("available");
            let mut a = Bf16Acts::default();
            a.round(&x, n, cols);
            assert_eq!(a.bits, want_bits, "{path:?} n {n}: rounding");
            a.pack_panels(t.transpose);
            for p in 0..n.div_ceil(NR) {
                for q in 0..cols / 2 {
                    for j in 0..NR {
                        let t = p * NR + j;
                        let want = match t < n {
                            true => {
                                u32::from(want_bits[t * cols + 2 * q])
                                    | u32::from(want_bits[t * cols + 2 * q + 1]) << 16
                            }
                            false => 0,
                        };
                        assert_eq!(
                            a.panels()[(p * cols / 2 + q) * NR + j],
                            want,
                            "{path:?} n {n} panel {p} pair {q} row {j}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn every_path_writes_gemm_results_back_like_the_reference() {
    // Blocks of results (rows × tokens, rows lds apart) turned token-major: whole 8 × 8 blocks,
    // row and token edges, padding columns in the source that must not be read into the result.
    let lds = 27;
    let src = sample(96 * lds, 31);
    // Also attention's key panels: NR rows of kw columns (any width).
    for path in available_paths() {
        let t = table_for(path).expect("available");
        let shapes = [
            (0, 8),
            (1, 1),
            (7, 8),
            (8, 8),
            (16, 8),
            (19, 8),
            (96, 8),
            (96, 3),
            (13, 5),
            (40, 8),
            (16, 27),
            (16, 24),
            (9, 17),
        ];
        for (rows, cols) in shapes {
            let mut want = vec![f32::NAN; rows * cols + 3];
            let mut got = want.clone();
            super::generic::transpose(&src, lds, rows, cols, &mut want);
            (t.transpose)(&src, lds, rows, cols, &mut got);
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{path:?} {rows} × {cols}"
            );
            for (j, i) in (0..cols).flat_map(|j| (0..rows).map(move |i| (j, i))) {
                assert_eq!(want[j * rows + i], src[i * lds + j], "reference {rows} × {cols} at ({i}, {j})");
            }
        }
    }
}

#[test]
fn every_path_weighs_softmax_rows_with_the_same_bits() {
    // The same lane loops compiled per instruction set: the weights and the sum bit-identical.
    for n in [1, 5, 8, 13, 64, 301] {
        let xs: Vec<f32> = sample(n, 40 + n as u64).iter().map(|v| v * 30.0).collect();
        let m = xs.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
        let mut want = xs.clone();
        let want_sum = super::vexp::exp_sum(&mut want, m);
        for path in available_paths() {
            let mut got = xs.clone();
            let sum = (table_for(path).expect("available").exp_sum)(&mut got, m);
            assert_eq!(sum.to_bits(), want_sum.to_bits(), "{path:?} n {n}: sum");
            assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{path:?} n {n}: weights");
        }
    }
}

#[test]
fn every_path_scales_softmax_rows_and_takes_their_maximum_ignoring_nan() {
    for n in [0, 1, 5, 8, 13, 64, 301] {
        let mut xs: Vec<f32> = sample(n, 60 + n as u64).iter().map(|v| v * 30.0).collect();
        if n > 4 {
            xs[3] = f32::NAN;
        }
        for m in [f32::NEG_INFINITY, 0.5, 1e3] {
            let scaled: Vec<f32> = xs.iter().map(|&x| x * 0.125).collect();
            let want = scaled.iter().filter(|x| !x.is_nan()).fold(m, |a, &x| a.max(x));
            for path in available_paths() {
                let mut got = xs.clone();
                let max = (table_for(path).expect("available").scale_max)(&mut got, 0.125, m);
                assert_eq!(max.to_bits(), want.to_bits(), "{path:?} n {n} m {m}: maximum");
                let same = got.iter().zip(&scaled).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{path:?} n {n}: scaled in place");
            }
        }
    }
}

#[test]
fn rmsnorm_rows_match_the_definition_and_do_not_depend_on_the_pool() {
    // 40 × 2048 values: past the pool threshold; 13 columns: a tail after the eight lanes.
    for (n, dim) in [(40, 2048), (3, 13), (6000, 13)] {
        let x: Vec<f32> = sample(n * dim, 71).iter().map(|v| v * 40.0).collect();
        let gain = sample(dim, 72);
        let stored = DType::F32.encode(&gain, dim);
        let w = Mat::new(DType::F32, 1, dim, &stored).expect("a gain row");
        let (eps, shift) = (1e-6f32, 1.0f32);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
            let mut y = vec![0f32; n * dim];
            let mut inplace = x.clone();
            pool.install(|| {
                super::rmsnorm_shifted(&x, w, shift, eps, &mut y);
                super::rmsnorm_inplace_shifted(&mut inplace, w, shift, eps);
            });
            assert!(y.iter().zip(&inplace).all(|(a, b)| a.to_bits() == b.to_bits()), "{n} × {dim}: in place");
            y
        };
        let one = run(1);
        assert!(one.iter().zip(&run(3)).all(|(a, b)| a.to_bits() == b.to_bits()), "{n} × {dim}: threads");
        for (t, row) in one.chunks_exact(dim).enumerate() {
            let xr = &x[t * dim..(t + 1) * dim];
            let ms = xr.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / dim as f64;
            let inv = 1.0 / (ms + f64::from(eps)).sqrt();
            for ((&got, &xi), &g) in row.iter().zip(xr).zip(&gain) {
                let want = (f64::from(g) + f64::from(shift)) * f64::from(xi) * inv;
                assert!(
                    (f64::from(got) - want).abs() <= 1e-6 * want.abs().max(1e-3),
                    "{n} × {dim} row {t}: {got} vs {want}"
                );
            }
        }
    }
}

/// Operands read in place — rows further apart than the tile reads, as attention reads cached
/// rows — give the bits of the same values packed, single and pair tiles, on every path.
#[test]
fn the_micro_tile_reads_rows_in_place_as_it_reads_them_packed() {
    let (kc, lda, ldb, ldc) = (29, 29 + 11, 2 * NR + 5, 2 * NR + 1);
    let (a, b, c0) = (sample(MR * lda, 31), sample(kc * ldb, 32), sample(MR * ldc, 33));
    let packed_a: Vec<f32> = a.chunks_exact(lda).flat_map(|r| r[..kc].to_vec()).collect();
    let packed_b =
        |p: usize| -> Vec<f32> { b.chunks_exact(ldb).flat_map(|r| r[p * NR..(p + 1) * NR].to_vec()).collect() };
    let (b0, b1) = (packed_b(0), packed_b(1));
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for path in available_paths() {
        let t = table_for(path).expect("available");
        let (mut packed, mut strided, mut pair) = (c0.clone(), c0.clone(), c0.clone());
        let pa = Operand::new(&packed_a, kc);
        (t.tile)(pa, Operand::new(&b0, NR), kc, &mut packed, ldc, NR);
        (t.tile)(pa, Operand::new(&b1, NR), kc, &mut packed[NR..], ldc, NR / 2);
        let (sa, sb) = (Operand::new(&a, lda), Operand::new(&b, ldb));
        (t.tile)(sa, sb, kc, &mut strided, ldc, NR);
        (t.tile)(sa, sb.at(0, NR), kc, &mut strided[NR..], ldc, NR / 2);
        assert_eq!(bits(&packed), bits(&strided), "{path:?}: single tiles");
        let mut want = c0.clone();
        (t.tile)(pa, Operand::new(&b0, NR), kc, &mut want, ldc, NR);
        (t.tile)(pa, Operand::new(&b1, NR), kc, &mut want[NR..], ldc, NR);
        t.tile2(sa, [sb, sb.at(0, NR)], kc, &mut pair, ldc);
        assert_eq!(bits(&want), bits(&pair), "{path:?}: pair tile");
        assert_ne!(bits(&pair), bits(&c0), "{path:?}: the tile wrote its outputs");
    }
}

#[test]
fn a_pair_tile_gives_the_bits_of_two_single_tiles_on_every_path() {
    for kc in [1, 7, 64, 257] {
        let a = sample(MR * kc, 80 + kc as u64);
        let b = [sample(kc * NR, 81), sample(kc * NR, 82)];
        let ldc = 2 * NR + 3;
        let c0 = sample(MR * ldc, 83);
        for path in available_paths() {
            let t = table_for(path).expect("available");
            let (mut pair, mut single) = (c0.clone(), c0.clone());
            let (ap, bp) = (Operand::new(&a, kc), [Operand::new(&b[0], NR), Operand::new(&b[1], NR)]);
            t.tile2(ap, bp, kc, &mut pair, ldc);
            (t.tile)(ap, bp[0], kc, &mut single, ldc, NR);
            (t.tile)(ap, bp[1], kc, &mut single[NR..], ldc, NR);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&pair), bits(&single), "{path:?} kc {kc}");
            let exact = (0..MR * 2 * NR).all(|o| {
                let (i, p, j) = (o / (2 * NR), o % (2 * NR) / NR, o % NR);
                let want: f64 = f64::from(c0[i * ldc + p * NR + j])
                    + (0..kc).map(|k| f64::from(a[i * kc + k]) * f64::from(b[p][k * NR + j])).sum::<f64>();
                (f64::from(pair[i * ldc + p * NR + j]) - want).abs() <= 1e-5 * (1.0 + kc as f64)
            });
            assert!(exact, "{path:?} kc {kc}: the sums");
            assert_eq!(bits(&pair[2 * NR..ldc]), bits(&c0[2 * NR..ldc]), "{path:?}: past the two panels");
        }
    }
}
