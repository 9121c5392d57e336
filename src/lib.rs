//! colibri: Mixture-of-Experts LLM inference on CPU from one memory-mapped `.colibri` file.
//!
//! Module map (imports go one way, top to bottom):
//! - [`ffi`]: the C ABI (`include/colibri.h`).
//! - [`generate`]: prompt → tokens loop on one session.
//! - [`embed`]: token sequences → pooled final-normed hidden states (embeddings).
//! - [`decoder`]: one generation's decisions (sampling, end of sequence, text, stop strings),
//!   shared by `generate` and the server.
//! - [`grammar`]: structured output (JSON / JSON Schema) as a token mask per step.
//! - [`tokenizer`], [`sampler`]: text ↔ ids, logits → next id.
//! - [`forward`]: the forward pass (layer loop; attention, router, experts, ffn helpers).
//! - [`session`]: per-session KV cache, position, routing state and logits.
//! - [`model`]: Config + Weights (bound matrices) + metadata of an opened file (`Model::open`).
//! - [`tensor`]: zero-copy views of tensors, bound as kernel operands.
//! - [`kernels`]: math on bound matrices and slices (scalar reference + run-time chosen SIMD).
//! - [`mmap`]: the OS mapping (or aligned read) of a file.
//! - [`format`]: the on-disk contract: byte layout, dtype table, block layouts, parser,
//!   validator, streaming writer.
//! - [`error`]: the crate's one error type; [`rng`]: the seeded PRNG.

// Every unsafe operation sits in its own `unsafe` block with a `// SAFETY:` line saying why
// it holds, also inside `unsafe fn`s.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

/// cbindgen:ignore
pub mod chat_output;
/// cbindgen:ignore
pub mod decoder;
/// cbindgen:ignore
pub mod embed;
/// cbindgen:ignore
pub mod error;
/// cbindgen:ignore
pub mod fallible;
/// The C ABI: the only module cbindgen reads (every other one is `cbindgen:ignore`).
pub mod ffi;
/// cbindgen:ignore
pub mod format;
/// cbindgen:ignore
pub mod forward;
/// cbindgen:ignore
pub mod generate;
/// cbindgen:ignore
pub mod grammar;
/// cbindgen:ignore
pub mod kernels;
/// cbindgen:ignore
pub mod mmap;
/// cbindgen:ignore
pub mod model;
/// cbindgen:ignore
pub mod rng;
/// cbindgen:ignore
pub mod sampler;
/// cbindgen:ignore
pub mod session;
/// cbindgen:ignore
pub mod sigbus;
/// cbindgen:ignore
pub mod stop;
/// cbindgen:ignore
pub mod tensor;
/// cbindgen:ignore
pub mod threads;
/// cbindgen:ignore
pub mod tokenizer;
/// cbindgen:ignore
pub mod usable;

pub use error::{Error, Result};
pub use mmap::LoadOptions;
pub use model::{Config, Family, Model};

/// The library version (Cargo package version).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
