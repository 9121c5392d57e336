//! Where the AMX product's operands are (`gemm`): the weights' A tiles — in the stored bytes,
//! row-major or bf16r32 (`format::tiles`), or copied and zero-padded at the matrix's edges — and
//! the activation panels' B tiles.

use super::{TILE_COLSB, TILE_ROWS, TK};
use crate::format::{tiles, DType};
use crate::kernels::mat::Mat;
use crate::kernels::table::NR;

/// Column pairs per B tile (its rows).
pub(super) const TQ: usize = TK / 2;
const _: () = assert!(NR == TILE_ROWS && TQ == TILE_ROWS, "a panel is a B tile's width");

/// A tile's bytes: 16 rows × 64.
#[repr(C, align(64))]
pub(super) struct TileBuf([u8; TILE_ROWS * TILE_COLSB]);

impl Default for TileBuf {
    fn default() -> TileBuf {
        TileBuf([0; TILE_ROWS * TILE_COLSB])
    }
}

/// Where a bf16 matrix's A tiles are: row-major rows (a tile's 16 rows `cols · 2` bytes apart,
/// one column step 64 bytes on), or bf16r32's units (`format::tiles`: a tile's rows 64 bytes
/// apart, one column step 2 KiB on — a block of 32 rows reads one stream).
#[derive(Clone, Copy)]
pub(super) struct Weights<'a> {
    w: &'a [u16],
    pub(super) rows: usize,
    cols: usize,
    /// bf16r32 (else row-major).
    pub(super) tiled: bool,
}

impl<'a> Weights<'a> {
    pub(super) fn of(w: Mat<'a>) -> Weights<'a> {
        assert_eq!(w.dtype().encoding(), DType::BF16, "amx gemm on a {} matrix", w.dtype());
        Weights { w: w.as_u16(), rows: w.rows(), cols: w.cols(), tiled: w.dtype() == DType::Bf16R32 }
    }

    /// Where element (r, c) is stored.
    #[inline(always)]
    pub(super) fn index(&self, r: usize, c: usize) -> usize {
        if self.tiled {
            tiles::at(r, c, self.cols)
        } else {
            r * self.cols + c
        }
    }

    /// Bytes between a tile's rows.
    #[inline(always)]
    pub(super) fn stride(&self) -> usize {
        if self.tiled {
            TILE_COLSB
        } else {
            self.cols * 2
        }
    }

    /// Bytes from a tile to the same rows' tile one column step on.
    #[inline(always)]
    pub(super) fn advance(&self) -> usize {
        if self.tiled {
            tiles::UNIT * 2
        } else {
            TILE_COLSB
        }
    }

    /// Whether rows r .. r + 16 are one tile in the stored bytes (`stride` apart): always
    /// row-major; bf16r32 when they lie in one group of 32.
    #[inline(always)]
    pub(super) fn tile_in_place(&self, r: usize) -> bool {
        !self.tiled || r % tiles::TILE <= tiles::TILE - TILE_ROWS
    }

    /// The A tile of rows r .. r + 16 at column step s, inside the matrix (`tile_in_place`).
    #[inline(always)]
    pub(super) fn tile(&self, r: usize, s: usize) -> *const u8 {
        self.w[self.index(r, s * TK)..].as_ptr().cast()
    }
}

/// Where the A tile of weight rows r .. r + 16, columns k0 .. k0 + 32 is: (pointer, stride). In
/// the stored weights when whole; otherwise copied into `buf`, zero past the matrix.
pub(super) fn a_tile(w: &Weights<'_>, r: usize, k0: usize, buf: &mut TileBuf) -> (*const u8, usize) {
    let (rows, cols) = (w.rows, w.cols);
    if r + TILE_ROWS <= rows && k0 + TK <= cols && w.tile_in_place(r) {
        return (w.tile(r, k0 / TK), w.stride());
    }
    buf.0.fill(0);
    let kc = TK.min(cols - k0);
    for i in 0..TILE_ROWS.min(rows.saturating_sub(r)) {
        for c in 0..kc {
            let v = w.w[w.index(r + i, k0 + c)];
            buf.0[i * TILE_COLSB + 2 * c..][..2].copy_from_slice(&v.to_le_bytes());
        }
    }
    (buf.0.as_ptr(), TILE_COLSB)
}

/// Where the B tile of panel p, pairs q0 .. q0 + 16 is (panels [n_panels, pairs, lanes], see
/// `Bf16Acts::pack_tiles`): (pointer, stride). In the panels when whole; otherwise copied into
/// `buf` (rows 64 bytes apart), zero past the last panel or pair.
pub(super) fn b_tile(
    panels: &[u32],
    pairs: usize,
    lanes: usize,
    p: usize,
    q0: usize,
    buf: &mut TileBuf,
) -> (*const u8, usize) {
    let n_panels = panels.len() / (pairs * lanes).max(1);
    if p < n_panels && q0 + TQ <= pairs {
        return (panels[(p * pairs + q0) * lanes..].as_ptr().cast(), lanes * 4);
    }
    buf.0.fill(0);
    if p < n_panels {
        let q = TQ.min(pairs - q0);
        for (i, row) in panels[(p * pairs + q0) * lanes..][..q * lanes].chunks_exact(lanes).enumerate() {
            for (j, &v) in row.iter().enumerate() {
                buf.0[i * TILE_COLSB + 4 * j..][..4].copy_from_slice(&v.to_le_bytes());
            }
        }
    }
    (buf.0.as_ptr(), TILE_COLSB)
}
