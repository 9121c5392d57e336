//! Typed, zero-copy views of tensors borrowed from a mapping. A view is a record (dtype, shape,
//! expert stride) plus the bytes it covers; it never copies weights. Block-quantised views are
//! read as `kernels::quant` matrices (and dequantised only by the f32 accessors for tools).

use crate::format::{DType, TensorKind, TensorRecord};
use crate::kernels::quant::{self, Layout, Q4, Q8};
use half::{bf16, f16};

/// A borrowed tensor.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    pub name: &'a str,
    pub dtype: DType,
    pub shape: &'a [u64],
    pub kind: TensorKind,
    /// Bytes between experts of a stack (0 otherwise).
    pub expert_stride: usize,
    /// All bytes of the tensor (for stacks: including the zero gaps between experts).
    pub bytes: &'a [u8],
}

/// Element data of a view, typed. A block-quantised view that is not one matrix (a whole
/// expert stack, whose bytes include the gaps) gives an empty block matrix.
#[derive(Clone, Copy, Debug)]
pub enum Elements<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
    Q8(Q8<'a>),
    Q4(Q4<'a>),
}

impl Elements<'_> {
    /// Number of elements held.
    pub fn len(&self) -> usize {
        match self {
            Elements::F32(x) => x.len(),
            Elements::F16(x) => x.len(),
            Elements::BF16(x) => x.len(),
            Elements::Q8(m) => m.qs.len(),
            Elements::Q4(m) => m.qs.len() * 2,
        }
    }

    /// True when no element is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<'a> TensorView<'a> {
    /// View `rec` inside `file` (already validated by `format::parse`).
    pub fn new(rec: &'a TensorRecord, file: &'a [u8]) -> TensorView<'a> {
        let start = rec.data_offset as usize;
        let end = start + rec.byte_length as usize;
        TensorView {
            name: &rec.name,
            dtype: rec.dtype,
            shape: &rec.shape,
            kind: rec.kind,
            expert_stride: rec.expert_stride as usize,
            bytes: &file[start..end],
        }
    }

    /// Number of experts of a stack (1 for any other tensor).
    pub fn n_experts(&self) -> usize {
        if self.kind == TensorKind::Experts {
            self.shape[0] as usize
        } else {
            1
        }
    }

    /// Expert `e` of a stack as a 2-D view [rows, cols] (None when out of range or not a stack).
    pub fn expert(&self, e: usize) -> Option<TensorView<'a>> {
        if self.kind != TensorKind::Experts || e >= self.n_experts() {
            return None;
        }
        let unit = usize::try_from(self.dtype.bytes_for(self.shape[1].checked_mul(self.shape[2])?)?).ok()?;
        let start = e * self.expert_stride;
        Some(TensorView {
            name: self.name,
            dtype: self.dtype,
            shape: &self.shape[1..],
            kind: TensorKind::Plain,
            expert_stride: 0,
            bytes: self.bytes.get(start..start + unit)?,
        })
    }

    /// Number of rows (first dimension of a 2-D view; 1 for vectors).
    pub fn rows(&self) -> usize {
        if self.shape.len() >= 2 {
            self.shape[self.shape.len() - 2] as usize
        } else {
            1
        }
    }

    /// Length of a row (last dimension).
    pub fn cols(&self) -> usize {
        *self.shape.last().unwrap_or(&1) as usize
    }

    /// Elements of the matrix (product of the shape).
    fn matrix_elements(&self) -> usize {
        self.shape.iter().product::<u64>() as usize
    }

    /// Where a block matrix keeps its blocks (row-major unless the dtype is interleaved; a
    /// matrix whose rows are not whole groups gets no valid layout and reads as empty).
    fn layout(&self) -> Layout {
        if self.dtype.is_interleaved() {
            Layout::interleaved(self.rows(), self.cols()).unwrap_or(Layout::Interleaved { nb: 0 })
        } else {
            Layout::Rows
        }
    }

    /// The elements, typed (plain tensors and single experts; float stacks include their gaps).
    pub fn elements(&self) -> Elements<'a> {
        // Data offsets are multiples of 64 and mappings are page-aligned, so these casts are
        // aligned; `align_to` keeps this safe even if that ever stopped holding (empty prefix).
        match self.dtype {
            DType::F32 => Elements::F32(cast(self.bytes)),
            DType::F16 => Elements::F16(cast(self.bytes)),
            DType::BF16 => Elements::BF16(cast(self.bytes)),
            DType::Q8 | DType::Q8R8 => {
                Elements::Q8(Q8::from_bytes(self.bytes, self.matrix_elements(), self.layout()).unwrap_or(Q8 {
                    qs: &[],
                    d: &[],
                    layout: Layout::Rows,
                }))
            }
            DType::Q4 | DType::Q4R8 => {
                Elements::Q4(Q4::from_bytes(self.bytes, self.matrix_elements(), self.layout()).unwrap_or(Q4 {
                    qs: &[],
                    d: &[],
                    layout: Layout::Rows,
                }))
            }
        }
    }

    /// The elements as a kernel matrix operand (plain tensors and single experts).
    pub fn mat(&self) -> crate::kernels::Mat<'a> {
        use crate::kernels::Mat;
        match self.elements() {
            Elements::F32(x) => Mat::F32(x),
            Elements::F16(_) => Mat::F16(cast(self.bytes)),
            Elements::BF16(_) => Mat::BF16(cast(self.bytes)),
            Elements::Q8(m) => Mat::Q8(m),
            Elements::Q4(m) => Mat::Q4(m),
        }
    }

    /// The f32 elements if the dtype is F32.
    pub fn as_f32(&self) -> Option<&'a [f32]> {
        match self.elements() {
            Elements::F32(x) => Some(x),
            _ => None,
        }
    }

    /// Elements `start .. start + out.len()` (row-major, of a plain tensor or single expert)
    /// converted to f32 into `out`; block types are dequantised, so both bounds must then be
    /// multiples of the group. `None` when the range is outside the tensor or not whole blocks.
    pub fn read_f32(&self, start: usize, out: &mut [f32]) -> Option<()> {
        let end = start.checked_add(out.len())?;
        let elements = self.elements();
        if end > elements.len() {
            return None;
        }
        let whole_blocks = start % quant::QK == 0 && out.len() % quant::QK == 0;
        match elements {
            Elements::F32(x) => out.copy_from_slice(&x[start..end]),
            Elements::F16(x) => out.iter_mut().zip(&x[start..end]).for_each(|(o, v)| *o = v.to_f32()),
            Elements::BF16(x) => out.iter_mut().zip(&x[start..end]).for_each(|(o, v)| *o = v.to_f32()),
            Elements::Q8(m) => quant::dequantize_q8(m, start, whole_blocks.then_some(out)?),
            Elements::Q4(m) => quant::dequantize_q4(m, start, whole_blocks.then_some(out)?),
        }
        Some(())
    }

    /// Row `r` of a 2-D view converted to f32 (for tools and tests; not a hot path).
    pub fn row_f32(&self, r: usize) -> Option<Vec<f32>> {
        let mut row = vec![0f32; self.cols()];
        self.read_f32(r.checked_mul(self.cols())?, &mut row)?;
        Some(row)
    }

    /// All elements converted to f32, experts of a stack concatenated without their gaps.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        if self.kind == TensorKind::Experts {
            return (0..self.n_experts()).filter_map(|e| self.expert(e)).flat_map(|v| v.to_f32_vec()).collect();
        }
        let mut all = vec![0f32; self.elements().len()];
        match self.read_f32(0, &mut all) {
            Some(()) => all,
            None => Vec::new(),
        }
    }
}

/// Reinterpret bytes as a slice of plain-old-data numbers (2- or 4-byte float types).
fn cast<T: Pod>(bytes: &[u8]) -> &[T] {
    // SAFETY: T is a plain number type valid for any bit pattern; align_to only returns an
    // aligned middle part.
    let (pre, mid, _) = unsafe { bytes.align_to::<T>() };
    if pre.is_empty() {
        mid
    } else {
        &[]
    }
}

/// Types valid for any bit pattern.
trait Pod: Copy {}
impl Pod for f32 {}
impl Pod for f16 {}
impl Pod for bf16 {}
impl Pod for u16 {}
