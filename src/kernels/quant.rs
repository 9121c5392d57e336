//! Block-quantised weight formats: their byte layout, the reference quantisers and
//! dequantisers, and the scalar reference dot products every SIMD path is tested against.
//!
//! Both formats quantise a row-major matrix [rows, cols] (cols a multiple of 32) in blocks of
//! `QK` = 32 consecutive elements of a row, each block with one IEEE binary16 scale `d`. A matrix
//! is stored as two regions, quants first, then scales (struct of arrays, so a block's quants
//! are one aligned 32- or 16-byte load):
//!
//! ```text
//! q8: qs  i8 [rows·cols]            value = d · q,        q ∈ [-127, 127]
//!     d   f16 [rows·cols/32]
//! q4: qs  u8 [rows·cols/2]          value = d · (q − 8),  q ∈ [0, 15]
//!     d   f16 [rows·cols/32]
//! ```
//!
//! q4 packs a block's 32 nibbles into 16 bytes: byte j holds element j in its low nibble and
//! element j+16 in its high nibble. Block b of row r is block index r·cols/32 + b in both regions.

use super::reference::f16_to_f32;

/// Elements per quantisation block (the group size recorded in the tensor table).
pub const QK: usize = 32;

/// Bytes of a q8 matrix with `n` elements (n a multiple of 32).
pub const fn q8_bytes(n: usize) -> usize {
    n + n / QK * 2
}

/// Bytes of a q4 matrix with `n` elements (n a multiple of 32).
pub const fn q4_bytes(n: usize) -> usize {
    n / 2 + n / QK * 2
}

/// A borrowed q8 matrix: quants and per-block f16 scale bits.
#[derive(Clone, Copy, Debug)]
pub struct Q8<'a> {
    pub qs: &'a [i8],
    pub d: &'a [u16],
}

/// A borrowed q4 matrix: packed nibbles and per-block f16 scale bits.
#[derive(Clone, Copy, Debug)]
pub struct Q4<'a> {
    pub qs: &'a [u8],
    pub d: &'a [u16],
}

impl<'a> Q8<'a> {
    /// Split the stored bytes of a matrix with `n` elements into its two regions.
    pub fn from_bytes(bytes: &'a [u8], n: usize) -> Option<Q8<'a>> {
        if n % QK != 0 || bytes.len() != q8_bytes(n) {
            return None;
        }
        let (qs, d) = bytes.split_at(n);
        // SAFETY: i8 and u8 have the same size and any bit pattern is valid.
        let qs = unsafe { std::slice::from_raw_parts(qs.as_ptr().cast::<i8>(), qs.len()) };
        Some(Q8 { qs, d: cast_u16(d)? })
    }
}

impl<'a> Q4<'a> {
    /// Split the stored bytes of a matrix with `n` elements into its two regions.
    pub fn from_bytes(bytes: &'a [u8], n: usize) -> Option<Q4<'a>> {
        if n % QK != 0 || bytes.len() != q4_bytes(n) {
            return None;
        }
        let (qs, d) = bytes.split_at(n / 2);
        Some(Q4 { qs, d: cast_u16(d)? })
    }
}

/// Reinterpret an even-length, 2-aligned byte slice as u16 (None when misaligned).
fn cast_u16(b: &[u8]) -> Option<&[u16]> {
    // SAFETY: u16 is valid for any bit pattern; align_to returns only an aligned middle.
    let (pre, mid, post) = unsafe { b.align_to::<u16>() };
    (pre.is_empty() && post.is_empty()).then_some(mid)
}

fn f32_to_f16_bits(v: f32) -> u16 {
    half::f16::from_f32(v).to_bits()
}

/// Quantise one row (len a multiple of 32) to q8: d = max|x|/127 (rounded to f16),
/// q = round(x/d). Writes len quants and len/32 scales.
pub fn quantize_row_q8(x: &[f32], qs: &mut [i8], d: &mut [u16]) {
    for ((xb, qb), db) in x.chunks_exact(QK).zip(qs.chunks_exact_mut(QK)).zip(d.iter_mut()) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        *db = f32_to_f16_bits(amax / 127.0);
        let dv = f16_to_f32(*db);
        let inv = if dv > 0.0 { 1.0 / dv } else { 0.0 };
        for (q, &v) in qb.iter_mut().zip(xb) {
            *q = (v * inv).round().clamp(-127.0, 127.0) as i8;
        }
    }
}

/// Quantise one row (len a multiple of 32) to q4: the element of largest magnitude, m, maps to
/// −8 exactly (d = −m/8, rounded to f16), so both signs use the full range; q = round(x/d) + 8
/// clamped to [0, 15]. Writes len/2 packed bytes and len/32 scales.
pub fn quantize_row_q4(x: &[f32], qs: &mut [u8], d: &mut [u16]) {
    for ((xb, qb), db) in x.chunks_exact(QK).zip(qs.chunks_exact_mut(QK / 2)).zip(d.iter_mut()) {
        let m = xb.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        *db = f32_to_f16_bits(m / -8.0);
        let dv = f16_to_f32(*db);
        let inv = if dv != 0.0 { 1.0 / dv } else { 0.0 };
        let q = |v: f32| ((v * inv).round() + 8.0).clamp(0.0, 15.0) as u8;
        for j in 0..QK / 2 {
            qb[j] = q(xb[j]) | (q(xb[j + QK / 2]) << 4);
        }
    }
}

/// Dequantise `out.len()` elements of a q8 matrix starting at element `start` (both multiples of 32).
pub fn dequantize_q8(m: Q8<'_>, start: usize, out: &mut [f32]) {
    for (b, ob) in out.chunks_exact_mut(QK).enumerate() {
        let blk = start / QK + b;
        let d = f16_to_f32(m.d[blk]);
        for (o, &q) in ob.iter_mut().zip(&m.qs[blk * QK..(blk + 1) * QK]) {
            *o = d * f32::from(q);
        }
    }
}

/// Dequantise `out.len()` elements of a q4 matrix starting at element `start` (both multiples of 32).
pub fn dequantize_q4(m: Q4<'_>, start: usize, out: &mut [f32]) {
    for (b, ob) in out.chunks_exact_mut(QK).enumerate() {
        let blk = start / QK + b;
        let d = f16_to_f32(m.d[blk]);
        let qb = &m.qs[blk * QK / 2..(blk + 1) * QK / 2];
        for j in 0..QK / 2 {
            ob[j] = d * (f32::from(qb[j] & 15) - 8.0);
            ob[j + QK / 2] = d * (f32::from(qb[j] >> 4) - 8.0);
        }
    }
}

/// Reference W8A16 dot of row `r` (length `cols`) with f32 activations: Σ_b d_b · Σ_i q·x,
/// each block summed in f32 in element order, blocks accumulated in order.
pub fn dot_q8(m: Q8<'_>, r: usize, cols: usize, x: &[f32]) -> f32 {
    let b0 = r * cols / QK;
    let mut acc = 0f32;
    for (b, xb) in x[..cols].chunks_exact(QK).enumerate() {
        let qb = &m.qs[(b0 + b) * QK..(b0 + b + 1) * QK];
        let s: f32 = qb.iter().zip(xb).map(|(&q, &v)| f32::from(q) * v).sum();
        acc += f16_to_f32(m.d[b0 + b]) * s;
    }
    acc
}

/// Reference W4A16 dot of row `r` (length `cols`) with f32 activations.
pub fn dot_q4(m: Q4<'_>, r: usize, cols: usize, x: &[f32]) -> f32 {
    let b0 = r * cols / QK;
    let mut acc = 0f32;
    for (b, xb) in x[..cols].chunks_exact(QK).enumerate() {
        let qb = &m.qs[(b0 + b) * QK / 2..(b0 + b + 1) * QK / 2];
        let mut s = 0f32;
        for j in 0..QK / 2 {
            s += (f32::from(qb[j] & 15) - 8.0) * xb[j] + (f32::from(qb[j] >> 4) - 8.0) * xb[j + QK / 2];
        }
        acc += f16_to_f32(m.d[b0 + b]) * s;
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32 - 0.5) * 2.0
            })
            .collect()
    }

    #[test]
    fn q8_roundtrip_error_is_within_half_a_step() {
        let x = sample(4 * 64, 1);
        let mut buf = vec![0u8; q8_bytes(x.len())];
        let (qs, d) = buf.split_at_mut(x.len());
        let mut dv = vec![0u16; x.len() / QK];
        let qs_i8: &mut [i8] = unsafe { std::slice::from_raw_parts_mut(qs.as_mut_ptr().cast(), qs.len()) };
        quantize_row_q8(&x, qs_i8, &mut dv);
        d.copy_from_slice(unsafe { std::slice::from_raw_parts(dv.as_ptr().cast::<u8>(), dv.len() * 2) });
        let m = Q8::from_bytes(&buf, x.len()).expect("layout");
        let mut y = vec![0f32; x.len()];
        dequantize_q8(m, 0, &mut y);
        for (b, (xb, yb)) in x.chunks(QK).zip(y.chunks(QK)).enumerate() {
            let step = f16_to_f32(m.d[b]);
            for (a, c) in xb.iter().zip(yb) {
                assert!((a - c).abs() <= step * 0.5 + 1e-6, "block {b}: {a} vs {c}, step {step}");
            }
        }
    }

    #[test]
    fn q4_maps_the_extreme_to_minus_eight_and_packs_halves() {
        let mut x = sample(64, 2);
        x[5] = -3.0; // block 0's extreme, negative
        x[40] = 2.5; // block 1's extreme, positive
        let mut qs = vec![0u8; 32];
        let mut d = vec![0u16; 2];
        quantize_row_q4(&x, &mut qs, &mut d);
        assert_eq!(qs[5] & 15, 0, "-3 is the most negative value: q = 0 (= -8 + 8)");
        assert_eq!(qs[16 + 8] & 15, 0, "element 40 is element 8 of block 1: low nibble of its byte 8");
        let m = Q4 { qs: &qs, d: &d };
        let mut y = vec![0f32; 64];
        dequantize_q4(m, 0, &mut y);
        assert!((y[5] + 3.0).abs() < 3.0 * 1e-3);
        assert!((y[40] - 2.5).abs() < 2.5 * 1e-3);
        for (b, (xb, yb)) in x.chunks(QK).zip(y.chunks(QK)).enumerate() {
            let step = f16_to_f32(d[b]).abs();
            for (a, c) in xb.iter().zip(yb) {
                assert!((a - c).abs() <= step * 0.5 + 1e-6, "block {b}: {a} vs {c}");
            }
        }
    }

    #[test]
    fn reference_dots_equal_dot_of_dequantised_rows() {
        let (rows, cols) = (3, 96);
        let w = sample(rows * cols, 3);
        let x = sample(cols, 4);
        let mut q8 = vec![0i8; rows * cols];
        let mut d8 = vec![0u16; rows * cols / QK];
        let mut q4 = vec![0u8; rows * cols / 2];
        let mut d4 = vec![0u16; rows * cols / QK];
        for r in 0..rows {
            let wr = &w[r * cols..(r + 1) * cols];
            quantize_row_q8(wr, &mut q8[r * cols..(r + 1) * cols], &mut d8[r * 3..(r + 1) * 3]);
            quantize_row_q4(wr, &mut q4[r * cols / 2..(r + 1) * cols / 2], &mut d4[r * 3..(r + 1) * 3]);
        }
        let (m8, m4) = (Q8 { qs: &q8, d: &d8 }, Q4 { qs: &q4, d: &d4 });
        for r in 0..rows {
            let mut deq = vec![0f32; cols];
            dequantize_q8(m8, r * cols, &mut deq);
            let want: f64 = deq.iter().zip(&x).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
            assert!((f64::from(dot_q8(m8, r, cols, &x)) - want).abs() < 1e-4);
            dequantize_q4(m4, r * cols, &mut deq);
            let want: f64 = deq.iter().zip(&x).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
            assert!((f64::from(dot_q4(m4, r, cols, &x)) - want).abs() < 1e-4);
        }
    }
}
