//! Reference encoders of the K-quants: ports of ggml's `quantize_row_q2_K_ref` …
//! `quantize_row_q6_K_ref` and their helpers make_qx_quants, make_q3_quants and
//! make_qkx2_quants (ggml-quants.c), what llama.cpp's quantiser runs without an importance
//! matrix. Same f32 operations in the same order, so the bytes are ggml's when its compiler
//! did not fuse multiply-adds (tests/gguf_blocks.rs counts the blocks that match).

// The loops index several arrays at once as ggml's do, so the port reads line by line
// against ggml-quants.c.
#![allow(clippy::needless_range_loop)]

use super::{h, nearest_int, scale_min_k4, to_h, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, QK_K};

/// Below this magnitude a group is all zero (ggml's GROUP_MAX_EPS).
const EPS: f32 = 1e-15;

/// The value of largest magnitude (first on ties) and that magnitude.
fn signed_max(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            (amax, max) = (v.abs(), v);
        }
    }
    (max, amax)
}

/// Σ w·x·l and Σ w·l² (w = x²) of the quants of x at inverse scale `iscale`, clamped to
/// [−nmax, nmax − 1].
fn qx_sums(x: &[f32], nmax: i32, iscale: f32) -> (f32, f32) {
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for &v in x {
        let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1) as f32;
        let w = v * v;
        sumlx += w * v * l;
        suml2 += w * l * l;
    }
    (sumlx, suml2)
}

fn qx_levels(x: &[f32], nmax: i32, iscale: f32, l: &mut [i8]) {
    for (o, &v) in l.iter_mut().zip(x) {
        *o = (nmax + nearest_int(iscale * v).clamp(-nmax, nmax - 1)) as i8;
    }
}

/// ggml's make_qx_quants with rmse_type 1 and no weights: the scale, levels (offset by nmax).
fn make_qx_quants(x: &[f32], nmax: i32, l: &mut [i8]) -> f32 {
    let (max, amax) = signed_max(x);
    if amax < EPS {
        l.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    qx_levels(x, nmax, iscale, l);
    let (sumlx, suml2) = qx_sums(x, nmax, iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&i| i != 0) {
        let iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = qx_sums(x, nmax, iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            qx_levels(x, nmax, iscale, l);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml's make_q3_quants with do_rmse: the scale, levels (offset by nmax).
fn make_q3_quants(x: &[f32], nmax: i32, l: &mut [i8]) -> f32 {
    let (max, amax) = signed_max(x);
    if amax < EPS {
        l.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (o, &v) in l.iter_mut().zip(x) {
        let q = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *o = q as i8;
        let w = v * v;
        sumlx += w * v * q as f32;
        suml2 += w * q as f32 * q as f32;
    }
    for _ in 0..5 {
        let mut changed = 0;
        for (i, &v) in x.iter().enumerate() {
            let w = v * v;
            let li = f32::from(l[i]);
            let mut slx = sumlx - w * v * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != i32::from(l[i]) {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        (l[i], sumlx, suml2) = (new_l as i8, slx, sl2);
                        changed += 1;
                    }
                }
            }
        }
        if changed == 0 {
            break;
        }
    }
    l.iter_mut().for_each(|v| *v += nmax as i8);
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// The search of ggml's make_qkx2_quants: (rmin, rdelta, nstep, use_mad).
#[derive(Clone, Copy)]
struct Search(f32, f32, i32, bool);

/// Weighted error Σ w·err(scale·l + min − x).
fn qkx_error(x: &[f32], w: &[f32], l: &[u8], scale: f32, min: f32, mad: bool) -> f32 {
    let mut e = 0f32;
    for ((&v, &wi), &li) in x.iter().zip(w).zip(l) {
        let diff = scale * f32::from(li) + min - v;
        e += wi * if mad { diff.abs() } else { diff * diff };
    }
    e
}

/// ggml's make_qkx2_quants: (scale, −min), levels in [0, nmax] into `l`.
fn make_qkx2_quants(x: &[f32], w: &[f32], nmax: i32, l: &mut [u8], s: Search) -> (f32, f32) {
    let (mut min, mut max) = (x[0], x[0]);
    let (mut sum_w, mut sum_x) = (w[0], w[0] * x[0]);
    for (&v, &wi) in x.iter().zip(w).skip(1) {
        min = if v < min { v } else { min };
        max = if v > max { v } else { max };
        sum_w += wi;
        sum_x += wi * v;
    }
    min = if min > 0.0 { 0.0 } else { min };
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    levels_from(x, min, nmax, iscale, l);
    let mut best_error = qkx_error(x, w, l, scale, min, s.3);
    let mut laux = [0u8; 32];
    let laux = &mut laux[..x.len()];
    // As in ggml, a better (scale, min) found changes the min the later steps start from.
    for is in 0..=s.2 {
        let iscale = (s.0 + s.1 * is as f32 + nmax as f32) / (max - min);
        levels_from(x, min, nmax, iscale, laux);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for ((&li, &wi), &v) in laux.iter().zip(w).zip(x) {
            let lf = f32::from(li);
            sum_l += wi * lf;
            sum_l2 += wi * lf * lf;
            sum_xl += wi * lf * v;
        }
        let dd = sum_w * sum_l2 - sum_l * sum_l;
        if dd > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / dd;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / dd;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let cur_error = qkx_error(x, w, laux, this_scale, this_min, s.3);
            if cur_error < best_error {
                l.copy_from_slice(laux);
                (best_error, scale, min) = (cur_error, this_scale, this_min);
            }
        }
    }
    (scale, -min)
}

fn levels_from(x: &[f32], min: f32, nmax: i32, iscale: f32, l: &mut [u8]) {
    for (o, &v) in l.iter_mut().zip(x) {
        *o = nearest_int(iscale * (v - min)).clamp(0, nmax) as u8;
    }
}

/// Pack 2-bit levels: per 128 elements, qs[32·(j/128) + l] holds elements j + l, +32, +64, +96.
fn pack_two_bit(l: &[i8; QK_K], qs: &mut [u8; 64]) {
    for j in (0..QK_K).step_by(128) {
        for i in 0..32 {
            let v = |k: usize| l[j + i + 32 * k] as u8;
            qs[j / 4 + i] = v(0) | (v(1) << 2) | (v(2) << 4) | (v(3) << 6);
        }
    }
}

pub fn q2_k(x: &[f32]) -> BlockQ2K {
    let mut b = BlockQ2K::ZERO;
    let mut l = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 16], [0f32; 16]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..16 {
        let xs = &x[16 * j..16 * j + 16];
        let w: Vec<f32> = xs.iter().map(|v| v.abs()).collect();
        (scales[j], mins[j]) = make_qkx2_quants(xs, &w, 3, &mut l[16 * j..16 * j + 16], Search(-0.5, 0.1, 15, true));
        max_scale = if scales[j] > max_scale { scales[j] } else { max_scale };
        max_min = if mins[j] > max_min { mins[j] } else { max_min };
    }
    if max_scale > 0.0 {
        let iscale = 15.0 / max_scale;
        for j in 0..16 {
            b.scales[j] = nearest_int(iscale * scales[j]) as u8;
        }
        b.d = to_h(max_scale / 15.0);
    } else {
        b.d = to_h(0.0);
    }
    if max_min > 0.0 {
        let iscale = 15.0 / max_min;
        for j in 0..16 {
            b.scales[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
        }
        b.dmin = to_h(max_min / 15.0);
    } else {
        b.dmin = to_h(0.0);
    }
    for j in 0..16 {
        let d = h(b.d) * f32::from(b.scales[j] & 0xF);
        if d == 0.0 {
            continue;
        }
        let dm = h(b.dmin) * f32::from(b.scales[j] >> 4);
        for i in 16 * j..16 * j + 16 {
            l[i] = nearest_int((x[i] + dm) / d).clamp(0, 3) as u8;
        }
    }
    pack_two_bit(&l.map(|v| v as i8), &mut b.qs);
    b
}

/// The scales `make` finds for the 16 groups of 16 (levels into `l`), the one of largest
/// magnitude (the first, on ties) and that magnitude.
fn group_scales(x: &[f32], l: &mut [i8; QK_K], make: impl Fn(&[f32], &mut [i8]) -> f32) -> ([f32; 16], f32, f32) {
    let mut scales = [0f32; 16];
    let (mut max_scale, mut amax) = (0f32, 0f32);
    for j in 0..16 {
        scales[j] = make(&x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
        if scales[j].abs() > amax {
            (amax, max_scale) = (scales[j].abs(), scales[j]);
        }
    }
    (scales, max_scale, amax)
}

pub fn q3_k(x: &[f32]) -> BlockQ3K {
    let mut b = BlockQ3K::ZERO;
    let mut l = [0i8; QK_K];
    let (scales, max_scale, _) = group_scales(x, &mut l, |xs, ls| make_q3_quants(xs, 4, ls));
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        for j in 0..16 {
            let v = ((nearest_int(iscale * scales[j]) as i8).clamp(-32, 31) + 32) as u8;
            if j < 8 {
                b.scales[j] = v & 0xF;
            } else {
                b.scales[j - 8] |= (v & 0xF) << 4;
            }
            b.scales[j % 4 + 8] |= (v >> 4) << (2 * (j / 4));
        }
        b.d = to_h(1.0 / iscale);
    } else {
        b.d = to_h(0.0);
    }
    let sc = super::q3k_scales(&b.scales);
    for j in 0..16 {
        let d = h(b.d) * f32::from(sc[j] - 32);
        if d == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            l[i] = (nearest_int(x[i] / d).clamp(-4, 3) + 4) as i8;
        }
    }
    // The high bit of element j goes to bit j / 32 of hmask[j % 32].
    for (j, v) in l.iter_mut().enumerate() {
        if *v > 3 {
            b.hmask[j % 32] |= 1 << (j / 32);
            *v -= 4;
        }
    }
    pack_two_bit(&l, &mut b.qs);
    b
}

/// The 8 (scale, min) pairs of q4_k / q5_k: make_qkx2_quants per 32 with weights av_x + |x|,
/// then 6-bit scales and mins under f16 super-scales. Returns the levels before requantising.
fn k_scales(x: &[f32], nmax: i32, s: Search, l: &mut [u8; QK_K]) -> ([u8; 12], [u8; 2], [u8; 2]) {
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let sum_x2 = xs.iter().fold(0f32, |a, v| a + v * v);
        let av_x = (sum_x2 / 32.0).sqrt();
        let w: Vec<f32> = xs.iter().map(|v| av_x + v.abs()).collect();
        (scales[j], mins[j]) = make_qkx2_quants(xs, &w, nmax, &mut l[32 * j..32 * j + 32], s);
        max_scale = if scales[j] > max_scale { scales[j] } else { max_scale };
        max_min = if mins[j] > max_min { mins[j] } else { max_min };
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut packed = [0u8; 12];
    for j in 0..8 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            (packed[j], packed[j + 4]) = (ls, lm);
        } else {
            packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    (packed, to_h(max_scale / 63.0), to_h(max_min / 63.0))
}

/// Requantise x against the stored scales and mins of a q4_k / q5_k block (levels ≤ nmax).
fn k_levels(x: &[f32], packed: &[u8; 12], d: [u8; 2], dmin: [u8; 2], nmax: i32, l: &mut [u8; QK_K]) {
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, packed);
        let d = h(d) * f32::from(sc);
        if d == 0.0 {
            continue;
        }
        let dm = h(dmin) * f32::from(m);
        for i in 32 * j..32 * j + 32 {
            l[i] = nearest_int((x[i] + dm) / d).clamp(0, nmax) as u8;
        }
    }
}

pub fn q4_k(x: &[f32]) -> BlockQ4K {
    let mut l = [0u8; QK_K];
    let (scales, d, dmin) = k_scales(x, 15, Search(-1.0, 0.1, 20, false), &mut l);
    k_levels(x, &scales, d, dmin, 15, &mut l);
    let mut b = BlockQ4K { d, dmin, scales, ..BlockQ4K::ZERO };
    for j in (0..QK_K).step_by(64) {
        for i in 0..32 {
            b.qs[j / 2 + i] = l[j + i] | (l[j + i + 32] << 4);
        }
    }
    b
}

pub fn q5_k(x: &[f32]) -> BlockQ5K {
    let mut l = [0u8; QK_K];
    let (scales, d, dmin) = k_scales(x, 31, Search(-0.5, 0.1, 15, false), &mut l);
    k_levels(x, &scales, d, dmin, 31, &mut l);
    let mut b = BlockQ5K { d, dmin, scales, ..BlockQ5K::ZERO };
    for (n, j) in (0..QK_K).step_by(64).enumerate() {
        for i in 0..32 {
            let (l1, l2) = (l[j + i], l[j + i + 32]);
            b.qh[i] |= ((l1 >> 4) << (2 * n)) | ((l2 >> 4) << (2 * n + 1));
            b.qs[j / 2 + i] = (l1 & 0xF) | ((l2 & 0xF) << 4);
        }
    }
    b
}

pub fn q6_k(x: &[f32]) -> BlockQ6K {
    let mut b = BlockQ6K::ZERO;
    let mut l = [0i8; QK_K];
    let (scales, max_scale, max_abs) = group_scales(x, &mut l, |xs, ls| make_qx_quants(xs, 32, ls));
    if max_abs < EPS {
        return b;
    }
    let iscale = -128.0 / max_scale;
    b.d = to_h(1.0 / iscale);
    for ib in 0..16 {
        b.scales[ib] = nearest_int(iscale * scales[ib]).min(127) as i8 as u8;
    }
    for j in 0..16 {
        let d = h(b.d) * f32::from(b.scales[j] as i8);
        if d == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            l[i] = (nearest_int(x[i] / d).clamp(-32, 31) + 32) as i8;
        }
    }
    for (n, j) in (0..QK_K).step_by(128).enumerate() {
        for i in 0..32 {
            let v = |k: usize| l[j + i + 32 * k] as u8;
            b.ql[64 * n + i] = (v(0) & 0xF) | ((v(2) & 0xF) << 4);
            b.ql[64 * n + i + 32] = (v(1) & 0xF) | ((v(3) & 0xF) << 4);
            b.qh[32 * n + i] = (v(0) >> 4) | ((v(1) >> 4) << 2) | ((v(2) >> 4) << 4) | ((v(3) >> 4) << 6);
        }
    }
    b
}
