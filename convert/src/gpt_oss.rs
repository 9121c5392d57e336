//! Where GPT-OSS's expert tensors come from. The checkpoint fuses gate and up into one
//! `experts.gate_up_proj` whose 2F outputs interleave them (gate = even, up = odd:
//! `GptOssExperts._apply_gate`), and stores it either as MXFP4 (the hub:
//! `gate_up_proj_blocks` [E, 2F, H/32, 16] u8 + `gate_up_proj_scales` [E, 2F, H/32] u8, rows =
//! outputs) or as floats transposed (`gate_up_proj` [E, H, 2F], as transformers keeps it in
//! memory); `down_proj` likewise ([E, H, F/32, 16] + [E, H, F/32], or [E, F, H]); the biases are
//! `gate_up_proj_bias` [E, 2F] and `down_proj_bias` [E, H]. Every piece is shape-checked here.

use super::piece::{Piece, PieceLayout};
use super::safetensors::{Checkpoint, SrcTensor};
use crate::error::{fail, Result};
use colibri::format::GROUP;
use colibri::model::TensorSpec;

/// Which projection of an expert stack (or of its bias).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Proj {
    Gate,
    Up,
    Down,
}

impl Proj {
    /// The checkpoint's tensor name stem and, for gate/up, the interleaved row (0 or 1).
    fn source(self) -> (&'static str, u64) {
        match self {
            Proj::Gate => ("gate_up_proj", 0),
            Proj::Up => ("gate_up_proj", 1),
            Proj::Down => ("down_proj", 0),
        }
    }
}

fn tensor<'a>(ck: &'a Checkpoint, name: &str) -> Option<(String, &'a SrcTensor)> {
    ck.tensors.get(name).map(|t| (name.to_string(), t))
}

fn check(name: &str, t: &SrcTensor, want: &[u64]) -> Result<()> {
    if t.shape != want {
        return Err(fail(format!("tensor {name} has shape {:?}, the config implies {:?}", t.shape, want)));
    }
    Ok(())
}

/// The pieces of one expert stack [E, rows, cols] of layer `l` (`spec`).
pub fn expert_stack(ck: &Checkpoint, l: usize, proj: Proj, spec: &TensorSpec) -> Result<Vec<Piece>> {
    let (e_count, rows, cols) = (spec.shape[0], spec.shape[1], spec.shape[2]);
    let (stem, half) = proj.source();
    let base = format!("model.layers.{l}.mlp.experts.{stem}");
    // Fused rows per expert in the checkpoint: 2F for gate_up, H for down.
    let fused = if proj == Proj::Down { rows } else { 2 * rows };
    let step = if proj == Proj::Down { 1 } else { 2 };
    if let Some((bname, blocks)) = tensor(ck, &format!("{base}_blocks")) {
        let groups = cols / u64::from(GROUP);
        check(&bname, blocks, &[e_count, fused, groups, 16])?;
        let sname = format!("{base}_scales");
        let (sname, scales) = tensor(ck, &sname).ok_or_else(|| fail(format!("missing tensor {sname} for {bname}")))?;
        check(&sname, scales, &[e_count, fused, groups])?;
        return Ok((0..e_count)
            .map(|e| Piece {
                scale: None,
                source: bname.clone(),
                tensor: blocks.clone(),
                byte_offset: 0,
                elements: rows * cols,
                layout: PieceLayout::Mxfp4 {
                    scales_source: sname.clone(),
                    scales: scales.clone(),
                    first_row: e * fused + half,
                    row_step: step,
                    rows,
                    groups,
                },
            })
            .collect());
    }
    let (name, t) = tensor(ck, &base).ok_or_else(|| {
        fail(format!("missing expert weights for {}: neither {base}_blocks nor {base} found", spec.name))
    })?;
    // Stored transposed: [E, cols, fused]; element (r, c) of expert e is at (e·cols + c)·fused + step·r + half.
    check(&name, t, &[e_count, cols, fused])?;
    let esize = t.dtype.size() as u64;
    Ok((0..e_count)
        .map(|e| Piece {
            scale: None,
            source: name.clone(),
            tensor: t.clone(),
            byte_offset: (e * cols * fused + half) * esize,
            elements: rows * cols,
            layout: PieceLayout::Strided { rows, cols, row_stride: step, col_stride: fused },
        })
        .collect())
}

/// The one piece of an expert bias tensor [E, width] of layer `l`.
pub fn expert_bias(ck: &Checkpoint, l: usize, proj: Proj, spec: &TensorSpec) -> Result<Vec<Piece>> {
    let (e_count, width) = (spec.shape[0], spec.shape[1]);
    let (stem, half) = proj.source();
    let name = format!("model.layers.{l}.mlp.experts.{stem}_bias");
    let (name, t) = tensor(ck, &name).ok_or_else(|| fail(format!("missing tensor {name} for {}", spec.name)))?;
    let fused = if proj == Proj::Down { width } else { 2 * width };
    check(&name, t, &[e_count, fused])?;
    let step = if proj == Proj::Down { 1 } else { 2 };
    Ok(vec![Piece {
        scale: None,
        source: name,
        tensor: t.clone(),
        byte_offset: half * t.dtype.size() as u64,
        elements: e_count * width,
        layout: PieceLayout::Strided { rows: e_count, cols: width, row_stride: fused, col_stride: step },
    }])
}
