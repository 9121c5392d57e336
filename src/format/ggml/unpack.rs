//! Each GGUF block type's bytes in one integer form, per 32-element sub-block: element i is
//! (d · k[i/16]) · q[i], plus dm · m[i/16] for the types with a min. These are ports of ggml's
//! `dequantize_row_*` (ggml-quants.c) split at the point where ggml turns integers into floats,
//! so `Block::dequantize` (that expression, in ggml's operation order) is bit for bit ggml's
//! and gguf-py's dequantisation, and the int8-activation kernels meet the same integers.

use super::BlockQ6K;
use super::{h, iq4xs_scale, q3k_scales, scale_min_k4, KVALUES_IQ4NL};
use super::{
    BlockIq4Nl, BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1,
};

/// One 32-element sub-block in integer form: w[i] = (d · k[i/16]) · q[i] (+ dm · m[i/16] when
/// `has_min`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Unpacked {
    /// Quants, signed and offset-free: q4_0's nibble − 8, q6_k's 6 bits − 32, K[nibble], …
    pub q: [i8; 32],
    /// Integer scale of each half of 16 (1 for the 32-element types without sub-scales).
    pub k: [i32; 2],
    /// Integer min of each half (0 without a min).
    pub m: [i32; 2],
    /// Float scale.
    pub d: f32,
    /// Float multiplier of the min: q4_1 / q5_1's m, minus the K-quants' dmin.
    pub dm: f32,
    pub has_min: bool,
}

impl Unpacked {
    /// out[..32] = the sub-block's values, in ggml's operation order.
    #[inline]
    pub fn values(&self, out: &mut [f32]) {
        for (i, o) in out[..32].iter_mut().enumerate() {
            let v = (self.d * self.k[i / 16] as f32) * f32::from(self.q[i]);
            *o = if self.has_min { v + self.dm * self.m[i / 16] as f32 } else { v };
        }
    }

    fn set(&mut self, d: f32, k: [i32; 2], min: Option<(f32, [i32; 2])>) {
        (self.d, self.k) = (d, k);
        (self.has_min, self.dm, self.m) = match min {
            Some((dm, m)) => (true, dm, m),
            None => (false, 0.0, [0, 0]),
        };
    }
}

/// Nibbles of a 16-byte run mapped by `f`: element j low nibble of byte j, j + 16 its high one.
#[inline]
fn nibbles(qs: &[u8], q: &mut [i8; 32], f: impl Fn(u8) -> i8) {
    for (j, &v) in qs[..16].iter().enumerate() {
        q[j] = f(v & 0xF);
        q[j + 16] = f(v >> 4);
    }
}

/// The 5-bit quants of q5_0 / q5_1: nibble | (bit j of qh) << 4.
#[inline]
fn five_bit(qh: [u8; 4], qs: &[u8; 16], q: &mut [i8; 32], offset: i8) {
    let qh = u32::from_le_bytes(qh);
    nibbles(qs, q, |v| v as i8);
    for (j, v) in q.iter_mut().enumerate() {
        *v = (*v | (((qh >> j) & 1) << 4) as i8) - offset;
    }
}

pub fn q4_0(b: &BlockQ4_0, _sub: usize, u: &mut Unpacked) {
    nibbles(&b.qs, &mut u.q, |v| v as i8 - 8);
    u.set(h(b.d), [1, 1], None);
}

pub fn q4_1(b: &BlockQ4_1, _sub: usize, u: &mut Unpacked) {
    nibbles(&b.qs, &mut u.q, |v| v as i8);
    u.set(h(b.d), [1, 1], Some((h(b.m), [1, 1])));
}

pub fn q5_0(b: &BlockQ5_0, _sub: usize, u: &mut Unpacked) {
    five_bit(b.qh, &b.qs, &mut u.q, 16);
    u.set(h(b.d), [1, 1], None);
}

pub fn q5_1(b: &BlockQ5_1, _sub: usize, u: &mut Unpacked) {
    five_bit(b.qh, &b.qs, &mut u.q, 0);
    u.set(h(b.d), [1, 1], Some((h(b.m), [1, 1])));
}

pub fn iq4_nl(b: &BlockIq4Nl, _sub: usize, u: &mut Unpacked) {
    nibbles(&b.qs, &mut u.q, |v| KVALUES_IQ4NL[usize::from(v)]);
    u.set(h(b.d), [1, 1], None);
}

/// The 2-bit quants of q2_k / q3_k's 32-element sub-block s: per 128 elements (n = s / 4) the
/// bytes qs[32n ..], bits 2·(s % 4).
#[inline]
fn two_bit(qs: &[u8; 64], s: usize, q: &mut [i8; 32]) {
    let (n, shift) = (s / 4, 2 * (s % 4));
    for (v, &b) in q.iter_mut().zip(&qs[32 * n..32 * n + 32]) {
        *v = ((b >> shift) & 3) as i8;
    }
}

pub fn q2_k(b: &BlockQ2K, s: usize, u: &mut Unpacked) {
    two_bit(&b.qs, s, &mut u.q);
    let (s0, s1) = (b.scales[2 * s], b.scales[2 * s + 1]);
    let k = [i32::from(s0 & 0xF), i32::from(s1 & 0xF)];
    u.set(h(b.d), k, Some((-h(b.dmin), [i32::from(s0 >> 4), i32::from(s1 >> 4)])));
}

pub fn q3_k(b: &BlockQ3K, s: usize, u: &mut Unpacked) {
    two_bit(&b.qs, s, &mut u.q);
    // The third bit: bit s of hmask[l] (set: q, clear: q − 4).
    for (v, &hb) in u.q.iter_mut().zip(&b.hmask) {
        *v -= if hb & (1 << s) != 0 { 0 } else { 4 };
    }
    let sc = q3k_scales(&b.scales);
    u.set(h(b.d), [i32::from(sc[2 * s]) - 32, i32::from(sc[2 * s + 1]) - 32], None);
}

/// Sub-block j of q4_k / q5_k: the low (j even) or high nibbles of qs[32·(j/2) ..].
#[inline]
fn k_nibbles(qs: &[u8; 128], j: usize, q: &mut [i8; 32]) {
    let shift = 4 * (j % 2);
    for (v, &b) in q.iter_mut().zip(&qs[32 * (j / 2)..32 * (j / 2) + 32]) {
        *v = ((b >> shift) & 0xF) as i8;
    }
}

pub fn q4_k(b: &BlockQ4K, j: usize, u: &mut Unpacked) {
    k_nibbles(&b.qs, j, &mut u.q);
    let (sc, m) = scale_min_k4(j, &b.scales);
    let (sc, m) = (i32::from(sc), i32::from(m));
    u.set(h(b.d), [sc, sc], Some((-h(b.dmin), [m, m])));
}

pub fn q5_k(b: &BlockQ5K, j: usize, u: &mut Unpacked) {
    k_nibbles(&b.qs, j, &mut u.q);
    for (v, &hb) in u.q.iter_mut().zip(&b.qh) {
        *v |= (((hb >> j) & 1) << 4) as i8;
    }
    let (sc, m) = scale_min_k4(j, &b.scales);
    let (sc, m) = (i32::from(sc), i32::from(m));
    u.set(h(b.d), [sc, sc], Some((-h(b.dmin), [m, m])));
}

/// Sub-block s = 4n + i: low (i < 2) or high nibbles of ql[64n + 32·(i % 2) ..], bits 2i of
/// qh[32n ..], scales sc[8n + 2i], sc[8n + 2i + 1].
pub fn q6_k(b: &BlockQ6K, s: usize, u: &mut Unpacked) {
    let (n, i) = (s / 4, s % 4);
    let ql = &b.ql[64 * n + 32 * (i % 2)..64 * n + 32 * (i % 2) + 32];
    let qh = &b.qh[32 * n..32 * n + 32];
    let shift = 4 * (i / 2);
    for ((v, &l), &hb) in u.q.iter_mut().zip(ql).zip(qh) {
        *v = (((l >> shift) & 0xF) | (((hb >> (2 * i)) & 3) << 4)) as i8 - 32;
    }
    let k = [i32::from(b.scales[8 * n + 2 * i] as i8), i32::from(b.scales[8 * n + 2 * i + 1] as i8)];
    u.set(h(b.d), k, None);
}

pub fn iq4_xs(b: &BlockIq4Xs, ib: usize, u: &mut Unpacked) {
    nibbles(&b.qs[16 * ib..16 * ib + 16], &mut u.q, |v| KVALUES_IQ4NL[usize::from(v)]);
    let ls = iq4xs_scale(b, ib) - 32;
    u.set(h(b.d), [ls, ls], None);
}
