//! bf16 activations for bf16 weights (the `Reduced` activation mode, see
//! `actq::QuantActivations`): each activation is rounded to bf16 once per product, so a bf16
//! weight meets it in BF16 × BF16 products — exact in f32 — summed in f32.
//!
//! Reference semantics: the float kernels on the rounded values (what a path without a bf16 dot
//! instruction runs). A path with one (AVX-512 BF16) computes the same products in another
//! summation order; its instruction also treats bf16 subnormals (|v| < 2⁻¹²⁶) as zero, which
//! stays far inside the float tolerances.

use super::table::{TransposeFn, NR};
use super::XRows;

/// f32 → bf16 bits, rounded to nearest even; ±∞ stay, finite values past bf16's range become
/// ±∞, NaN stays a (quiet) NaN. Every path rounds with this function: the same bits everywhere.
/// Written as a select of two integer results (no branch), so that loops over it vectorise.
#[inline(always)]
pub fn round_bf16(v: f32) -> u16 {
    let b = v.to_bits();
    let quiet = ((b >> 16) | 0x40) as u16;
    let rounded = (b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16) as u16;
    if b & 0x7FFF_FFFF > 0x7F80_0000 {
        quiet
    } else {
        rounded
    }
}

/// out[i] = round_bf16(x[i]): on CPUs with AVX-512 BW the same integer operations 32 lanes at a
/// time (the same bits).
pub(crate) fn round_slice(x: &[f32], out: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512bw") {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { round_slice_avx512(x, out) };
    }
    round_slice_body(x, out)
}

#[inline(always)]
fn round_slice_body(x: &[f32], out: &mut [u16]) {
    out.iter_mut().zip(x).for_each(|(b, &v)| *b = round_bf16(v));
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2")]
unsafe fn round_slice_avx512(x: &[f32], out: &mut [u16]) {
    round_slice_body(x, out)
}

/// n activation rows rounded to bf16 (`bits`, [n, cols]) and, for the GEMM, the same values in
/// panels of NR rows by column pairs: panels[p][q][j] = bits[p·NR + j, 2q] | bits[p·NR + j,
/// 2q + 1] << 16 ([panels, cols / 2, NR]; zero past n).
/// From this many activation values on, rounding and packing run on the calling pool.
const PAR_ELEMENTS: usize = 1 << 16;

#[derive(Default)]
pub struct Bf16Acts {
    pub cols: usize,
    pub bits: Vec<u16>,
    /// The panels' storage, in cache lines: every 64-byte row of a tile (16 dwords) is one line.
    lines: Vec<Line>,
    /// u32 values of the panels in `lines`.
    len: usize,
}

/// A column pair's panel value: the first bf16 in the low half (the pair's f32 lane as
/// `transpose` moves it on a little-endian machine).
fn pair_bits_of(pair: &[u16]) -> u32 {
    u32::from(pair[0]) | u32::from(pair[1]) << 16
}

/// One cache line of panel values (a heap Vec<u32> of a megabyte starts 16 bytes into a page:
/// each 64-byte tile row would then straddle two lines).
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Line([u32; 16]);

impl Bf16Acts {
    /// The packed panels (`pack_panels` / `pack_tiles`), starting on a cache line.
    pub fn panels(&self) -> &[u32] {
        // SAFETY: `lines` holds at least `len` u32 values (`panels_for`), plain data.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast(), self.len) }
    }

    /// The rounded rows, and the panels' storage for `len` values (contents unspecified: every
    /// caller writes all of them).
    fn bits_and_panels(&mut self, len: usize) -> (&[u16], &mut [u32]) {
        self.lines.resize(len.div_ceil(16), Line::default());
        self.len = len;
        // SAFETY: as in `panels`; the borrow of `lines` is exclusive.
        (&self.bits, unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast(), len) })
    }

    /// Round n rows of x ([n, cols]), wherever they are (`XRows`): the bits `round` gives
    /// them copied together.
    pub fn round_rows(&mut self, x: XRows<'_>, n: usize, cols: usize) {
        if let XRows::Dense(x) = x {
            return self.round(x, n, cols);
        }
        self.cols = cols;
        self.bits.resize(n * cols, 0);
        let one = |(i, b): (usize, &mut [u16])| round_slice(x.row(i, cols), b);
        if n * cols > PAR_ELEMENTS && crate::threads::current() > 1 && cols > 0 {
            use rayon::prelude::*;
            self.bits.par_chunks_mut(cols).enumerate().for_each(one);
        } else if cols > 0 {
            self.bits.chunks_mut(cols).enumerate().for_each(one);
        }
    }

    /// Round x ([n, cols]).
    pub fn round(&mut self, x: &[f32], n: usize, cols: usize) {
        self.cols = cols;
        let x = &x[..n * cols];
        self.bits.resize(x.len(), 0);
        if x.len() > PAR_ELEMENTS && crate::threads::current() > 1 {
            use rayon::prelude::*;
            self.bits
                .par_chunks_mut(PAR_ELEMENTS)
                .zip(x.par_chunks(PAR_ELEMENTS))
                .for_each(|(b, xs)| round_slice(xs, b));
        } else {
            round_slice(x, &mut self.bits);
        }
    }

    /// Pack the rounded rows for the AMX tiles (cols even): from NR rows on `pack_panels`;
    /// fewer rows as one panel of exactly n lanes ([cols / 2, n]: a pair of each row per lane,
    /// by the path's `transpose`), so a tile n dwords wide reads them contiguously (a decode
    /// row is its own panel).
    pub fn pack_tiles(&mut self, transpose: TransposeFn) {
        let cols = self.cols;
        let n = self.bits.len().checked_div(cols).unwrap_or(0);
        if n >= NR {
            return self.pack_panels(transpose);
        }
        assert!(cols.is_multiple_of(2), "bf16 panels pair columns: {cols} is odd");
        let pairs = cols / 2;
        let (bits, panels) = self.bits_and_panels(pairs * n);
        // SAFETY: any bits are a valid f32; align_to splits off what is not 4-byte aligned.
        let (head, pair_bits, _) = unsafe { bits.align_to::<f32>() };
        if head.is_empty() {
            // SAFETY: as above.
            let (_, dst, _) = unsafe { panels.align_to_mut::<f32>() };
            return transpose(pair_bits, pairs, n, pairs, dst);
        }
        for (j, row) in bits.chunks_exact(cols).enumerate() {
            for (q, pair) in row.chunks_exact(2).enumerate() {
                panels[q * n + j] = pair_bits_of(pair);
            }
        }
    }

    /// Pack the rounded rows into column-pair panels (cols even). Whole panels are 16 rows of
    /// cols / 2 pairs turned pair-major by the path's `transpose` (the pairs' bits moved as f32
    /// lanes, never computed on); the last partial panel element by element.
    pub fn pack_panels(&mut self, transpose: TransposeFn) {
        let cols = self.cols;
        assert!(cols.is_multiple_of(2), "bf16 panels pair columns: {cols} is odd");
        let n = self.bits.len().checked_div(cols).unwrap_or(0);
        let (pairs, panels) = (cols / 2, n.div_ceil(NR));
        let (bits, out) = self.bits_and_panels(panels * pairs * NR);
        // SAFETY: any bits are a valid f32; align_to splits off what is not 4-byte aligned.
        let (head, pair_bits, _) = unsafe { bits.align_to::<f32>() };
        let aligned = head.is_empty();
        let pack = |(p, panel): (usize, &mut [u32])| {
            if aligned && (p + 1) * NR <= n {
                // SAFETY: as above.
                let (_, dst, _) = unsafe { panel.align_to_mut::<f32>() };
                return transpose(&pair_bits[p * NR * pairs..], pairs, NR, pairs, dst);
            }
            panel.fill(0);
            for j in 0..NR.min(n - p * NR) {
                let row = &bits[(p * NR + j) * cols..(p * NR + j + 1) * cols];
                for (q, pair) in row.chunks_exact(2).enumerate() {
                    panel[q * NR + j] = pair_bits_of(pair);
                }
            }
        };
        // A prefill's panels (hundreds of rows) are packed by the calling pool's threads.
        if panels > 1 && n * cols > PAR_ELEMENTS && crate::threads::current() > 1 {
            use rayon::prelude::*;
            out.par_chunks_exact_mut(pairs * NR).enumerate().for_each(pack);
        } else {
            out.chunks_exact_mut(pairs * NR).enumerate().for_each(pack);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_round_to_nearest_even_like_the_converter() {
        let mut specials = vec![
            0.0f32,
            -0.0,
            1.0,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            1e-40,
            -1e-45,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::from_bits(0x3F80_8000), // a tie: stays even
            f32::from_bits(0x3F81_8000), // a tie: rounds up to even
            f32::from_bits(0x7F7F_FFFF),
        ];
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..100_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            specials.push(f32::from_bits(s as u32));
        }
        for v in specials {
            let want = half::bf16::from_f32(v);
            let got = round_bf16(v);
            if v.is_nan() {
                assert!(half::bf16::from_bits(got).is_nan(), "{v:e} ({:#x}) → {got:#x}", v.to_bits());
                assert_eq!(got & 0x8000, want.to_bits() & 0x8000, "NaN keeps its sign");
            } else {
                assert_eq!(got, want.to_bits(), "{v:e} ({:#x})", v.to_bits());
            }
        }
    }

    #[test]
    fn panels_pair_columns_per_row() {
        let (n, cols) = (NR + 3, 6);
        let x: Vec<f32> = (0..n * cols).map(|i| i as f32).collect();
        let mut a = Bf16Acts::default();
        a.round(&x, n, cols);
        a.pack_panels(crate::kernels::generic::transpose);
        assert_eq!(a.panels().len(), 2 * (cols / 2) * NR);
        assert_eq!(a.panels().as_ptr() as usize % 64, 0, "panels start on a cache line");
        let at = |p: usize, q: usize, j: usize| a.panels()[p * (cols / 2) * NR + q * NR + j];
        for t in 0..n {
            for q in 0..cols / 2 {
                let v = at(t / NR, q, t % NR);
                let lo = f32::from_bits((v & 0xFFFF) << 16);
                let hi = f32::from_bits(v & 0xFFFF_0000);
                assert_eq!((lo, hi), (x[t * cols + 2 * q], x[t * cols + 2 * q + 1]), "row {t} pair {q}");
            }
        }
        assert!((n % NR..NR).all(|j| (0..cols / 2).all(|q| at(1, q, j) == 0)), "padding rows are zero");
    }

    #[test]
    fn a_reused_buffer_packs_what_a_fresh_one_does() {
        let cols = 64;
        let x: Vec<f32> = (0..48 * cols).map(|i| (i % 97) as f32 - 40.0).collect();
        let mut reused = Bf16Acts::default();
        for n in [48, 33, 5, 40, 17, 1] {
            let mut fresh = Bf16Acts::default();
            for a in [&mut reused, &mut fresh] {
                a.round(&x, n, cols);
                a.pack_tiles(crate::kernels::generic::transpose);
            }
            assert_eq!(reused.panels(), fresh.panels(), "n {n}: stale values of a longer pack");
        }
    }

    #[test]
    fn rounding_and_packing_on_a_pool_equal_one_thread() {
        let (n, cols) = (40, 4096);
        let x: Vec<f32> = (0..n * cols).map(|i| ((i * 2654435761usize) % 10007) as f32 * 1e-3 - 5.0).collect();
        let mut one = Bf16Acts::default();
        one.round(&x, n, cols);
        one.pack_panels(crate::kernels::generic::transpose);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
        let mut two = Bf16Acts::default();
        pool.install(|| {
            assert_eq!(crate::threads::current(), 2);
            two.round(&x, n, cols);
            two.pack_panels(crate::kernels::generic::transpose);
        });
        assert!(n * cols > PAR_ELEMENTS, "the input must take the pool's path");
        assert!(one.bits == two.bits && one.panels() == two.panels());
    }
}
