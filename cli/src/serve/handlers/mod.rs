//! One module per endpoint family; `common` holds what the generating ones share.

pub mod chat;
pub mod common;
pub mod completions;
pub mod embeddings;
pub mod generate;
pub mod info;
pub mod tally;
pub mod tokens;
