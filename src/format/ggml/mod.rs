//! GGUF's block types, kept as GGUF stores them: the block layouts of llama.cpp's
//! ggml-common.h as `#[repr(C)]` structs of bytes (whole blocks one after another, each its
//! scales and quants together), with per type the integer form of its bytes (`unpack`, ports
//! of ggml's `dequantize_row_*` up to the floats), the reference dequantisation over it
//! (`Block::dequantize`, bit for bit ggml's), and the reference encoder (`quant_legacy`,
//! `quant_k`: ports of ggml's `quantize_row_*_ref`). The dtype table (`format::dtype`) points
//! at these; the kernels' reference rows (`kernels::reference`) too. q8_0 lives in `blocks`.
//!
//! ```text
//!          elements bytes  layout (f16 = IEEE binary16, little-endian)            value
//! q4_0     32      18      d f16, qs[16] (elem j low nibble, j+16 high)          d·(q − 8)
//! q4_1     32      20      d f16, m f16, qs[16]                                  d·q + m
//! q5_0     32      22      d f16, qh u32 (bit j = 5th bit of elem j), qs[16]     d·(q − 16)
//! q5_1     32      24      d f16, m f16, qh u32, qs[16]                          d·q + m
//! iq4_nl   32      18      d f16, qs[16]                                         d·K[q]
//! q2_k     256     84      scales[16] (lo 4 bits scale, hi 4 bits min), qs[64] 2-bit, d, dmin
//!                                                                 (d·sc)·q − dmin·m
//! q3_k     256     110     hmask[32], qs[64] 2-bit, scales[12] (16 × 6 bits), d  (d·(sc − 32))·q
//!                          q = low 2 bits − 4 unless the hmask bit is set
//! q4_k     256     144     d, dmin, scales[12] (8 × 6-bit scale + 8 × 6-bit min), qs[128]
//!                                                                 (d·sc)·q − dmin·m
//! q5_k     256     176     d, dmin, scales[12], qh[32], qs[128]                  (d·sc)·q − dmin·m
//! q6_k     256     210     ql[128], qh[64], scales[16] i8, d                     (d·sc)·(q − 32)
//! iq4_xs   256     136     d, scales_h u16, scales_l[4] (8 × 6 bits), qs[128]    (d·(ls − 32))·K[q]
//! ```
//!
//! K = `KVALUES_IQ4NL`, the 16 non-linear levels. The element order inside the K-quant blocks
//! is ggml's (see each `unpack` function).

mod quant_k;
mod quant_legacy;
mod unpack;

pub use unpack::Unpacked;

use super::blocks::f16_to_f32;

/// Elements of a K-quant super-block.
pub const QK_K: usize = 256;

/// The 16 levels of iq4_nl / iq4_xs (ggml's `kvalues_iq4nl`).
pub const KVALUES_IQ4NL: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// One GGUF block type: its layout (the implementing struct, all `u8` arrays: alignment 1, no
/// padding, every bit pattern valid) and what its bytes mean.
pub trait Block: Sized + 'static {
    /// Elements per block.
    const QK: usize;
    /// Byte offsets of the block's f16 scales (the NaN/Inf scan reads these).
    const SCALES: &'static [usize];
    /// out[..QK] = the block's values (ggml's dequantisation, bit for bit).
    #[inline]
    fn dequantize(&self, out: &mut [f32]) {
        let mut u = Unpacked::default();
        for (s, o) in out[..Self::QK].chunks_exact_mut(32).enumerate() {
            self.unpack(s, &mut u);
            u.values(o);
        }
    }
    /// The block of x[..QK] as ggml's reference quantiser makes it.
    fn quantize(x: &[f32]) -> Self;
    /// 32-element sub-block `sub` (< QK / 32) in integer form (see `Unpacked`).
    fn unpack(&self, sub: usize, u: &mut Unpacked);
}

/// Bytes per block of `B`.
pub const fn block_bytes<B: Block>() -> usize {
    std::mem::size_of::<B>()
}

/// The blocks held by `bytes` (whole blocks; a trailing partial block is left out).
#[inline]
pub fn blocks<B: Block>(bytes: &[u8]) -> &[B] {
    let n = bytes.len() / block_bytes::<B>();
    // SAFETY: every `Block` is a #[repr(C)] struct of u8 arrays (size = its bytes, alignment 1,
    // any bit pattern valid), and n whole blocks lie inside `bytes`.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), n) }
}

/// The bytes of one block.
#[inline]
pub fn bytes_of<B: Block>(b: &B) -> &[u8] {
    // SAFETY: as in `blocks`: the struct is exactly its block_bytes initialised bytes.
    unsafe { std::slice::from_raw_parts((b as *const B).cast::<u8>(), block_bytes::<B>()) }
}

/// An f16 field as f32.
#[inline]
pub fn h(b: [u8; 2]) -> f32 {
    f16_to_f32(u16::from_le_bytes(b))
}

/// An f32 rounded to an f16 field (nearest even, as ggml's GGML_FP32_TO_FP16).
#[inline]
pub(crate) fn to_h(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_bits().to_le_bytes()
}

/// Round to nearest, ties to even (ggml's nearest_int: the magic-number trick, for |v| ≤ 2²²).
#[inline]
pub(crate) fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}

macro_rules! layout {
    ($(#[$doc:meta])* $name:ident [$bytes:expr] { $($field:ident : $n:expr),* $(,)? }) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name {
            $(pub $field: [u8; $n],)*
        }
        const _: () = assert!(std::mem::size_of::<$name>() == $bytes && std::mem::align_of::<$name>() == 1);
        impl $name {
            /// A block of zero bytes.
            pub const ZERO: $name = $name { $($field: [0; $n],)* };
        }
    };
}

layout!(/// ggml's block_q4_0.
    BlockQ4_0 [18] { d: 2, qs: 16 });
layout!(/// ggml's block_q4_1.
    BlockQ4_1 [20] { d: 2, m: 2, qs: 16 });
layout!(/// ggml's block_q5_0.
    BlockQ5_0 [22] { d: 2, qh: 4, qs: 16 });
layout!(/// ggml's block_q5_1.
    BlockQ5_1 [24] { d: 2, m: 2, qh: 4, qs: 16 });
layout!(/// ggml's block_iq4_nl.
    BlockIq4Nl [18] { d: 2, qs: 16 });
layout!(/// ggml's block_q2_K.
    BlockQ2K [84] { scales: 16, qs: 64, d: 2, dmin: 2 });
layout!(/// ggml's block_q3_K.
    BlockQ3K [110] { hmask: 32, qs: 64, scales: 12, d: 2 });
layout!(/// ggml's block_q4_K.
    BlockQ4K [144] { d: 2, dmin: 2, scales: 12, qs: 128 });
layout!(/// ggml's block_q5_K.
    BlockQ5K [176] { d: 2, dmin: 2, scales: 12, qh: 32, qs: 128 });
layout!(/// ggml's block_q6_K.
    BlockQ6K [210] { ql: 128, qh: 64, scales: 16, d: 2 });
layout!(/// ggml's block_iq4_xs.
    BlockIq4Xs [136] { d: 2, scales_h: 2, scales_l: 4, qs: 128 });

macro_rules! impl_block {
    ($t:ident, $qk:expr, $scales:expr, $quant:path, $unpack:path) => {
        impl Block for $t {
            const QK: usize = $qk;
            const SCALES: &'static [usize] = &$scales;
            fn quantize(x: &[f32]) -> Self {
                $quant(x)
            }
            #[inline]
            fn unpack(&self, sub: usize, u: &mut Unpacked) {
                $unpack(self, sub, u)
            }
        }
    };
}

impl_block!(BlockQ4_0, 32, [0], quant_legacy::q4_0, unpack::q4_0);
impl_block!(BlockQ4_1, 32, [0, 2], quant_legacy::q4_1, unpack::q4_1);
impl_block!(BlockQ5_0, 32, [0], quant_legacy::q5_0, unpack::q5_0);
impl_block!(BlockQ5_1, 32, [0, 2], quant_legacy::q5_1, unpack::q5_1);
impl_block!(BlockIq4Nl, 32, [0], quant_legacy::iq4_nl, unpack::iq4_nl);
impl_block!(BlockQ2K, QK_K, [80, 82], quant_k::q2_k, unpack::q2_k);
impl_block!(BlockQ3K, QK_K, [108], quant_k::q3_k, unpack::q3_k);
impl_block!(BlockQ4K, QK_K, [0, 2], quant_k::q4_k, unpack::q4_k);
impl_block!(BlockQ5K, QK_K, [0, 2], quant_k::q5_k, unpack::q5_k);
impl_block!(BlockQ6K, QK_K, [208], quant_k::q6_k, unpack::q6_k);
impl_block!(BlockIq4Xs, QK_K, [0], quant_legacy::iq4_xs, unpack::iq4_xs);

/// Scale and min of sub-block j (< 8) of q4_k / q5_k's packed 6-bit pairs (ggml's
/// get_scale_min_k4).
#[inline]
pub fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// The 16 6-bit scales of a q3_k block (stored values, 0..64; the scale is value − 32).
#[inline]
pub fn q3k_scales(s: &[u8; 12]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let low = if j < 8 { s[j] & 0xF } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = (low | (high << 4)) as i8;
    }
    out
}

/// The 6-bit scale of sub-block ib (< 8) of an iq4_xs block (stored value; the scale is ls − 32).
#[inline]
pub fn iq4xs_scale(b: &BlockIq4Xs, ib: usize) -> i32 {
    let sh = u16::from_le_bytes(b.scales_h);
    i32::from((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (i32::from((sh >> (2 * ib)) & 3) << 4)
}

/// Dequantise `out.len()` elements of a matrix of `B` blocks from element `start` (both
/// multiples of `B::QK`).
pub fn dequantize<B: Block>(bytes: &[u8], start: usize, out: &mut [f32]) {
    let first = start / B::QK;
    for (b, o) in blocks::<B>(bytes)[first..].iter().zip(out.chunks_exact_mut(B::QK)) {
        b.dequantize(o);
    }
}

/// The stored bytes of x (a multiple of `B::QK` values) quantised by `B`'s reference encoder.
pub fn quantize<B: Block>(x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(x.len() / B::QK * block_bytes::<B>());
    for xb in x.chunks_exact(B::QK) {
        out.extend_from_slice(bytes_of(&B::quantize(xb)));
    }
    out
}

/// First block of a `B` matrix one of whose f16 scales is NaN/Inf.
pub fn find_bad_scale<B: Block>(bytes: &[u8]) -> Option<u64> {
    let bad = |blk: &[u8]| B::SCALES.iter().any(|&o| u16::from_le_bytes([blk[o], blk[o + 1]]) & 0x7c00 == 0x7c00);
    bytes.chunks_exact(block_bytes::<B>()).position(bad).map(|p| p as u64)
}

#[cfg(test)]
mod tests;
