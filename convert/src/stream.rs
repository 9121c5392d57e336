//! Streaming one planned tensor from its source pieces into the writer, in bounded chunks:
//! float targets are cast chunk by chunk; block targets are quantised matrix by matrix (one
//! expert of a stack, or the whole tensor — possibly several row runs of its source, as the
//! de-grouped Qwen3-Next projections), quants as they come, then the matrix's scales.

use super::cast;
use super::quantize::MatrixQuantizer;
use super::safetensors::Checkpoint;
use super::sources::{Piece, Resolved};
use crate::error::{fail, Result};
use colibri::format::{FileWriter, PlannedTensor, TensorKind};

/// Source bytes read per step: bounds the converter's buffers (a multiple of every block's
/// source bytes, 32 × 4).
const CHUNK: usize = 8 << 20;

/// Reusable buffers of the streaming loop.
#[derive(Default)]
pub struct Streamer {
    src: Vec<u8>,
    wide: Vec<f32>,
    out: Vec<u8>,
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
        if p.dtype.is_quantized() {
            // One matrix per expert of a stack; the row runs of a de-grouped plain tensor make one.
            let matrices: Vec<&[Piece]> = match p.kind {
                TensorKind::Experts => r.pieces.chunks(1).collect(),
                _ => vec![&r.pieces[..]],
            };
            for pieces in matrices {
                self.quantised_matrix(ck, writer, pieces, p, progress)?;
            }
        } else {
            for piece in &r.pieces {
                self.float_piece(ck, writer, piece, p, progress)?;
            }
        }
        Ok(writer.end()?)
    }

    /// Calls `step(self, chunk_start_element)` with `self.src` holding each source chunk.
    fn chunks(
        &mut self,
        ck: &Checkpoint,
        piece: &Piece,
        mut step: impl FnMut(&mut Self, u64) -> Result<()>,
    ) -> Result<()> {
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

    fn float_piece(
        &mut self,
        ck: &Checkpoint,
        writer: &mut FileWriter,
        piece: &Piece,
        p: &PlannedTensor,
        progress: &dyn Fn(u64),
    ) -> Result<()> {
        self.chunks(ck, piece, |s, first| {
            cast::convert(piece.tensor.dtype, p.dtype, &s.src, &mut s.out).map_err(|o| {
                fail(format!(
                    "{} (from {}): value {} at element {} does not fit {}; convert with --dtype bf16 or f32",
                    p.name,
                    piece.source,
                    o.value,
                    first + o.index as u64,
                    p.dtype
                ))
            })?;
            writer.write(&s.out)?;
            progress(s.out.len() as u64);
            Ok(())
        })
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
        self.chunks(ck, piece, |s, _| {
            cast::widen(piece.tensor.dtype, &s.src, &mut s.wide);
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
