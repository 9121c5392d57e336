//! llama.cpp architectures → colibri families: one `Mapping` per `general.architecture` value,
//! each in its own file (`llama` with experts = Mixtral, `qwen2moe`, `qwen3moe`, `olmoe`,
//! `granitemoe`, `glm4moe`, `deepseek2`, `gpt-oss`, `phimoe`, `qwen3next`, `dots1`, `ernie4_5-moe`,
//! `hunyuan-moe`, `llama4`). A mapping builds the
//! colibri `Config` from the `{arch}.*` keys and the tensors present, and says which of
//! llama.cpp's converter transformations to undo; the tensor names are llama.cpp's shared ones
//! (`sources`, and `special` for those of a few architectures). Adding an architecture is one file with
//! one `Mapping` and one line in `MAPPINGS`.

mod common;
mod deepseek2;
mod dots1;
mod ernie;
mod glm4;
mod gpt_oss;
mod granite;
mod hunyuan;
mod llama;
mod llama4;
mod olmoe;
mod phimoe;
mod qwen;
mod qwen3next;

pub use common::Hparams;

use crate::error::{fail, Result};
use colibri::model::{Config, Family};

/// How one llama.cpp architecture maps onto colibri.
pub struct Mapping {
    /// `general.architecture`.
    pub arch: &'static str,
    /// The family (deepseek2's config says V2 or V3 from its gating function).
    pub family: Family,
    /// llama.cpp's converter permuted the q/k rows for its interleaved RoPE
    /// (`LlamaModel.permute`): undo it.
    pub permuted_qk: bool,
    /// The config from the hyperparameters (special-token ids are filled later).
    pub config: fn(&Hparams) -> Result<Config>,
}

static MAPPINGS: &[&Mapping] = &[
    &llama::LLAMA,
    &qwen::QWEN2MOE,
    &qwen::QWEN3MOE,
    &olmoe::OLMOE,
    &granite::GRANITEMOE,
    &glm4::GLM4MOE,
    &deepseek2::DEEPSEEK2,
    &gpt_oss::GPT_OSS,
    &phimoe::PHIMOE,
    &qwen3next::QWEN3NEXT,
    &dots1::DOTS1,
    &ernie::ERNIE4_5_MOE,
    &hunyuan::HUNYUAN_MOE,
    &llama4::LLAMA4,
];

/// The mapping of `arch`, or a one-line refusal naming it.
pub fn mapping(arch: &str) -> Result<&'static Mapping> {
    MAPPINGS.iter().copied().find(|m| m.arch == arch).ok_or_else(|| {
        let known: Vec<&str> = MAPPINGS.iter().map(|m| m.arch).collect();
        fail(format!("GGUF architecture '{arch}' is not supported (supported: {})", known.join(", ")))
    })
}
