//! Reference encoders of GGUF's 32-element block types and of iq4_xs: ports of ggml's
//! `quantize_row_q4_0_ref` … `quantize_row_q5_1_ref` and of `quantize_row_iq4_nl_impl` as
//! llama.cpp's quantiser runs it without an importance matrix (ggml-quants.c). Same operations
//! in the same order, so the bytes are ggml's (tests/gguf_blocks.rs compares them with
//! llama.cpp's on the committed vectors).

// The loops index several arrays at once as ggml's do, so the port reads line by line
// against ggml-quants.c.
#![allow(clippy::needless_range_loop)]

use super::{nearest_int, to_h, BlockIq4Nl, BlockIq4Xs, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, KVALUES_IQ4NL};

/// The value of largest magnitude (the first one, on ties) and that magnitude.
fn signed_max(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            (amax, max) = (v.abs(), v);
        }
    }
    (max, amax)
}

/// (min, max) of x.
fn range(x: &[f32]) -> (f32, f32) {
    x.iter().fold((f32::MAX, -f32::MAX), |(lo, hi), &v| (if v < lo { v } else { lo }, if v > hi { v } else { hi }))
}

/// Pack 32 quants (< 32) as 16 nibble bytes and the 32 fifth bits.
fn pack(q: &[u8; 32]) -> ([u8; 16], u32) {
    let (mut qs, mut qh) = ([0u8; 16], 0u32);
    for j in 0..16 {
        qs[j] = (q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4);
        qh |= u32::from((q[j] & 0x10) >> 4) << j;
        qh |= u32::from((q[j + 16] & 0x10) >> 4) << (j + 16);
    }
    (qs, qh)
}

/// Symmetric quants: d = max / −(levels / 2), q = min(levels − 1, trunc(x / d + levels / 2 + ½)).
fn symmetric(x: &[f32], half: f32) -> (f32, [u8; 32]) {
    let (max, _) = signed_max(x);
    let d = max / -half;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let top = (2.0 * half - 1.0) as i8;
    let mut q = [0u8; 32];
    for (o, &v) in q.iter_mut().zip(x) {
        *o = ((v * id + (half + 0.5)) as i8).min(top) as u8;
    }
    (d, q)
}

/// Quants with a min: d = (max − min) / (levels − 1), q = trunc((x − min) / d + ½).
fn affine(x: &[f32], levels: f32, cap: u8) -> (f32, f32, [u8; 32]) {
    let (min, max) = range(x);
    let d = (max - min) / levels;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut q = [0u8; 32];
    for (o, &v) in q.iter_mut().zip(x) {
        *o = (((v - min) * id + 0.5) as i8 as u8).min(cap);
    }
    (d, min, q)
}

pub fn q4_0(x: &[f32]) -> BlockQ4_0 {
    let (d, q) = symmetric(x, 8.0);
    BlockQ4_0 { d: to_h(d), qs: pack(&q).0 }
}

pub fn q4_1(x: &[f32]) -> BlockQ4_1 {
    let (d, min, q) = affine(x, 15.0, 15);
    BlockQ4_1 { d: to_h(d), m: to_h(min), qs: pack(&q).0 }
}

pub fn q5_0(x: &[f32]) -> BlockQ5_0 {
    let (d, q) = symmetric(x, 16.0);
    let (qs, qh) = pack(&q);
    BlockQ5_0 { d: to_h(d), qh: qh.to_le_bytes(), qs }
}

pub fn q5_1(x: &[f32]) -> BlockQ5_1 {
    // ggml casts to uint8_t without a cap here; the quants never exceed 31 for finite x.
    let (d, min, q) = affine(x, 31.0, u8::MAX);
    let (qs, qh) = pack(&q);
    BlockQ5_1 { d: to_h(d), m: to_h(min), qh: qh.to_le_bytes(), qs }
}

pub fn iq4_nl(x: &[f32]) -> BlockIq4Nl {
    let mut b = BlockIq4Nl::ZERO;
    let mut scales_h = 0u16;
    iq4_impl(x, &mut b.d, &mut b.qs, &mut scales_h, &mut []);
    b
}

pub fn iq4_xs(x: &[f32]) -> BlockIq4Xs {
    let mut b = BlockIq4Xs::ZERO;
    let mut scales_h = 0u16;
    iq4_impl(x, &mut b.d, &mut b.qs, &mut scales_h, &mut b.scales_l);
    b.scales_h = scales_h.to_le_bytes();
    b
}

/// ggml's best_index_int8 over the iq4 levels: the index of the level nearest x (the lower on
/// a tie... as ggml decides it).
fn best_index(x: f32) -> u8 {
    let v = |i: usize| f32::from(KVALUES_IQ4NL[i]);
    if x <= v(0) {
        return 0;
    }
    if x >= v(15) {
        return 15;
    }
    let (mut ml, mut mu) = (0, 15);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < v(mav) {
            mu = mav
        } else {
            ml = mav
        }
    }
    if x - v(mu - 1) < v(mu) - x {
        (mu - 1) as u8
    } else {
        mu as u8
    }
}

/// Σ w·q·x and Σ w·q² (w = x²) of x quantised with inverse scale `id`; the indices into `l`
/// when given.
fn iq4_sums(x: &[f32], id: f32, mut l: Option<&mut [u8]>) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for (j, &v) in x.iter().enumerate() {
        let i = best_index(id * v);
        if let Some(l) = l.as_deref_mut() {
            l[j] = i;
        }
        let (q, w) = (f32::from(KVALUES_IQ4NL[usize::from(i)]), v * v);
        sumqx += w * q * v;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// The best scale of one 32-element block (ggml's search with ntry = 7), its quants into `l`.
fn iq4_block_scale(xb: &[f32], l: &mut [u8]) -> f32 {
    const NTRY: i32 = 7;
    let (max, amax) = signed_max(xb);
    if amax < 1e-15 {
        return 0.0;
    }
    let k0 = f32::from(KVALUES_IQ4NL[0]);
    let (sumqx, sumq2) = iq4_sums(xb, 1.0 / (-max / k0), Some(l));
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let id = (itry + i32::from(KVALUES_IQ4NL[0])) as f32 / max;
        let (sumqx, sumq2) = iq4_sums(xb, id, None);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// ggml's quantize_row_iq4_nl_impl without importance weights, ntry = 7 (as llama.cpp's
/// quantize_iq4_nl / quantize_iq4_xs call it): one 32-element block (iq4_nl, `scales_l`
/// empty) or a 256-element super-block of 8 with 6-bit sub-scales (iq4_xs).
fn iq4_impl(x: &[f32], dh: &mut [u8; 2], q4: &mut [u8], scales_h: &mut u16, scales_l: &mut [u8]) {
    let nb = x.len() / 32;
    let mut l = [0u8; 256];
    let mut scales = [0f32; 8];
    let (mut max_scale, mut amax_scale) = (0f32, 0f32);
    for ib in 0..nb {
        let d = iq4_block_scale(&x[32 * ib..32 * ib + 32], &mut l[32 * ib..32 * ib + 32]);
        scales[ib] = d;
        if d.abs() > amax_scale {
            (amax_scale, max_scale) = (d.abs(), d);
        }
    }
    if nb > 1 {
        *scales_h = 0;
        let d = -max_scale / 32.0;
        *dh = to_h(d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for ib in 0..nb {
            let li = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * li as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            for (o, &v) in l[32 * ib..32 * ib + 32].iter_mut().zip(&x[32 * ib..]) {
                *o = best_index(idl * v);
            }
            let li = (li + 32) as u8;
            if ib % 2 == 0 {
                scales_l[ib / 2] = li & 0xF;
            } else {
                scales_l[ib / 2] |= (li & 0xF) << 4;
            }
            *scales_h |= u16::from(li >> 4) << (2 * (ib % 8));
        }
    } else {
        *dh = to_h(scales[0]);
        let id = if scales[0] != 0.0 { 1.0 / scales[0] } else { 0.0 };
        for (o, &v) in l.iter_mut().zip(x) {
            *o = best_index(id * v);
        }
    }
    for i in 0..nb {
        for j in 0..16 {
            q4[16 * i + j] = l[32 * i + j] | (l[32 * i + 16 + j] << 4);
        }
    }
}
