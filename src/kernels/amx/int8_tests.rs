//! The model's TDPBSSD against hand computation and its faults; the AMX-INT8 product of q8r8 /
//! q4r8 on the tile model against the AVX-512 VNNI kernel (bit for bit) and the scalar
//! reference, on ragged shapes and row ranges, on pools of 1 and 3 threads. The hardware kernel
//! runs only where the CPU has AMX-INT8 (`amx_hardware_int8_kernel_matches_the_model`, ignored
//! elsewhere). The kernel scales with AVX-512: its tests need an AVX-512 VNNI CPU.

use super::int8::{gemv_i8, on_tiles, AMX_MIN_ROWS};
use super::model::Model;
use super::{TileConfig, Tiles};
use crate::format::DType;
use crate::kernels::actq::QuantizedActs;
use crate::kernels::dispatch::table_for;
use crate::kernels::par::gemv_by;
use crate::kernels::table::CpuPath;
use crate::kernels::tests::{exact, sample};
use crate::kernels::Mat;
use std::ops::Range;

/// A model with tmm0 = C (rows × cols i32), tmm1 = A (rows × 4·k bytes), tmm2 = B (k × 4·cols
/// bytes) loaded from the given values, then tdpbssd tmm0, tmm1, tmm2.
fn dp(c: &[i32], a: &[i8], b: &[i8], rows: usize, k: usize, cols: usize) -> Model {
    let cfg = TileConfig::shaped(&[(rows, cols * 4), (rows, k * 4), (k, cols * 4)]);
    let mut t = Model::default();
    t.configure(&cfg);
    // SAFETY: each slice holds rows × colsb bytes of its register, densely.
    unsafe {
        t.load::<0>(c.as_ptr().cast(), cols * 4);
        t.load::<1>(a.as_ptr().cast(), k * 4);
        t.load::<2>(b.as_ptr().cast(), cols * 4);
    }
    t.dpbssd::<0, 1, 2>();
    t
}

#[test]
fn the_model_int8_dot_product_matches_a_hand_computed_case() {
    // A [2 rows × 8 bytes] (k = 2 dwords), B [2 rows × 2 columns of 4 bytes], C [2 × 2].
    let a: [i8; 16] = [1, 2, 3, 4, -1, -2, -3, -4, -128, 127, 0, 5, 6, 7, 8, 9];
    let b: [i8; 16] = [1, 1, 1, 1, 1, -1, 1, -1, 2, 0, 0, 2, -128, -128, 127, 1];
    let t = dp(&[10, 20, 30, 40], &a, &b, 2, 2, 2);
    // C[m][n] += Σ_k Σ_t A[m][4k + t]·B[k][4n + t]:
    // (0, 0): 1 + 2 + 3 + 4 + (−1)·2 + 0 + 0 + (−4)·2 = 0;
    // (0, 1): 1 − 2 + 3 − 4 + (−1)(−128) + (−2)(−128) + (−3)·127 + (−4)·1 = −3;
    // (1, 0): −128 + 127 + 0 + 5 + 6·2 + 0 + 0 + 9·2 = 34;
    // (1, 1): −128 − 127 + 0 − 5 + 6(−128) + 7(−128) + 8·127 + 9 = −899.
    let got: Vec<i32> = (0..4).map(|i| t.i32_at(0, i / 2, i % 2)).collect();
    assert_eq!(got, [10, 17, 64, -859]);
    // The sums wrap in 32 bits (no saturation).
    let t = dp(&[i32::MAX], &[1, 0, 0, 0], &[2, 0, 0, 0], 1, 1, 1);
    assert_eq!(t.i32_at(0, 0, 0), i32::MIN + 1);
    let t = dp(&[i32::MIN], &[-128, -128, -128, -128], &[127, 127, 127, 127], 1, 1, 1);
    assert_eq!(t.i32_at(0, 0, 0), i32::MIN.wrapping_add(-4 * 128 * 127));
}

#[test]
#[should_panic(expected = "colsb(A)/4")]
fn the_model_int8_product_faults_when_a_is_wider_than_b_is_tall() {
    // The kernel's shapes with B one row short: K = 32 bytes of A meet 7 rows of B.
    let mut t = Model::default();
    t.configure(&TileConfig::shaped(&[(16, 64), (16, 32), (7, 64)]));
    t.dpbssd::<0, 1, 2>();
}

#[test]
#[should_panic(expected = "colsb(C)")]
fn the_model_int8_product_faults_when_b_and_c_differ_in_width() {
    let mut t = Model::default();
    t.configure(&TileConfig::shaped(&[(16, 32), (16, 32), (8, 64)]));
    t.dpbssd::<0, 1, 2>();
}

#[test]
#[should_panic(expected = "rows(A)")]
fn the_model_int8_product_faults_when_a_and_c_differ_in_rows() {
    let mut t = Model::default();
    t.configure(&TileConfig::shaped(&[(16, 64), (15, 32), (8, 64)]));
    t.dpbssd::<0, 1, 2>();
}

#[test]
#[should_panic(expected = "repeated register")]
fn the_model_int8_product_faults_on_a_repeated_register() {
    let mut t = Model::default();
    t.configure(&TileConfig::full(0..8));
    t.dpbssd::<3, 3, 4>();
}

/// Whether this CPU runs the kernel's AVX-512 scaling and the VNNI kernel it is checked
/// against; says so when not.
fn runs_here(test: &str) -> bool {
    let ok = crate::kernels::x86::has_avx512();
    if !ok {
        eprintln!("{test}: this CPU lacks AVX-512 VNNI: not run");
    }
    ok
}

/// A q8r8 and a q4r8 matrix [rows, cols] from the same values.
fn matrices(rows: usize, cols: usize) -> Vec<(DType, Vec<u8>)> {
    let f = sample(rows * cols, (rows * 7 + cols) as u64);
    [DType::Q8R8, DType::Q4R8].into_iter().map(|d| (d, d.encode(&f, cols))).collect()
}

/// n activation rows of `cols` values, int8-quantised by the reference quantiser.
fn acts(n: usize, cols: usize) -> QuantizedActs {
    let mut xa = QuantizedActs::default();
    let x = sample(n * cols, (n * 3 + cols) as u64 + 5);
    xa.quantize_with(table_for(CpuPath::Generic).expect("generic").quantize, &x, n, cols);
    xa
}

type Kernel = fn(Mat<'_>, Range<usize>, &QuantizedActs, usize, &mut [f32]);

/// out [n, rows.len()] of one kernel call.
fn call(k: Kernel, w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n * rows.len()];
    k(w, rows, xa, n, &mut out);
    out
}

/// The whole product through the matrix-vector strategy's row split, on a pool of `threads`.
fn split(k: Kernel, w: Mat<'_>, xa: &QuantizedActs, n: usize, threads: usize) -> Vec<f32> {
    let mut y = vec![f32::NAN; n * w.rows()];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
    pool.install(|| gemv_by(w.rows(), w.cols(), n, &mut y, |r, out| k(w, r, xa, n, out)));
    y
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// The kernel's tile path on the tile model, at every n (below the threshold too).
fn on_model(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    on_tiles::<Model>(w, rows, xa, n, out)
}

/// The kernel as the table calls it (the VNNI kernel below the threshold), on the tile model.
fn dispatched(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    gemv_i8::<Model>(w, rows, xa, n, out)
}

/// The AVX-512 VNNI kernel (the AVX-512 table's q8r8 / q4r8 row).
fn vnni() -> Kernel {
    table_for(CpuPath::Avx512).expect("avx512").mat(DType::Q8R8).gemv_i8.expect("int8 kernel")
}

/// `got` (rows `range` of w against xa's n rows) against the scalar reference within the
/// int8 products' tolerance (4e-6 of Σ|w·x|: the order of the float block additions differs).
fn check_reference(w: Mat<'_>, range: Range<usize>, xa: &QuantizedActs, n: usize, got: &[f32], what: &str) {
    let generic = table_for(CpuPath::Generic).expect("generic").mat(w.dtype()).gemv_i8.expect("int8 kernel");
    let want = call(generic, w, range.clone(), xa, n);
    let mut x = vec![0f32; n * w.cols()];
    xa.dequantize(&mut x);
    let (_, mag) = exact(w, &x, n);
    let len = range.len();
    for t in 0..n {
        for (i, r) in range.clone().enumerate() {
            let (g, e) = (got[t * len + i], want[t * len + i]);
            let tol = 4e-6 * mag[t * w.rows() + r] + 1e-30;
            assert!(f64::from((g - e).abs()) <= tol, "{what}: row {r} token {t}: {g} vs reference {e}");
        }
    }
}

/// (activation rows, weight rows, columns) of the comparisons.
fn shapes() -> impl Iterator<Item = (usize, usize, usize)> {
    let ns = [1, 7, 16, 17, 33, 100];
    ns.into_iter().flat_map(|n| [8, 16, 40, 64].into_iter().flat_map(move |r| [32, 96, 2048].map(|c| (n, r, c))))
}

#[test]
fn the_int8_kernel_on_the_tile_model_is_the_vnni_kernel_bit_for_bit() {
    if !runs_here("the_int8_kernel_on_the_tile_model_is_the_vnni_kernel_bit_for_bit") {
        return;
    }
    for (n, rows, cols) in shapes() {
        let xa = acts(n, cols);
        for (d, bytes) in matrices(rows, cols) {
            let w = Mat::new(d, rows, cols, &bytes).expect("binds");
            let what = format!("{} n {n} rows {rows} cols {cols}", d.name());
            let got = call(on_model, w, 0..rows, &xa, n);
            assert_eq!(bits(&got), bits(&call(vnni(), w, 0..rows, &xa, n)), "{what}: model vs vnni");
            assert_eq!(bits(&got), bits(&call(dispatched, w, 0..rows, &xa, n)), "{what}: tiles vs dispatched");
            check_reference(w, 0..rows, &xa, n, &got, &what);
        }
    }
}

#[test]
fn the_int8_kernel_takes_any_row_range() {
    if !runs_here("the_int8_kernel_takes_any_row_range") {
        return;
    }
    let (rows, cols) = (40, 96);
    // Ranges starting or ending inside a group, odd group counts (a last single group), one row.
    let ranges = [0..40, 3..37, 8..16, 8..32, 0..24, 5..6, 16..40, 7..9];
    for n in [1, AMX_MIN_ROWS, 17, 70] {
        let xa = acts(n, cols);
        for (d, bytes) in matrices(rows, cols) {
            let w = Mat::new(d, rows, cols, &bytes).expect("binds");
            for r in ranges.clone() {
                let what = format!("{} n {n} rows {r:?}", d.name());
                let got = call(on_model, w, r.clone(), &xa, n);
                assert_eq!(bits(&got), bits(&call(vnni(), w, r.clone(), &xa, n)), "{what}: model vs vnni");
                check_reference(w, r, &xa, n, &got, &what);
            }
        }
    }
}

#[test]
fn int8_results_do_not_depend_on_the_thread_count() {
    if !runs_here("int8_results_do_not_depend_on_the_thread_count") {
        return;
    }
    let (rows, cols, n) = (200, 256, 45);
    let xa = acts(n, cols);
    for (d, bytes) in matrices(rows, cols) {
        let w = Mat::new(d, rows, cols, &bytes).expect("binds");
        let one = split(on_model, w, &xa, n, 1);
        assert_eq!(bits(&one), bits(&split(on_model, w, &xa, n, 3)), "{}: 1 vs 3 threads", d.name());
        assert_eq!(bits(&one), bits(&call(on_model, w, 0..rows, &xa, n)), "{}: split vs one call", d.name());
    }
}

mod hardware {
    use super::*;
    use crate::kernels::amx::hw::{cpuid_has_amx_int8, status, Hw};

    fn on_hw(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
        on_tiles::<Hw>(w, rows, xa, n, out)
    }

    fn dispatched_hw(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
        gemv_i8::<Hw>(w, rows, xa, n, out)
    }

    /// The hardware tiles against the model, the VNNI kernel (bit for bit) and the reference.
    /// Ignored by default: on a CPU without AMX-INT8 it cannot run and must not pass.
    #[test]
    #[ignore = "needs a CPU with AMX-INT8: cargo test --release -p colibri amx_hardware -- --ignored"]
    fn amx_hardware_int8_kernel_matches_the_model() {
        if let Err(why) = status() {
            panic!("AMX HARDWARE INT8 KERNEL NOT RUN: {why}");
        }
        assert!(cpuid_has_amx_int8(), "AMX HARDWARE INT8 KERNEL NOT RUN: no amx_int8 in cpuid");
        for (n, rows, cols) in shapes().chain([(256, 512, 4096), (100, 24, 2048)]) {
            let xa = acts(n, cols);
            for (d, bytes) in matrices(rows, cols) {
                let w = Mat::new(d, rows, cols, &bytes).expect("binds");
                let what = format!("hardware {} n {n} rows {rows} cols {cols}", d.name());
                let hw = split(on_hw, w, &xa, n, 3);
                assert_eq!(bits(&hw), bits(&split(on_hw, w, &xa, n, 1)), "{what}: 1 vs 3 threads");
                assert_eq!(bits(&hw), bits(&call(vnni(), w, 0..rows, &xa, n)), "{what}: vs vnni");
                assert_eq!(bits(&hw), bits(&split(dispatched_hw, w, &xa, n, 2)), "{what}: vs dispatched");
                if n * rows * cols <= 100 * 64 * 2048 {
                    assert_eq!(bits(&hw), bits(&call(on_model, w, 0..rows, &xa, n)), "{what}: vs model");
                }
                check_reference(w, 0..rows, &xa, n, &hw, &what);
            }
            for r in [3..rows - 1, 8..rows.min(24)] {
                let xa = acts(n, cols);
                let (d, bytes) = &matrices(rows, cols)[1];
                let w = Mat::new(*d, rows, cols, bytes).expect("binds");
                let hw = call(on_hw, w, r.clone(), &xa, n);
                assert_eq!(bits(&hw), bits(&call(vnni(), w, r.clone(), &xa, n)), "hardware q4r8 n {n} rows {r:?}");
            }
        }
    }
}
