//! What one decoded token reads from a model file: active parameters and active bytes, summed
//! from the tensor table's records (byte lengths, so the figure also holds for block-quantised
//! dtypes), plus the file-level figures bench reports (weight bytes, total parameters, dtypes).

use colibri::format::{TensorKind, TensorRecord};
use colibri::model::EMBEDDING;
use colibri::Model;

/// Size figures of one model, as bench reports them.
#[derive(Clone, Debug)]
pub struct Footprint {
    /// Bytes of all tensors (the weights, without header and metadata).
    pub weight_bytes: u64,
    /// Every stored parameter (a tied embedding once).
    pub params: u64,
    /// Parameters read per decoded token (see `active`).
    pub active_params: u64,
    /// Bytes read per decoded token (see `active`).
    pub active_bytes: u64,
    /// Distinct tensor dtypes in file order of first appearance, e.g. ["f32", "bf16"].
    pub dtypes: Vec<&'static str>,
}

/// Bytes of one expert's data in a stack: the stack's length minus the strides before the last
/// expert (the padding between experts is never read).
fn expert_bytes(r: &TensorRecord) -> u64 {
    let n = r.shape[0].max(1);
    if n > 1 && r.expert_stride > 0 {
        r.byte_length.saturating_sub(r.expert_stride * (n - 1))
    } else {
        r.byte_length / n
    }
}

/// (params, bytes) one token reads from record `r`: every plain tensor and router whole, top_k
/// experts of each stack, one row of the embedding (plus the whole table when it doubles as the
/// lm_head, which has no record of its own then).
fn active(r: &TensorRecord, top_k: u64, tied: bool) -> (u64, u64) {
    match r.kind {
        TensorKind::Experts => {
            let n = r.shape[0].max(1);
            (r.elements() / n * top_k, expert_bytes(r) * top_k)
        }
        _ if r.name == EMBEDDING => {
            let rows = r.shape[0].max(1);
            let row = (r.elements() / rows, r.byte_length / rows);
            if tied {
                (r.elements() + row.0, r.byte_length + row.1)
            } else {
                row
            }
        }
        _ => (r.elements(), r.byte_length),
    }
}

/// Footprint of an opened model.
pub fn footprint(model: &Model) -> Footprint {
    let c = model.config();
    let top_k = c.moe.top_k as u64;
    let mut f = Footprint {
        weight_bytes: 0,
        params: model.params().total,
        active_params: 0,
        active_bytes: 0,
        dtypes: Vec::new(),
    };
    for r in &model.parsed().tensors {
        f.weight_bytes += r.byte_length;
        let (p, b) = active(r, top_k, c.tie_embeddings);
        f.active_params += p;
        f.active_bytes += b;
        if !f.dtypes.contains(&r.dtype.name()) {
            f.dtypes.push(r.dtype.name());
        }
    }
    f
}
