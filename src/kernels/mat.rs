//! `Mat`: the operand every matrix kernel takes — a stored matrix bound once to its dtype and
//! shape, checked when it is made (byte length, whole blocks and row groups, alignment), then
//! copied freely. Kernels trust its invariants and never re-validate it (the block views
//! `q8()` / `q4()` only split the checked bytes).

use crate::format::blocks::{Layout, Q4, Q8};
use crate::format::{DType, Packing};

/// A row-major matrix as stored: `rows × cols` elements of `dtype`, laid out as the dtype's row
/// of the format table says (`format::blocks` for the block types).
#[derive(Clone, Copy, Debug)]
pub struct Mat<'a> {
    dtype: DType,
    rows: usize,
    cols: usize,
    bytes: &'a [u8],
}

impl<'a> Mat<'a> {
    /// Bind `bytes` as a [rows, cols] matrix of `dtype`. The reason is returned when the bytes
    /// cannot be that matrix: wrong length, a row length that is not whole blocks, rows that are
    /// not whole row groups, or storage not aligned for the dtype's elements or scales.
    pub fn new(dtype: DType, rows: usize, cols: usize, bytes: &'a [u8]) -> Result<Mat<'a>, String> {
        let elements = rows.checked_mul(cols).ok_or("rows × cols overflows")?;
        if dtype.is_quantized() && cols == 0 {
            return Err(format!("a {dtype} matrix needs whole blocks of columns, not 0"));
        }
        if !cols.is_multiple_of(dtype.block()) {
            return Err(format!("row length {cols} is not a multiple of the {dtype} block {}", dtype.block()));
        }
        if !cols.is_multiple_of(dtype.col_group()) {
            return Err(format!(
                "row length {cols} is not a multiple of the {dtype} column group {}",
                dtype.col_group()
            ));
        }
        if !rows.is_multiple_of(dtype.row_group()) {
            return Err(format!("{rows} rows are not a multiple of the {dtype} row group {}", dtype.row_group()));
        }
        let want = dtype.bytes_for(elements as u64);
        if want != Some(bytes.len() as u64) {
            return Err(format!("{} bytes for {rows} × {cols} {dtype}, which needs {want:?}", bytes.len()));
        }
        let align = dtype.info().align as usize;
        if !(bytes.as_ptr() as usize).is_multiple_of(align) {
            return Err(format!("{dtype} storage is not {align}-byte aligned"));
        }
        Ok(Mat { dtype, rows, cols, bytes })
    }

    /// A [rows, cols] f32 matrix over `x` (whose length must be rows·cols).
    pub fn f32s(x: &'a [f32], rows: usize, cols: usize) -> Mat<'a> {
        assert_eq!(rows.checked_mul(cols), Some(x.len()), "Mat::f32s: {} values for {rows} × {cols}", x.len());
        // SAFETY: f32 has no padding and every byte of it is initialised.
        let bytes = unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u8>(), x.len() * 4) };
        Mat { dtype: DType::F32, rows, cols, bytes }
    }

    /// A [rows, cols] f16 or bf16 matrix over the bits in `x` (length rows·cols).
    pub fn halves(dtype: DType, x: &'a [u16], rows: usize, cols: usize) -> Mat<'a> {
        assert!(matches!(dtype, DType::F16 | DType::BF16), "Mat::halves takes f16 or bf16, not {dtype}");
        assert_eq!(rows.checked_mul(cols), Some(x.len()), "Mat::halves: {} values for {rows} × {cols}", x.len());
        // SAFETY: u16 has no padding and every byte of it is initialised.
        let bytes = unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u8>(), x.len() * 2) };
        Mat { dtype, rows, cols, bytes }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Number of elements (rows · cols).
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// True when the matrix holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The stored bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The elements of an f32 matrix.
    pub fn as_f32(&self) -> &'a [f32] {
        assert_eq!(self.dtype, DType::F32, "as_f32 on a {} matrix", self.dtype);
        // SAFETY: `new` checked 4-byte alignment and the length; any bits are a valid f32.
        unsafe { std::slice::from_raw_parts(self.bytes.as_ptr().cast::<f32>(), self.len()) }
    }

    /// The element bits of an f16 or bf16 matrix, or of a bf16r32 one in its tile order
    /// (`format::tiles`).
    pub fn as_u16(&self) -> &'a [u16] {
        assert_eq!(self.float_size(), 2, "as_u16 on a {} matrix", self.dtype);
        // SAFETY: `new` checked 2-byte alignment and the length; any bits are a valid u16.
        unsafe { std::slice::from_raw_parts(self.bytes.as_ptr().cast::<u16>(), self.len()) }
    }

    fn float_size(&self) -> usize {
        self.dtype.float_size().unwrap_or(0) as usize
    }

    /// Where a block matrix keeps its blocks.
    pub fn layout(&self) -> Layout {
        self.dtype.layout(self.cols)
    }

    /// The regions of a q8 or q8r8 matrix.
    pub fn q8(&self) -> Q8<'a> {
        assert_eq!(self.dtype.encoding(), DType::Q8, "q8 view of a {} matrix", self.dtype);
        Q8::from_bytes(self.bytes, self.len(), self.layout()).expect("a bound q8 matrix splits")
    }

    /// The regions of a q4 or q4r8 matrix.
    pub fn q4(&self) -> Q4<'a> {
        assert_eq!(self.dtype.encoding(), DType::Q4, "q4 view of a {} matrix", self.dtype);
        Q4::from_bytes(self.bytes, self.len(), self.layout()).expect("a bound q4 matrix splits")
    }

    /// out = elements [start, start + out.len()) as f32 (the format's reference meaning of the
    /// bytes; block types need both bounds on block boundaries).
    pub fn dequantize(&self, start: usize, out: &mut [f32]) {
        assert!(start + out.len() <= self.len(), "dequantize past the end of a {} × {} matrix", self.rows, self.cols);
        let b = self.dtype.block();
        assert!(
            start.is_multiple_of(b) && out.len().is_multiple_of(b),
            "dequantize of a {} matrix off its blocks",
            self.dtype
        );
        self.dtype.dequantize(self.bytes, self.cols, start, out)
    }

    /// Row `r` as f32 into `out` (length cols): embedding lookup.
    pub fn row_to_f32(&self, r: usize, out: &mut [f32]) {
        self.dequantize(r * self.cols, &mut out[..self.cols])
    }

    /// Hint the cache to start loading elements [k0, k1) of row `r`. Only a hint: nothing is
    /// read, so any range is harmless; no effect off x86-64.
    #[inline]
    pub(crate) fn prefetch(&self, r: usize, k0: usize, k1: usize) {
        let (start, bytes) = self.span(r, k0, k1);
        #[cfg(target_arch = "x86_64")]
        for off in (0..bytes).step_by(64) {
            use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // SAFETY: a prefetch never faults and reads nothing architecturally.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(off).cast()) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (start, bytes);
    }

    /// First byte and byte count holding elements [k0, k1) of row `r` (for an interleaved block
    /// matrix: the first row of a group asks for all 8 rows' units, the others for nothing).
    fn span(&self, r: usize, k0: usize, k1: usize) -> (*const u8, usize) {
        let base = self.bytes.as_ptr();
        let info = self.dtype.info();
        let (block, block_bytes) = (info.block as usize, info.block_bytes as usize);
        let first = (r * self.cols + k0) / block;
        // Bytes of one row's block in the stream the row range reads (mxfp4r8's and the K-quant
        // r8 units hold whole blocks, q8r8 / q4r8's their quants).
        let (quant_bytes, group) = match info.packing {
            Packing::Split { quant_bytes } => (quant_bytes as usize, self.dtype.row_group()),
            // Whole blocks in interleaved units (`format::kr8`).
            Packing::Blocks if self.dtype.is_interleaved() => (block_bytes, self.dtype.row_group()),
            // A bf16r32 row is spread over its group's units: no one range to hint.
            Packing::Elements if self.dtype.is_interleaved() => return (base, 0),
            Packing::Elements | Packing::Blocks => {
                return (base.wrapping_add(first * block_bytes), (k1 - k0) / block * block_bytes)
            }
        };
        match self.layout() {
            Layout::Interleaved { .. } if r.is_multiple_of(group) => {
                let unit = (r / group * (self.cols / block) + k0 / block) * group * quant_bytes;
                (base.wrapping_add(unit), (k1 - k0) / block * group * quant_bytes)
            }
            Layout::Interleaved { .. } => (base, 0),
            Layout::Rows => (base.wrapping_add(first * quant_bytes), (k1 - k0) / block * quant_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_checks_length_blocks_groups_and_alignment() {
        let q4 = DType::Q4R8.encode(&[0.5; 8 * 64], 64);
        assert!(Mat::new(DType::Q4R8, 8, 64, &q4).is_ok());
        assert!(Mat::new(DType::Q4R8, 8, 64, &q4[..q4.len() - 2]).unwrap_err().contains("bytes"));
        // 5 rows labelled interleaved: the kernels would read whole 8-row units.
        let ragged = DType::Q4.encode(&[0.5; 5 * 32], 32);
        assert!(Mat::new(DType::Q4R8, 5, 32, &ragged).unwrap_err().contains("row group"));
        // 64 quants of 2 rows × 32 columns but a single scale.
        assert!(Mat::new(DType::Q8, 2, 32, &[1u8; 66]).unwrap_err().contains("bytes"));
        assert!(Mat::new(DType::Q8, 1, 48, &[0u8; 51]).unwrap_err().contains("block"));
        let f = [0f32; 5];
        // SAFETY: 5 initialised f32 are 20 readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(f.as_ptr().cast::<u8>(), 20) };
        assert!(Mat::new(DType::F32, 1, 4, &bytes[1..17]).unwrap_err().contains("aligned"));
        assert_eq!(Mat::new(DType::F32, 1, 4, &bytes[4..20]).unwrap().as_f32(), &[0f32; 4]);
    }
}
