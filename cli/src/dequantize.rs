//! `colibri dequantize`: a new .colibri file in which every block-quantised tensor is
//! dequantised to a float dtype; every other tensor and every metadata blob is copied verbatim.
//! The input is fully verified first (so a corrupt file is not re-checksummed into a valid one);
//! the output goes through the writer's temp file + rename, one bounded chunk at a time.

use colibri::format::{DType, FileWriter, PlannedTensor, GROUP};
use colibri::tensor::TensorView;
use colibri::{Error, LoadOptions};
use colibri_convert::cast;
use std::path::Path;

/// Elements dequantised per step (a multiple of the group).
const CHUNK_ELEMENTS: usize = 1 << 20;

/// What a run did, for the summary line.
pub struct Report {
    pub dequantised: usize,
    pub tensors: usize,
    pub bytes: u64,
}

/// Dequantise `input` into `output` with block tensors stored as the float dtype `dtype`.
pub fn run(input: &Path, output: &Path, dtype: DType) -> Result<Report, Error> {
    if dtype.is_quantized() {
        return Err(Error::InvalidArgument { reason: format!("dequantize writes a float dtype, not {dtype}") });
    }
    let model = crate::model_path::open(input, &LoadOptions::default())?;
    model.verify()?;
    let p = model.parsed();
    let meta: Vec<_> =
        p.metadata.iter().map(|e| (e.key.clone(), e.kind, model.meta(&e.key).unwrap_or_default().to_vec())).collect();
    let plan: Vec<PlannedTensor> = p
        .tensors
        .iter()
        .map(|t| PlannedTensor {
            name: t.name.clone(),
            dtype: if t.dtype.is_quantized() { dtype } else { t.dtype },
            shape: t.shape.clone(),
            kind: t.kind,
        })
        .collect();
    let h = &p.header;
    let mut writer = FileWriter::create(output, h.num_layers, h.num_experts, h.top_k, &meta, plan)?;
    let (mut wide, mut out) = (Vec::new(), Vec::new());
    let mut dequantised = 0;
    for t in &p.tensors {
        let view = model.tensor(&t.name).ok_or_else(|| Error::MissingTensor { name: t.name.clone() })?;
        writer.begin(&t.name)?;
        for e in 0..view.n_experts() {
            let unit = view.expert(e).unwrap_or(view);
            if t.dtype.is_quantized() {
                write_dequantised(&mut writer, &unit, dtype, &mut wide, &mut out)?;
            } else {
                writer.write(unit.bytes)?;
            }
        }
        writer.end()?;
        dequantised += usize::from(t.dtype.is_quantized());
    }
    let summary = writer.finish()?;
    Ok(Report { dequantised, tensors: p.tensors.len(), bytes: summary.file_size })
}

/// Dequantise one block matrix (a plain tensor or one expert) into the writer as `dtype`.
fn write_dequantised(
    writer: &mut FileWriter,
    unit: &TensorView<'_>,
    dtype: DType,
    wide: &mut Vec<f32>,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    debug_assert_eq!(CHUNK_ELEMENTS % GROUP as usize, 0);
    let n = unit.len();
    let mut start = 0;
    while start < n {
        wide.resize((n - start).min(CHUNK_ELEMENTS), 0.0);
        unit.read_f32(start, wide).ok_or_else(|| Error::InvalidArgument {
            reason: format!("'{}': cannot read elements from {start}", unit.name),
        })?;
        cast::from_f32(dtype, wide, out).map_err(|o| Error::InvalidArgument {
            reason: format!(
                "'{}': dequantised value {} at element {} does not fit {dtype}; use --dtype f32",
                unit.name,
                o.value,
                start + o.index
            ),
        })?;
        writer.write(out)?;
        start += wide.len();
    }
    Ok(())
}
