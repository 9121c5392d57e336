//! Int8-activation kernels of the interleaved K-quants (q4_kr8 / q6_kr8 / iq4_xsr8 / iq4_nlr8, `format::kr8`),
//! AVX2 and AVX-512 VNNI from one body each: a 32-byte load of a unit holds 4 quant bytes of each
//! of 8 rows, one broadcast of 4 activation bytes meets all 8 (`vpmaddubsw` + `vpmaddwd` on AVX2,
//! one `vpdpbusd` on VNNI), and the 8 rows' sums live in the 8 i32 lanes of one vector: no
//! horizontal adds anywhere. One pass over a group's units serves up to 4 (AVX2) or 8 (VNNI)
//! activation rows, so prefill unpacks each weight once per pass, and stores its results straight
//! into the product's output rows; the unit some way ahead is prefetched
//! (`tune::kr8_prefetch_units`).
//!
//! * q4_kr8, per sub-block pair p: 8 loads, low nibbles (sub-block 2p) and high (2p + 1) against
//!   their activation bytes (VNNI takes the high nibbles where they are, 16 × their value, and
//!   shifts the i32 sum back: one mask per load instead of a shift and a mask); the 8 rows' 6-bit
//!   scales and mins come out of the three interleaved scale words with ggml's word shuffle, 8
//!   rows at once, then one byte shuffle per sub-block; the activations' dx·Σqx (the mins'
//!   term) is taken once per product (`QuantizedActs::scaled_sums`).
//! * q6_kr8, per sub-block s = 4n + 2J + P (n: half of the block, J: ql's low or high nibbles,
//!   P: which ql chunk and qh bit pair): its ql and qh chunks make the 6-bit quants (the unit's
//!   scales and d first, then each half's qh and ql side by side: the kernel reads the unit front
//!   to back); each half of 16 sums apart, the offset −32 taken off as 32 · (the activations'
//!   half sum), then multiplied by the 8 rows' i8 scales in i32 (exact: |Σ| < 2²⁵), and
//!   scaled and accumulated in the reference's order. With 1–2 activation rows each ql / qh chunk
//!   is loaded once for the two sub-blocks it serves and the 8 sums wait for the block's end;
//!   from 4 rows on each sub-block's sum is accumulated as soon as it is complete, so only one
//!   sum per row is live (all 8 per row spilled out of the registers at 8 rows: 1.45× slower).
//! * iq4_xsr8, per sub-block: 4 loads, each one's low and high nibbles turned into levels by one
//!   `vpshufb` each (`Dot::LEVELS`: + 128 on VNNI, whose sum starts at −128 · the activations'
//!   block sum; signed on AVX2, where `vpmaddubsw` takes |K| and x with K's sign); the 8 rows'
//!   d·(ls − 32) of the 8 sub-blocks come out of the unit's scale words once per block.
//!   iq4_nlr8 (one 32-column block and its 8 f16 d per unit) is one such sub-block, scaled by d.
//!
//! From 16 activation rows on (prefill; on the Emerald Rapids VM from one, `tune::kr8_two_groups_from`)
//! the VNNI kernels take two adjacent row groups per pass in the two halves of a zmm
//! (`lanes::Zmm`): each activation broadcast and float scaling step then meets 16 rows, and on a
//! core with 512-bit datapaths (the development VM reports AMD family 1Ah, Zen 5) each
//! `vpdpbusd` does twice the multiply-adds; where a zmm runs as two halves (Zen 4) only the
//! instruction count halves. Such a pass reads two streams, one per group, and its prefetch
//! past the groups' end goes to the next pass's groups (`units`).
//!
//! The integer sums are the reference's (`kernels::kr8ref`) and every float operation is the
//! reference's in the same order on each lane: the results are its bits, on every set and width.

use super::super::actq::QuantizedActs;
use super::super::generic;
use super::super::mat::Mat;
use super::lanes::{Avx2, Dot, Lanes, Vnni, Ymm, Zmm};
use super::qgroup::by_groups;
use crate::format::blocks::QK;
use crate::format::ggml::QK_K;
use crate::format::kr8::{
    IQ4NL_QUANTS, IQ4_QUANTS, IQ4_SCALES_H, IQ4_SCALES_L, Q6_D, Q6_HALF, Q6_QUANTS, Q6_SCALES, ROWS,
};
use core::arch::x86_64::*;
use std::ops::Range;

/// Unit bytes (8 blocks) of q4_kr8, q6_kr8, iq4_xsr8 and iq4_nlr8.
const Q4K_UNIT: usize = 1152;
const Q6K_UNIT: usize = 1680;
const IQ4XS_UNIT: usize = 1088;
const IQ4NL_UNIT: usize = 144;

/// One int8 activation row: quants, block scales and dx·Σqx (per 32; q4_k), integer sums
/// (`Sums`: 32 · half sums per 16, q6_k; Σqx per 32, iq4_xs).
#[derive(Clone, Copy)]
struct Acts {
    q: *const i8,
    d: *const f32,
    dsums: *const f32,
    isums: *const i32,
}

/// The activation sums a dtype's kernel reads besides quants and scales.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sums {
    /// dx·Σqx per block of 32 (q4_k's mins).
    Scaled,
    /// 32 · Σqx per 16 (q6_k's offset).
    Halves,
    /// Σqx per block of 32 (the iq4 levels' offset).
    Blocks,
}

/// A kernel: out[t·stride + 8·i + j] = row 8·i + j of the groups whose first units are at g[i]
/// (i < the width's groups; nb units each) · activation row x[t], x.len() activation rows (the
/// kernel's T); out must be valid for those writes.
type Kern = unsafe fn(g: [*const u8; 2], nb: usize, x: &[Acts], out: *mut f32, stride: usize);

/// Prefetch the `bytes` bytes at p (a hint: never faults, any address is fine).
#[inline(always)]
unsafe fn prefetch(p: *const u8, bytes: usize) {
    for line in (0..bytes).step_by(64) {
        // SAFETY: a prefetch reads nothing architecturally.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(line).cast()) };
    }
}

/// The units of block b (of nb) of each group of the width, and the unit `ahead` units on
/// prefetched: past a group's end, the unit as far into the group the next pass reads in its
/// place (the groups of a pass are adjacent: with two, the first one's overflow is the second's
/// own stream).
#[inline(always)]
unsafe fn units<L: Lanes>(g: [*const u8; 2], b: usize, nb: usize, unit: usize, ahead: usize) -> [*const u8; 2] {
    let u = g.map(|p| p.wrapping_add(b * unit));
    if ahead > 0 {
        let skip = if b + ahead >= nb { (L::GROUPS - 1) * nb * unit } else { 0 };
        for p in &u[..L::GROUPS] {
            // SAFETY: a prefetch hint.
            unsafe { prefetch(p.wrapping_add(ahead * unit + skip), unit) };
        }
    }
    u
}

/// q4_kr8 for T activation rows (see `Kern`).
#[inline(always)]
unsafe fn q4k<L: Lanes, D: Dot<L>, const T: usize>(
    g: [*const u8; 2],
    nb: usize,
    xs: &[Acts],
    out: *mut f32,
    stride: usize,
) {
    // SAFETY: the caller's contract (`Kern`): nb whole units at each g, nb blocks per activation
    // row.
    unsafe {
        let x: [Acts; T] = std::array::from_fn(|k| xs[k]);
        let ahead = super::tune::kr8_prefetch_units(T);
        let m4 = L::splat8(15);
        let (m1, m2, m3) = (L::splat32(0x3f3f_3f3f), L::splat32(0x0f0f_0f0f), L::splat32(0x0303_0303));
        let mut acc = [L::zero_f(); T];
        for b in 0..nb {
            let u = units::<L>(g, b, nb, Q4K_UNIT, ahead);
            let d = L::load_f16(u, 0);
            let dmin = L::load_f16(u, 16);
            let (u0, u1, u2) = (L::load(u, 32), L::load(u, 64), L::load(u, 96));
            // ggml's scale_min_k4 on 8 rows at once: byte k of lane r of sc[0] is row r's scale
            // of sub-block k, of sc[1] sub-block 4 + k; mn likewise.
            let high0 = L::slli32::<4>(L::and(L::srli32::<6>(u0), m3));
            let high1 = L::slli32::<4>(L::and(L::srli32::<6>(u1), m3));
            let sc = [L::and(u0, m1), L::or(L::and(u2, m2), high0)];
            let mn = [L::and(u1, m1), L::or(L::and(L::srli32::<4>(u2), m2), high1)];
            for p in 0..4 {
                // Sums of sub-blocks 2p (low nibbles) and 2p + 1 (high), per activation row.
                let (mut s0, mut s1) = ([L::zero(); T], [L::zero(); T]);
                for c in 0..8 {
                    let q = L::load(u, 128 + 32 * (8 * p + c));
                    let (lo, hi) = (L::and(q, m4), D::high(q));
                    for t in 0..T {
                        let xb = x[t].q.add(QK_K * b + 64 * p + 4 * c);
                        s0[t] = D::dot(s0[t], lo, L::bcast4(xb));
                        s1[t] = D::dot(s1[t], hi, L::bcast4(xb.add(QK)));
                    }
                }
                for s in s1.iter_mut() {
                    *s = D::high_sum(*s);
                }
                for (hf, s) in [s0, s1].iter().enumerate() {
                    let j = 2 * p + hf;
                    // d·scale and dmin·min of sub-block j, 8 rows per group.
                    let dsc = L::mul(d, L::byte_ps(sc[j / 4], j % 4));
                    let dmn = L::mul(dmin, L::byte_ps(mn[j / 4], j % 4));
                    let k = 8 * b + j;
                    scale_add::<L, T>(&mut acc, dsc, &x, k, *s);
                    for (a, xt) in acc.iter_mut().zip(&x) {
                        *a = L::fnmadd(dmn, L::splat_f(*xt.dsums.add(k)), *a);
                    }
                }
            }
        }
        L::store(acc, out, stride)
    }
}

/// q6_kr8 for T activation rows (see `Kern`).
#[inline(always)]
unsafe fn q6k<L: Lanes, D: Dot<L>, const T: usize>(
    g: [*const u8; 2],
    nb: usize,
    xs: &[Acts],
    out: *mut f32,
    stride: usize,
) {
    // SAFETY: the caller's contract (`Kern`): nb whole units at each g, nb blocks per activation
    // row.
    unsafe {
        let x: [Acts; T] = std::array::from_fn(|k| xs[k]);
        let ahead = super::tune::kr8_prefetch_units(T);
        let mut acc = [L::zero_f(); T];
        for b in 0..nb {
            let u = units::<L>(g, b, nb, Q6K_UNIT, ahead);
            let d = L::load_f16(u, Q6_D);
            // The sums S of sub-blocks s = 4n + 2J + P (see `kr8ref::dot_i8_q6k`), each scaled and
            // accumulated in the reference's order.
            if T <= 2 {
                // Few rows: the 8 sums fit in registers, and each ql / qh chunk is loaded once
                // for the two sub-blocks it serves.
                let mut sums = [[L::zero(); 8]; T];
                for n in 0..2 {
                    q6_pair::<L, D, T, 0>(u, b, n, &x, &mut sums);
                    q6_pair::<L, D, T, 1>(u, b, n, &x, &mut sums);
                }
                for (s, k) in (0..8).zip(8 * b..) {
                    scale_add::<L, T>(&mut acc, d, &x, k, std::array::from_fn(|t| sums[t][s]));
                }
                continue;
            }
            // More rows: each sub-block's sum is accumulated as soon as it is complete, so only T
            // sums are live (eight per row spilled out of the registers at T = 8).
            for n in 0..2 {
                let s = 4 * n;
                scale_add::<L, T>(&mut acc, d, &x, 8 * b + s, q6_sub::<L, D, T, 0, 0>(u, b, n, &x));
                scale_add::<L, T>(&mut acc, d, &x, 8 * b + s + 1, q6_sub::<L, D, T, 1, 0>(u, b, n, &x));
                scale_add::<L, T>(&mut acc, d, &x, 8 * b + s + 2, q6_sub::<L, D, T, 0, 1>(u, b, n, &x));
                scale_add::<L, T>(&mut acc, d, &x, 8 * b + s + 3, q6_sub::<L, D, T, 1, 1>(u, b, n, &x));
            }
        }
        L::store(acc, out, stride)
    }
}

/// acc[t] += S[t] · d · (activation row t's scale of block k), the reference's float steps (every
/// kr8 body's: d is the block's, or the sub-block's d·scale, per row of the groups).
#[inline(always)]
unsafe fn scale_add<L: Lanes, const T: usize>(acc: &mut [L::F; T], d: L::F, x: &[Acts; T], k: usize, sums: [L::I; T]) {
    // SAFETY: the caller's contract (`Kern`): every activation row has block scale k.
    unsafe {
        for ((a, xt), &v) in acc.iter_mut().zip(x).zip(&sums) {
            *a = L::fmadd(L::cvt(v), L::mul(d, L::splat_f(*xt.d.add(k))), *a);
        }
    }
}

/// The integer sums S of sub-block 4n + 2J + P of the q6_kr8 units at u (block b), per activation
/// row: ql's low (J = 0) or high (J = 1) nibbles with qh's bits 2P + 4J; per half of 16, Σ q·qx
/// over 4 chunks started at the offset's −32 · (the activations' half sum), times the 8 rows' i8
/// scales (exact in i32: |S| < 2²⁵).
#[inline(always)]
unsafe fn q6_sub<L: Lanes, D: Dot<L>, const T: usize, const P: usize, const J: usize>(
    u: [*const u8; 2],
    b: usize,
    n: usize,
    x: &[Acts; T],
) -> [L::I; T] {
    // SAFETY: the caller's contract (`Kern`): the units' chunks and the activation bytes exist.
    unsafe {
        let (m4, m30) = (L::splat8(15), L::splat8(0x30));
        let qh = Q6_QUANTS + Q6_HALF * n;
        let ql = qh + 256 + 32 * 8 * P;
        let s = 4 * n + 2 * J + P;
        let mut sums = [L::zero(); T];
        for h in 0..2 {
            let mut a: [L::I; T] = std::array::from_fn(|t| L::splat32(-*x[t].isums.add(16 * b + 2 * s + h)));
            for c in 4 * h..4 * h + 4 {
                let l = L::load(u, ql + 32 * c);
                let hb = L::load(u, qh + 32 * c);
                // The nibble and qh's bits 2P + 4J moved to bits 4..6 of each byte.
                let lo = if J == 0 { L::and(l, m4) } else { L::and(L::srli16::<4>(l), m4) };
                let hi = match (P, J) {
                    (0, 0) => L::slli16::<4>(hb),
                    (0, _) => hb,
                    (_, 0) => L::slli16::<2>(hb),
                    _ => L::srli16::<2>(hb),
                };
                let q = L::or(lo, L::and(hi, m30));
                for t in 0..T {
                    a[t] = D::dot(a[t], q, L::bcast4(x[t].q.add(QK_K * b + 4 * c + QK * s)));
                }
            }
            let k = L::load_i8(u, Q6_SCALES + 8 * (8 * n + 2 * (2 * J + P) + h));
            for t in 0..T {
                sums[t] = L::add32(sums[t], L::mullo32(a[t], k));
            }
        }
        sums
    }
}

/// Adds to sums[t][s] the integer sums of sub-blocks s = 4n + P (ql's low nibbles, qh bits
/// 2P) and 4n + P + 2 (high nibbles, bits 2P + 4) of the q6_kr8 units at u (block b): per half
/// of 16, Σ q·qx over 4 chunks (each ql and qh chunk loaded once for both sub-blocks) started at
/// the offset's −32 · (the activations' half sum), times the 8 rows' i8 scales.
#[inline(always)]
unsafe fn q6_pair<L: Lanes, D: Dot<L>, const T: usize, const P: usize>(
    u: [*const u8; 2],
    b: usize,
    n: usize,
    x: &[Acts; T],
    sums: &mut [[L::I; 8]; T],
) {
    // SAFETY: the caller's contract (`Kern`): the units' chunks and the activation bytes exist.
    unsafe {
        let (m4, m30) = (L::splat8(15), L::splat8(0x30));
        let qh = Q6_QUANTS + Q6_HALF * n;
        let ql = qh + 256 + 32 * 8 * P;
        let sub = [4 * n + P, 4 * n + P + 2];
        for h in 0..2 {
            // Each sum starts at the offset's term −32 · (the activations' half sum).
            let a0 = |t: usize, j: usize| L::splat32(-*x[t].isums.add(16 * b + 2 * sub[j] + h));
            let mut a: [[L::I; 2]; T] = std::array::from_fn(|t| [a0(t, 0), a0(t, 1)]);
            for c in 4 * h..4 * h + 4 {
                let l = L::load(u, ql + 32 * c);
                let hb = L::load(u, qh + 32 * c);
                // qh's bits 2P and 2P + 4 moved to bits 4..6 of each byte.
                let (h0, h1) = if P == 0 { (L::slli16::<4>(hb), hb) } else { (L::slli16::<2>(hb), L::srli16::<2>(hb)) };
                let q = [L::or(L::and(l, m4), L::and(h0, m30)), L::or(L::and(L::srli16::<4>(l), m4), L::and(h1, m30))];
                for t in 0..T {
                    let xb = x[t].q.add(QK_K * b + 4 * c);
                    for j in 0..2 {
                        a[t][j] = D::dot(a[t][j], q[j], L::bcast4(xb.add(QK * sub[j])));
                    }
                }
            }
            for j in 0..2 {
                let s = sub[j];
                let k = L::load_i8(u, Q6_SCALES + 8 * (8 * n + 2 * (s % 4) + h));
                for t in 0..T {
                    sums[t][s] = L::add32(sums[t][s], L::mullo32(a[t][j], k));
                }
            }
        }
    }
}

/// iq4_xsr8 for T activation rows (see `Kern`).
#[inline(always)]
unsafe fn iq4xs<L: Lanes, D: Dot<L>, const T: usize>(
    g: [*const u8; 2],
    nb: usize,
    xs: &[Acts],
    out: *mut f32,
    stride: usize,
) {
    // SAFETY: the caller's contract (`Kern`): nb whole units at each g, nb blocks per activation
    // row.
    unsafe {
        let x: [Acts; T] = std::array::from_fn(|k| xs[k]);
        let ahead = super::tune::kr8_prefetch_units(T);
        let table = L::table16(D::LEVELS.as_ptr());
        let mut acc = [L::zero_f(); T];
        for b in 0..nb {
            let u = units::<L>(g, b, nb, IQ4XS_UNIT, ahead);
            let d = L::load_f16(u, 0);
            let (sh, sl) = (L::load_u16(u, IQ4_SCALES_H), L::load(u, IQ4_SCALES_L));
            for j in 0..8 {
                let s = iq4_block::<L, D, T>(u, IQ4_QUANTS + 128 * j, table, &x, 8 * b + j);
                // d·(ls − 32) of the 8 rows per group: ls's low nibble at bits 4j of the rows'
                // u32, its high 2 bits at bits 2j of their u16.
                let low = L::and(L::srl32(sl, 4 * j as i32), L::splat32(15));
                let high = L::slli32::<4>(L::and(L::srl32(sh, 2 * j as i32), L::splat32(3)));
                let dsc = L::mul(d, L::cvt(L::add32(L::or(low, high), L::splat32(-32))));
                scale_add::<L, T>(&mut acc, dsc, &x, 8 * b + j, s);
            }
        }
        L::store(acc, out, stride)
    }
}

/// iq4_nlr8 for T activation rows (see `Kern`): one 32-column block per unit.
#[inline(always)]
unsafe fn iq4nl<L: Lanes, D: Dot<L>, const T: usize>(
    g: [*const u8; 2],
    nb: usize,
    xs: &[Acts],
    out: *mut f32,
    stride: usize,
) {
    // SAFETY: the caller's contract (`Kern`): nb whole units at each g, nb blocks per activation
    // row.
    unsafe {
        let x: [Acts; T] = std::array::from_fn(|k| xs[k]);
        let ahead = super::tune::kr8_prefetch_units(T) * (IQ4XS_UNIT / IQ4NL_UNIT);
        let table = L::table16(D::LEVELS.as_ptr());
        let mut acc = [L::zero_f(); T];
        for b in 0..nb {
            let u = units::<L>(g, b, nb, IQ4NL_UNIT, ahead);
            let s = iq4_block::<L, D, T>(u, IQ4NL_QUANTS, table, &x, b);
            let d = L::load_f16(u, 0);
            scale_add::<L, T>(&mut acc, d, &x, b, s);
        }
        L::store(acc, out, stride)
    }
}

/// Σ K[q]·qx of one 32-element iq4 block of the units at u, per activation row: its 4 quant
/// chunks from unit byte `at`, each one's low and high nibbles turned into levels by one
/// `vpshufb`, against activation block k; the sums start at −offset · Σqx (`Dot::LEVELS`).
#[inline(always)]
unsafe fn iq4_block<L: Lanes, D: Dot<L>, const T: usize>(
    u: [*const u8; 2],
    at: usize,
    table: L::I,
    x: &[Acts; T],
    k: usize,
) -> [L::I; T] {
    // SAFETY: the caller's contract (`Kern`): the units' chunks and the activation bytes exist.
    unsafe {
        let m4 = L::splat8(15);
        let mut s: [L::I; T] = std::array::from_fn(|t| L::splat32(-D::LEVEL_OFFSET * *x[t].isums.add(k)));
        for c in 0..4 {
            let q = L::load(u, at + 32 * c);
            let lo = L::shuffle8(table, L::and(q, m4));
            let hi = L::shuffle8(table, L::and(L::srli16::<4>(q), m4));
            for t in 0..T {
                let xb = x[t].q.add(QK * k + 4 * c);
                s[t] = D::dot_levels(s[t], lo, L::bcast4(xb));
                s[t] = D::dot_levels(s[t], hi, L::bcast4(xb.add(QK / 2)));
            }
        }
        s
    }
}

/// The kernels of `body` on one instruction set and width, for 1, 2, 4 (and 8) activation rows.
macro_rules! kernels {
    ($name:ident, $features:literal, $lanes:ty, $dot:ty, $body:ident) => {
        #[target_feature(enable = $features)]
        unsafe fn $name<const T: usize>(g: [*const u8; 2], nb: usize, x: &[Acts], out: *mut f32, stride: usize) {
            // SAFETY: the caller's contract (`Kern`); reached only through a table whose CPU has
            // these features.
            unsafe { $body::<$lanes, $dot, T>(g, nb, x, out, stride) }
        }
    };
}

/// A dtype's product on AVX2 (`$name`, one row group per pass, 1, 2 or 4 activation rows) from
/// its kernel body.
macro_rules! avx2_product {
    ($(#[$doc:meta])* $name:ident, $body:ident, $sums:expr) => {
        $(#[$doc])*
        pub fn $name(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
            kernels!(one, "avx2,fma,f16c", Ymm, Avx2, $body);
            drive(w, rows, xa, n, out, Kerns { one: &[one::<1>, one::<2>, one::<4>], two: &[] }, $sums)
        }
    };
}

/// A dtype's product on AVX-512 VNNI (`$name`: one row group per pass in a ymm, or two in a zmm;
/// 1, 2, 4 or 8 activation rows) from its kernel body.
macro_rules! vnni_product {
    ($(#[$doc:meta])* $name:ident, $body:ident, $sums:expr) => {
        $(#[$doc])*
        pub fn $name(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
            kernels!(one, "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c", Ymm, Vnni, $body);
            kernels!(two, "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c", Zmm, Vnni, $body);
            let one: &[Kern] = &[one::<1>, one::<2>, one::<4>, one::<8>];
            let two: &[Kern] = &[two::<1>, two::<2>, two::<4>, two::<8>];
            drive(w, rows, xa, n, out, Kerns { one, two }, $sums)
        }
    };
}

/// The kernels of a dtype on one instruction set: `one[l]` takes one row group and 2^l
/// activation rows per pass, `two[l]` (if any) two adjacent groups.
struct Kerns<'a> {
    one: &'a [Kern],
    two: &'a [Kern],
}

/// out[t·rows.len() + i] = w[rows.start + i] · activation row t by `kerns` (two groups per pass
/// from `tune::kr8_two_groups_from` activation rows on, where there are two; the ragged ends of `rows`:
/// the reference).
fn drive(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32], kerns: Kerns<'_>, sums: Sums) {
    let cols = w.cols();
    let (nb, unit) = (cols / w.dtype().block(), w.dtype().info().block_bytes as usize * ROWS);
    assert!(xa.cols == cols && xa.qs.len() >= n * cols && xa.sums.len() >= n * cols / QK);
    assert!(out.len() >= n * rows.len() && rows.end <= w.rows() && w.bytes().len() >= w.rows() / ROWS * nb * unit);
    // q6_k's offset meets the activations per half block of 16, q4_k's min and the iq4 levels'
    // offset per block.
    let (isums, per, dsums): (&[i32], usize, &[f32]) = match sums {
        Sums::Halves => (xa.half_sums(), 16, &[]),
        Sums::Blocks => (&xa.sums, QK, &[]),
        Sums::Scaled => (&[], QK, xa.scaled_sums()),
    };
    let acts: Vec<Acts> = (0..n)
        .map(|t| {
            let (q, d) = xa.row(t);
            let isums = isums.as_ptr().wrapping_add(t * cols / per);
            let dsums = dsums.as_ptr().wrapping_add(t * cols / QK);
            Acts { q: q.as_ptr(), d: d.as_ptr(), dsums, isums }
        })
        .collect();
    let len = rows.len();
    let step = if n >= super::tune::kr8_two_groups_from() && !kerns.two.is_empty() { 2 } else { 1 };
    by_groups(
        rows,
        n,
        step,
        out,
        |r, o| generic::gemv_i8(w, r, xa, n, o),
        |grp, k, at, out, tokens| {
            let base = w.bytes().as_ptr();
            let g = [base.wrapping_add(grp * nb * unit), base.wrapping_add((grp + 1) * nb * unit)];
            let table = if k == 2 { kerns.two } else { kerns.one };
            let mut t = tokens.start;
            while t < tokens.end {
                let level = (tokens.end - t).min(1 << (table.len() - 1)).ilog2() as usize;
                let take = 1 << level;
                // The pass's results go straight to out: rows t.. of it, k·8 values each from at.
                assert!(out.len() >= (t + take - 1) * len + at + k * ROWS);
                // SAFETY: the kernels' table only on CPUs with their features; the k groups from
                // grp lie inside the matrix (asserted above; by_groups passes whole groups),
                // every activation row holds nb blocks, and the last write ends inside `out`
                // (asserted).
                unsafe { table[level](g, nb, &acts[t..t + take], out[t * len + at..].as_mut_ptr(), len) };
                t += take;
            }
        },
    );
}

avx2_product!(
    /// q4_kr8 · int8 activations (see `table::GemvI8Fn`), AVX2.
    gemv_i8_q4k, q4k, Sums::Scaled
);
avx2_product!(
    /// q6_kr8 · int8 activations, AVX2.
    gemv_i8_q6k, q6k, Sums::Halves
);
avx2_product!(
    /// iq4_xsr8 · int8 activations, AVX2.
    gemv_i8_iq4xs, iq4xs, Sums::Blocks
);
avx2_product!(
    /// iq4_nlr8 · int8 activations, AVX2.
    gemv_i8_iq4nl, iq4nl, Sums::Blocks
);
vnni_product!(
    /// q4_kr8 · int8 activations, AVX-512 VNNI (eight activation rows per pass: 32 registers).
    gemv_i8_q4k_vnni, q4k, Sums::Scaled
);
vnni_product!(
    /// q6_kr8 · int8 activations, AVX-512 VNNI.
    gemv_i8_q6k_vnni, q6k, Sums::Halves
);
vnni_product!(
    /// iq4_xsr8 · int8 activations, AVX-512 VNNI.
    gemv_i8_iq4xs_vnni, iq4xs, Sums::Blocks
);
vnni_product!(
    /// iq4_nlr8 · int8 activations, AVX-512 VNNI.
    gemv_i8_iq4nl_vnni, iq4nl, Sums::Blocks
);
