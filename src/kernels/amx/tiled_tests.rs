//! The AMX product over bf16r32 weights (`format::tiles`: each 32-row group's column steps as
//! 2 KiB units) against the same values row-major: the same bits at every activation-row count,
//! over row ranges that cut groups, in column chunks, with gate and up joined (a decode step's
//! phased tasks among them) and with the intermediate going to the down panels — on the tile
//! model everywhere, on the hardware where the CPU has AMX.

use super::gemm::gemm_in_chunks;
use super::model::Model;
use super::operand::Weights;
use super::tests::{mlp_both_ways, model_gemm, whole_only};
use super::Tiles;
use crate::format::DType;
use crate::kernels::bf16act::Bf16Acts;
use crate::kernels::dispatch::kernels_on;
use crate::kernels::generic;
use crate::kernels::table::{Bf16GemmFn, Bf16Out, Gate, GatedUp, Table};
use crate::kernels::tests::sample;
use crate::kernels::tiled_tests::both;
use crate::kernels::{Mat, QuantActivations, XRows};
use std::ops::Range;

/// `both`'s bytes bound: [bf16, bf16r32].
fn bind<'a>(bytes: &'a [Vec<u8>; 2], rows: usize, cols: usize) -> [Mat<'a>; 2] {
    let [b, t] = bytes;
    [Mat::new(DType::BF16, rows, cols, b).unwrap(), Mat::new(DType::Bf16R32, rows, cols, t).unwrap()]
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// y [n, range] (or act(gate, up) with `up`) by the AMX product on tiles T, columns in chunks of
/// kc, on a pool of `threads`.
fn product<T: Tiles>(w: Mat<'_>, up: Option<Mat<'_>>, range: Range<usize>, x: &[f32], n: usize, kc: usize) -> Vec<u32> {
    let mut acts = Bf16Acts::default();
    acts.round(x, n, w.cols());
    acts.pack_tiles(generic::transpose);
    let mut y = vec![f32::NAN; n * range.len()];
    let up = up.map(|up| GatedUp { up, gated: generic::GENERIC.gated, act: Gate::Silu });
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
    let out = Bf16Out::Rows(&mut y);
    pool.install(|| gemm_in_chunks::<T>(generic::transpose, w, range, acts.panels(), n, out, true, up, kc));
    assert!(y.iter().all(|v| !v.is_nan()), "every output written");
    bits(&y)
}

/// bf16r32 against bf16 on tiles T: plain products over whole and ragged row ranges and in
/// column chunks, and gate / up joined, at activation-row counts from a decode step's one to
/// several panels (a triple among them).
fn products_match<T: Tiles>(what: &str) {
    for (rows, cols) in [(32, 64), (96, 96), (288, 2048), (64, 4160)] {
        let (wbytes, ubytes) = (both(rows, cols, 1), both(rows, cols, 2));
        let ([wb, wt], [ub, ut]) = (bind(&wbytes, rows, cols), bind(&ubytes, rows, cols));
        for n in [1, 3, 16, 17, 33, 48] {
            let x = sample(n * cols, 3 + n as u64);
            for (range, kc) in
                [(0..rows, cols.next_multiple_of(32)), (5..rows - 3, cols.next_multiple_of(32)), (16..rows, 64)]
            {
                let at = format!("{what} {rows}x{cols} n {n} rows {range:?} kc {kc}");
                let want = product::<T>(wb, None, range.clone(), &x, n, kc);
                assert_eq!(product::<T>(wt, None, range.clone(), &x, n, kc), want, "{at}");
                let want = product::<T>(wb, Some(ub), range.clone(), &x, n, kc);
                assert_eq!(product::<T>(wt, Some(ut), range.clone(), &x, n, kc), want, "{at} with up");
            }
        }
    }
}

/// The whole MLP on a path whose product is `gemm`, bf16r32 against bf16 (and its two steps).
fn mlps_match(gemm: Bf16GemmFn, what: &str) {
    let kern = kernels_on(Table { bf16: Some(whole_only(gemm)), ..generic::GENERIC }, QuantActivations::Reduced);
    for (m, ffn, hidden) in [(1, 64, 96), (1, 1024, 2048), (7, 96, 64), (40, 64, 1024)] {
        let [g, u, d] = [both(ffn, hidden, 11), both(ffn, hidden, 12), both(hidden, ffn, 13)];
        let ([gb, gt], [ub, ut], [db, dt]) = (bind(&g, ffn, hidden), bind(&u, ffn, hidden), bind(&d, hidden, ffn));
        let x = sample(m * hidden, 14);
        let (row_major, _) = mlp_both_ways(kern, &x, m, [gb, ub, db], Gate::Silu);
        let (tiled, apart) = mlp_both_ways(kern, &x, m, [gt, ut, dt], Gate::Silu);
        assert_eq!(bits(&tiled), bits(&row_major), "{what} MLP m {m} ffn {ffn} hidden {hidden}");
        assert_eq!(bits(&tiled), bits(&apart), "{what} MLP m {m} ffn {ffn} hidden {hidden}: joined vs two steps");
        // Picked rows, as the experts read them.
        let picked: Vec<usize> = (0..m).rev().collect();
        let (mut gp, mut scratch) = (vec![f32::NAN; m * ffn], vec![f32::NAN; m * ffn]);
        kern.gated_matmuls(XRows::Picked { from: &x, rows: &picked }, m, gt, ut, Gate::Silu, &mut gp, &mut scratch);
        let reversed: Vec<f32> = picked.iter().flat_map(|&r| x[r * hidden..][..hidden].to_vec()).collect();
        let mut gd = vec![f32::NAN; m * ffn];
        kern.gated_matmuls(XRows::Dense(&reversed), m, gb, ub, Gate::Silu, &mut gd, &mut scratch);
        assert_eq!(bits(&gp), bits(&gd), "{what} picked rows m {m} ffn {ffn}");
    }
}

#[test]
fn bf16r32_weights_give_the_bits_of_bf16_on_the_tile_model() {
    products_match::<Model>("model");
    mlps_match(model_gemm, "model");
}

#[test]
fn bf16r32_tiles_lie_in_place_only_within_a_group() {
    let bytes = both(64, 64, 5);
    let [_, wt] = bind(&bytes, 64, 64);
    let w = Weights::of(wt);
    // Rows r .. r + 16 are one tile (rows 64 bytes apart) from r = 0 to 16 of each group.
    let in_place: Vec<usize> = (0..64).filter(|&r| w.tile_in_place(r)).collect();
    assert_eq!(in_place, (0..=16).chain(32..=48).collect::<Vec<_>>());
}

#[cfg(target_arch = "x86_64")]
#[test]
#[ignore = "needs a CPU with AMX-BF16: cargo test --release -p colibri amx_hardware -- --ignored"]
fn amx_hardware_bf16r32_weights_give_the_bits_of_bf16() {
    if let Err(why) = super::hw::status() {
        panic!("AMX HARDWARE KERNEL NOT RUN: {why}");
    }
    products_match::<super::hw::Hw>("hardware");
    mlps_match(super::hw::gemm, "hardware");
}
