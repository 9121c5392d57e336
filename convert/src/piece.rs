//! A piece of a source tensor: the part of one checkpoint tensor that gives (part of) one
//! colibri tensor, and how its values lie there. Made by `sources` / `gpt_oss`, read by `stream`.

use super::fp8::BlockScale;
use super::safetensors::SrcTensor;
use std::sync::Arc;

/// A part of one source tensor holding `elements` values, from `byte_offset` on, laid out as
/// `layout` says.
#[derive(Clone, Debug)]
pub struct Piece {
    pub source: String,
    pub tensor: SrcTensor,
    pub byte_offset: u64,
    pub elements: u64,
    pub layout: PieceLayout,
    /// The scales of an fp8 source (`tensor` is float8_e4m3fn), dequantised on reading.
    pub scale: Option<Arc<BlockScale>>,
}

/// How a piece's values sit in its source tensor.
#[derive(Clone, Debug)]
pub enum PieceLayout {
    /// One after another.
    Contiguous,
    /// A [rows, cols] matrix whose element (r, c) is source element r·row_stride + c·col_stride
    /// counted from `byte_offset` (GPT-OSS's transposed, interleaved experts).
    Strided { rows: u64, cols: u64, row_stride: u64, col_stride: u64 },
    /// A [rows, cols] matrix stored contiguously and written transposed ([cols, rows]): MLA's
    /// W_UK (small: one head's).
    Transposed { rows: u64, cols: u64 },
    /// An MXFP4 matrix [rows, groups·32] in the HuggingFace layout: row r is row first_row +
    /// r·row_step of the `*_blocks` tensor (`tensor`, 16 bytes per block) and of its `*_scales`.
    Mxfp4 { scales_source: String, scales: SrcTensor, first_row: u64, row_step: u64, rows: u64, groups: u64 },
}

impl Piece {
    /// True when the piece holds MXFP4 blocks (stored as MXFP4 whatever the options).
    pub fn is_mxfp4(&self) -> bool {
        matches!(self.layout, PieceLayout::Mxfp4 { .. })
    }
}
