//! The registers the interleaved K-quant kernels (`kr8`) compute in, so that one kernel body
//! serves both widths: one 8-row group in the 8 i32 / f32 lanes of a ymm (`Ymm`), or two
//! adjacent groups in the 16 lanes of a zmm (`Zmm`, group g in half g). Every operation is
//! lane-wise (or within a 128-bit lane, identical in each), so lane j of a `Zmm` result is bit for
//! bit the `Ymm` result of row j of its group; what the zmm form saves is instructions: each
//! activation broadcast and float scaling step meets 16 rows instead of 8. `Dot` is the integer
//! step of an instruction set on a width (`vpmaddubsw` + `vpmaddwd` on AVX2, `vpdpbusd` on VNNI).
//!
//! All functions are `inline(always)` and reached only from kernels compiled with the features
//! they use (AVX2 + FMA + F16C for `Ymm`, AVX-512 F/BW/VL + VNNI for `Zmm` and `Vnni`).

use core::arch::x86_64::*;

/// A register width: `GROUPS` row groups of 8 lanes each.
pub(super) trait Lanes {
    type I: Copy;
    type F: Copy;
    /// Row groups one register holds.
    const GROUPS: usize;
    /// The 32 bytes at u[g] + off for each group g < GROUPS.
    unsafe fn load(u: [*const u8; 2], off: usize) -> Self::I;
    /// The 8 i8 at u[g] + off as i32 lanes.
    unsafe fn load_i8(u: [*const u8; 2], off: usize) -> Self::I;
    /// The 8 f16 at u[g] + off as f32 lanes.
    unsafe fn load_f16(u: [*const u8; 2], off: usize) -> Self::F;
    /// The 8 u16 at u[g] + off as i32 lanes.
    unsafe fn load_u16(u: [*const u8; 2], off: usize) -> Self::I;
    /// The 16 bytes at p in every 128-bit lane (a `shuffle8` table).
    unsafe fn table16(p: *const u8) -> Self::I;
    /// Byte i of each 128-bit lane: that lane's byte idx[i] (`vpshufb`; idx < 16 here).
    unsafe fn shuffle8(table: Self::I, idx: Self::I) -> Self::I;
    /// The 4 bytes at p in every i32 lane.
    unsafe fn bcast4(p: *const i8) -> Self::I;
    unsafe fn splat8(v: i8) -> Self::I;
    unsafe fn splat32(v: i32) -> Self::I;
    unsafe fn splat_f(v: f32) -> Self::F;
    unsafe fn zero() -> Self::I;
    unsafe fn zero_f() -> Self::F;
    unsafe fn and(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn or(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn add32(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn mullo32(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn srli32<const N: i32>(v: Self::I) -> Self::I;
    unsafe fn slli32<const N: i32>(v: Self::I) -> Self::I;
    unsafe fn srai32<const N: i32>(v: Self::I) -> Self::I;
    /// Each i32 lane shifted right by n (logical; n < 32).
    unsafe fn srl32(v: Self::I, n: i32) -> Self::I;
    unsafe fn srli16<const N: i32>(v: Self::I) -> Self::I;
    unsafe fn slli16<const N: i32>(v: Self::I) -> Self::I;
    /// Byte k (< 4) of each i32 lane, as f32.
    unsafe fn byte_ps(v: Self::I, k: usize) -> Self::F;
    unsafe fn cvt(v: Self::I) -> Self::F;
    unsafe fn mul(a: Self::F, b: Self::F) -> Self::F;
    /// a·b + c.
    unsafe fn fmadd(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    /// c − a·b.
    unsafe fn fnmadd(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    /// out[t·stride..t·stride + 8·GROUPS] = the lanes of v[t] (unaligned stores).
    unsafe fn store<const T: usize>(v: [Self::F; T], out: *mut f32, stride: usize);
}

/// The integer step of an instruction set on width L: acc + Σ over each 4-byte lane of u8 w ×
/// i8 x, and how the high nibbles of a quant byte meet it (VNNI: left in place, 16 × theirs,
/// the i32 sum shifted back exactly; AVX2's i16 pair sums would overflow there, so it shifts
/// each load).
pub(super) trait Dot<L: Lanes> {
    unsafe fn dot(acc: L::I, w: L::I, x: L::I) -> L::I;
    unsafe fn high(q: L::I) -> L::I;
    unsafe fn high_sum(s: L::I) -> L::I;
    /// The iq4 levels as this set meets them: `LEVELS[q]` = K[q] plus LEVEL_OFFSET as a byte
    /// (VNNI: offset 128, unsigned as `vpdpbusd` wants; AVX2: offset 0, signed), and
    /// `dot_levels` = acc plus the sum over each 4-byte lane of those bytes times x (AVX2: |K|
    /// times x with K's sign, whose pair sums fit i16 as |K|, |x| ≤ 127).
    const LEVELS: [u8; 16];
    const LEVEL_OFFSET: i32;
    unsafe fn dot_levels(acc: L::I, w: L::I, x: L::I) -> L::I;
}

/// ggml's iq4 levels (`KVALUES_IQ4NL`) plus `offset`, as bytes.
const fn levels(offset: i32) -> [u8; 16] {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (crate::format::ggml::KVALUES_IQ4NL[i] as i32 + offset) as u8;
        i += 1;
    }
    t
}

/// The shuffle of `byte_ps` within each 128-bit lane: byte 0 of dword i ← byte 4i + k, the rest
/// zero.
#[inline(always)]
fn byte_mask(k: usize) -> [i32; 4] {
    std::array::from_fn(|i| 0x8080_8000u32 as i32 | (4 * i + k) as i32)
}

/// One group in a ymm.
pub(super) struct Ymm;

// SAFETY (every method): inlined only into kernels compiled with AVX2 + FMA + F16C; the
// pointers are the caller's (`kr8`'s unit and activation bounds).
impl Lanes for Ymm {
    type I = __m256i;
    type F = __m256;
    const GROUPS: usize = 1;
    #[inline(always)]
    unsafe fn load(u: [*const u8; 2], off: usize) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_loadu_si256(u[0].add(off).cast()) }
    }
    #[inline(always)]
    unsafe fn load_i8(u: [*const u8; 2], off: usize) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_cvtepi8_epi32(_mm_loadl_epi64(u[0].add(off).cast())) }
    }
    #[inline(always)]
    unsafe fn load_f16(u: [*const u8; 2], off: usize) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(u[0].add(off).cast())) }
    }
    #[inline(always)]
    unsafe fn load_u16(u: [*const u8; 2], off: usize) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_cvtepu16_epi32(_mm_loadu_si128(u[0].add(off).cast())) }
    }
    #[inline(always)]
    unsafe fn table16(p: *const u8) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    unsafe fn shuffle8(table: __m256i, idx: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_shuffle_epi8(table, idx) }
    }
    #[inline(always)]
    unsafe fn bcast4(p: *const i8) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_set1_epi32(p.cast::<i32>().read_unaligned()) }
    }
    #[inline(always)]
    unsafe fn splat8(v: i8) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_set1_epi8(v) }
    }
    #[inline(always)]
    unsafe fn splat32(v: i32) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_set1_epi32(v) }
    }
    #[inline(always)]
    unsafe fn splat_f(v: f32) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn zero() -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_setzero_si256() }
    }
    #[inline(always)]
    unsafe fn zero_f() -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn and(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_and_si256(a, b) }
    }
    #[inline(always)]
    unsafe fn or(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_or_si256(a, b) }
    }
    #[inline(always)]
    unsafe fn add32(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_add_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn mullo32(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_mullo_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn srli32<const N: i32>(v: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_srli_epi32::<N>(v) }
    }
    #[inline(always)]
    unsafe fn slli32<const N: i32>(v: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_slli_epi32::<N>(v) }
    }
    #[inline(always)]
    unsafe fn srai32<const N: i32>(v: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_srai_epi32::<N>(v) }
    }
    #[inline(always)]
    unsafe fn srl32(v: __m256i, n: i32) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_srl_epi32(v, _mm_cvtsi32_si128(n)) }
    }
    #[inline(always)]
    unsafe fn srli16<const N: i32>(v: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_srli_epi16::<N>(v) }
    }
    #[inline(always)]
    unsafe fn slli16<const N: i32>(v: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_slli_epi16::<N>(v) }
    }
    #[inline(always)]
    unsafe fn byte_ps(v: __m256i, k: usize) -> __m256 {
        let m = byte_mask(k);
        // SAFETY: see the impl.
        unsafe {
            _mm256_cvtepi32_ps(_mm256_shuffle_epi8(
                v,
                _mm256_setr_epi32(m[0], m[1], m[2], m[3], m[0], m[1], m[2], m[3]),
            ))
        }
    }
    #[inline(always)]
    unsafe fn cvt(v: __m256i) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_cvtepi32_ps(v) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn fnmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_fnmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn store<const T: usize>(v: [__m256; T], out: *mut f32, stride: usize) {
        for (t, vt) in v.into_iter().enumerate() {
            // SAFETY: see the impl.
            unsafe { _mm256_storeu_ps(out.add(t * stride), vt) };
        }
    }
}

/// Two adjacent groups in a zmm (group g in 256-bit half g).
pub(super) struct Zmm;

// SAFETY (every method): inlined only into kernels compiled with AVX-512 F/BW/VL + VNNI (and
// AVX2 + FMA + F16C); the pointers are the caller's.
impl Lanes for Zmm {
    type I = __m512i;
    type F = __m512;
    const GROUPS: usize = 2;
    #[inline(always)]
    unsafe fn load(u: [*const u8; 2], off: usize) -> __m512i {
        // SAFETY: see the impl.
        unsafe {
            let lo = _mm512_castsi256_si512(_mm256_loadu_si256(u[0].add(off).cast()));
            _mm512_inserti64x4::<1>(lo, _mm256_loadu_si256(u[1].add(off).cast()))
        }
    }
    #[inline(always)]
    unsafe fn load_i8(u: [*const u8; 2], off: usize) -> __m512i {
        // SAFETY: see the impl.
        unsafe {
            let (a, b) = (_mm_loadl_epi64(u[0].add(off).cast()), _mm_loadl_epi64(u[1].add(off).cast()));
            _mm512_cvtepi8_epi32(_mm_unpacklo_epi64(a, b))
        }
    }
    #[inline(always)]
    unsafe fn load_f16(u: [*const u8; 2], off: usize) -> __m512 {
        // SAFETY: see the impl.
        unsafe {
            let lo = _mm256_castsi128_si256(_mm_loadu_si128(u[0].add(off).cast()));
            _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(lo, _mm_loadu_si128(u[1].add(off).cast())))
        }
    }
    #[inline(always)]
    unsafe fn load_u16(u: [*const u8; 2], off: usize) -> __m512i {
        // SAFETY: see the impl.
        unsafe {
            let lo = _mm256_castsi128_si256(_mm_loadu_si128(u[0].add(off).cast()));
            _mm512_cvtepu16_epi32(_mm256_inserti128_si256::<1>(lo, _mm_loadu_si128(u[1].add(off).cast())))
        }
    }
    #[inline(always)]
    unsafe fn table16(p: *const u8) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_broadcast_i32x4(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    unsafe fn shuffle8(table: __m512i, idx: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_shuffle_epi8(table, idx) }
    }
    #[inline(always)]
    unsafe fn bcast4(p: *const i8) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_set1_epi32(p.cast::<i32>().read_unaligned()) }
    }
    #[inline(always)]
    unsafe fn splat8(v: i8) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_set1_epi8(v) }
    }
    #[inline(always)]
    unsafe fn splat32(v: i32) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_set1_epi32(v) }
    }
    #[inline(always)]
    unsafe fn splat_f(v: f32) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn zero() -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_setzero_si512() }
    }
    #[inline(always)]
    unsafe fn zero_f() -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn and(a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_and_si512(a, b) }
    }
    #[inline(always)]
    unsafe fn or(a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_or_si512(a, b) }
    }
    #[inline(always)]
    unsafe fn add32(a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_add_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn mullo32(a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_mullo_epi32(a, b) }
    }
    // The count forms with a constant count (folded to the immediate forms): the zmm immediate
    // shifts take their count as u32, the ymm ones as i32.
    #[inline(always)]
    unsafe fn srli32<const N: i32>(v: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_srl_epi32(v, _mm_cvtsi32_si128(N)) }
    }
    #[inline(always)]
    unsafe fn slli32<const N: i32>(v: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_sll_epi32(v, _mm_cvtsi32_si128(N)) }
    }
    #[inline(always)]
    unsafe fn srai32<const N: i32>(v: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_sra_epi32(v, _mm_cvtsi32_si128(N)) }
    }
    #[inline(always)]
    unsafe fn srl32(v: __m512i, n: i32) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_srl_epi32(v, _mm_cvtsi32_si128(n)) }
    }
    #[inline(always)]
    unsafe fn srli16<const N: i32>(v: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_srl_epi16(v, _mm_cvtsi32_si128(N)) }
    }
    #[inline(always)]
    unsafe fn slli16<const N: i32>(v: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_sll_epi16(v, _mm_cvtsi32_si128(N)) }
    }
    #[inline(always)]
    unsafe fn byte_ps(v: __m512i, k: usize) -> __m512 {
        let m = byte_mask(k);
        // SAFETY: see the impl.
        unsafe {
            _mm512_cvtepi32_ps(_mm512_shuffle_epi8(v, _mm512_broadcast_i32x4(_mm_setr_epi32(m[0], m[1], m[2], m[3]))))
        }
    }
    #[inline(always)]
    unsafe fn cvt(v: __m512i) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_cvtepi32_ps(v) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn fnmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_fnmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn store<const T: usize>(v: [__m512; T], out: *mut f32, stride: usize) {
        for (t, vt) in v.into_iter().enumerate() {
            // SAFETY: see the impl.
            unsafe { _mm512_storeu_ps(out.add(t * stride), vt) };
        }
    }
}

/// AVX2's integer step: `vpmaddubsw` pair sums (in i16: 2 · 63 · 128 < 2¹⁵) then `vpmaddwd`.
pub(super) struct Avx2;

impl Dot<Ymm> for Avx2 {
    #[inline(always)]
    unsafe fn dot(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
        // SAFETY: inlined only into the AVX2 kernels (the CPU has AVX2).
        unsafe { _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1))) }
    }
    #[inline(always)]
    unsafe fn high(q: __m256i) -> __m256i {
        // SAFETY: as `dot`.
        unsafe { _mm256_and_si256(_mm256_srli_epi16::<4>(q), _mm256_set1_epi8(15)) }
    }
    #[inline(always)]
    unsafe fn high_sum(s: __m256i) -> __m256i {
        s
    }
    const LEVELS: [u8; 16] = levels(0);
    const LEVEL_OFFSET: i32 = 0;
    #[inline(always)]
    unsafe fn dot_levels(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
        // SAFETY: as `dot`.
        unsafe { Self::dot(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)) }
    }
}

/// VNNI's integer step, `vpdpbusd`, on either width.
pub(super) struct Vnni;

impl<L: Lanes> Dot<L> for Vnni
where
    L: VnniOps,
{
    #[inline(always)]
    unsafe fn dot(acc: L::I, w: L::I, x: L::I) -> L::I {
        // SAFETY: inlined only into the VNNI kernels (the CPU has AVX-512 VL + VNNI).
        unsafe { L::dpbusd(acc, w, x) }
    }
    #[inline(always)]
    unsafe fn high(q: L::I) -> L::I {
        // SAFETY: as `dot`.
        unsafe { L::and(q, L::splat8(0xF0u8 as i8)) }
    }
    #[inline(always)]
    unsafe fn high_sum(s: L::I) -> L::I {
        // SAFETY: as `dot`. s = 16 · Σ nibble·x exactly (|Σ| < 2²⁰), so the shift is exact.
        unsafe { L::srai32::<4>(s) }
    }
    const LEVELS: [u8; 16] = levels(128);
    const LEVEL_OFFSET: i32 = 128;
    #[inline(always)]
    unsafe fn dot_levels(acc: L::I, w: L::I, x: L::I) -> L::I {
        // SAFETY: as `dot`.
        unsafe { L::dpbusd(acc, w, x) }
    }
}

/// `vpdpbusd` at a width.
pub(super) trait VnniOps: Lanes {
    unsafe fn dpbusd(acc: Self::I, w: Self::I, x: Self::I) -> Self::I;
}

impl VnniOps for Ymm {
    #[inline(always)]
    unsafe fn dpbusd(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
        // SAFETY: inlined only into the VNNI kernels.
        unsafe { _mm256_dpbusd_epi32(acc, w, x) }
    }
}

impl VnniOps for Zmm {
    #[inline(always)]
    unsafe fn dpbusd(acc: __m512i, w: __m512i, x: __m512i) -> __m512i {
        // SAFETY: inlined only into the VNNI kernels.
        unsafe { _mm512_dpbusd_epi32(acc, w, x) }
    }
}
