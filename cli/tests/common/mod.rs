//! Helpers of the CLI's tests: what they need of the library tests' fixture helpers (the fixture
//! checkpoints, their tensors read with `safetensors`, the independent HF → colibri name mapping,
//! argmax), included from the root tests/common rather than copied.
#![allow(dead_code)] // each test binary uses a different subset

#[path = "../../../tests/common/fixtures.rs"]
mod fixtures;
pub use fixtures::{argmax, expected_bytes, fixtures, load_sources, to_f32_vec};
