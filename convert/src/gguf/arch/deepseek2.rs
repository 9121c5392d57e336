//! `deepseek2`: DeepSeek-V2 and V3 (and Kimi-K2 / Moonlight). Multi-head latent attention from
//! `attention.{q_lora_rank, kv_lora_rank, key_length_mla, value_length_mla}` and
//! `rope.dimension_count` (llama.cpp writes key/value_length as the latent cache's widths and
//! head_count_kv 1: not colibri's head sizes). V3 is told from V2 by `expert_gating_func` 2
//! (sigmoid, with the `exp_probs_b` choice bias); absent, llama.cpp takes softmax: V2. Expert
//! groups (`expert_group_count` > 1) are scored as each model defines them: V3 by top-2 sums
//! (llama.cpp's rule), V2 by the group maximum (`group_limited_greedy`). RoPE rotates
//! interleaved pairs (llama.cpp's NORM rope, transformers' DeepSeek). YaRN: llama.cpp stores
//! `rope.scaling.yarn_log_multiplier` = 0.1 · mscale_all_dim and takes mscale = mscale_all_dim,
//! so the rotation's attention factor is 1 and the softmax scale is × (0.1 · mscale_all_dim ·
//! ln factor + 1)². The latent norms keep transformers' eps 1e-6. MTP blocks
//! (`nextn_predict_layers`) are not part of the model.

use super::common::{base, Defaults, Hparams};
use super::Mapping;
use crate::error::{fail, Result};
use colibri::model::{Config, ExpertGroups, Family, GroupScore, Mla, QkNorm, RopeScaling, Scoring};

pub static DEEPSEEK2: Mapping = Mapping { arch: "deepseek2", family: Family::DeepseekV2, permuted_qk: false, config };

fn config(h: &Hparams) -> Result<Config> {
    let v3 = match h.u("expert_gating_func")? {
        None | Some(1) => false,
        Some(2) => true,
        Some(g) => return Err(fail(format!("GGUF deepseek2.expert_gating_func {g} is not supported"))),
    };
    let family = if v3 { Family::DeepseekV3 } else { Family::DeepseekV2 };
    let d = Defaults { family, norm_topk: false, qk_norm: QkNorm::None, ffn_is_expert: false };
    let mut c = base(h, &d)?;
    let rope_dim = h.need("rope.dimension_count")?;
    let key = h.need("attention.key_length_mla")?;
    let m = Mla {
        q_lora_rank: h.u("attention.q_lora_rank")?.unwrap_or(0),
        kv_lora_rank: h.need("attention.kv_lora_rank")?,
        qk_nope_head_dim: key.checked_sub(rope_dim).filter(|&n| n > 0).ok_or_else(|| {
            fail(format!("GGUF deepseek2.attention.key_length_mla {key} is not above rope.dimension_count {rope_dim}"))
        })?,
        qk_rope_head_dim: rope_dim,
        v_head_dim: h.need("attention.value_length_mla")?,
        latent_norm_eps: 1e-6,
    };
    (c.head_dim, c.n_kv_heads) = (key, c.n_heads);
    c.rope.partial_rotary_factor = 1.0;
    c.rope.interleaved = true;
    let mut softmax_scale = (key as f64).powf(-0.5);
    if let (Some(log_mul), RopeScaling::Yarn { factor, attention_factor, .. }) =
        (h.f("rope.scaling.yarn_log_multiplier")?, &mut c.rope.scaling)
    {
        *attention_factor = 1.0;
        if *factor > 1.0 {
            let mscale = log_mul * factor.ln() + 1.0;
            softmax_scale *= mscale * mscale;
        }
    }
    c.scales.attention = Some(softmax_scale);
    c.mla = Some(m);
    c.moe.shared_expert_ffn = c.moe.expert_ffn.saturating_mul(h.u("expert_shared_count")?.unwrap_or(0));
    c.moe.routed_scaling = h.f("expert_weights_scale")?.unwrap_or(1.0);
    c.moe.scoring = if v3 { Scoring::Sigmoid } else { Scoring::Softmax };
    c.moe.choice_bias = (0..c.n_layers).any(|l| h.has(&format!("blk.{l}.exp_probs_b.bias")));
    let score = if v3 { GroupScore::Top2Sum } else { GroupScore::Max };
    c.moe.groups = match (h.u("expert_group_count")?, h.u("expert_group_used_count")?) {
        (Some(n_group), used) if n_group > 1 => Some(ExpertGroups { n_group, topk_group: used.unwrap_or(1), score }),
        _ => None,
    };
    Ok(c)
}
