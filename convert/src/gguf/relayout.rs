//! Writing a GGUF block matrix in colibri's 8-row interleaved layouts: q4_k → q4_kr8, q6_k →
//! q6_kr8, iq4_xs / iq4_nl → iq4_xsr8 / iq4_nlr8 (`colibri::format::kr8`), q8_0 → q8r8, q4_0 → q4r8
//! (`colibri::format::blocks`: the same blocks, scales and quants in two regions). Each piece is
//! read in bounded runs of whole 8-row groups (its rows gathered through llama.cpp's q/k
//! permutation when it has one), re-laid-out, written. The bytes are the GGUF's blocks, moved:
//! nothing is re-quantised.

use super::file::GgufFile;
use super::sources::{Piece, Resolved};
use crate::error::{fail, Result};
use colibri::format::{blocks, kr8, AlignedBuf, DType, FileWriter};

/// Bytes read per step (whole groups; at least one).
const CHUNK: u64 = 8 << 20;

/// The interleaved dtype a GGUF block type `src` is written as (`src` itself when it has none).
pub fn twin(src: DType) -> DType {
    match src {
        DType::Q8_0 => DType::Q8R8,
        DType::Q4_0 => DType::Q4R8,
        _ => src.interleaved(),
    }
}

/// True for the dtypes `tensor` writes.
pub fn writes(dtype: DType) -> bool {
    matches!(dtype, DType::Q4KR8 | DType::Q6KR8 | DType::Iq4XsR8 | DType::Iq4NlR8 | DType::Q8R8 | DType::Q4R8)
}

/// The scales of a q8r8 / q4r8 matrix follow all its quants: those of the rows read so far.
struct Scales {
    bytes: Vec<u8>,
    /// Rows of the current matrix written, of `rows` (a tensor's pieces may be several
    /// matrices, an expert each, or parts of one, e.g. rows of a merged projection).
    done: u64,
    rows: u64,
}

/// Write every piece of `r` as tensor `r.spec.name` in interleaved `dtype`.
pub fn tensor(
    f: &GgufFile,
    w: &mut FileWriter,
    r: &Resolved,
    dtype: DType,
    buf: &mut AlignedBuf,
    progress: &dyn Fn(u64),
) -> Result<()> {
    w.begin(&r.spec.name)?;
    let shape = &r.spec.shape;
    let cols = shape.last().copied().unwrap_or(0) as usize;
    let rows = shape.len().checked_sub(2).map_or(1, |i| shape[i]);
    let mut scales = Scales { bytes: Vec::new(), done: 0, rows };
    for p in &r.pieces {
        piece(f, w, p, dtype, cols, buf, &mut scales, progress)?;
    }
    if scales.done != 0 {
        return Err(fail(format!("{}: its pieces are not whole matrices of {rows} rows", r.spec.name)));
    }
    Ok(w.end()?)
}

#[allow(clippy::too_many_arguments)]
fn piece(
    f: &GgufFile,
    w: &mut FileWriter,
    p: &Piece,
    dtype: DType,
    cols: usize,
    buf: &mut AlignedBuf,
    scales: &mut Scales,
    progress: &dyn Fn(u64),
) -> Result<()> {
    let rb = p.row_bytes;
    let group = rb * kr8::ROWS as u64;
    let name = &p.tensor.info.name;
    if p.map.is_some()
        || rb == 0
        || !p.bytes.is_multiple_of(group)
        || scales.rows == 0
        || !scales.rows.is_multiple_of(kr8::ROWS as u64)
        || p.tensor.info.ggml.dtype().map(twin) != Some(dtype)
        || dtype.encoding().bytes_for(cols as u64) != Some(rb)
    {
        return Err(fail(format!("{name}: its rows of {rb} bytes are not whole 8-row groups of {dtype}")));
    }
    let rows = p.bytes / rb;
    let per_chunk = (CHUNK / group).max(1) * kr8::ROWS as u64;
    let mut quants = Vec::new();
    let mut r = 0;
    while r < rows {
        // A step ends at the end of a matrix, where its scales are written.
        let n = (rows - r).min(per_chunk).min(scales.rows - scales.done);
        let data: &[u8] = match p.permute {
            Some(perm) => {
                buf.set_len((n * rb) as usize);
                for (k, row) in buf.bytes_mut().chunks_exact_mut(rb as usize).enumerate() {
                    f.read(&p.tensor, p.byte_offset + perm.source_row(r + k as u64) * rb, row)?;
                }
                buf.bytes()
            }
            None => f.read_span(&p.tensor, p.byte_offset + r * rb, (n * rb) as usize, buf)?,
        };
        if matches!(dtype, DType::Q8R8 | DType::Q4R8) {
            quants.clear();
            let gb = dtype.info().block_bytes as usize;
            blocks::interleave_ggml_blocks(data, gb, cols / blocks::QK, &mut quants, &mut scales.bytes)
                .map_err(|e| fail(format!("{name}: {e}")))?;
        } else {
            quants = kr8::interleave(dtype, data, cols).map_err(|e| fail(format!("{name}: {e}")))?;
        }
        w.write(&quants)?;
        progress(quants.len() as u64);
        r += n;
        scales.done += n;
        if scales.done == scales.rows {
            w.write(&scales.bytes)?;
            progress(scales.bytes.len() as u64);
            scales.bytes.clear();
            scales.done = 0;
        }
    }
    Ok(())
}
