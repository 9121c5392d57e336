//! `qwen2moe` and `qwen3moe`. llama.cpp renormalises Qwen3-MoE's top-k weights and not
//! Qwen2-MoE's; Qwen2-MoE has a sigmoid-gated shared expert (`ffn_*_shexp`,
//! `ffn_gate_inp_shexp`), Qwen3-MoE per-head q/k norms. Dense layers are those without a router.

use super::common::{base, Defaults, Hparams};
use super::Mapping;
use crate::error::Result;
use colibri::model::{Config, Family, QkNorm};

pub static QWEN2MOE: Mapping =
    Mapping { arch: "qwen2moe", family: Family::Qwen2Moe, permuted_qk: false, config: qwen2 };
pub static QWEN3MOE: Mapping =
    Mapping { arch: "qwen3moe", family: Family::Qwen3Moe, permuted_qk: false, config: qwen3 };

fn qwen2(h: &Hparams) -> Result<Config> {
    base(h, &Defaults { family: Family::Qwen2Moe, norm_topk: false, qk_norm: QkNorm::None, ffn_is_expert: false })
}

fn qwen3(h: &Hparams) -> Result<Config> {
    base(h, &Defaults { family: Family::Qwen3Moe, norm_topk: true, qk_norm: QkNorm::PerHead, ffn_is_expert: false })
}
