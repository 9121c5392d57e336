//! Shared harness of the colibri fuzz targets: everything the library does with an untrusted
//! .colibri image, from `format::parse` down to touching every element of every tensor view.
//! The rule under test: hostile bytes give `Err`, never a panic, abort or out-of-bounds access.

use colibri::format::{self, ParsedFile, TensorKind};
use colibri::model::{self, Config, Weights};
use colibri::tensor::TensorView;
use colibri::{LoadOptions, Model};
use std::path::PathBuf;

/// Run the whole pipeline on `data` (the complete file contents).
pub fn exercise(data: &[u8]) {
    let parsed = match format::parse(data) {
        Ok(p) => p,
        Err(e) => {
            // Formatting the error must not panic either.
            let _ = e.to_string();
            return;
        }
    };
    check_parsed(data, &parsed);

    // In memory: full data check, config, tensor table against the config, binding.
    let _ = format::verify_data(data, &parsed).map_err(|e| e.to_string());
    for key in ["config", "tokenizer", "chat_template", "provenance", "user", "nonexistent"] {
        let _ = parsed.meta(data, key).map(|v| v.len());
    }
    if let Some(json) = parsed.meta(data, model::meta_keys::CONFIG) {
        if let Ok(config) = Config::from_json(json) {
            let _ = model::param_count(&config);
            let _ = config.kv_bytes_per_token(2);
            if model::check_tensors(&config, &parsed).is_ok() {
                if let Ok(w) = Weights::bind(&config, &parsed, data) {
                    // The fuzzer's buffer may not be 4-byte aligned, so no length assertions here.
                    touch_weights(&w, false);
                }
            }
        }
    }

    // Through a real file, mapped and read, exactly as applications open models.
    let path = scratch_path();
    std::fs::write(&path, data).expect("fuzz harness: cannot write the scratch file (is /dev/shm full?)");
    for mmap in [true, false] {
        let opts = LoadOptions { mmap, ..LoadOptions::default() };
        match Model::open(&path, &opts) {
            Ok(m) => touch_model(&m),
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
    let _ = std::fs::remove_file(&path);
}

/// Invariants `parse` promises: nothing points outside the file, names resolve.
fn check_parsed(data: &[u8], p: &ParsedFile) {
    let len = data.len() as u64;
    assert_eq!(p.header.file_size, len, "parse accepted a header whose file_size differs from the length");
    assert!(p.metadata_range.end as u64 <= len);
    for e in &p.metadata {
        assert!(e.value.start <= e.value.end && e.value.end <= p.metadata_range.len());
    }
    for t in &p.tensors {
        let end = t.data_offset.checked_add(t.byte_length).expect("parse accepted an overflowing tensor range");
        assert!(end <= len, "tensor '{}' ends at {end} past the file ({len})", t.name);
        assert!(std::ptr::eq(p.tensor(&t.name).expect("parsed tensor not found by name"), t));
        let _ = t.unit_bytes();
        let _ = t.elements();
        let v = TensorView::new(t, data);
        assert_eq!(v.bytes.len() as u64, t.byte_length);
        let _ = format::find_nonfinite_in(v.dtype, v.bytes, v.cols() as u64);
    }
}

fn touch_model(m: &Model) {
    let _ = m.verify().map_err(|e| e.to_string());
    let _ = format!("{m:?}");
    let _ = m.params();
    let _ = (m.tokenizer_json(), m.chat_template(), m.provenance(), m.user_metadata());
    let _ = m.mapping().is_mapped();
    m.mapping().prefetch(0, m.bytes().len());
    touch_weights(m.weights(), true);
    for t in &m.parsed().tensors {
        let v = m.tensor(&t.name).expect("a parsed tensor is missing from its model");
        touch_view(&v, true);
    }
}

fn touch_weights(w: &Weights<'_>, aligned: bool) {
    let _ = aligned;
    w.visit_mats(&mut |m| touch_mat(m));
}

/// Read every row of a bound matrix (binding checked it: this must never fail).
fn touch_mat(m: &colibri::kernels::Mat<'_>) {
    let mut row = vec![0f32; m.cols()];
    let mut sum = 0f64;
    for r in 0..m.rows() {
        m.row_to_f32(r, &mut row);
        sum += row.iter().map(|&x| f64::from(x)).sum::<f64>();
    }
    std::hint::black_box(sum);
}

/// Read every element of a view through every accessor. With a page-aligned buffer (a model's
/// mapping) the element counts must match the shape exactly.
fn touch_view(v: &TensorView<'_>, aligned: bool) {
    let elems: u64 = v.shape.iter().product();
    let all = v.to_f32_vec();
    if aligned {
        assert_eq!(all.len() as u64, elems, "to_f32_vec of '{}' has the wrong length", v.name);
    }
    let mut sum = all.iter().fold(0f64, |a, &x| a + f64::from(x));
    let _ = v.mat().map(|m| m.len());
    let _ = (v.rows(), v.cols());
    if let Some(r) = v.row_f32(0) {
        sum += r.len() as f64;
    }
    let _ = v.row_f32(v.rows());
    let _ = v.row_f32(usize::MAX);
    if v.kind == TensorKind::Experts {
        for e in 0..v.n_experts() {
            let x = v.expert(e).expect("an expert inside the stack is missing");
            if aligned {
                assert_eq!(x.to_f32_vec().len(), x.rows() * x.cols());
            }
            let _ = x.row_f32(x.rows().saturating_sub(1));
        }
        assert!(v.expert(v.n_experts()).is_none());
    }
    std::hint::black_box(sum);
}

fn scratch_path() -> PathBuf {
    let dir = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    dir.join(format!("colibri-fuzz-{}.colibri", std::process::id()))
}

/// Make a mutated image self-consistent where the format only guards against corruption:
/// the header's file_size follows the real length, and (once the structure parses) each
/// tensor's checksum is recomputed. Lets the fuzzer reach the data checks and the model
/// binding instead of stopping at "truncated" or "checksum mismatch".
pub fn fixup(data: &[u8]) -> Vec<u8> {
    let mut v = data.to_vec();
    if v.len() >= 0x60 {
        let len = v.len() as u64;
        v[0x58..0x60].copy_from_slice(&len.to_le_bytes());
    }
    if let Ok(p) = format::parse(&v) {
        let table = p.header.table_offset as usize;
        let sums: Vec<u64> = p
            .tensors
            .iter()
            .map(|t| xxhash_rust::xxh64::xxh64(&v[t.data_offset as usize..(t.data_offset + t.byte_length) as usize], 0))
            .collect();
        for (i, s) in sums.into_iter().enumerate() {
            let at = table + i * format::RECORD_SIZE as usize + 72;
            v[at..at + 8].copy_from_slice(&s.to_le_bytes());
        }
    }
    v
}
