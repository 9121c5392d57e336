//! Writing a GGUF K-quant matrix in colibri's 8-row interleaved layout (q4_k → q4_kr8, q6_k →
//! q6_kr8, `colibri::format::kr8`): each piece read in bounded runs of whole 8-row groups (its
//! rows gathered through llama.cpp's q/k permutation when it has one), re-laid-out, written.
//! The bytes are the GGUF's blocks, moved: nothing is re-quantised.

use super::file::GgufFile;
use super::sources::{Piece, Resolved};
use crate::error::{fail, Result};
use colibri::format::{kr8, DType, FileWriter};

/// Bytes read per step (whole groups; at least one).
const CHUNK: u64 = 8 << 20;

/// Write every piece of `r` as tensor `r.spec.name` in interleaved `dtype`.
pub fn tensor(
    f: &GgufFile,
    w: &mut FileWriter,
    r: &Resolved,
    dtype: DType,
    buf: &mut Vec<u8>,
    progress: &dyn Fn(u64),
) -> Result<()> {
    w.begin(&r.spec.name)?;
    let cols = r.spec.shape.last().copied().unwrap_or(0) as usize;
    for p in &r.pieces {
        piece(f, w, p, dtype, cols, buf, progress)?;
    }
    Ok(w.end()?)
}

fn piece(
    f: &GgufFile,
    w: &mut FileWriter,
    p: &Piece,
    dtype: DType,
    cols: usize,
    buf: &mut Vec<u8>,
    progress: &dyn Fn(u64),
) -> Result<()> {
    let rb = p.row_bytes;
    let group = rb * kr8::ROWS as u64;
    if p.map.is_some()
        || rb == 0
        || !p.bytes.is_multiple_of(group)
        || dtype.encoding().bytes_for(cols as u64) != Some(rb)
    {
        return Err(fail(format!(
            "{}: its rows of {rb} bytes are not whole 8-row groups of {dtype}",
            p.tensor.info.name
        )));
    }
    let rows = p.bytes / rb;
    let per_chunk = (CHUNK / group).max(1) * kr8::ROWS as u64;
    let mut r = 0;
    while r < rows {
        let n = (rows - r).min(per_chunk);
        buf.resize((n * rb) as usize, 0);
        match p.permute {
            Some(perm) => {
                for (k, row) in buf.chunks_exact_mut(rb as usize).enumerate() {
                    f.read(&p.tensor, p.byte_offset + perm.source_row(r + k as u64) * rb, row)?;
                }
            }
            None => f.read(&p.tensor, p.byte_offset + r * rb, buf)?,
        }
        let out = kr8::interleave(dtype, buf, cols).map_err(|e| fail(format!("{}: {e}", p.tensor.info.name)))?;
        w.write(&out)?;
        progress(out.len() as u64);
        r += n;
    }
    Ok(())
}
