//! Copying resolved GGUF pieces into the writer unchanged, in bounded chunks with positioned
//! reads; row-permuted pieces (llama.cpp's q/k) are gathered row by row into the chunk buffer;
//! block-typed tensors colibri keeps in float are dequantised to f32 whole rows at a time;
//! value-mapped pieces (`ValueMap`, small f32 vectors) are transformed element by element.

use super::file::GgufFile;
use super::sources::{Piece, Resolved, ValueMap};
use crate::error::{fail, Result};
use colibri::format::{AlignedBuf, DType, FileWriter};

/// Bytes read per step (bounds the buffer: peak memory stays far below the model size).
const CHUNK: u64 = 8 << 20;

/// Write every piece of `r` as tensor `r.spec.name` of dtype `to` (dequantised from `widen` to
/// f32 if given; mxfp4r8 interleaved from MXFP4); `progress` gets the bytes written.
pub fn tensor(
    f: &GgufFile,
    w: &mut FileWriter,
    r: &Resolved,
    widen: Option<DType>,
    to: DType,
    buf: &mut AlignedBuf,
    progress: &dyn Fn(u64),
) -> Result<()> {
    w.begin(&r.spec.name)?;
    let cols = r.spec.shape.last().copied().unwrap_or(1) as usize;
    for p in &r.pieces {
        if to == DType::Mxfp4R8 {
            interleaved(f, w, p, cols, buf, progress)?;
        } else if let Some(map) = p.map {
            mapped(f, w, p, map, buf, progress)?;
        } else if let Some(src) = widen {
            widened(f, w, p, src, cols, buf, progress)?;
        } else if p.permute.is_some() {
            permuted(f, w, p, buf, progress)?;
        } else {
            let mut done = 0;
            while done < p.bytes {
                let n = (p.bytes - done).min(CHUNK);
                w.write(f.read_span(&p.tensor, p.byte_offset + done, n as usize, buf)?)?;
                progress(n);
                done += n;
            }
        }
    }
    Ok(w.end()?)
}

fn permuted(f: &GgufFile, w: &mut FileWriter, p: &Piece, buf: &mut AlignedBuf, progress: &dyn Fn(u64)) -> Result<()> {
    let Some(perm) = p.permute else { return Err(fail("internal: permuted() without a permutation")) };
    let rb = p.row_bytes;
    let rows = p.bytes.checked_div(rb).unwrap_or(0);
    if rb == 0
        || rows * rb != p.bytes
        || perm.head_rows < 2
        || !rows.is_multiple_of(perm.head_rows)
        || !perm.head_rows.is_multiple_of(2)
    {
        return Err(fail(format!(
            "{}: {rows} rows cannot be un-permuted in heads of {}",
            p.tensor.info.name, perm.head_rows
        )));
    }
    let per_chunk = (CHUNK / rb).max(1);
    let mut r = 0;
    while r < rows {
        let n = (rows - r).min(per_chunk);
        buf.set_len((n * rb) as usize);
        for (k, row) in buf.bytes_mut().chunks_exact_mut(rb as usize).enumerate() {
            let src = perm.source_row(r + k as u64);
            f.read(&p.tensor, p.byte_offset + src * rb, row)?;
        }
        w.write(buf.bytes())?;
        progress(n * rb);
        r += n;
    }
    Ok(())
}

/// MXFP4 piece `p` (rows of `cols` elements) as mxfp4r8, whole 8-row groups at a time.
fn interleaved(
    f: &GgufFile,
    w: &mut FileWriter,
    p: &Piece,
    cols: usize,
    buf: &mut AlignedBuf,
    progress: &dyn Fn(u64),
) -> Result<()> {
    let nb = cols / colibri::format::GROUP as usize;
    let group = p.row_bytes * DType::Mxfp4R8.row_group() as u64;
    if p.tensor.info.ggml.dtype() != Some(DType::Mxfp4)
        || p.permute.is_some()
        || nb == 0
        || DType::Mxfp4.bytes_for(cols as u64) != Some(p.row_bytes)
        || !p.bytes.is_multiple_of(group)
    {
        return Err(fail(format!(
            "{}: cannot interleave {} bytes as mxfp4r8 rows of {cols}",
            p.tensor.info.name, p.bytes
        )));
    }
    let per_chunk = (CHUNK / group).max(1) * group;
    let mut out = Vec::new();
    let mut done = 0;
    while done < p.bytes {
        let n = (p.bytes - done).min(per_chunk);
        let data = f.read_span(&p.tensor, p.byte_offset + done, n as usize, buf)?;
        out.resize(data.len(), 0);
        colibri::format::mxfp4::interleave(data, nb, &mut out);
        w.write(&out)?;
        progress(n);
        done += n;
    }
    Ok(())
}

/// Whole rows of `p` (a block dtype `src`, rows of `cols` elements) dequantised to f32.
fn widened(
    f: &GgufFile,
    w: &mut FileWriter,
    p: &Piece,
    src: DType,
    cols: usize,
    buf: &mut AlignedBuf,
    progress: &dyn Fn(u64),
) -> Result<()> {
    let rb = p.row_bytes;
    if p.permute.is_some() || rb == 0 || !p.bytes.is_multiple_of(rb) || src.bytes_for(cols as u64) != Some(rb) {
        return Err(fail(format!("{}: cannot dequantise rows of {rb} bytes as {src}", p.tensor.info.name)));
    }
    let rows_per = (CHUNK / rb).max(1);
    let mut wide = vec![0f32; 0];
    let mut done = 0;
    while done < p.bytes {
        let n = (p.bytes - done).min(rows_per * rb);
        let data = f.read_span(&p.tensor, p.byte_offset + done, n as usize, buf)?;
        wide.resize((n / rb) as usize * cols, 0.0);
        (src.info().dequantize)(data, cols, 0, &mut wide);
        let out: Vec<u8> = wide.iter().flat_map(|x| x.to_le_bytes()).collect();
        w.write(&out)?;
        progress(out.len() as u64);
        done += n;
    }
    Ok(())
}

/// An f32 piece (a small vector) with `map` applied to each element.
fn mapped(
    f: &GgufFile,
    w: &mut FileWriter,
    p: &Piece,
    map: ValueMap,
    buf: &mut AlignedBuf,
    progress: &dyn Fn(u64),
) -> Result<()> {
    if p.tensor.info.ggml.id != 0 || p.permute.is_some() || !p.bytes.is_multiple_of(4) || p.bytes > CHUNK {
        return Err(fail(format!("{}: only a small F32 tensor can be value-mapped", p.tensor.info.name)));
    }
    let data = f.read_span(&p.tensor, p.byte_offset, p.bytes as usize, buf)?;
    for x in data.chunks_exact_mut(4) {
        let v = f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
        let out = match map {
            ValueMap::LnNeg => (-f64::from(v)).ln() as f32,
        };
        x.copy_from_slice(&out.to_le_bytes());
    }
    w.write(data)?;
    progress(p.bytes);
    Ok(())
}
