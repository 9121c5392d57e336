//! `dots1` (dots.llm1): per-head q/k norms before RoPE, DeepSeek-V3's router — sigmoid scores,
//! the `exp_probs_b` choice bias, expert groups (`expert_group_count` /
//! `expert_group_used_count`) scored by their top-2 sums, `expert_weights_norm`,
//! `expert_weights_scale` — ungated shared experts (`ffn_*_shexp`, their width read from the
//! tensors), leading dense layers (those without a router), optional q/k/v/o biases.
//! `expert_gating_func` is written by llama.cpp's converter only when the config names a
//! scoring function; transformers' Dots1 always scores by sigmoid, so absent means sigmoid.
//! llama.cpp's dots1 has no sliding window: a checkpoint's sliding layers (from
//! `max_window_layers`) attend fully in its GGUF.

use super::common::{base, Defaults, Hparams};
use super::Mapping;
use crate::error::{fail, Result};
use colibri::model::{Config, ExpertGroups, Family, GroupScore, QkNorm, Scoring};

pub static DOTS1: Mapping = Mapping { arch: "dots1", family: Family::Dots1, permuted_qk: false, config };

fn config(h: &Hparams) -> Result<Config> {
    let d = Defaults { family: Family::Dots1, norm_topk: false, qk_norm: QkNorm::PerHead, ffn_is_expert: false };
    let mut c = base(h, &d)?;
    match h.u("expert_gating_func")? {
        None | Some(2) => c.moe.scoring = Scoring::Sigmoid,
        Some(g) => {
            return Err(fail(format!(
                "GGUF dots1.expert_gating_func {g} is not supported (dots.llm1 scores by sigmoid)"
            )))
        }
    }
    c.moe.choice_bias = h.any_layer_has("exp_probs_b.bias");
    c.moe.shared_expert_ffn = h.rows_of("ffn_gate_shexp.weight").unwrap_or(0);
    c.moe.shared_expert_gate = false;
    c.moe.routed_scaling = h.f("expert_weights_scale")?.filter(|&s| s != 0.0).unwrap_or(1.0);
    c.moe.groups = match (h.u("expert_group_count")?, h.u("expert_group_used_count")?) {
        (Some(n_group), used) if n_group > 1 => {
            Some(ExpertGroups { n_group, topk_group: used.unwrap_or(1), score: GroupScore::Top2Sum })
        }
        _ => None,
    };
    c.attention_out_bias = h.has("blk.0.attn_output.bias");
    Ok(c)
}
