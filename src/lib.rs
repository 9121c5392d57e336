//! colibri: Mixture-of-Experts LLM inference on CPU from one memory-mapped `.colibri` file.
//!
//! Module map (imports go one way, top to bottom):
//! - [`model`]: Config + Weights + metadata of an opened file (`Model::open`).
//! - [`tensor`]: zero-copy typed views of tensors.
//! - [`mmap`]: the OS mapping (or aligned read) of a file.
//! - [`format`]: the on-disk contract: byte layout, parser, validator, streaming writer.
//! - [`error`]: the crate's one error type.

pub mod error;
pub mod format;
pub mod mmap;
pub mod model;
pub mod tensor;

pub use error::{Error, Result};
pub use mmap::LoadOptions;
pub use model::{Config, Family, Model};

/// The library version (Cargo package version).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
