//! GGUF input: llama.cpp's model files, read and re-laid-out into a .colibri file without
//! re-quantising (`convert`). `parse` is the validating header parser (its module doc is the
//! byte-level spec), `file` a model of one or several split files, `types` the ggml type table,
//! `arch` the architecture mappings, `sources` / `stream` the tensor mapping and copying (`relayout` into
//! the interleaved K-quant dtypes),
//! `vocab` the tokenizer part of a GGUF's metadata as plain data (`GgufFile::vocab` fills it),
//! and `tokenizer` the builder of the HuggingFace tokenizer files from it.

pub mod arch;
pub mod convert;
pub mod file;
pub mod parse;
mod piece;
mod provenance;
mod relayout;
pub mod sources;
mod special;
mod stream;
pub mod tokenizer;
pub mod types;
pub mod value;
pub mod vocab;
mod vocab_read;

pub use convert::{is_gguf, map, Mapped};
pub use file::{GgufFile, Tensor};
pub use parse::{parse, Header, TensorInfo};
pub use types::GgmlType;
pub use value::{Metadata, Value};
pub use vocab::GgufVocab;
