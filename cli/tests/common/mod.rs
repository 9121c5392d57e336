//! Helpers of the CLI's tests: what they need of the library tests' fixture helpers (the fixture
//! checkpoints, their tensors read with `safetensors`, the independent HF → colibri name mapping,
//! argmax), included from the root tests/common rather than copied.
#![allow(dead_code)] // each test binary uses a different subset

#[path = "../../../tests/common/fixtures.rs"]
mod fixtures;
#[allow(unused_imports)]
pub use fixtures::{argmax, expected_bytes, fixtures, load_sources, to_f32_vec};

/// Copy the model at `src` to `dst` through the format writer (so every checksum is right),
/// passing each metadata value through `meta(key, bytes)` and each tensor's payload through
/// `data(record, bytes)`: files that are intact but altered in meaning.
pub fn rewrite_model(
    src: &std::path::Path,
    dst: &std::path::Path,
    meta: impl Fn(&str, Vec<u8>) -> Vec<u8>,
    data: impl Fn(&colibri::format::TensorRecord, Vec<u8>) -> Vec<u8>,
) {
    use colibri::format::{parse, FileWriter, PlannedTensor};
    let file = std::fs::read(src).unwrap();
    let p = parse(&file).unwrap();
    let entries: Vec<_> = p
        .metadata
        .iter()
        .map(|e| (e.key.clone(), e.kind, meta(&e.key, p.meta(&file, &e.key).unwrap().to_vec())))
        .collect();
    let plan = p
        .tensors
        .iter()
        .map(|t| PlannedTensor { name: t.name.clone(), dtype: t.dtype, shape: t.shape.clone(), kind: t.kind })
        .collect();
    let h = &p.header;
    let mut w = FileWriter::create(dst, h.num_layers, h.num_experts, h.top_k, &entries, plan).unwrap();
    for t in &p.tensors {
        let (unit, stride) = (t.unit_bytes() as usize, t.expert_stride.max(t.unit_bytes()) as usize);
        let mut payload = Vec::new();
        for u in 0..t.units() as usize {
            let at = t.data_offset as usize + u * stride;
            payload.extend_from_slice(&file[at..at + unit]);
        }
        w.tensor(&t.name, &data(t, payload)).unwrap();
    }
    w.finish().unwrap();
}
