//! The provenance record of a GGUF conversion: the source file, its GGUF version, architecture
//! and llama.cpp file type, the stored types per tensor class, and the GGUF's own scalar
//! metadata (tokenizer keys and long arrays left out). `colibri inspect` prints it.

use super::file::GgufFile;
use super::sources::Resolved;
use crate::metadata::{today, MetaEntry};
use colibri::format::{DType, MetaKind, PlannedTensor};
use colibri::model::{meta_keys, Config};
use serde_json::{json, Map, Value};

/// llama.cpp's `general.file_type` names (LlamaFileType), for the common ones.
fn file_type_name(t: u64) -> Option<&'static str> {
    Some(match t {
        0 => "ALL_F32",
        1 => "MOSTLY_F16",
        2 => "MOSTLY_Q4_0",
        3 => "MOSTLY_Q4_1",
        7 => "MOSTLY_Q8_0",
        8 => "MOSTLY_Q5_0",
        9 => "MOSTLY_Q5_1",
        10 => "MOSTLY_Q2_K",
        11 => "MOSTLY_Q3_K_S",
        12 => "MOSTLY_Q3_K_M",
        13 => "MOSTLY_Q3_K_L",
        14 => "MOSTLY_Q4_K_S",
        15 => "MOSTLY_Q4_K_M",
        16 => "MOSTLY_Q5_K_S",
        17 => "MOSTLY_Q5_K_M",
        18 => "MOSTLY_Q6_K",
        25 => "MOSTLY_IQ4_NL",
        30 => "MOSTLY_IQ4_XS",
        32 => "MOSTLY_BF16",
        38 => "MOSTLY_MXFP4_MOE",
        _ => return None,
    })
}

/// The stored dtypes of each tensor class ("experts": ["f16", "q8_0"], …).
fn types_per_class(resolved: &[Resolved], planned: &[PlannedTensor]) -> Value {
    let mut classes: Map<String, Value> = Map::new();
    let mut roles: Vec<String> = resolved.iter().map(|r| format!("{:?}", r.spec.role).to_lowercase()).collect();
    roles.dedup();
    roles.sort();
    roles.dedup();
    for role in roles {
        let of: Vec<&PlannedTensor> = resolved
            .iter()
            .zip(planned)
            .filter(|(r, _)| format!("{:?}", r.spec.role).to_lowercase() == role)
            .map(|(_, p)| p)
            .collect();
        classes.insert(role, json!(dtype_names(&of)));
    }
    Value::Object(classes)
}

/// The provenance metadata entry.
pub fn entry(
    file: &GgufFile,
    arch: &str,
    config: &Config,
    resolved: &[Resolved],
    planned: &[PlannedTensor],
) -> MetaEntry {
    let m = file.metadata();
    let file_type = m.get("general.file_type").and_then(|v| v.as_u64());
    let kv: Map<String, Value> =
        m.0.iter().filter(|(k, _)| !k.starts_with("tokenizer.")).map(|(k, v)| (k.clone(), v.to_json(16))).collect();
    let sources: Vec<String> =
        file.paths().map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()).collect();
    let provenance = json!({
        "source": sources.first().cloned().unwrap_or_default(),
        "format": "gguf",
        "architecture": config.family.hf_architecture(),
        "converter": format!("colibri {}", colibri::VERSION),
        "date": today(),
        "dtype": "source",
        "gguf": {
            "version": file.header.version,
            "files": sources,
            "architecture": arch,
            "file_type": file_type,
            "file_type_name": file_type.and_then(file_type_name),
            "tensor_types": types_per_class(resolved, planned),
            "metadata": kv,
        },
    });
    (meta_keys::PROVENANCE.to_string(), MetaKind::Json, provenance.to_string().into_bytes())
}

/// The dtype names of a planned list (for provenance).
pub(crate) fn dtype_names(ts: &[&PlannedTensor]) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = ts.iter().map(|t| DType::name(t.dtype)).collect();
    v.sort_unstable();
    v.dedup();
    v
}
