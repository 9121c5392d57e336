//! The AMX GEMM through the tile model against exact sums and the scalar reference; the tile
//! sources (direct and zero-padded) against index formulas; the model's TDPBF16PS against hand
//! computation and its faults; the run-time choice's fallback. The hardware kernel runs only
//! where the CPU has AMX (`amx_hardware_kernel_matches_the_model`, ignored elsewhere).

use super::gemm::{gemm, gemm_in_chunks, groups, lanes, Group};
use super::model::Model;
use super::operand::{a_tile, b_tile, TileBuf, Weights};
use super::sink::BLOCK;
use super::split::{chunk_width, task_rows, KC, PANELS_NEAR};
use super::TK;
use super::{TileConfig, Tiles, TILE_COLSB, TILE_ROWS};
use crate::format::DType;
use crate::kernels::bf16act::{round_bf16, Bf16Acts};
use crate::kernels::dispatch::Kernels;
use crate::kernels::generic;
use crate::kernels::table::{Bf16Out, CpuPath, Gate, GatedUp, TransposeFn, NR};
use crate::kernels::tests::{exact, sample, FLOAT_TOL};
use crate::kernels::{Mat, QuantActivations, XRows};

/// bf16 bits of a value that bf16 holds exactly.
fn bf(v: f32) -> u16 {
    let b = round_bf16(v);
    assert_eq!(f32::from_bits(u32::from(b) << 16), v, "{v} is not a bf16");
    b
}

/// A model with tmm0 = C (rows × cols f32), tmm1 = A (rows × 2·pairs bf16), tmm2 = B (pairs ×
/// 2·cols bf16) loaded from the given values, then tdpbf16ps tmm0, tmm1, tmm2.
fn dp(c: &[f32], a: &[u16], b: &[u16], rows: usize, pairs: usize, cols: usize) -> Model {
    let mut cfg = TileConfig::full(0..0);
    (cfg.rows[0], cfg.colsb[0]) = (rows as u8, (cols * 4) as u16);
    (cfg.rows[1], cfg.colsb[1]) = (rows as u8, (pairs * 4) as u16);
    (cfg.rows[2], cfg.colsb[2]) = (pairs as u8, (cols * 4) as u16);
    let mut t = Model::default();
    t.configure(&cfg);
    // SAFETY: each slice holds rows × colsb bytes of its register, densely.
    unsafe {
        t.load::<0>(c.as_ptr().cast(), cols * 4);
        t.load::<1>(a.as_ptr().cast(), pairs * 4);
        t.load::<2>(b.as_ptr().cast(), cols * 4);
    }
    t.dpbf16ps::<0, 1, 2>();
    t
}

#[test]
fn the_model_dot_product_matches_a_hand_computed_case() {
    // A [2 × 2 pairs], B [2 pairs × 2 columns of pairs], C [2 × 2] = 10, 20, 30, 40.
    let a: Vec<u16> = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0].map(bf).to_vec();
    let b: Vec<u16> = [1.0, 0.0, 0.0, 1.0, 2.0, 1.0, 1.0, 2.0].map(bf).to_vec();
    let t = dp(&[10.0, 20.0, 30.0, 40.0], &a, &b, 2, 2, 2);
    // C[m][n] += Σ_k A[m][2k]·B[k][2n] + A[m][2k+1]·B[k][2n+1]:
    // row 0: 1·1 + 2·0 + 3·2 + 4·1 = 11, 1·0 + 2·1 + 3·1 + 4·2 = 13; row 1: 27, 29.
    let got: Vec<f32> = (0..4).map(|i| t.f32_at(0, i / 2, i % 2)).collect();
    assert_eq!(got, [21.0, 33.0, 57.0, 69.0]);
}

#[test]
fn the_model_sums_even_and_odd_products_apart_then_adds_them() {
    // The SDM's two lanes per output: even products 2²⁴ − 2²⁴ = 0, odd ones 1 + 1 = 2, sum 2.
    // One chain over the products in order would give 2²⁴, 2²⁴ (2²⁴ + 1 rounds to even), 0, 1.
    let big = 16_777_216.0;
    let a: Vec<u16> = [1.0, 1.0, 1.0, 1.0].map(bf).to_vec();
    let b: Vec<u16> = [big, 1.0, -big, 1.0].map(bf).to_vec();
    assert_eq!(dp(&[0.0], &a, &b, 1, 2, 1).f32_at(0, 0, 0), 2.0);
    // Inputs below 2⁻¹²⁶ read as zero (DAZ): 2⁻¹³³ · 2¹⁰⁰ would be 2⁻³³.
    let (tiny, huge) = (0x0001u16, bf(2f32.powi(100)));
    assert_eq!(dp(&[0.5], &[tiny, 0], &[huge, 0], 1, 1, 1).f32_at(0, 0, 0), 0.5);
    // Results below 2⁻¹²⁶ become zero (FTZ): 2⁻⁷⁰ · 2⁻⁷⁰.
    let small = bf(2f32.powi(-70));
    assert_eq!(dp(&[0.0], &[small, 0], &[small, 0], 1, 1, 1).f32_at(0, 0, 0).to_bits(), 0);
}

#[test]
#[should_panic(expected = "#GP")]
fn the_model_faults_on_a_tile_taller_than_16_rows() {
    let mut cfg = TileConfig::full(0..1);
    cfg.rows[0] = 17;
    Model::default().configure(&cfg);
}

#[test]
#[should_panic(expected = "#GP")]
fn the_model_faults_on_a_tile_wider_than_64_bytes() {
    let mut cfg = TileConfig::full(0..1);
    cfg.colsb[0] = 68;
    Model::default().configure(&cfg);
}

#[test]
#[should_panic(expected = "rows(A)")]
fn the_model_faults_on_shapes_that_do_not_chain() {
    let mut cfg = TileConfig::full(0..3);
    cfg.rows[1] = 8;
    let mut t = Model::default();
    t.configure(&cfg);
    t.dpbf16ps::<0, 1, 2>();
}

#[test]
#[should_panic(expected = "unconfigured")]
fn the_model_faults_on_an_unconfigured_tile() {
    let mut t = Model::default();
    t.configure(&TileConfig::full(0..2));
    t.dpbf16ps::<0, 1, 2>();
}

#[test]
#[should_panic(expected = "repeated register")]
fn the_model_faults_on_a_repeated_register() {
    let mut t = Model::default();
    t.configure(&TileConfig::full(0..8));
    t.dpbf16ps::<0, 1, 1>();
}

/// A model with tmm0 16 rows × `colsb` bytes loaded from `src`.
pub(super) fn loaded(src: (*const u8, usize), colsb: usize) -> Model {
    let mut t = Model::default();
    t.configure(&TileConfig::shaped(&[(TILE_ROWS, colsb)]));
    // SAFETY: a_tile / b_tile hand out 16 rows of `colsb` readable bytes.
    unsafe { t.load::<0>(src.0, src.1) };
    t
}

#[test]
fn weight_tiles_are_the_stored_rows_zero_past_the_matrix() {
    for (rows, cols) in [(40, 100), (16, 32), (17, 96), (5, 2)] {
        let w: Vec<u16> = (0..rows * cols).map(|i| i as u16 + 1).collect();
        for r in (0..rows + TILE_ROWS).step_by(TILE_ROWS) {
            for k0 in (0..cols).step_by(TK) {
                let mut buf = TileBuf::default();
                let t =
                    loaded(a_tile(&Weights::of(Mat::halves(DType::BF16, &w, rows, cols)), r, k0, &mut buf), TILE_COLSB);
                for (i, c) in (0..TILE_ROWS).flat_map(|i| (0..TK).map(move |c| (i, c))) {
                    let want = if r + i < rows && k0 + c < cols { w[(r + i) * cols + k0 + c] } else { 0 };
                    assert_eq!(t.bf16(0, i, c), want, "{rows}x{cols} tile ({r}, {k0}) element ({i}, {c})");
                }
            }
        }
    }
}

#[test]
fn activation_tiles_pair_columns_zero_past_the_panels() {
    for (n, cols) in [(17, 100), (16, 64), (40, 2), (33, 96), (1, 100), (5, 64), (15, 34)] {
        let x = sample(n * cols, 3);
        let mut acts = Bf16Acts::default();
        acts.round(&x, n, cols);
        acts.pack_tiles(generic::transpose);
        let (pairs, lanes) = (cols / 2, lanes(n));
        for p in 0..n.div_ceil(NR) + 1 {
            for q0 in (0..pairs).step_by(TILE_ROWS) {
                let mut buf = TileBuf::default();
                let t = loaded(b_tile(acts.panels(), pairs, lanes, p, q0, &mut buf), 4 * lanes);
                for (q, j) in (0..TILE_ROWS).flat_map(|q| (0..lanes).map(move |j| (q, j))) {
                    let (tok, c) = (p * NR + j, 2 * (q0 + q));
                    let want = match tok < n && q0 + q < pairs {
                        true => {
                            u32::from(round_bf16(x[tok * cols + c]))
                                | u32::from(round_bf16(x[tok * cols + c + 1])) << 16
                        }
                        false => 0,
                    };
                    assert_eq!(t.u32_at(0, q, j), want, "n {n} cols {cols} panel {p} pair {} token {tok}", q0 + q);
                }
            }
        }
    }
}

/// y [n, rows] by the AMX GEMM on tiles `T`, on a pool of `threads`.
pub(super) fn run<T: Tiles>(w: Mat<'_>, x: &[f32], n: usize, threads: usize) -> Vec<f32> {
    let mut acts = Bf16Acts::default();
    acts.round(x, n, w.cols());
    acts.pack_tiles(generic::transpose);
    let mut y = vec![f32::NAN; n * w.rows()];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
    pool.install(|| gemm::<T>(generic::transpose, w, 0..w.rows(), acts.panels(), n, Bf16Out::Rows(&mut y), true, None));
    y
}

/// The shapes of the model's comparison: (activation rows, weight rows, columns).
fn shapes() -> impl Iterator<Item = (usize, usize, usize)> {
    let ms = [1, 5, 16, 17, 33, 100];
    ms.into_iter().flat_map(|m| [16, 40, 64].into_iter().flat_map(move |n| [32, 96, 100, 2048].map(|k| (m, n, k))))
}

/// y against the exact products of the rounded activations (f64) within FLOAT_TOL, and against
/// the scalar reference within twice that.
pub(super) fn check_against_reference(w: Mat<'_>, x: &[f32], n: usize, y: &[f32], what: &str) {
    let rounded: Vec<f32> = x.iter().map(|&v| f32::from_bits(u32::from(round_bf16(v)) << 16)).collect();
    let (want, mag) = exact(w, &rounded, n);
    let mut reference = vec![0f32; y.len()];
    Kernels::on(CpuPath::Generic, QuantActivations::Reduced).expect("generic").matmul(w, x, n, &mut reference);
    for i in 0..y.len() {
        let err = (f64::from(y[i]) - want[i]).abs();
        assert!(err <= FLOAT_TOL * mag[i] + 1e-30, "{what}: y[{i}] = {} vs exact {} (err {err:e})", y[i], want[i]);
        let err = f64::from((y[i] - reference[i]).abs());
        assert!(err <= 2.0 * FLOAT_TOL * mag[i] + 1e-30, "{what}: y[{i}] = {} vs reference {}", y[i], reference[i]);
    }
}

#[test]
fn the_gemm_on_the_tile_model_matches_the_reference_on_ragged_shapes() {
    for (m, n, k) in shapes() {
        let w: Vec<u16> = sample(n * k, (n * k) as u64).iter().map(|&v| round_bf16(v)).collect();
        let w = Mat::halves(DType::BF16, &w, n, k);
        let x = sample(m * k, (m + k) as u64);
        let one = run::<Model>(w, &x, m, 1);
        check_against_reference(w, &x, m, &one, &format!("m {m} n {n} k {k}"));
        let three = run::<Model>(w, &x, m, 3);
        assert!(one.iter().zip(&three).all(|(a, b)| a.to_bits() == b.to_bits()), "m {m} n {n} k {k}: 1 vs 3 threads");
    }
}

#[test]
fn panels_go_in_pairs_and_an_odd_count_ends_in_a_triple() {
    use Group::{Pair, Single, Triple};
    let want: [&[(usize, Group)]; 8] = [
        &[],
        &[(0, Single)],
        &[(0, Pair)],
        &[(0, Triple)],
        &[(0, Pair), (2, Pair)],
        &[(0, Pair), (2, Triple)],
        &[(0, Pair), (2, Pair), (4, Pair)],
        &[(0, Pair), (2, Pair), (4, Triple)],
    ];
    for (n_panels, want) in want.iter().enumerate() {
        assert_eq!(groups(n_panels).collect::<Vec<_>>(), *want, "{n_panels} panels");
    }
    // Every panel in exactly one group, in order, for any count.
    for n_panels in 0..40 {
        let covered: Vec<usize> = groups(n_panels)
            .flat_map(|(p, g)| p..p + [(Pair, 2), (Single, 1), (Triple, 3)].iter().find(|(k, _)| *k == g).unwrap().1)
            .collect();
        assert_eq!(covered, (0..n_panels).collect::<Vec<_>>(), "{n_panels} panels");
    }
}

#[test]
fn column_chunks_change_no_bit() {
    // Rows wider than a chunk keep each block's partial sums between chunks: every output is
    // still one chain over the column steps, so any chunk width gives the same bits (and the
    // product stays within the reference's tolerance), including a ragged last chunk.
    for (m, n, k) in [(1, 40, 4196), (33, 40, 4196), (100, 64, 200), (17, 16, 4096 + 32)] {
        let w: Vec<u16> = sample(n * k, (n * k) as u64).iter().map(|&v| round_bf16(v)).collect();
        let w = Mat::halves(DType::BF16, &w, n, k);
        let x = sample(m * k, (m + k) as u64);
        let mut acts = Bf16Acts::default();
        acts.round(&x, m, k);
        acts.pack_tiles(generic::transpose);
        let with = |kc: usize| {
            let mut y = vec![f32::NAN; m * n];
            gemm_in_chunks::<Model>(
                generic::transpose,
                w,
                0..n,
                acts.panels(),
                m,
                Bf16Out::Rows(&mut y),
                false,
                None,
                kc,
            );
            y
        };
        let whole = with(k.next_multiple_of(TK));
        check_against_reference(w, &x, m, &whole, &format!("m {m} n {n} k {k}"));
        for kc in [TK, 2 * TK, 96, 4096] {
            let same = with(kc).iter().zip(&whole).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "m {m} n {n} k {k}: chunks of {kc} columns change the result");
        }
        assert!(run::<Model>(w, &x, m, 2).iter().zip(&whole).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

#[test]
fn rows_wider_than_a_chunk_split_into_as_few_chunks_of_equal_width() {
    for cols in [2, 32, 100, 4096, 4097, 5632, 8192, 8193, 14336, 20000] {
        let kc = chunk_width(cols);
        let chunks = cols.div_ceil(kc);
        assert!(kc.is_multiple_of(TK) && kc <= KC, "{cols} columns: chunks of {kc}");
        assert_eq!(chunks, cols.div_ceil(KC), "{cols} columns: {chunks} chunks of {kc}");
        // The last chunk is short by less than a step per chunk.
        assert!(cols - (chunks - 1) * kc + chunks * TK > kc, "{cols} columns: chunks of {kc}");
    }
    assert_eq!((chunk_width(5632), chunk_width(14336)), (2816, 3584));
}

#[test]
fn tasks_are_whole_blocks_and_grow_only_when_the_panels_leave_l2() {
    for cols in [64, 1408, 2048, 2816, 3584, 4096, 8192, 20000] {
        for n in [1, 16, 33, 64, 128, 255, 256, 512] {
            let near = task_rows(cols, n, n * cols * 2);
            let far = task_rows(cols, n, PANELS_NEAR + 1);
            for rows in [near, far] {
                assert!(rows.is_multiple_of(BLOCK) && (BLOCK..=4 * BLOCK).contains(&rows), "{cols} × {n}: {rows}");
            }
            assert!(far >= near, "{cols} columns, n {n}: {far} rows with far panels against {near}");
            if n >= 256 {
                assert_eq!(near, far, "{cols} columns, n {n}: many panel pairs size the task alike");
            }
        }
    }
    // Mixtral's down projection (chunks of 3584) at 128 rows: 2.7 MiB of panels take 96-row tasks.
    let (kc, n) = (chunk_width(14336), 128);
    assert!(task_rows(kc, n, n * 14336 * 2) > task_rows(kc, n, n * kc * 2));
}

/// Fused gate/up products the tile model has run through `model_gemm`.
static FUSED_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The AMX GEMM on the tile model, as a path's `Bf16Kernels::gemm` (counting the calls that join
/// a gate and an up projection).
#[allow(clippy::too_many_arguments)]
pub(super) fn model_gemm(
    transpose: TransposeFn,
    w: Mat<'_>,
    rows: std::ops::Range<usize>,
    panels: &[u32],
    n: usize,
    out: Bf16Out<'_>,
    pool: bool,
    up: Option<GatedUp<'_>>,
) {
    if up.is_some() {
        FUSED_RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    gemm::<Model>(transpose, w, rows, panels, n, out, pool, up)
}

/// bf16 kernels whose only product is `gemm` at every row count: the other kernels fail the test.
pub(super) fn whole_only(gemm: crate::kernels::table::Bf16GemmFn) -> crate::kernels::table::Bf16Kernels {
    crate::kernels::table::Bf16Kernels {
        gemv: |_, _, _, _, _| panic!("the matrix-vector kernel ran on a path with a whole product"),
        tile: |_, _, _, _, _, _, _| panic!("the blocked GEMM ran instead of the path's own"),
        gemm: Some(gemm),
    }
}

#[test]
fn a_path_with_a_whole_bf16_product_takes_it_at_every_row_count_with_the_same_bits_per_row() {
    use crate::kernels::gemm_bf16::{product, rows};
    use crate::kernels::table::Table;
    let k = whole_only(model_gemm);
    let table = Table { bf16: Some(k), ..crate::kernels::generic::GENERIC };
    let (w_rows, cols) = (72, 100);
    let w: Vec<u16> = sample(w_rows * cols, 8).iter().map(|&v| round_bf16(v)).collect();
    let w = Mat::halves(DType::BF16, &w, w_rows, cols);
    let x = sample(100 * cols, 9);
    // Each activation row alone: what every batch must repeat.
    let alone: Vec<Vec<f32>> = (0..100)
        .map(|t| {
            let mut y = vec![f32::NAN; w_rows];
            product(&table, k, w, &x[t * cols..][..cols], 1, &mut y);
            y
        })
        .collect();
    for n in [1, 2, 5, 15, 16, 17, 31, 33, 100] {
        let mut y = vec![f32::NAN; n * w_rows];
        product(&table, k, w, &x, n, &mut y);
        check_against_reference(w, &x, n, &y, &format!("through product, n {n}"));
        for (t, row) in y.chunks_exact(w_rows).enumerate() {
            let same = row.iter().zip(&alone[t]).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "n {n}: activation row {t} differs from its product alone");
        }
        // A range of weight rows on the calling thread: the same bits.
        let range = 8..w_rows - 3;
        let mut part = vec![f32::NAN; n * range.len()];
        rows(&table, w, range.clone(), &x, n, &mut part);
        for t in 0..n {
            let same = part[t * range.len()..][..range.len()]
                .iter()
                .zip(&y[t * w_rows + range.start..t * w_rows + range.end])
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "n {n}: weight rows {range:?} of activation row {t} differ on the calling thread");
        }
    }
}

#[test]
fn gate_and_up_in_one_pass_are_the_two_products_then_the_activation() {
    use crate::kernels::dispatch::kernels_on;
    use crate::kernels::table::Table;
    let k = whole_only(model_gemm);
    let kern = kernels_on(Table { bf16: Some(k), ..crate::kernels::generic::GENERIC }, QuantActivations::Reduced);
    // Activation rows under a panel, ragged and several panels; weight rows past the tasks'
    // blocks; columns over a chunk.
    for (m, rows, cols) in [(1, 40, 100), (5, 64, 96), (17, 40, 4196), (33, 16, 2048), (100, 72, 100)] {
        let mat = |seed: u64| -> Vec<u16> { sample(rows * cols, seed).iter().map(|&v| round_bf16(v)).collect() };
        let (gate, up) = (mat(1), mat(2));
        let (gate, up) = (Mat::halves(DType::BF16, &gate, rows, cols), Mat::halves(DType::BF16, &up, rows, cols));
        let x = sample(m * cols, 3);
        for act in [Gate::Silu, Gate::Clamped { alpha: 1.702, limit: 7.0 }] {
            let before = FUSED_RUNS.load(std::sync::atomic::Ordering::Relaxed);
            let (mut g, mut scratch) = (vec![f32::NAN; m * rows], vec![f32::NAN; m * rows]);
            kern.gated_matmuls(XRows::Dense(&x), m, gate, up, act, &mut g, &mut scratch);
            assert!(FUSED_RUNS.load(std::sync::atomic::Ordering::Relaxed) > before, "the fused product did not run");
            let (mut g2, mut u2) = (vec![f32::NAN; m * rows], vec![f32::NAN; m * rows]);
            kern.matmuls(&x, m, &mut [(gate, &mut g2[..]), (up, &mut u2[..])]);
            kern.gated(&mut g2, &u2, act);
            let same = g.iter().zip(&g2).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "m {m} rows {rows} cols {cols} {act:?}: fused differs from the products then the activation");
            assert!(g.iter().all(|v| v.is_finite()), "m {m} rows {rows} cols {cols}: every output written");
            // The same rows picked from a larger matrix (in reverse, between others), on this
            // path and on the generic one (which gathers them): the same bits.
            let from: Vec<f32> = (0..2 * m)
                .rev()
                .flat_map(|r| match r % 2 {
                    0 => x[r / 2 * cols..][..cols].to_vec(),
                    _ => vec![f32::NAN; cols],
                })
                .collect();
            let picked: Vec<usize> = (0..m).map(|i| 2 * m - 1 - 2 * i).collect();
            let x_picked = XRows::Picked { from: &from, rows: &picked };
            let generic = Kernels::on(CpuPath::Generic, QuantActivations::Reduced).expect("generic");
            for (what, k) in [("fused", kern), ("generic", generic)] {
                let mut gp = vec![f32::NAN; m * rows];
                k.gated_matmuls(x_picked, m, gate, up, act, &mut gp, &mut scratch);
                let mut gd = vec![f32::NAN; m * rows];
                k.gated_matmuls(XRows::Dense(&x), m, gate, up, act, &mut gd, &mut scratch);
                let same = gp.iter().zip(&gd).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{what} m {m} rows {rows} cols {cols}: picked rows differ from the same rows in place");
            }
        }
    }
}

/// act(x·gateᵀ, x·upᵀ)·downᵀ by `fused_mlp` on kernels `kern`, against `gated_matmuls` then
/// `matmul` on the same kernels: the same bits (checked by the caller), for a dense x.
pub(super) fn mlp_both_ways(kern: Kernels, x: &[f32], m: usize, mats: [Mat<'_>; 3], act: Gate) -> (Vec<f32>, Vec<f32>) {
    let [gate, up, down] = mats;
    let (ffn, hidden) = (gate.rows(), down.rows());
    let mut fused = vec![f32::NAN; m * hidden];
    assert!(kern.fused_mlp(XRows::Dense(x), m, mats, act, &mut fused), "the joined MLP did not run");
    let (mut g, mut u) = (vec![f32::NAN; m * ffn], vec![f32::NAN; m * ffn]);
    kern.gated_matmuls(XRows::Dense(x), m, gate, up, act, &mut g, &mut u);
    let mut apart = vec![f32::NAN; m * hidden];
    kern.matmul(down, &g, m, &mut apart);
    (fused, apart)
}

/// bf16 matrices gate, up [ffn, hidden] and down [hidden, ffn] from seeds 11, 12, 13.
pub(super) fn mlp_mats(ffn: usize, hidden: usize) -> [Vec<u16>; 3] {
    let mat = |len: usize, seed: u64| -> Vec<u16> { sample(len, seed).iter().map(|&v| round_bf16(v)).collect() };
    [mat(ffn * hidden, 11), mat(ffn * hidden, 12), mat(hidden * ffn, 13)]
}

/// `mlp_mats`' matrices bound: gate and up [ffn, hidden], down [hidden, ffn].
fn mlp_bound(stored: &[Vec<u16>; 3], ffn: usize, hidden: usize) -> [Mat<'_>; 3] {
    let [gate, up, down] = stored;
    [
        Mat::halves(DType::BF16, gate, ffn, hidden),
        Mat::halves(DType::BF16, up, ffn, hidden),
        Mat::halves(DType::BF16, down, hidden, ffn),
    ]
}

#[test]
fn an_mlp_whose_intermediate_goes_straight_to_the_down_panels_gives_the_bits_of_the_two_steps() {
    use crate::kernels::dispatch::kernels_on;
    use crate::kernels::table::Table;
    let kern = kernels_on(Table { bf16: Some(whole_only(model_gemm)), ..generic::GENERIC }, QuantActivations::Reduced);
    // Activation rows: under a panel (narrow tiles), ragged, a triple's three panels, several;
    // intermediate widths: blocks past the last whole one, an odd pair count, a chunk's width.
    for (m, ffn, hidden) in [(1, 64, 96), (5, 70, 64), (16, 96, 32), (17, 40, 100), (40, 34, 64), (100, 4200, 64)] {
        let stored = mlp_mats(ffn, hidden);
        let mats = mlp_bound(&stored, ffn, hidden);
        let x = sample(m * hidden, 14);
        for act in [Gate::Silu, Gate::Clamped { alpha: 1.702, limit: 7.0 }] {
            let (fused, apart) = mlp_both_ways(kern, &x, m, mats, act);
            let same = fused.iter().zip(&apart).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "m {m} ffn {ffn} hidden {hidden} {act:?}: joined MLP differs from its two steps");
            assert!(fused.iter().all(|v| v.is_finite()), "m {m} ffn {ffn}: every output written");
        }
    }
    // Not joined: an odd intermediate width (no pairs), a float down projection, float mode.
    let [gate, up, down] = mlp_mats(7, 32);
    let (g, u) = (Mat::halves(DType::BF16, &gate, 7, 32), Mat::halves(DType::BF16, &up, 7, 32));
    let mut y = vec![1.5f32; 32];
    assert!(!kern.fused_mlp(
        XRows::Dense(&sample(32, 15)),
        1,
        [g, u, Mat::halves(DType::BF16, &down, 32, 7)],
        Gate::Silu,
        &mut y
    ));
    assert!(y.iter().all(|&v| v == 1.5), "a refused MLP leaves y untouched");
    let floats = kernels_on(Table { bf16: Some(whole_only(model_gemm)), ..generic::GENERIC }, QuantActivations::Float);
    let stored = mlp_mats(8, 32);
    let mats = mlp_bound(&stored, 8, 32);
    assert!(!floats.fused_mlp(XRows::Dense(&sample(32, 16)), 1, mats, Gate::Silu, &mut y), "float mode");
}

#[cfg(target_arch = "x86_64")]
mod hardware {
    use super::*;
    use crate::kernels::amx::hw::{cpuid_has_amx_bf16, decide, status, Hw};

    #[test]
    fn without_amx_or_permission_the_choice_says_why() {
        let asked = std::cell::Cell::new(false);
        let absent = decide(false, || {
            asked.set(true);
            Ok(())
        });
        assert!(!asked.get(), "no permission is asked for without AMX in cpuid");
        assert!(absent.unwrap_err().contains("no amx_bf16"));
        let refused = decide(true, || Err(std::io::Error::from_raw_os_error(libc::EPERM))).unwrap_err();
        assert!(refused.contains("refused") && refused.contains("os error 1"), "{refused}");
        assert!(decide(true, || Ok(())).is_ok());
        // This CPU: cpuid decides first.
        if !cpuid_has_amx_bf16() {
            assert!(status().as_ref().unwrap_err().contains("no amx_bf16"));
        }
    }

    /// The hardware tiles against the model and the reference. Ignored by default: on a CPU
    /// without AMX it cannot run and must not pass; `scripts/test-all.sh` runs it (`--ignored`)
    /// where /proc/cpuinfo lists amx_bf16, and says SKIPPED elsewhere.
    #[test]
    #[ignore = "needs a CPU with AMX-BF16: cargo test --release -p colibri amx_hardware -- --ignored"]
    fn amx_hardware_kernel_matches_the_model() {
        if let Err(why) = status() {
            panic!("AMX HARDWARE KERNEL NOT RUN: {why}");
        }
        let (mut same, mut total) = (0, 0);
        for (m, n, k) in shapes().chain([(256, 512, 4096), (40, 64, 14336)]) {
            let w: Vec<u16> = sample(n * k, (n * k) as u64).iter().map(|&v| round_bf16(v)).collect();
            let w = Mat::halves(DType::BF16, &w, n, k);
            let x = sample(m * k, (m + k) as u64);
            let hw = run::<Hw>(w, &x, m, 3);
            check_against_reference(w, &x, m, &hw, &format!("hardware m {m} n {n} k {k}"));
            assert_eq!(hw, run::<Hw>(w, &x, m, 1), "hardware m {m} n {n} k {k}: 1 vs 3 threads");
            let model = run::<Model>(w, &x, m, 3);
            same += hw.iter().zip(&model).filter(|(a, b)| a.to_bits() == b.to_bits()).count();
            total += hw.len();
        }
        eprintln!("amx hardware vs model: {same} of {total} outputs bit-identical");
        // Gate and up joined on the tiles: the two products, then the activation.
        for (m, n, k) in [(1, 64, 2048), (40, 96, 1024), (100, 64, 4196)] {
            let mat = |seed: u64| -> Vec<u16> { sample(n * k, seed).iter().map(|&v| round_bf16(v)).collect() };
            let (gate, up) = (mat(5), mat(6));
            let (gate, up) = (Mat::halves(DType::BF16, &gate, n, k), Mat::halves(DType::BF16, &up, n, k));
            let x = sample(m * k, 7);
            let mut acts = Bf16Acts::default();
            acts.round(&x, m, k);
            acts.pack_tiles(generic::transpose);
            let act = Gate::Silu;
            let joined = GatedUp { up, gated: generic::GENERIC.gated, act };
            let mut fused = vec![f32::NAN; m * n];
            gemm::<Hw>(generic::transpose, gate, 0..n, acts.panels(), m, Bf16Out::Rows(&mut fused), true, Some(joined));
            let (mut g, u) = (run::<Hw>(gate, &x, m, 2), run::<Hw>(up, &x, m, 2));
            (generic::GENERIC.gated)(&mut g, &u, act);
            assert!(fused.iter().zip(&g).all(|(a, b)| a.to_bits() == b.to_bits()), "hardware fused m {m} n {n} k {k}");
        }
        // The whole MLP, the intermediate into the down product's panels: the two steps' bits
        // on the hardware, and the model's.
        let on = |gemm| {
            use crate::kernels::dispatch::kernels_on;
            let table = crate::kernels::table::Table { bf16: Some(whole_only(gemm)), ..generic::GENERIC };
            kernels_on(table, QuantActivations::Reduced)
        };
        for (m, ffn, hidden) in [(1, 1024, 2048), (7, 1408, 2048), (40, 96, 1024), (100, 4200, 64)] {
            let stored = mlp_mats(ffn, hidden);
            let mats = mlp_bound(&stored, ffn, hidden);
            let x = sample(m * hidden, 17);
            let (hw, apart) = mlp_both_ways(on(crate::kernels::amx::hw::gemm), &x, m, mats, Gate::Silu);
            let (model, _) = mlp_both_ways(on(model_gemm), &x, m, mats, Gate::Silu);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&hw), bits(&apart), "hardware MLP m {m} ffn {ffn} hidden {hidden}: joined vs two steps");
            assert_eq!(bits(&hw), bits(&model), "hardware MLP m {m} ffn {ffn} hidden {hidden}: hardware vs model");
        }
    }
}
