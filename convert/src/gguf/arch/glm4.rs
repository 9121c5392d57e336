//! `glm4moe` (GLM-4.5): sigmoid scoring with a choice bias (`exp_probs_b`), expert groups
//! (`expert_group_count` / `expert_group_used_count`), `expert_weights_scale` and
//! `expert_weights_norm`, `expert_shared_count` ungated shared experts, leading dense layers,
//! partial RoPE (`rope.dimension_count`), optional per-head q/k norms. The trailing
//! `nextn_predict_layers` (multi-token prediction) blocks are not part of the model.

use super::common::{base, Defaults, Hparams};
use super::Mapping;
use crate::error::{fail, Result};
use colibri::model::{Config, ExpertGroups, Family, GroupScore, QkNorm, Scoring};

pub static GLM4MOE: Mapping = Mapping { arch: "glm4moe", family: Family::Glm4Moe, permuted_qk: false, config };

fn config(h: &Hparams) -> Result<Config> {
    let qk_norm = if h.has("blk.0.attn_q_norm.weight") { QkNorm::PerHead } else { QkNorm::None };
    let d = Defaults { family: Family::Glm4Moe, norm_topk: false, qk_norm, ffn_is_expert: false };
    let mut c = base(h, &d)?;
    match h.u("expert_gating_func")? {
        None | Some(2) => c.moe.scoring = Scoring::Sigmoid,
        Some(1) => c.moe.scoring = Scoring::Softmax,
        Some(g) => return Err(fail(format!("GGUF glm4moe.expert_gating_func {g} is not supported"))),
    }
    c.moe.choice_bias = true;
    c.moe.shared_expert_ffn = c.moe.expert_ffn.saturating_mul(h.u("expert_shared_count")?.unwrap_or(1));
    c.moe.shared_expert_gate = false;
    c.moe.routed_scaling = h.f("expert_weights_scale")?.unwrap_or(1.0);
    c.moe.groups = match (h.u("expert_group_count")?, h.u("expert_group_used_count")?) {
        (Some(n_group), used) if n_group > 1 => {
            Some(ExpertGroups { n_group, topk_group: used.unwrap_or(1), score: GroupScore::Top2Sum })
        }
        _ => None,
    };
    Ok(c)
}
