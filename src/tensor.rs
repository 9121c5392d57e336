//! Zero-copy views of tensors borrowed from a mapping: a record (name, dtype, shape, expert
//! stride) plus the bytes it covers. `mat()` binds a plain tensor or one expert as a kernel
//! operand (checked once, when the model is opened); the f32 accessors are for tools and tests.

use crate::error::{Error, Result};
use crate::format::{DType, TensorKind, TensorRecord};
use crate::kernels::Mat;

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

    /// Elements of the view (product of the shape; a stack counts every expert).
    pub fn len(&self) -> usize {
        self.shape.iter().product::<u64>() as usize
    }

    /// True when the view holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The tensor (a plain tensor, a vector as one row, or one expert) as a kernel operand.
    /// An expert stack as a whole is not one matrix: bind its experts.
    pub fn mat(&self) -> Result<Mat<'a>> {
        if self.kind == TensorKind::Experts || self.shape.len() > 2 {
            return Err(self.mismatch("an expert stack is bound one expert at a time".into()));
        }
        Mat::new(self.dtype, self.rows(), self.cols(), self.bytes).map_err(|reason| self.mismatch(reason))
    }

    /// Every expert of a stack bound as a kernel operand, in order.
    pub fn expert_mats(&self) -> Result<Vec<Mat<'a>>> {
        if self.kind != TensorKind::Experts {
            return Err(self.mismatch("not an expert stack".into()));
        }
        (0..self.n_experts())
            .map(|e| {
                let x = self.expert(e).ok_or_else(|| self.mismatch(format!("expert {e} runs past the tensor")))?;
                x.mat()
            })
            .collect()
    }

    fn mismatch(&self, reason: String) -> Error {
        Error::TensorMismatch { name: self.name.to_string(), reason }
    }

    /// Elements `start .. start + out.len()` (row-major, of a plain tensor or single expert)
    /// converted to f32 into `out`; block types are dequantised, so both bounds must then be
    /// whole blocks. `None` when the range is outside the tensor or not whole blocks, or the view
    /// is a whole stack.
    pub fn read_f32(&self, start: usize, out: &mut [f32]) -> Option<()> {
        let m = self.mat().ok()?;
        let end = start.checked_add(out.len())?;
        let block = self.dtype.block();
        if end > m.len() || !start.is_multiple_of(block) || !out.len().is_multiple_of(block) {
            return None;
        }
        m.dequantize(start, out);
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
        let mut all = vec![0f32; self.len()];
        match self.read_f32(0, &mut all) {
            Some(()) => all,
            None => Vec::new(),
        }
    }
}
