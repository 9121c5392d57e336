//! Attention's tile products (`attend`): the operands' tile order against index formulas, the
//! products on the tile model against exact sums, and on the hardware against the model
//! (`amx_hardware_attention_matches_the_model`, ignored where the CPU has no AMX).

use super::attend::{pack_keys, pack_values, round_rows, scores, values, Aligned, ROWS, STEP};
use super::model::Model;
use crate::kernels::bf16act::round_bf16;
use crate::kernels::generic;
use crate::kernels::table::{AttendTiles, CachedRows, Table};
use crate::kernels::tests::{sample, FLOAT_TOL};
use std::ops::Range;

/// `Reduced`-mode kernels of the portable path whose attention products run on the tile model:
/// the tiled attention's tests on any CPU (`forward::blocked_attention`, `forward::gqa_attend`).
pub(crate) fn model_kernels() -> crate::kernels::Kernels {
    let attend = Some(AttendTiles { scores: scores::<Model>, values: values::<Model>, pack_values });
    let table = Table { attend, ..generic::GENERIC };
    crate::kernels::dispatch::kernels_on(table, crate::kernels::QuantActivations::Reduced)
}

/// `CachedRows` of `bits`.
fn at(bits: &[u16], stride: usize, live: Range<usize>) -> CachedRows<'_> {
    CachedRows { bits, stride, live }
}

/// n bf16 values of `sample`'s, rounded.
fn bits(n: usize, seed: u64) -> Vec<u16> {
    sample(n, seed).iter().map(|&v| round_bf16(v)).collect()
}

fn wide(b: u16) -> f64 {
    f64::from(f32::from_bits(u32::from(b) << 16))
}

/// The pair of row j's values (2q, 2q + 1) of `rows` (`stride` apart, kw wide) where j is live,
/// else 0, as a tile holds it (the first in the low half).
fn pair(rows: &[u16], stride: usize, kw: usize, live: &Range<usize>, j: usize, q: usize) -> u32 {
    if !live.contains(&j) {
        return 0;
    }
    let at = |d: usize| if d < kw { u32::from(rows[j * stride + d]) } else { 0 };
    at(2 * q) | at(2 * q + 1) << 16
}

/// Live ranges of a 64-position block: whole, ragged both ends, one group missing, none.
const LIVES: [Range<usize>; 5] = [0..64, 3..61, 16..40, 0..1, 5..5];

#[test]
fn keys_land_pair_major_per_16_positions_zero_outside_the_live_rows() {
    // (kw, stride): a 128-wide head in a 4-head row; odd and short widths padded to 32.
    for (kw, stride) in [(128usize, 512usize), (24, 24), (7, 9), (64, 64)] {
        let kwp = kw.div_ceil(STEP) * STEP;
        let ks = 64;
        let rows = bits(ks * stride + kw, kw as u64);
        for live in LIVES {
            let mut buf = Aligned::default();
            let kt = buf.slice_mut::<u32>(ks * kwp / 2);
            kt.fill(0xDEAD_BEEF);
            pack_keys(generic::transpose, at(&rows, stride, live.clone()), kw, kwp, ks, kt);
            for g in 0..ks / ROWS {
                for q in 0..kwp / 2 {
                    for j in 0..ROWS {
                        let want = pair(&rows, stride, kw, &live, g * ROWS + j, q);
                        let got = kt[(g * kwp / 2 + q) * ROWS + j];
                        assert_eq!(got, want, "kw {kw} live {live:?}: group {g} pair {q} position {j}");
                    }
                }
            }
        }
    }
}

#[test]
fn values_land_in_position_pairs_zero_outside_the_live_rows() {
    for (vw, stride) in [(128usize, 512usize), (20, 24), (7, 9)] {
        let vwp = vw.div_ceil(ROWS) * ROWS;
        let ksp = 64;
        let rows = bits(ksp * stride + vw, vw as u64 + 1);
        for live in LIVES {
            let mut buf = Aligned::default();
            let vt = buf.slice_mut::<u32>(ksp / 2 * vwp);
            vt.fill(0xDEAD_BEEF);
            pack_values(at(&rows, stride, live.clone()), vw, vwp, ksp, vt);
            for r in 0..ksp / 2 {
                for d in 0..vwp {
                    let at = |j: usize| if live.contains(&j) && d < vw { u32::from(rows[j * stride + d]) } else { 0 };
                    assert_eq!(
                        vt[r * vwp + d],
                        at(2 * r) | at(2 * r + 1) << 16,
                        "vw {vw} live {live:?}: pair {r} dim {d}"
                    );
                }
            }
        }
    }
}

#[test]
fn rounded_rows_are_zero_past_the_columns_and_the_source_rows() {
    let src = sample(3 * 5, 9);
    let mut dst = vec![0xFFFFu16; 4 * 8];
    round_rows(&src, 5, 8, &mut dst);
    for (i, row) in dst.chunks_exact(8).enumerate() {
        for (c, &b) in row.iter().enumerate() {
            let want = if i < 3 && c < 5 { round_bf16(src[i * 5 + c]) } else { 0 };
            assert_eq!(b, want, "row {i} column {c}");
        }
    }
}

/// Operands of one block: queries [mp, kwp], keys and values of ks positions (all live), the
/// weights [mp, ksp] and a starting accumulator [mp, vwp], all bf16-exact.
struct Block {
    mp: usize,
    kwp: usize,
    ks: usize,
    vwp: usize,
    q: Aligned,
    keys: Vec<u16>,
    kt: Aligned,
    p: Aligned,
    vals: Vec<u16>,
    vt: Aligned,
    acc0: Vec<f32>,
}

impl Block {
    fn new(mp: usize, kwp: usize, ks: usize, vwp: usize, seed: u64) -> Block {
        let ksp = ks.div_ceil(STEP) * STEP;
        let (mut q, mut kt, mut p, mut vt) =
            (Aligned::default(), Aligned::default(), Aligned::default(), Aligned::default());
        q.slice_mut(mp * kwp).copy_from_slice(&bits(mp * kwp, seed));
        let keys = bits(ks * kwp, seed + 1);
        pack_keys(generic::transpose, at(&keys, kwp, 0..ks), kwp, kwp, ks, kt.slice_mut(ks * kwp / 2));
        let w: Vec<u16> = sample(mp * ks, seed + 2).iter().map(|&v| round_bf16(v.abs())).collect();
        round_rows(&w.iter().map(|&b| wide(b) as f32).collect::<Vec<_>>(), ks, ksp, p.slice_mut(mp * ksp));
        let vals = bits(ks * vwp, seed + 3);
        pack_values(at(&vals, vwp, 0..ks), vwp, vwp, ksp, vt.slice_mut(ksp / 2 * vwp));
        Block { mp, kwp, ks, vwp, q, keys, kt, p, vals, vt, acc0: sample(mp * vwp, seed + 4) }
    }

    fn ksp(&self) -> usize {
        self.ks.div_ceil(STEP) * STEP
    }

    /// The scores and the accumulator after the value product, by tiles T.
    fn run<T: super::Tiles>(&self) -> (Vec<f32>, Vec<f32>) {
        let (mut s, mut acc) = (Aligned::default(), Aligned::default());
        let s = s.slice_mut(self.mp * self.ks);
        scores::<T>(self.q.slice(self.mp * self.kwp), self.kwp, self.kt.slice(self.ks * self.kwp / 2), self.ks, s);
        let acc = acc.slice_mut(self.mp * self.vwp);
        acc.copy_from_slice(&self.acc0);
        let ksp = self.ksp();
        values::<T>(self.p.slice(self.mp * ksp), ksp, self.vt.slice(ksp / 2 * self.vwp), self.vwp, acc);
        (s.to_vec(), acc.to_vec())
    }
}

#[test]
fn scores_and_values_on_the_model_are_the_exact_products() {
    // (queries, key width, positions, value width): one tile each; several of each, wider than
    // the four C registers; positions not a multiple of 32 (the weights' last step half zero).
    for (mp, kwp, ks, vwp) in [(16, 32, 16, 16), (48, 128, 64, 128), (32, 576, 48, 512), (16, 64, 80, 80)] {
        let b = Block::new(mp, kwp, ks, vwp, (mp + kwp + ks) as u64);
        let (s, acc) = b.run::<Model>();
        let q = b.q.slice::<u16>(mp * kwp);
        for i in 0..mp {
            for j in 0..ks {
                let terms = (0..kwp).map(|d| wide(q[i * kwp + d]) * wide(b.keys[j * kwp + d]));
                let (want, mag) = terms.fold((0.0, 0.0), |(s, m), t| (s + t, m + t.abs()));
                let err = (f64::from(s[i * ks + j]) - want).abs();
                assert!(err <= FLOAT_TOL * mag + 1e-30, "{mp}×{kwp}×{ks}: s[{i}][{j}] = {} vs {want}", s[i * ks + j]);
            }
        }
        let (ksp, p) = (b.ksp(), b.p.slice::<u16>(mp * b.ksp()));
        for i in 0..mp {
            for d in 0..vwp {
                let a0 = f64::from(b.acc0[i * vwp + d]);
                let terms = (0..ks).map(|j| wide(p[i * ksp + j]) * wide(b.vals[j * vwp + d]));
                let (want, mag) = terms.fold((a0, a0.abs()), |(s, m), t| (s + t, m + t.abs()));
                let err = (f64::from(acc[i * vwp + d]) - want).abs();
                assert!(
                    err <= FLOAT_TOL * mag + 1e-30,
                    "{mp}×{ks}×{vwp}: acc[{i}][{d}] = {} vs {want}",
                    acc[i * vwp + d]
                );
            }
        }
    }
}

/// The hardware tiles against the model, bit for bit. Ignored by default: on a CPU without AMX
/// it cannot run and must not pass; `scripts/test-all.sh` runs it (`--ignored`) where
/// /proc/cpuinfo lists amx_bf16, and says SKIPPED elsewhere.
#[cfg(target_arch = "x86_64")]
#[test]
#[ignore = "needs a CPU with AMX-BF16: cargo test --release -p colibri amx_hardware -- --ignored"]
fn amx_hardware_attention_matches_the_model() {
    use super::hw::{status, Hw};
    if let Err(why) = status() {
        panic!("AMX HARDWARE ATTENTION NOT RUN: {why}");
    }
    for (mp, kwp, ks, vwp) in [(16, 32, 16, 16), (96, 128, 64, 128), (32, 576, 48, 512), (16, 64, 80, 80)] {
        let b = Block::new(mp, kwp, ks, vwp, 7 * (mp + kwp + ks) as u64);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let ((hs, ha), (ms, ma)) = (b.run::<Hw>(), b.run::<Model>());
        assert_eq!(bits(&hs), bits(&ms), "{mp}×{kwp}×{ks}: hardware scores vs the model");
        assert_eq!(bits(&ha), bits(&ma), "{mp}×{ks}×{vwp}: hardware values vs the model");
    }
    // The value rows' packing compiled for AVX-512: the portable one's layout.
    for (vw, stride) in [(128usize, 512usize), (20, 24), (7, 9)] {
        let (vwp, ksp) = (vw.div_ceil(ROWS) * ROWS, 64);
        let rows = bits(ksp * stride + vw, 3);
        for live in LIVES {
            let (mut a, mut b) = (vec![1u32; ksp / 2 * vwp], vec![2u32; ksp / 2 * vwp]);
            pack_values(at(&rows, stride, live.clone()), vw, vwp, ksp, &mut a);
            (super::hw::ATTEND.pack_values)(at(&rows, stride, live.clone()), vw, vwp, ksp, &mut b);
            assert_eq!(a, b, "vw {vw} live {live:?}: packed values");
        }
    }
}
