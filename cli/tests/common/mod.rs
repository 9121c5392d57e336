//! Shared helpers of the engine tests on the committed fixtures (tests/fixtures/models): find
//! the fixture directories, read their oracle metadata, convert them with the CLI, argmax.
#![allow(dead_code)] // each test binary uses a different subset

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every fixture directory with an oracle, sorted by name.
pub fn fixture_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("oracle/meta.json").is_file())
        .collect();
    v.sort();
    assert!(v.len() >= 4);
    v
}

/// The fixture's oracle/meta.json.
pub fn meta(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("oracle/meta.json")).unwrap()).unwrap()
}

/// A JSON array of ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// `colibri convert DIR -o OUT --dtype DTYPE`.
pub fn convert(dir: &Path, out: &Path, dtype: &str) {
    let o = Command::new(env!("CARGO_BIN_EXE_colibri"))
        .arg("convert")
        .arg(dir)
        .arg("-o")
        .arg(out)
        .args(["--dtype", dtype])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Index of the largest value (ties to the lowest index).
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// max |a - b| over two equally long slices.
pub fn max_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter().zip(b).fold(0f64, |m, (&x, &y)| m.max((f64::from(x) - f64::from(y)).abs()))
}
