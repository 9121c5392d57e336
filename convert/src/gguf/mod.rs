//! GGUF input: llama.cpp's model files, read and re-laid-out into a .colibri file without
//! re-quantising. `vocab` is the tokenizer part of a GGUF's metadata, as plain data.

pub mod tokenizer;
pub mod vocab;
