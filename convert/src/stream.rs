//! Streaming one planned tensor from its source pieces into the writer, in bounded chunks:
//! float targets are cast chunk by chunk; block targets are quantised matrix by matrix (one
//! expert of a stack, or a plain tensor's pieces — row runs — together), quants as they come,
//! then the matrix's scales.

use super::cast;
use super::piece::{Piece, PieceLayout};
use super::quantize::MatrixQuantizer;
use super::safetensors::Checkpoint;
use super::sources::Resolved;
use crate::error::{fail, Result};
use colibri::format::{mxfp4, tiles, DType, FileWriter, PlannedTensor, TensorKind};

/// Source bytes read per step: bounds the converter's buffers (a multiple of every block's
/// source bytes, 32 × 4).
const CHUNK: usize = 8 << 20;

/// Reusable buffers of the streaming loop.
#[derive(Default)]
pub struct Streamer {
    src: Vec<u8>,
    wide: Vec<f32>,
    out: Vec<u8>,
    /// A bf16r32 tensor's rows until they make a whole group of 32 (`grouped`).
    rows: Vec<u8>,
}

impl Streamer {
    /// Write tensor `p` (resolved as `r`) through `writer`; `progress` gets the bytes written.
    pub fn tensor(
        &mut self,
        ck: &Checkpoint,
        writer: &mut FileWriter,
        r: &Resolved,
        p: &PlannedTensor,
        progress: &dyn Fn(u64),
    ) -> Result<()> {
        writer.begin(&p.name)?;
        if p.dtype.is_quantized() && !r.pieces.iter().any(Piece::is_mxfp4) {
            // One matrix per expert of a stack; the row runs of a de-grouped plain tensor make one.
            let matrices: Vec<&[Piece]> = match p.kind {
                TensorKind::Experts => r.pieces.chunks(1).collect(),
                _ => vec![&r.pieces[..]],
            };
            for pieces in matrices {
                self.quantised_matrix(ck, writer, pieces, p, progress)?;
            }
        } else {
            self.rows.clear();
            for piece in &r.pieces {
                if piece.is_mxfp4() {
                    self.mxfp4_piece(ck, writer, piece, p, progress)?;
                } else if let PieceLayout::Transposed { rows, cols } = piece.layout {
                    self.transposed_piece(ck, writer, piece, [rows, cols], p, progress)?;
                } else {
                    self.float_piece(ck, writer, piece, p, progress)?;
                }
            }
            if !self.rows.is_empty() {
                return Err(fail(format!("internal: {} ends inside a group of 32 rows", p.name)));
            }
        }
        Ok(writer.end()?)
    }

    /// `self.wide` = `self.src` (the piece's elements from `first` on) as f32: fp8 codes times
    /// their tiles' scales, other types widened.
    fn widen(&mut self, piece: &Piece, first: u64) {
        match &piece.scale {
            Some(s) => {
                let at = piece.byte_offset / piece.tensor.dtype.size() as u64 + first;
                s.dequantise(&self.src, at, &mut self.wide)
            }
            None => cast::widen(piece.tensor.dtype, &self.src, &mut self.wide),
        }
    }

    /// Calls `step(self, chunk_start_element)` with `self.src` holding each source chunk.
    fn chunks(
        &mut self,
        ck: &Checkpoint,
        piece: &Piece,
        mut step: impl FnMut(&mut Self, u64) -> Result<()>,
    ) -> Result<()> {
        if let PieceLayout::Strided { .. } = piece.layout {
            self.gather(ck, piece)?;
            return step(self, 0);
        }
        let esize = piece.tensor.dtype.size() as u64;
        let total = piece.elements * esize;
        let mut done = 0u64;
        while done < total {
            let n = (total - done).min(CHUNK as u64) as usize;
            self.src.resize(n, 0);
            ck.read(&piece.tensor, piece.byte_offset + done, &mut self.src)?;
            step(self, done / esize)?;
            done += n as u64;
        }
        Ok(())
    }

    /// `self.src` = the elements of a strided piece in row-major order (one read of the span
    /// they lie in: one expert of a stack, or a whole bias tensor).
    fn gather(&mut self, ck: &Checkpoint, piece: &Piece) -> Result<()> {
        let PieceLayout::Strided { rows, cols, row_stride, col_stride } = piece.layout else {
            return Err(fail("internal: gather of a contiguous piece"));
        };
        let esize = piece.tensor.dtype.size();
        let span = ((rows.max(1) - 1) * row_stride + (cols.max(1) - 1) * col_stride + 1) as usize * esize;
        let mut raw = vec![0u8; span];
        ck.read(&piece.tensor, piece.byte_offset, &mut raw)?;
        self.src.clear();
        for r in 0..rows {
            for c in 0..cols {
                let at = (r * row_stride + c * col_stride) as usize * esize;
                self.src.extend_from_slice(&raw[at..at + esize]);
            }
        }
        Ok(())
    }

    /// An MXFP4 piece in the HuggingFace layout, repacked block by block into ggml's (the bytes
    /// of a colibri mxfp4 matrix), one row at a time.
    fn mxfp4_piece(
        &mut self,
        ck: &Checkpoint,
        writer: &mut FileWriter,
        piece: &Piece,
        p: &PlannedTensor,
        progress: &dyn Fn(u64),
    ) -> Result<()> {
        let PieceLayout::Mxfp4 { scales, first_row, row_step, rows, groups, .. } = &piece.layout else {
            return Err(fail("internal: mxfp4_piece of a float piece"));
        };
        if p.dtype.encoding() != DType::Mxfp4 {
            return Err(fail(format!("internal: {} planned as {} from MXFP4 blocks", p.name, p.dtype)));
        }
        // Rows written together: a row group for mxfp4r8 (interleaved once complete), else one.
        let group = p.dtype.row_group() as u64;
        if !rows.is_multiple_of(group) {
            return Err(fail(format!("internal: {} planned as {} with {rows} rows", p.name, p.dtype)));
        }
        let g = *groups as usize;
        let (mut blocks, mut sc) = (vec![0u8; 16 * g], vec![0u8; g]);
        self.out.clear();
        for r in 0..*rows {
            let src = first_row + r * row_step;
            ck.read(&piece.tensor, src * 16 * *groups, &mut blocks)?;
            ck.read(scales, src * *groups, &mut sc)?;
            for (b, &s) in blocks.chunks_exact(16).zip(&sc) {
                let hf: &[u8; 16] = b.try_into().map_err(|_| fail("internal: a 16-byte block"))?;
                self.out.extend_from_slice(&mxfp4::from_hf_block(hf, s));
            }
            if (r + 1) % group == 0 {
                if p.dtype.is_interleaved() {
                    self.src.resize(self.out.len(), 0);
                    mxfp4::interleave(&self.out, g, &mut self.src);
                    std::mem::swap(&mut self.src, &mut self.out);
                }
                writer.write(&self.out)?;
                progress(self.out.len() as u64);
                self.out.clear();
            }
        }
        Ok(())
    }

    fn float_piece(
        &mut self,
        ck: &Checkpoint,
        writer: &mut FileWriter,
        piece: &Piece,
        p: &PlannedTensor,
        progress: &dyn Fn(u64),
    ) -> Result<()> {
        // bf16r32 is bf16's values, written a group of 32 rows at a time in tile order.
        let values = p.dtype.encoding();
        self.chunks(ck, piece, |s, first| {
            let converted = if piece.scale.is_some() {
                s.widen(piece, first);
                cast::from_f32(values, &s.wide, &mut s.out)
            } else {
                cast::convert(piece.tensor.dtype, values, &s.src, &mut s.out)
            };
            converted.map_err(|o| {
                fail(format!(
                    "{} (from {}): value {} at element {} does not fit {}; convert with --dtype bf16 or f32",
                    p.name,
                    piece.source,
                    o.value,
                    first + o.index as u64,
                    p.dtype
                ))
            })?;
            if p.dtype.is_interleaved() {
                return s.grouped(writer, p, progress);
            }
            writer.write(&s.out)?;
            progress(s.out.len() as u64);
            Ok(())
        })
    }

    /// `self.out` (bf16 rows of a bf16r32 tensor, in order) added to the rows held; every whole
    /// group of 32 rows written in tile order (`format::tiles`).
    fn grouped(&mut self, writer: &mut FileWriter, p: &PlannedTensor, progress: &dyn Fn(u64)) -> Result<()> {
        let cols = p.shape.last().copied().unwrap_or(0) as usize;
        let group = tiles::TILE * cols * 2;
        if p.dtype != DType::Bf16R32 || group == 0 {
            return Err(fail(format!("internal: {} planned as {} from float values", p.name, p.dtype)));
        }
        self.rows.extend_from_slice(&self.out);
        let whole = self.rows.len() / group * group;
        let bits: Vec<u16> = self.rows[..whole].chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
        let mut tiled = vec![0u16; bits.len()];
        tiles::from_rows(&bits, cols, &mut tiled);
        self.out.clear();
        self.out.extend(tiled.iter().flat_map(|b| b.to_le_bytes()));
        self.rows.drain(..whole);
        writer.write(&self.out)?;
        progress(self.out.len() as u64);
        Ok(())
    }

    /// A piece written transposed (small: one head's W_UK), as a float type.
    fn transposed_piece(
        &mut self,
        ck: &Checkpoint,
        writer: &mut FileWriter,
        piece: &Piece,
        [rows, cols]: [u64; 2],
        p: &PlannedTensor,
        progress: &dyn Fn(u64),
    ) -> Result<()> {
        let (rows, cols) = (rows as usize, cols as usize);
        if p.dtype.is_quantized() || p.dtype.is_interleaved() {
            return Err(fail(format!("internal: {} is transposed and cannot be stored as {}", p.name, p.dtype)));
        }
        self.src.resize(piece.elements as usize * piece.tensor.dtype.size(), 0);
        ck.read(&piece.tensor, piece.byte_offset, &mut self.src)?;
        self.widen(piece, 0);
        let t: Vec<f32> = (0..rows * cols).map(|i| self.wide[(i % rows) * cols + i / rows]).collect();
        cast::from_f32(p.dtype, &t, &mut self.out).map_err(|o| {
            fail(format!("{} (from {}): value {} does not fit {}", p.name, piece.source, o.value, p.dtype))
        })?;
        writer.write(&self.out)?;
        progress(self.out.len() as u64);
        Ok(())
    }

    /// One matrix from its pieces (consecutive row runs): quants as they come, then its scales.
    fn quantised_matrix(
        &mut self,
        ck: &Checkpoint,
        writer: &mut FileWriter,
        pieces: &[Piece],
        p: &PlannedTensor,
        progress: &dyn Fn(u64),
    ) -> Result<()> {
        let cols = p.shape.last().copied().unwrap_or(0) as usize;
        let mut q = MatrixQuantizer::new(p.dtype, cols);
        for piece in pieces {
            self.quantised_rows(ck, writer, piece, p, &mut q, progress)?;
        }
        q.finish(&mut self.out);
        writer.write(&self.out)?;
        progress(self.out.len() as u64);
        Ok(())
    }

    fn quantised_rows(
        &mut self,
        ck: &Checkpoint,
        writer: &mut FileWriter,
        piece: &Piece,
        p: &PlannedTensor,
        q: &mut MatrixQuantizer,
        progress: &dyn Fn(u64),
    ) -> Result<()> {
        self.chunks(ck, piece, |s, first| {
            s.widen(piece, first);
            q.push(&s.wide, &mut s.out).map_err(|o| {
                fail(format!(
                    "{} (from {}): values up to {} in the block at element {} are too large for {} (its f16 \
                     scale overflows); leave this class unquantised with --quantize-only",
                    p.name, piece.source, o.amax, o.element, p.dtype
                ))
            })?;
            writer.write(&s.out)?;
            progress(s.out.len() as u64);
            Ok(())
        })
    }
}
