//! DeepSeek-V2 / V3 config.json rules (transformers' configuration_deepseek_v2/v3.py and
//! modeling_deepseek_v2/v3.py): multi-head latent attention, the softmax attention scale with
//! YaRN's mscale_all_dim, the routers (V2: softmax, greedy or group-limited by group maximum;
//! V3: sigmoid + choice bias, groups by top-2 sums), shared experts and leading dense layers.
//! Kimi-K2 and Moonlight configs are V3 configs.

use crate::error::{fail, Result};
use crate::json_keys::{get, opt_bool, opt_f64, opt_usize, usize_key};
use colibri::model::{ExpertGroups, Family, GroupScore, Mla, Scoring};
use serde_json::Value;

/// The defaults of DeepseekV2Config / DeepseekV3Config that differ between the two.
struct Defaults {
    first_k_dense_replace: usize,
    n_shared_experts: usize,
    routed_scaling_factor: f64,
    norm_topk_prob: bool,
}

fn defaults(fam: Family) -> Defaults {
    match fam {
        Family::DeepseekV2 => Defaults {
            first_k_dense_replace: 0,
            n_shared_experts: 2,
            routed_scaling_factor: 1.0,
            norm_topk_prob: false,
        },
        _ => {
            Defaults { first_k_dense_replace: 3, n_shared_experts: 1, routed_scaling_factor: 2.5, norm_topk_prob: true }
        }
    }
}

/// Whether `fam` is a DeepSeek family.
pub fn is_deepseek(fam: Family) -> bool {
    matches!(fam, Family::DeepseekV2 | Family::DeepseekV3)
}

/// The latent attention dimensions. `q_lora_rank` absent means the configs' default 1536; null
/// means a full q projection.
pub fn mla(hf: &Value) -> Result<Mla> {
    let q_lora_rank = match hf.get("q_lora_rank") {
        None => 1536,
        Some(Value::Null) => 0,
        Some(_) => usize_key(hf, "q_lora_rank")?,
    };
    Ok(Mla {
        q_lora_rank,
        kv_lora_rank: opt_usize(hf, "kv_lora_rank")?.unwrap_or(512),
        qk_nope_head_dim: opt_usize(hf, "qk_nope_head_dim")?.unwrap_or(128),
        qk_rope_head_dim: opt_usize(hf, "qk_rope_head_dim")?.unwrap_or(64),
        v_head_dim: opt_usize(hf, "v_head_dim")?.unwrap_or(128),
        latent_norm_eps: 1e-6,
    })
}

/// Refuse what transformers' DeepSeek models do not build or colibri does not run: biases on
/// the attention or MLP projections.
pub fn check_unsupported(hf: &Value) -> Result<()> {
    for key in ["attention_bias", "mlp_bias"] {
        if opt_bool(hf, key)?.unwrap_or(false) {
            return Err(fail(format!("config.json '{key}' = true is not supported for DeepSeek models")));
        }
    }
    Ok(())
}

/// The softmax scale: qk_head_dim^-0.5, × mscale² when the RoPE parameters carry
/// mscale_all_dim (transformers `yarn_apply_mscale`).
pub fn attention_scale(hf: &Value, m: &Mla) -> Result<f64> {
    let scale = ((m.qk_nope_head_dim + m.qk_rope_head_dim) as f64).powf(-0.5);
    let Some(p) = get(hf, "rope_parameters").or_else(|| get(hf, "rope_scaling")) else { return Ok(scale) };
    let kind = get(p, "rope_type").or_else(|| get(p, "type")).and_then(Value::as_str).unwrap_or("default");
    let all_dim = opt_f64(p, "mscale_all_dim")?.unwrap_or(0.0);
    if kind == "default" || all_dim == 0.0 {
        return Ok(scale);
    }
    let factor = opt_f64(p, "factor")?.ok_or_else(|| fail("rope parameters with mscale_all_dim need 'factor'"))?;
    let mscale = if factor <= 1.0 { 1.0 } else { 0.1 * all_dim * factor.ln() + 1.0 };
    Ok(scale * mscale * mscale)
}

/// Whether RoPE rotates interleaved pairs: always in V2, per `rope_interleave` (default true)
/// in V3.
pub fn rope_interleaved(hf: &Value, fam: Family) -> Result<bool> {
    Ok(fam == Family::DeepseekV2 || opt_bool(hf, "rope_interleave")?.unwrap_or(true))
}

/// A string key that must be one of `allowed` when present.
fn one_of(hf: &Value, key: &str, allowed: &[&str]) -> Result<Option<String>> {
    match get(hf, key) {
        None => Ok(None),
        Some(Value::String(s)) if allowed.contains(&s.as_str()) => Ok(Some(s.clone())),
        Some(v) => Err(fail(format!("config.json '{key}' = {v} is not supported (expected one of {allowed:?})"))),
    }
}

/// The routing rule: (scoring, choice bias, groups, norm_topk_prob, routed_scaling).
pub struct Routing {
    pub scoring: Scoring,
    pub choice_bias: bool,
    pub groups: Option<ExpertGroups>,
    pub norm_topk_prob: bool,
    pub routed_scaling: f64,
}

/// The router of `DeepseekV2TopkRouter` (softmax; `topk_method` greedy or
/// group_limited_greedy; weights never renormalised) or `DeepseekV3TopkRouter` (sigmoid scores
/// + e_score_correction_bias for the choice, groups by top-2 sums, `norm_topk_prob`).
pub fn routing(hf: &Value, fam: Family) -> Result<Routing> {
    let d = defaults(fam);
    let routed_scaling = opt_f64(hf, "routed_scaling_factor")?.unwrap_or(d.routed_scaling_factor);
    let groups = |score: GroupScore, n_default: Option<usize>, k_default: Option<usize>| -> Result<_> {
        let n_group = opt_usize(hf, "n_group")?.or(n_default).ok_or_else(|| fail("config.json lacks 'n_group'"))?;
        let topk_group =
            opt_usize(hf, "topk_group")?.or(k_default).ok_or_else(|| fail("config.json lacks 'topk_group'"))?;
        Ok((n_group > 1).then_some(ExpertGroups { n_group, topk_group, score }))
    };
    if fam == Family::DeepseekV2 {
        one_of(hf, "scoring_func", &["softmax"])?;
        let method = one_of(hf, "topk_method", &["greedy", "group_limited_greedy"])?;
        let groups = match method.as_deref() {
            Some("group_limited_greedy") => groups(GroupScore::Max, None, None)?,
            _ => None,
        };
        return Ok(Routing {
            scoring: Scoring::Softmax,
            choice_bias: false,
            groups,
            norm_topk_prob: false,
            routed_scaling,
        });
    }
    one_of(hf, "scoring_func", &["sigmoid"])?;
    one_of(hf, "topk_method", &["noaux_tc"])?;
    Ok(Routing {
        scoring: Scoring::Sigmoid,
        choice_bias: true,
        groups: groups(GroupScore::Top2Sum, Some(8), Some(4))?,
        norm_topk_prob: opt_bool(hf, "norm_topk_prob")?.unwrap_or(d.norm_topk_prob),
        routed_scaling,
    })
}

/// (expert ffn, dense ffn, shared ffn): moe_intermediate_size, intermediate_size and
/// moe_intermediate_size × n_shared_experts.
pub fn ffn_sizes(hf: &Value, fam: Family) -> Result<(usize, usize, usize)> {
    let f = usize_key(hf, "moe_intermediate_size")?;
    let shared = opt_usize(hf, "n_shared_experts")?.unwrap_or(defaults(fam).n_shared_experts);
    Ok((f, opt_usize(hf, "intermediate_size")?.unwrap_or(0), f * shared))
}

/// Layer `i` is a MoE layer (the first `first_k_dense_replace` are dense).
pub fn moe_layer(hf: &Value, fam: Family, i: usize) -> Result<bool> {
    Ok(i >= opt_usize(hf, "first_k_dense_replace")?.unwrap_or(defaults(fam).first_k_dense_replace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_routing_keys_are_refused_naming_the_key() {
        for (fam, hf, key) in [
            (Family::DeepseekV2, json!({"topk_method": "noaux_tc"}), "topk_method"),
            (Family::DeepseekV2, json!({"scoring_func": "sigmoid"}), "scoring_func"),
            (Family::DeepseekV3, json!({"scoring_func": "softmax", "n_group": 1, "topk_group": 1}), "scoring_func"),
            (Family::DeepseekV3, json!({"topk_method": "greedy", "n_group": 1, "topk_group": 1}), "topk_method"),
        ] {
            let e = routing(&hf, fam).err().expect("refused").to_string();
            assert!(e.contains(key) && !e.contains('\n'), "{fam:?} {hf}: {e}");
        }
    }

    #[test]
    fn v2_groups_score_by_maximum_and_v3_by_top_two_sums() {
        let v2 =
            routing(&json!({"topk_method": "group_limited_greedy", "n_group": 4, "topk_group": 2}), Family::DeepseekV2)
                .unwrap();
        assert_eq!(v2.groups, Some(ExpertGroups { n_group: 4, topk_group: 2, score: GroupScore::Max }));
        assert_eq!((v2.scoring, v2.choice_bias, v2.norm_topk_prob), (Scoring::Softmax, false, false));
        let greedy =
            routing(&json!({"topk_method": "greedy", "n_group": 4, "topk_group": 2}), Family::DeepseekV2).unwrap();
        assert_eq!(greedy.groups, None, "greedy ignores the groups");
        // DeepseekV3Config's defaults: 8 groups, 4 kept, renormalised, x2.5.
        let v3 = routing(&json!({}), Family::DeepseekV3).unwrap();
        assert_eq!(v3.groups, Some(ExpertGroups { n_group: 8, topk_group: 4, score: GroupScore::Top2Sum }));
        assert_eq!(
            (v3.scoring, v3.choice_bias, v3.norm_topk_prob, v3.routed_scaling),
            (Scoring::Sigmoid, true, true, 2.5)
        );
    }

    #[test]
    fn q_lora_rank_absent_is_the_default_and_null_is_a_full_projection() {
        assert_eq!(mla(&json!({})).unwrap().q_lora_rank, 1536);
        assert_eq!(mla(&json!({"q_lora_rank": null})).unwrap().q_lora_rank, 0);
        assert_eq!(mla(&json!({"q_lora_rank": 24})).unwrap().q_lora_rank, 24);
    }

    #[test]
    fn the_softmax_scale_takes_mscale_all_dim_squared() {
        let m = mla(&json!({"qk_nope_head_dim": 128, "qk_rope_head_dim": 64})).unwrap();
        let plain = attention_scale(&json!({}), &m).unwrap();
        assert!((plain - 192f64.powf(-0.5)).abs() < 1e-15);
        // DeepSeek-V3's hub rope_scaling: factor 40, mscale_all_dim 1 → × (0.1 ln 40 + 1)².
        let hub = json!({"rope_scaling": {"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096}});
        let m40 = 0.1 * 40f64.ln() + 1.0;
        assert!((attention_scale(&hub, &m).unwrap() - plain * m40 * m40).abs() < 1e-12);
        let no_all_dim = json!({"rope_parameters": {"rope_type": "yarn", "factor": 40}});
        assert_eq!(attention_scale(&no_all_dim, &m).unwrap(), plain);
    }
}
