//! A software model of the AMX tile registers: eight tiles of 16 rows × 64 bytes with the shapes
//! `ldtilecfg` gave them, and TDPBF16PS as the Intel SDM's pseudo-code defines it. Every
//! condition the hardware faults on (#UD / #GP) that the GEMM could reach is a panic here: a
//! shape past 16 × 64 bytes, an unconfigured register, operand shapes that do not chain,
//! repeated registers.
//!
//! Arithmetic (SDM, TDPBF16PS "Operation"): per row m, a temporary of two f32 lanes per output
//! column, zeroed, accumulates the even and the odd products of the k pairs in ascending k with
//! FP32 FMAs; then each output adds the sum of its two lanes. Every step rounds to nearest even
//! with DAZ = FTZ = 1 whatever MXCSR says: bf16 inputs below 2⁻¹²⁶ read as zero and f32 results
//! below it become (signed) zero. NaN payloads are not modelled (colibri's inputs are finite).
//!
//! TDPBSSD (SDM "Operation"): each output dword adds the four signed byte products of each k
//! in turn, in 32-bit arithmetic that wraps (no saturation); being integer, the order does not
//! matter.

use super::{TileConfig, Tiles, TILE_COLSB, TILE_ROWS};

/// Tile registers (tmm0 … tmm7).
const TILES: usize = 8;

/// The eight tile registers and their configured shapes.
#[derive(Clone)]
pub struct Model {
    data: [[[u8; TILE_COLSB]; TILE_ROWS]; TILES],
    rows: [usize; TILES],
    colsb: [usize; TILES],
}

impl Default for Model {
    /// The state after `tilerelease`: nothing configured.
    fn default() -> Model {
        Model { data: [[[0; TILE_COLSB]; TILE_ROWS]; TILES], rows: [0; TILES], colsb: [0; TILES] }
    }
}

/// Treat an f32 below the normal range as zero (DAZ on inputs, FTZ on results), keeping the sign.
fn flush(v: f32) -> f32 {
    if v.is_subnormal() {
        f32::from_bits(v.to_bits() & 0x8000_0000)
    } else {
        v
    }
}

/// bf16 bits as f32 (the SDM's `make_fp32`), denormals as zero.
fn make_fp32(b: u16) -> f32 {
    flush(f32::from_bits(u32::from(b) << 16))
}

impl Model {
    /// Register `t`'s (rows, colsb), which must be configured.
    fn shape(&self, t: u8) -> (usize, usize) {
        let t = usize::from(t);
        assert!(t < TILES, "tmm{t} does not exist");
        assert!(self.rows[t] > 0, "tmm{t} used unconfigured (#UD)");
        (self.rows[t], self.colsb[t])
    }

    /// The shapes of a dot-product instruction's registers, checked as the hardware does (#UD):
    /// (rows of C, dword columns of C, dword columns of A = rows of B).
    fn chain(&self, op: &str, c: u8, a: u8, b: u8) -> (usize, usize, usize) {
        let ((m, cb), (am, ab), (bk, bb)) = (self.shape(c), self.shape(a), self.shape(b));
        assert!(c != a && c != b && a != b, "{op} tmm{c}, tmm{a}, tmm{b}: repeated register (#UD)");
        assert!(cb % 4 == 0 && ab % 4 == 0 && bb % 4 == 0, "{op}: colsb not a multiple of 4 (#UD)");
        assert_eq!(am, m, "{op}: rows(A) {am} ≠ rows(C) {m} (#UD)");
        assert_eq!(ab / 4, bk, "{op}: colsb(A)/4 {} ≠ rows(B) {bk} (#UD)", ab / 4);
        assert_eq!(cb, bb, "{op}: colsb(C) {cb} ≠ colsb(B) {bb} (#UD)");
        (m, cb / 4, ab / 4)
    }

    /// i32 element `i` of row `r` of register `t`.
    pub fn i32_at(&self, t: u8, r: usize, i: usize) -> i32 {
        self.u32_at(t, r, i) as i32
    }

    /// bf16 element `i` of row `r` of register `t`.
    pub fn bf16(&self, t: u8, r: usize, i: usize) -> u16 {
        let b = &self.data[usize::from(t)][r];
        u16::from_le_bytes([b[2 * i], b[2 * i + 1]])
    }

    /// u32 element `i` of row `r` of register `t`.
    pub fn u32_at(&self, t: u8, r: usize, i: usize) -> u32 {
        self.f32_at(t, r, i).to_bits()
    }

    /// f32 element `i` of row `r` of register `t`.
    pub fn f32_at(&self, t: u8, r: usize, i: usize) -> f32 {
        let b = &self.data[usize::from(t)][r];
        f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
    }

    fn set_f32(&mut self, t: u8, r: usize, i: usize, v: f32) {
        self.data[usize::from(t)][r][4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
}

impl Tiles for Model {
    fn configure(&mut self, cfg: &TileConfig) {
        assert_eq!(cfg.palette, 1, "palette {} (#GP)", cfg.palette);
        assert!(cfg.reserved.iter().all(|&b| b == 0), "reserved bytes set (#GP)");
        *self = Model::default();
        for t in 0..16 {
            let (rows, colsb) = (usize::from(cfg.rows[t]), usize::from(cfg.colsb[t]));
            assert!(t < TILES || rows + colsb == 0, "tmm{t} does not exist (#GP)");
            assert!(rows <= TILE_ROWS && colsb <= TILE_COLSB, "tmm{t}: {rows} rows × {colsb} bytes (#GP)");
            assert_eq!(rows == 0, colsb == 0, "tmm{t}: {rows} rows × {colsb} bytes (#GP)");
            if t < TILES {
                (self.rows[t], self.colsb[t]) = (rows, colsb);
            }
        }
    }

    fn zero<const T: u8>(&mut self) {
        self.shape(T);
        self.data[usize::from(T)] = [[0; TILE_COLSB]; TILE_ROWS];
    }

    unsafe fn load<const T: u8>(&mut self, ptr: *const u8, stride: usize) {
        let (rows, colsb) = self.shape(T);
        self.data[usize::from(T)] = [[0; TILE_COLSB]; TILE_ROWS];
        for r in 0..rows {
            // SAFETY: the caller's contract: rows × colsb bytes, `stride` apart, are readable.
            let src = unsafe { std::slice::from_raw_parts(ptr.add(r * stride), colsb) };
            self.data[usize::from(T)][r][..colsb].copy_from_slice(src);
        }
    }

    fn dpbf16ps<const C: u8, const A: u8, const B: u8>(&mut self) {
        let (m, n_out, n_k) = self.chain("tdpbf16ps", C, A, B);
        for row in 0..m {
            let mut temp = [0f32; 2 * TILE_COLSB / 4];
            for k in 0..n_k {
                let (a0, a1) = (make_fp32(self.bf16(A, row, 2 * k)), make_fp32(self.bf16(A, row, 2 * k + 1)));
                for n in 0..n_out {
                    let (b0, b1) = (make_fp32(self.bf16(B, k, 2 * n)), make_fp32(self.bf16(B, k, 2 * n + 1)));
                    temp[2 * n] = flush(a0.mul_add(b0, temp[2 * n]));
                    temp[2 * n + 1] = flush(a1.mul_add(b1, temp[2 * n + 1]));
                }
            }
            for n in 0..n_out {
                let sum = flush(temp[2 * n] + temp[2 * n + 1]);
                let c = flush(self.f32_at(C, row, n));
                self.set_f32(C, row, n, flush(c + sum));
            }
        }
    }

    fn dpbssd<const C: u8, const A: u8, const B: u8>(&mut self) {
        let (m, n_out, n_k) = self.chain("tdpbssd", C, A, B);
        for row in 0..m {
            for n in 0..n_out {
                let mut c = self.i32_at(C, row, n);
                for k in 0..n_k {
                    for t in 0..4 {
                        let a = self.data[usize::from(A)][row][4 * k + t] as i8;
                        let b = self.data[usize::from(B)][k][4 * n + t] as i8;
                        c = c.wrapping_add(i32::from(a) * i32::from(b));
                    }
                }
                self.set_f32(C, row, n, f32::from_bits(c as u32));
            }
        }
    }

    unsafe fn store<const T: u8>(&mut self, ptr: *mut u8, stride: usize) {
        let (rows, colsb) = self.shape(T);
        for r in 0..rows {
            // SAFETY: the caller's contract: rows × colsb bytes, `stride` apart, are writable.
            let dst = unsafe { std::slice::from_raw_parts_mut(ptr.add(r * stride), colsb) };
            dst.copy_from_slice(&self.data[usize::from(T)][r][..colsb]);
        }
    }

    fn release(&mut self) {
        *self = Model::default();
    }
}
