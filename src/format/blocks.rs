//! The block-quantised layouts of the format: what the bytes of a q8, q4, q8r8 or q4r8 matrix
//! are, the reference quantisers that make them and the dequantisers that read them back. This
//! is the one description of those layouts; the kernels import it (the shape of ggml-common.h).
//!
//! Every block dtype quantises a row-major matrix [rows, cols] (cols a multiple of 32) in blocks
//! of `QK` = 32 consecutive elements of a row, each block with one IEEE binary16 scale d. A
//! matrix (a tensor, or one expert of a stack) is self-contained and stored as two regions,
//! all the quants first, then all the scales (struct of arrays: a block's quants are one aligned
//! 32- or 16-byte load):
//!
//! ```text
//! q8: qs  i8 [rows·cols]      value = d · q        q ∈ [-127, 127] (−128 is accepted on read)
//!     d   f16 [rows·cols/32]  bytes = n + n/16 for n = rows·cols          (8.5 bits per weight)
//! q4: qs  u8 [rows·cols/2]    value = d · (q − 8)  q ∈ [0, 15]
//!     d   f16 [rows·cols/32]  bytes = n/2 + n/16                          (4.5 bits per weight)
//! ```
//!
//! q4 packs a block's 32 nibbles into 16 bytes: byte j holds element j in its low nibble and
//! element j+16 in its high nibble. In the row-major layouts (q8, q4) block b of row r is block
//! r·cols/32 + b in both regions.
//!
//! q8r8 and q4r8 hold the same blocks with the same bytes in 8-row interleaved groups (rows a
//! multiple of `GROUP_ROWS` = 8), so that one 32-byte load holds `CHUNK` = 4 bytes of each of
//! 8 consecutive rows: for row group g (rows 8g .. 8g+8) and block column b, the 8 blocks form one
//! unit of 8·bb bytes (bb = 32 for q8, 16 for q4) at unit index g·nb + b (nb = cols/32), in which
//! byte i of row 8g + j sits at ((i / 4)·8 + j)·4 + i % 4; the unit's 8 scales are scales
//! (g·nb + b)·8 + j. A matrix-vector kernel then meets 8 rows with one activation broadcast and
//! gets their 8 sums in the 8 lanes of one vector, in row order, with no horizontal adds.
//!
//! GGUF's block types are kept as GGUF stores them (ggml-common.h): whole blocks one after
//! another, each its scale and quants together.
//!
//! ```text
//! q8_0: per block of 32: d f16, qs i8 [32]    value = d · q        (34 bytes, 8.5 bits per weight)
//! ```

/// Elements per quantisation block (the group size recorded in the tensor table).
pub const QK: usize = 32;
/// Rows per group of the interleaved layouts.
pub const GROUP_ROWS: usize = 8;
/// Bytes of one row per step of the interleaved layouts.
pub const CHUNK: usize = 4;

/// Where a block matrix keeps block b of row r.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Row-major: block r·nb + b in both regions, its bytes contiguous.
    Rows,
    /// Groups of 8 rows interleaved in 4-byte chunks (see the module comment); `nb` blocks per
    /// row.
    Interleaved { nb: usize },
}

impl Layout {
    /// Position in the scale region of row-major block `blk` (= r·nb + b).
    #[inline]
    pub fn scale_pos(self, blk: usize) -> usize {
        match self {
            Layout::Rows => blk,
            Layout::Interleaved { nb } => {
                let (r, b) = (blk / nb, blk % nb);
                ((r / GROUP_ROWS) * nb + b) * GROUP_ROWS + r % GROUP_ROWS
            }
        }
    }

    /// Position in the quant region of byte `i` of row-major block `blk`, blocks of `bb` bytes.
    #[inline]
    pub fn byte_pos(self, blk: usize, i: usize, bb: usize) -> usize {
        match self {
            Layout::Rows => blk * bb + i,
            Layout::Interleaved { nb } => {
                let (r, b) = (blk / nb, blk % nb);
                let unit = (r / GROUP_ROWS) * nb + b;
                unit * GROUP_ROWS * bb + ((i / CHUNK) * GROUP_ROWS + r % GROUP_ROWS) * CHUNK + i % CHUNK
            }
        }
    }

    /// The layout of a [rows, cols] matrix stored interleaved, or None when rows are not whole
    /// groups or cols not whole blocks.
    pub fn interleaved(rows: usize, cols: usize) -> Option<Layout> {
        (rows.is_multiple_of(GROUP_ROWS) && cols.is_multiple_of(QK) && cols > 0)
            .then_some(Layout::Interleaved { nb: cols / QK })
    }
}

/// Bytes of a q8 matrix with `n` elements (n a multiple of 32).
pub const fn q8_bytes(n: usize) -> usize {
    n + n / QK * 2
}

/// Bytes of a q4 matrix with `n` elements (n a multiple of 32).
pub const fn q4_bytes(n: usize) -> usize {
    n / 2 + n / QK * 2
}

/// A borrowed q8 matrix: quants and per-block f16 scale bits, in `layout`.
#[derive(Clone, Copy, Debug)]
pub struct Q8<'a> {
    pub qs: &'a [i8],
    pub d: &'a [u16],
    pub layout: Layout,
}

/// A borrowed q4 matrix: packed nibbles and per-block f16 scale bits, in `layout`.
#[derive(Clone, Copy, Debug)]
pub struct Q4<'a> {
    pub qs: &'a [u8],
    pub d: &'a [u16],
    pub layout: Layout,
}

impl<'a> Q8<'a> {
    /// Split the stored bytes of a matrix with `n` elements into its two regions (None when the
    /// length, the groups or the scale alignment do not fit).
    pub fn from_bytes(bytes: &'a [u8], n: usize, layout: Layout) -> Option<Q8<'a>> {
        if !n.is_multiple_of(QK) || bytes.len() != q8_bytes(n) || !whole_groups(n, layout) {
            return None;
        }
        let (qs, d) = bytes.split_at(n);
        // SAFETY: i8 and u8 have the same size and any bit pattern is valid.
        let qs = unsafe { std::slice::from_raw_parts(qs.as_ptr().cast::<i8>(), qs.len()) };
        Some(Q8 { qs, d: cast_u16(d)?, layout })
    }

    /// Scale of row-major block `blk` (= r·nb + b).
    #[inline]
    pub fn scale(&self, blk: usize) -> f32 {
        f16_to_f32(self.d[self.layout.scale_pos(blk)])
    }

    /// Quants of row-major block `blk`.
    #[inline]
    pub fn block(&self, blk: usize) -> [i8; QK] {
        match self.layout {
            Layout::Rows => self.qs[blk * QK..(blk + 1) * QK].try_into().expect("32 quants"),
            l => std::array::from_fn(|i| self.qs[l.byte_pos(blk, i, QK)]),
        }
    }
}

impl<'a> Q4<'a> {
    /// Split the stored bytes of a matrix with `n` elements into its two regions.
    pub fn from_bytes(bytes: &'a [u8], n: usize, layout: Layout) -> Option<Q4<'a>> {
        if !n.is_multiple_of(QK) || bytes.len() != q4_bytes(n) || !whole_groups(n, layout) {
            return None;
        }
        let (qs, d) = bytes.split_at(n / 2);
        Some(Q4 { qs, d: cast_u16(d)?, layout })
    }

    /// Scale of row-major block `blk` (= r·nb + b).
    #[inline]
    pub fn scale(&self, blk: usize) -> f32 {
        f16_to_f32(self.d[self.layout.scale_pos(blk)])
    }

    /// Packed nibbles of row-major block `blk`.
    #[inline]
    pub fn block(&self, blk: usize) -> [u8; QK / 2] {
        match self.layout {
            Layout::Rows => self.qs[blk * QK / 2..(blk + 1) * QK / 2].try_into().expect("16 bytes"),
            l => std::array::from_fn(|i| self.qs[l.byte_pos(blk, i, QK / 2)]),
        }
    }
}

/// True when an interleaved layout's rows (n / (32·nb) of them) are whole groups of 8.
fn whole_groups(n: usize, layout: Layout) -> bool {
    match layout {
        Layout::Rows => true,
        Layout::Interleaved { nb } => nb > 0 && n.is_multiple_of(nb * QK * GROUP_ROWS),
    }
}

/// Reinterpret an even-length, 2-aligned byte slice as u16 (None when misaligned).
fn cast_u16(b: &[u8]) -> Option<&[u16]> {
    // SAFETY: u16 is valid for any bit pattern; align_to returns only an aligned middle.
    let (pre, mid, post) = unsafe { b.align_to::<u16>() };
    (pre.is_empty() && post.is_empty()).then_some(mid)
}

/// binary16 bits → f32 (exact).
#[inline]
pub fn f16_to_f32(b: u16) -> f32 {
    half::f16::from_bits(b).to_f32()
}

fn f32_to_f16_bits(v: f32) -> u16 {
    half::f16::from_f32(v).to_bits()
}

/// Reorder the quant region `src` of a row-major block matrix (blocks of `bb` bytes, `nb` per
/// row, rows a multiple of 8) into the interleaved layout in `dst` (same length).
pub fn interleave_quants(src: &[u8], bb: usize, nb: usize, dst: &mut [u8]) {
    assert!(src.len() == dst.len() && src.len().is_multiple_of(bb * nb * GROUP_ROWS));
    let layout = Layout::Interleaved { nb };
    for (blk, block) in src.chunks_exact(bb).enumerate() {
        for (i, &v) in block.iter().enumerate() {
            dst[layout.byte_pos(blk, i, bb)] = v;
        }
    }
}

/// Reorder the scale region `src` of a row-major block matrix (`nb` blocks per row, rows a
/// multiple of 8) into the interleaved layout in `dst` (same length).
pub fn interleave_scales(src: &[u16], nb: usize, dst: &mut [u16]) {
    assert!(src.len() == dst.len() && src.len().is_multiple_of(nb * GROUP_ROWS));
    let layout = Layout::Interleaved { nb };
    for (blk, &d) in src.iter().enumerate() {
        dst[layout.scale_pos(blk)] = d;
    }
}

/// The interleaved copy of a row-major block matrix given as quant bytes (`qs.len() / d.len()`
/// per block) and scales, `nb` blocks per row.
pub fn interleave(qs: &[u8], d: &[u16], nb: usize) -> (Vec<u8>, Vec<u16>) {
    let (mut qi, mut di) = (vec![0u8; qs.len()], vec![0u16; d.len()]);
    interleave_quants(qs, qs.len() / d.len().max(1), nb, &mut qi);
    interleave_scales(d, nb, &mut di);
    (qi, di)
}

/// The interleaved copy of a stored row-major block matrix (its quants, `bb` bytes per block,
/// then its little-endian f16 scales), `nb` blocks per row: the bytes a q8r8 / q4r8 tensor holds.
pub fn interleave_stored(bytes: &[u8], bb: usize, nb: usize) -> Vec<u8> {
    let blocks = bytes.len() / (bb + 2);
    let (qs, d) = bytes.split_at(blocks * bb);
    let d: Vec<u16> = d.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    let (mut out, di) = interleave(qs, &d, nb);
    out.extend(di.iter().flat_map(|v| v.to_le_bytes()));
    out
}

/// GGUF Q8_0 / Q4_0 blocks of whole 8-row groups (`nb` blocks per row; each block its f16
/// scale, then the `gb` − 2 quant bytes a q8 / q4 block holds, the same values: see
/// `q8_0_block`) in the interleaved layout: their quants appended to `qs`, their scales (f16
/// little-endian) to `d`. Rows starting at a group boundary are one contiguous run of each
/// region, so a q8r8 / q4r8 matrix is every run's quants, then every run's scales.
pub fn interleave_ggml_blocks(
    blocks: &[u8],
    gb: usize,
    nb: usize,
    qs: &mut Vec<u8>,
    d: &mut Vec<u8>,
) -> Result<(), String> {
    let qb = gb.saturating_sub(2);
    let row = gb * nb;
    if qb == 0 || !qb.is_multiple_of(CHUNK) || row == 0 || !blocks.len().is_multiple_of(row * GROUP_ROWS) {
        return Err(format!("{} bytes are not whole 8-row groups of {nb} blocks of {gb} bytes", blocks.len()));
    }
    // Written in output order (appends only, no zero fill first): per 8-row group and block,
    // the 8 rows' scales, then each 4-byte chunk of the 8 rows' quants in turn.
    qs.reserve(blocks.len() / gb * qb);
    d.reserve(blocks.len() / gb * 2);
    for grp in blocks.chunks_exact(row * GROUP_ROWS) {
        let rows: [&[u8]; GROUP_ROWS] = std::array::from_fn(|j| &grp[j * row..(j + 1) * row]);
        for b in 0..nb {
            let blk: [&[u8]; GROUP_ROWS] = std::array::from_fn(|j| &rows[j][b * gb..(b + 1) * gb]);
            for x in &blk {
                d.extend_from_slice(&x[..2]);
            }
            for c in (2..gb).step_by(CHUNK) {
                for x in &blk {
                    qs.extend_from_slice(&x[c..c + CHUNK]);
                }
            }
        }
    }
    Ok(())
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

/// The stored bytes of a block matrix ([x.len() / cols, cols], cols a multiple of 32) quantised
/// with the reference quantisers: q8 when `q8`, else q4; interleaved when `interleaved` (rows a
/// multiple of 8).
pub fn quantize_matrix(x: &[f32], cols: usize, q8: bool, interleaved: bool) -> Vec<u8> {
    let n = x.len();
    assert!(
        cols > 0 && cols.is_multiple_of(QK) && n.is_multiple_of(cols),
        "quantize_matrix: {n} values in rows of {cols}"
    );
    let mut d = vec![0u16; n / QK];
    let qs: Vec<u8> = if q8 {
        let mut q = vec![0i8; n];
        quantize_row_q8(x, &mut q, &mut d);
        q.iter().map(|&v| v as u8).collect()
    } else {
        let mut q = vec![0u8; n / 2];
        quantize_row_q4(x, &mut q, &mut d);
        q
    };
    let (qs, d) = if interleaved { interleave(&qs, &d, cols / QK) } else { (qs, d) };
    qs.into_iter().chain(d.iter().flat_map(|v| v.to_le_bytes())).collect()
}

/// Bytes of one q8_0 block: its f16 scale, then 32 quants.
pub const Q8_0_BYTES: usize = 2 + QK;

/// Scale and quants of block `b` of a q8_0 matrix's bytes.
#[inline]
pub fn q8_0_block(bytes: &[u8], b: usize) -> (f32, &[u8]) {
    let blk = &bytes[b * Q8_0_BYTES..(b + 1) * Q8_0_BYTES];
    (f16_to_f32(u16::from_le_bytes([blk[0], blk[1]])), &blk[2..])
}

/// q8_0 blocks of x (a multiple of 32 values), as ggml's reference quantiser makes them:
/// d = max|x| / 127 (stored as f16), q = round-half-away(x / d) with the f32 d.
pub fn quantize_q8_0(x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(x.len() / QK * Q8_0_BYTES);
    for xb in x.chunks_exact(QK) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let inv = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f32_to_f16_bits(d).to_le_bytes());
        out.extend(xb.iter().map(|&v| (v * inv).round() as i8 as u8));
    }
    out
}

/// Dequantise `out.len()` elements of a q8_0 matrix from element `start` (both multiples of 32).
pub fn dequantize_q8_0(bytes: &[u8], start: usize, out: &mut [f32]) {
    for (i, ob) in out.chunks_exact_mut(QK).enumerate() {
        let (d, qs) = q8_0_block(bytes, start / QK + i);
        for (o, &q) in ob.iter_mut().zip(qs) {
            *o = d * f32::from(q as i8);
        }
    }
}

/// Dequantise `out.len()` elements of a q8 matrix starting at element `start` (both multiples of 32).
pub fn dequantize_q8(m: Q8<'_>, start: usize, out: &mut [f32]) {
    for (b, ob) in out.chunks_exact_mut(QK).enumerate() {
        let blk = start / QK + b;
        let d = m.scale(blk);
        for (o, q) in ob.iter_mut().zip(m.block(blk)) {
            *o = d * f32::from(q);
        }
    }
}

/// Dequantise `out.len()` elements of a q4 matrix starting at element `start` (both multiples of 32).
pub fn dequantize_q4(m: Q4<'_>, start: usize, out: &mut [f32]) {
    for (b, ob) in out.chunks_exact_mut(QK).enumerate() {
        let blk = start / QK + b;
        let d = m.scale(blk);
        let qb = m.block(blk);
        for j in 0..QK / 2 {
            ob[j] = d * (f32::from(qb[j] & 15) - 8.0);
            ob[j + QK / 2] = d * (f32::from(qb[j] >> 4) - 8.0);
        }
    }
}

/// Deterministic values in (−1, 1) for tests (xorshift).
#[cfg(test)]
pub(crate) fn sample(n: usize, seed: u32) -> Vec<f32> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_roundtrip_error_is_within_half_a_step() {
        let x = sample(4 * 64, 1);
        let buf = quantize_matrix(&x, 64, true, false);
        let m = Q8::from_bytes(&buf, x.len(), Layout::Rows).expect("layout");
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
    fn q8_0_matches_ggml_block_by_block() {
        // One block by hand: 1.27 is the largest magnitude (d = 0.01), 0.005 rounds away to 1.
        let mut x = vec![0f32; 32];
        (x[0], x[1], x[2], x[31]) = (1.27, -0.635, 0.005, -0.004);
        let b = quantize_q8_0(&x);
        assert_eq!(b.len(), Q8_0_BYTES);
        assert_eq!(u16::from_le_bytes([b[0], b[1]]), half::f16::from_f32(0.01).to_bits());
        assert_eq!([b[2] as i8, b[3] as i8, b[4] as i8, b[33] as i8], [127, -64, 1, 0]);
        let mut y = vec![0f32; 32];
        dequantize_q8_0(&b, 0, &mut y);
        assert_eq!(y[0], f16_to_f32(half::f16::from_f32(0.01).to_bits()) * 127.0);
        // Many blocks: within half a step (plus the f16 rounding of d) everywhere.
        let x = sample(4 * 64, 5);
        let b = quantize_q8_0(&x);
        let mut y = vec![0f32; x.len()];
        dequantize_q8_0(&b, 32, &mut y[32..]);
        for (i, (a, c)) in x.iter().zip(&y).enumerate().skip(32) {
            let (d, _) = q8_0_block(&b, i / 32);
            assert!((a - c).abs() <= d * 0.5 + d * 127.0 * 1e-3, "element {i}: {a} vs {c}");
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
        let m = Q4 { qs: &qs, d: &d, layout: Layout::Rows };
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
    fn interleaving_moves_every_byte_and_scale_once_and_keeps_each_block() {
        let (rows, cols) = (16, 96);
        let nb = cols / QK;
        let x = sample(rows * cols, 7);
        let mut q4 = vec![0u8; rows * cols / 2];
        let mut d = vec![0u16; rows * nb];
        for r in 0..rows {
            quantize_row_q4(
                &x[r * cols..(r + 1) * cols],
                &mut q4[r * cols / 2..(r + 1) * cols / 2],
                &mut d[r * nb..(r + 1) * nb],
            );
        }
        let layout = Layout::interleaved(rows, cols).expect("whole groups");
        let mut seen = vec![false; q4.len()];
        for blk in 0..rows * nb {
            for i in 0..QK / 2 {
                let p = layout.byte_pos(blk, i, QK / 2);
                assert!(!seen[p], "byte position {p} used twice");
                seen[p] = true;
            }
        }
        let (qi, di) = interleave(&q4, &d, nb);
        let (a, b) = (Q4 { qs: &q4, d: &d, layout: Layout::Rows }, Q4 { qs: &qi, d: &di, layout });
        for blk in 0..rows * nb {
            assert_eq!(a.block(blk), b.block(blk), "block {blk}");
            assert_eq!(a.scale(blk).to_bits(), b.scale(blk).to_bits(), "scale {blk}");
        }
        // Row 9's block 1 is in unit (group 1, block 1); its bytes 4..8 are the second chunk.
        let unit = (nb + 1) * 8 * 16;
        assert_eq!(qi[unit + (8 + 1) * 4..unit + (8 + 1) * 4 + 4], q4[(9 * nb + 1) * 16 + 4..(9 * nb + 1) * 16 + 8]);
        assert!(Layout::interleaved(12, cols).is_none() && Layout::interleaved(8, 40).is_none());
        assert!(Q4::from_bytes(&[0u8; q4_bytes(12 * 96)], 12 * 96, Layout::Interleaved { nb }).is_none());
    }

    /// GGUF blocks interleaved in runs of whole groups are `interleave_stored` of the blocks'
    /// quants then scales (any bytes), for q8_0 (34-byte blocks) and q4_0 (18).
    #[test]
    fn ggml_blocks_interleave_in_runs_as_the_stored_matrix_does() {
        let (rows, nb) = (24, 3);
        for gb in [34, 18] {
            let blocks: Vec<u8> = (0..rows * nb * gb).map(|i| (i * 37 % 251) as u8).collect();
            let (scales, quants): (Vec<&[u8]>, Vec<&[u8]>) = blocks.chunks_exact(gb).map(|b| b.split_at(2)).unzip();
            let stored: Vec<u8> = quants.concat().into_iter().chain(scales.concat()).collect();
            let want = interleave_stored(&stored, gb - 2, nb);
            let (mut qs, mut d) = (vec![], vec![]);
            for run in blocks.chunks(16 * nb * gb) {
                interleave_ggml_blocks(run, gb, nb, &mut qs, &mut d).unwrap();
            }
            qs.extend(d);
            assert_eq!(qs, want, "blocks of {gb} bytes");
            let err = interleave_ggml_blocks(&blocks[..12 * nb * gb], gb, nb, &mut vec![], &mut vec![]);
            assert!(err.is_err(), "12 rows are not whole groups");
        }
    }
}
