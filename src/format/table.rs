//! Tensor records: the fixed 96-byte entries of the tensor table, decoded with every field
//! checked on its own (shape, dtype, byte length, alignment). Cross-record rules (order, gaps,
//! overlaps) are checked in `parse`.

use super::le::{u32_at, u64_at};
use super::{DType, EXPERT_ALIGN, TENSOR_ALIGN};
use crate::error::{Error, Result};

/// Bytes of one record.
pub const RECORD_SIZE: u64 = 96;
/// Most dimensions a tensor may have.
pub const MAX_NDIM: usize = 4;
/// Longest tensor name, in bytes.
pub const MAX_NAME_LEN: u32 = 256;
/// Largest single dimension accepted (2^40).
const MAX_DIM: u64 = 1 << 40;
/// Dtype ids earlier builds wrote for layouts this one no longer reads (no dtype has them), and
/// what they held: such a file is refused with a request to convert it again.
pub const RETIRED: [(u32, &str); 1] = [(25, "q6_kr8 in an earlier build's unit layout")];

fn retired(id: u32) -> Option<&'static str> {
    RETIRED.iter().find(|r| r.0 == id).map(|r| r.1)
}

/// The role of a tensor in the layout rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorKind {
    /// Any tensor: 64-byte aligned.
    Plain,
    /// A router ([n_experts, hidden]); routers come first, contiguously.
    Router,
    /// An expert stack [n_experts, rows, cols], each expert 4096-byte aligned.
    Experts,
}

impl TensorKind {
    fn from_id(id: u32) -> Option<TensorKind> {
        match id {
            0 => Some(TensorKind::Plain),
            1 => Some(TensorKind::Router),
            2 => Some(TensorKind::Experts),
            _ => None,
        }
    }

    pub(crate) fn id(self) -> u32 {
        match self {
            TensorKind::Plain => 0,
            TensorKind::Router => 1,
            TensorKind::Experts => 2,
        }
    }

    /// Required alignment of the tensor's first byte.
    pub fn align(self) -> u64 {
        match self {
            TensorKind::Experts => EXPERT_ALIGN,
            _ => TENSOR_ALIGN,
        }
    }
}

/// The name of record `index`: 1..=256 bytes of UTF-8 without NUL inside the string table.
fn decode_name(index: usize, rec: &[u8], strings: &[u8]) -> Result<String> {
    let (name_off, name_len) = (u64::from(u32_at(rec, 0)), u32_at(rec, 4));
    if name_len == 0 {
        return Err(Error::BadTensorName { index, reason: "empty name" });
    }
    if name_len > MAX_NAME_LEN {
        return Err(Error::BadTensorName { index, reason: "name longer than 256 bytes" });
    }
    let end = name_off + u64::from(name_len);
    let raw = strings
        .get(name_off as usize..end as usize)
        .ok_or(Error::BadTensorName { index, reason: "name runs past the string table" })?;
    let name = std::str::from_utf8(raw).map_err(|_| Error::BadTensorName { index, reason: "name is not UTF-8" })?;
    if name.contains('\0') {
        return Err(Error::BadTensorName { index, reason: "name contains NUL" });
    }
    Ok(name.to_string())
}

/// The shape of a record: 1..=4 dimensions, each in 1..=2^40, unused ones 0.
fn decode_shape(name: &str, rec: &[u8]) -> Result<Vec<u64>> {
    let ndim = u32_at(rec, 12) as usize;
    if ndim == 0 || ndim > MAX_NDIM {
        return Err(Error::shape(name, format!("ndim {ndim} outside 1..={MAX_NDIM}")));
    }
    let dims: Vec<u64> = (0..MAX_NDIM).map(|i| u64_at(rec, 16 + 8 * i)).collect();
    if let Some(d) = dims[ndim..].iter().find(|&&d| d != 0) {
        return Err(Error::shape(name, format!("unused dimension holds {d}, must be 0")));
    }
    let shape = dims[..ndim].to_vec();
    if shape.contains(&0) {
        return Err(Error::shape(name, "a dimension is 0"));
    }
    if let Some(&d) = shape.iter().find(|&&d| d > MAX_DIM) {
        return Err(Error::shape(name, format!("dimension {d} is absurd (> 2^40)")));
    }
    Ok(shape)
}

/// One decoded and individually validated tensor record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorRecord {
    pub name: String,
    pub dtype: DType,
    /// Dimensions, outermost first (1..=4 of them).
    pub shape: Vec<u64>,
    pub data_offset: u64,
    pub byte_length: u64,
    /// Bytes between consecutive experts (expert stacks only, else 0).
    pub expert_stride: u64,
    pub checksum: u64,
    pub group_size: u32,
    pub kind: TensorKind,
}

impl TensorRecord {
    /// Number of elements.
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Matrices stored: the experts of a stack, else 1.
    pub fn units(&self) -> u64 {
        match self.kind {
            TensorKind::Experts => self.shape[0],
            _ => 1,
        }
    }

    /// Elements of one expert's matrix (expert stacks), or of the whole tensor.
    pub fn unit_elements(&self) -> u64 {
        self.elements() / self.units().max(1)
    }

    /// Bytes of one expert's matrix (expert stacks), or of the whole tensor. Derived from the
    /// layout rule byte_length = expert_stride × (units − 1) + unit bytes, which `decode` and
    /// the writer's plan both guarantee.
    pub fn unit_bytes(&self) -> u64 {
        self.byte_length.saturating_sub(self.expert_stride.saturating_mul(self.units().saturating_sub(1)))
    }

    /// End offset (exclusive) of the data.
    pub fn end(&self) -> u64 {
        self.data_offset + self.byte_length
    }

    /// Expected byte length and stride of a tensor with this shape/dtype/kind; `None` on overflow.
    pub fn layout_for(dtype: DType, shape: &[u64], kind: TensorKind) -> Option<(u64, u64)> {
        match kind {
            TensorKind::Experts => {
                let unit = dtype.bytes_for(shape.get(1..)?.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?)?;
                let stride = super::align_up(unit, EXPERT_ALIGN)?;
                let n = shape[0];
                let len = stride.checked_mul(n.checked_sub(1)?)?.checked_add(unit)?;
                Some((len, stride))
            }
            _ => {
                let elems = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
                Some((dtype.bytes_for(elems)?, 0))
            }
        }
    }

    /// The shape rule of block-quantised dtypes: a 2-D matrix (plain or router) or a 3-D expert
    /// stack, whose rows are whole groups (each matrix is then a self-contained block matrix).
    /// Float dtypes pass. The error is the reason, for the caller to attach to a tensor name.
    pub fn check_block_shape(dtype: DType, shape: &[u64], kind: TensorKind) -> std::result::Result<(), String> {
        if !dtype.is_quantized() && !dtype.is_interleaved() {
            return Ok(());
        }
        let ndim_ok = match kind {
            TensorKind::Experts => shape.len() == 3,
            TensorKind::Plain | TensorKind::Router => shape.len() == 2,
        };
        if !ndim_ok {
            return Err(format!(
                "a {dtype} tensor must be a 2-D matrix or a 3-D expert stack, not a {}-D {kind:?} tensor",
                shape.len()
            ));
        }
        let (cols, block) = (shape.last().copied().unwrap_or(0), dtype.block() as u64);
        if cols % block != 0 {
            return Err(format!("row length {cols} is not a multiple of the {dtype} group size {block}"));
        }
        let group_cols = dtype.col_group() as u64;
        if !cols.is_multiple_of(group_cols) {
            return Err(format!("row length {cols} is not a multiple of the {dtype} column group {group_cols}"));
        }
        let rows = shape[shape.len() - 2];
        let group_rows = dtype.row_group() as u64;
        if !rows.is_multiple_of(group_rows) {
            return Err(format!("{rows} rows are not a multiple of the {dtype} row group {group_rows}"));
        }
        Ok(())
    }

    /// Decode record `index` (its 96 bytes, at file offset `rec_offset`), resolving the name in `strings`.
    pub fn decode(index: usize, rec: &[u8], rec_offset: u64, strings: &[u8]) -> Result<TensorRecord> {
        let name = decode_name(index, rec, strings)?;
        let dtype_id = u32_at(rec, 8);
        let dtype = DType::from_id(dtype_id).ok_or_else(|| match retired(dtype_id) {
            Some(what) => Error::Unsupported {
                what: format!(
                    "tensor '{name}' is {what} (dtype id {dtype_id}): run `colibri convert` on its source again"
                ),
            },
            None => Error::UnknownDtype { tensor: name.clone(), id: dtype_id },
        })?;
        let shape = decode_shape(&name, rec)?;
        let kind_id = u32_at(rec, 84);
        let kind = TensorKind::from_id(kind_id)
            .ok_or_else(|| Error::shape(&name, format!("unknown tensor kind {kind_id}")))?;
        if kind == TensorKind::Experts && shape.len() != 3 {
            return Err(Error::shape(&name, "an expert stack must have 3 dimensions"));
        }
        if kind == TensorKind::Router && shape.len() != 2 {
            return Err(Error::shape(&name, "a router must have 2 dimensions"));
        }
        let group_size = u32_at(rec, 80);
        if group_size != dtype.group_size() {
            return Err(Error::shape(
                &name,
                if dtype.is_quantized() {
                    format!("group size {group_size} given for {dtype}, which is stored in groups of {}", dtype.block())
                } else {
                    format!("group size {group_size} given for float dtype {dtype}")
                },
            ));
        }
        Self::check_block_shape(dtype, &shape, kind).map_err(|reason| Error::shape(&name, reason))?;
        if shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).and_then(|n| dtype.bytes_for(n)).is_none() {
            return Err(Error::shape(&name, "element count overflows"));
        }
        if u64_at(rec, 88) != 0 {
            return Err(Error::NonZeroPadding {
                what: format!("reserved field of tensor '{name}'"),
                offset: rec_offset + 88,
            });
        }
        let r = TensorRecord {
            name,
            dtype,
            shape,
            data_offset: u64_at(rec, 48),
            byte_length: u64_at(rec, 56),
            expert_stride: u64_at(rec, 64),
            checksum: u64_at(rec, 72),
            group_size,
            kind,
        };
        r.check_layout()?;
        Ok(r)
    }

    /// The record's byte length and expert stride are what its shape, dtype and kind need, and
    /// its data is aligned for its kind.
    fn check_layout(&self) -> Result<()> {
        let (want_len, want_stride) = Self::layout_for(self.dtype, &self.shape, self.kind)
            .ok_or_else(|| Error::shape(&self.name, "byte length overflows"))?;
        if self.expert_stride != want_stride {
            return Err(Error::Layout {
                what: format!("expert stride of '{}'", self.name),
                expected: want_stride,
                found: self.expert_stride,
            });
        }
        if self.byte_length != want_len {
            return Err(Error::ByteLength { tensor: self.name.clone(), expected: want_len, found: self.byte_length });
        }
        if !self.data_offset.is_multiple_of(self.kind.align()) {
            return Err(Error::Misaligned {
                tensor: self.name.clone(),
                offset: self.data_offset,
                align: self.kind.align(),
            });
        }
        Ok(())
    }

    /// Encode into 96 bytes with `name_offset` into the string table.
    pub fn encode(&self, name_offset: u32) -> [u8; RECORD_SIZE as usize] {
        let mut b = [0u8; RECORD_SIZE as usize];
        b[0..4].copy_from_slice(&name_offset.to_le_bytes());
        b[4..8].copy_from_slice(&(self.name.len() as u32).to_le_bytes());
        b[8..12].copy_from_slice(&self.dtype.id().to_le_bytes());
        b[12..16].copy_from_slice(&(self.shape.len() as u32).to_le_bytes());
        for (i, d) in self.shape.iter().enumerate() {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&d.to_le_bytes());
        }
        b[48..56].copy_from_slice(&self.data_offset.to_le_bytes());
        b[56..64].copy_from_slice(&self.byte_length.to_le_bytes());
        b[64..72].copy_from_slice(&self.expert_stride.to_le_bytes());
        b[72..80].copy_from_slice(&self.checksum.to_le_bytes());
        b[80..84].copy_from_slice(&self.group_size.to_le_bytes());
        b[84..88].copy_from_slice(&self.kind.id().to_le_bytes());
        b
    }
}
