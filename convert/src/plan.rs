//! The dtype of every output tensor. Without `--quantize`: `--dtype`, else the source dtype.
//! With it: the scheme's block dtype for every matrix of a selected class whose rows are whole
//! groups of 32; a selected matrix whose rows are not stays float (`--dtype`, else f16) and is
//! named in a warning; everything else follows the no-quantisation rule, except that sigmoid
//! routers and their choice bias stay f32.

use super::quantize::Quantize;
use super::sources::Resolved;
use crate::error::{fail, Result};
use colibri::format::{DType, PlannedTensor, GROUP};
use serde_json::{json, Value};

/// The planned tensors and what quantisation did to them.
pub struct Plan {
    pub tensors: Vec<PlannedTensor>,
    /// Tensors stored block-quantised.
    pub quantised: usize,
    /// Selected matrices kept float because their rows are not whole groups.
    pub kept_float: Vec<String>,
}

impl Plan {
    /// Stored bits per weight over all tensors (payload bytes × 8 / elements; no padding).
    pub fn bits_per_weight(&self) -> f64 {
        let (mut bytes, mut elements) = (0u64, 0u64);
        for t in &self.tensors {
            let n: u64 = t.shape.iter().product();
            elements += n;
            bytes += t.dtype.bytes_for(n).unwrap_or(0);
        }
        if elements == 0 {
            0.0
        } else {
            bytes as f64 * 8.0 / elements as f64
        }
    }

    /// Payload bytes (for the progress bar).
    pub fn payload_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.dtype.bytes_for(t.shape.iter().product()).unwrap_or(0)).sum()
    }

    /// The block dtypes the plan stores, in first-use order (q8r8 / q4r8 for interleaved
    /// matrices, q8 / q4 for the rest).
    pub fn block_dtypes(&self) -> Vec<DType> {
        let mut seen = Vec::new();
        for t in &self.tensors {
            if t.dtype.is_quantized() && !seen.contains(&t.dtype) {
                seen.push(t.dtype);
            }
        }
        seen
    }

    /// The provenance record of the quantisation (None without `--quantize`).
    pub fn provenance(&self, q: Option<&Quantize>) -> Option<Value> {
        let q = q?;
        Some(json!({
            "scheme": q.scheme.name(),
            "dtype": q.scheme.dtype().name(),
            "stored_as": self.block_dtypes().iter().map(|d| d.name()).collect::<Vec<_>>(),
            "group_size": GROUP,
            "classes": q.classes().iter().map(|c| c.name()).collect::<Vec<_>>(),
            "tensors": self.quantised,
            "kept_float": self.kept_float,
        }))
    }
}

/// The dtype MXFP4 blocks are stored as in a tensor of `shape` (a matrix or an expert stack):
/// mxfp4r8 when its rows are whole 8-row groups and `interleave` allows it, else mxfp4 (the
/// same values either way).
pub fn mxfp4_dtype(shape: &[u64], interleave: bool) -> DType {
    let rows = shape.len().checked_sub(2).map_or(1, |i| shape[i]);
    let r8 = DType::Mxfp4.interleaved();
    if interleave && rows.is_multiple_of(r8.row_group() as u64) {
        r8
    } else {
        DType::Mxfp4
    }
}

/// The float dtype a tensor of `spec` is stored in when `float` is asked for: bf16r32 (bf16 in
/// the AMX tiles' order) only for the matrices the products read whole — the quantisable
/// classes — whose rows and columns are multiples of 32; bf16 for every other tensor.
pub fn float_for(float: DType, spec: &colibri::model::TensorSpec) -> DType {
    if float != DType::Bf16R32 {
        return float;
    }
    let [rows, cols] = match spec.shape[..] {
        [.., r, c] => [r, c],
        _ => [0, 0],
    };
    let tiles = colibri::format::tiles::TILE as u64;
    let whole = cols > 0 && rows.is_multiple_of(tiles) && cols.is_multiple_of(tiles);
    if spec.quant.is_some() && whole {
        DType::Bf16R32
    } else {
        DType::BF16
    }
}

/// Plan every resolved tensor; `warnings` gets the kept-float matrices and selected classes the
/// model does not have.
pub fn plan(
    resolved: &[Resolved],
    dtype: Option<DType>,
    quantize: Option<&Quantize>,
    routers_f32: bool,
    warnings: &mut Vec<String>,
) -> Result<Plan> {
    let mut out = Plan { tensors: Vec::with_capacity(resolved.len()), quantised: 0, kept_float: Vec::new() };
    let classes = quantize.map(Quantize::classes).unwrap_or_default();
    for r in resolved {
        // MXFP4 experts (GPT-OSS as the hub ships it) stay MXFP4 whatever --dtype / --quantize
        // say: re-encoding them would lose precision for no smaller file (see `mxfp4_dtype`).
        if r.pieces.iter().any(|p| p.is_mxfp4()) {
            out.tensors.push(PlannedTensor {
                name: r.spec.name.clone(),
                dtype: mxfp4_dtype(&r.spec.shape, quantize.is_none_or(|q| q.interleave)),
                shape: r.spec.shape.clone(),
                kind: r.spec.kind,
            });
            continue;
        }
        let selected = match quantize {
            Some(q) if r.spec.quant.is_some_and(|c| classes.contains(&c)) => {
                let rows = r.spec.shape.len().checked_sub(2).map_or(1, |i| r.spec.shape[i]);
                Some(q.dtype_for(rows))
            }
            _ => None,
        };
        let rows_whole = r.spec.shape.last().is_some_and(|&c| c % u64::from(GROUP) == 0);
        let chosen = match selected {
            Some(block) if rows_whole => {
                out.quantised += 1;
                block
            }
            Some(_) => {
                out.kept_float.push(r.spec.name.clone());
                float_for(dtype.unwrap_or(DType::F16), &r.spec)
            }
            // Sigmoid routers (and their choice bias) stay f32 whatever --dtype says, as
            // transformers keeps them: bf16 routers change which experts win.
            None if routers_f32 && r.spec.role == colibri::model::Role::Router => DType::F32,
            None => {
                let src = r.pieces[0].tensor.dtype;
                if r.pieces.iter().any(|p| p.tensor.dtype != src) && dtype.is_none() {
                    return Err(fail(format!("{}: experts mix dtypes; pass --dtype", r.spec.name)));
                }
                let Some(float) = src.to_colibri() else {
                    return Err(fail(format!(
                        "{}: source tensor {} holds bytes, not values",
                        r.spec.name, r.pieces[0].source
                    )));
                };
                float_for(dtype.unwrap_or(float), &r.spec)
            }
        };
        out.tensors.push(PlannedTensor {
            name: r.spec.name.clone(),
            dtype: chosen,
            shape: r.spec.shape.clone(),
            kind: r.spec.kind,
        });
    }
    if let Some(q) = quantize {
        if !out.kept_float.is_empty() {
            warnings.push(format!(
                "{} matrices stay {} because their rows are not a multiple of {GROUP} (the {} group): {}",
                out.kept_float.len(),
                dtype.unwrap_or(DType::F16),
                q.scheme.dtype(),
                out.kept_float.join(", ")
            ));
        }
        for c in q.only.iter().flatten() {
            if !resolved.iter().any(|r| r.spec.quant == Some(*c)) {
                warnings.push(format!("--quantize-only {}: this model has no such matrices", c.name()));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mxfp4_matrices_of_whole_row_groups_are_interleaved_unless_asked_not_to() {
        assert_eq!(mxfp4_dtype(&[32, 2880, 2880], true), DType::Mxfp4R8);
        assert_eq!(mxfp4_dtype(&[16, 64], true), DType::Mxfp4R8);
        assert_eq!(mxfp4_dtype(&[4, 12, 64], true), DType::Mxfp4);
        assert_eq!(mxfp4_dtype(&[32, 2880, 2880], false), DType::Mxfp4);
    }
}
