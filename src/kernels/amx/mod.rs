//! AMX-BF16 products of bf16 weights with bf16 activations (`Reduced` mode) and AMX-INT8
//! products of q8r8 / q4r8 weights with int8 activations (`int8`): the `amx` path, the default
//! where the CPU has AMX and Linux grants the tile state. Owns the tile abstraction — `Tiles`, the operations the kernels need,
//! with a hardware implementation (`hw::Hw`, x86-64 inline asm) and a software model of the
//! eight tile registers (`model::Model`, any CPU) — and the kernels written once against it
//! (`gemm`, `int8`). The choice of path is `dispatch`'s; the activations' rounding and panels are
//! `bf16act`'s.
//!
//! Every part but the tile instructions is tested on any CPU through the model (the int8
//! kernel's AVX-512 scaling on AVX-512 CPUs); the hardware tests (`amx_hardware`, ignored
//! elsewhere) have run both kernels on an Intel Xeon with AMX-BF16 / AMX-INT8, the int8 one
//! giving the VNNI kernel's and the model's bits (see docs/performance.md, "AMX").

pub(crate) mod attend;
#[cfg(test)]
pub(crate) mod attend_tests;
mod gemm;
#[cfg(target_arch = "x86_64")]
pub(crate) mod hw;
#[cfg(target_arch = "x86_64")]
mod int8;
#[cfg(all(test, target_arch = "x86_64"))]
mod int8_tests;
#[cfg(test)]
mod model;
mod operand;
mod sink;
mod split;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tiled_tests;

pub(crate) use gemm::gemm;

/// Register this thread's tile buffers now (`kernels::prepare_thread`).
pub(crate) fn prepare_thread() {
    gemm::prepare_thread();
    attend::scratch::prepare_thread();
}

/// Rows of a tile register.
pub const TILE_ROWS: usize = 16;
/// Bytes per row of a tile register.
pub const TILE_COLSB: usize = 64;
/// bf16 columns per row of a tile register (a bf16 A tile's step along the columns).
pub(crate) const TK: usize = TILE_COLSB / 2;

/// The 64-byte operand of `ldtilecfg` (palette 1): each register's rows and bytes per row;
/// a register with zero rows is unconfigured.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileConfig {
    pub palette: u8,
    pub start_row: u8,
    pub reserved: [u8; 14],
    pub colsb: [u16; 16],
    pub rows: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<TileConfig>() == 64);

impl TileConfig {
    /// Palette 1 with registers `full` configured to 16 rows × 64 bytes, the rest unused.
    pub fn full(full: std::ops::Range<usize>) -> TileConfig {
        let mut c = TileConfig { palette: 1, start_row: 0, reserved: [0; 14], colsb: [0; 16], rows: [0; 16] };
        for t in full {
            c.colsb[t] = TILE_COLSB as u16;
            c.rows[t] = TILE_ROWS as u8;
        }
        c
    }

    /// Palette 1 with register t shaped `shapes[t]` = (rows, bytes per row), the rest unused.
    pub fn shaped(shapes: &[(usize, usize)]) -> TileConfig {
        let mut c = TileConfig::full(0..0);
        assert!(shapes.len() <= 8, "{} tile shapes", shapes.len());
        for (t, &(rows, colsb)) in shapes.iter().enumerate() {
            assert!(rows <= TILE_ROWS && colsb <= TILE_COLSB, "tmm{t}: {rows} rows × {colsb} bytes");
            (c.rows[t], c.colsb[t]) = (rows as u8, colsb as u16);
        }
        c
    }
}

/// The tile operations of the GEMM, named as the instructions; registers are const parameters
/// (the hardware's register names are fixed in the instruction).
pub trait Tiles: Default {
    /// `ldtilecfg`: set every register's shape (and zero them).
    fn configure(&mut self, cfg: &TileConfig);
    /// `tilezero tmm{T}`.
    fn zero<const T: u8>(&mut self);
    /// `tileloadd tmm{T}, [ptr + stride]`: rows(T) rows of colsb(T) bytes, `stride` bytes apart.
    ///
    /// # Safety
    /// Those bytes must be readable.
    unsafe fn load<const T: u8>(&mut self, ptr: *const u8, stride: usize);
    /// `tdpbf16ps tmm{C}, tmm{A}, tmm{B}`: C[m][n] += Σ_k A.bf16[m][2k]·B.bf16[k][2n] +
    /// A.bf16[m][2k + 1]·B.bf16[k][2n + 1] (see `model` for the rounding).
    fn dpbf16ps<const C: u8, const A: u8, const B: u8>(&mut self);
    /// `tdpbssd tmm{C}, tmm{A}, tmm{B}`: C.i32[m][n] += Σ_k Σ_{t<4} A.i8[m][4k + t]·B.i8[k][4n + t]
    /// (signed bytes, i32 sums wrapping).
    fn dpbssd<const C: u8, const A: u8, const B: u8>(&mut self);
    /// `tilestored [ptr + stride], tmm{T}`.
    ///
    /// # Safety
    /// rows(T) rows of colsb(T) bytes, `stride` apart from `ptr`, must be writable.
    unsafe fn store<const T: u8>(&mut self, ptr: *mut u8, stride: usize);
    /// `tilerelease`: back to the unconfigured state.
    fn release(&mut self);
}
