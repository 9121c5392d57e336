//! dots.llm1 (`Dots1Config`, modeling_dots1) config rules: DeepSeek-V3's router (sigmoid scores,
//! `e_score_correction_bias` for choosing only, groups scored by their top-2 sums,
//! `norm_topk_prob`, `routed_scaling_factor`) without DeepSeek's `scoring_func` / `topk_method`
//! keys and with Dots1Config's defaults; ungated shared experts of moe_intermediate_size ×
//! n_shared_experts; the first `first_k_dense_replace` layers dense; sliding layers from
//! `max_window_layers` on when the config has no `layer_types`.

use crate::error::{fail, Result};
use crate::json_keys::{opt_bool, opt_f64, opt_usize, usize_key};
use colibri::model::{ExpertGroups, GroupScore, MoeConfig, Scoring};
use serde_json::Value;

/// The routed and shared experts, and the dense layers' FFN width.
pub fn moe(hf: &Value, n_experts: usize, top_k: usize) -> Result<(MoeConfig, usize)> {
    let f = usize_key(hf, "moe_intermediate_size")?;
    // Dots1MoE sizes its shared experts as moe_intermediate_size * n_shared_experts: without the
    // key (Dots1Config's default None) transformers cannot build the model.
    let n_shared = opt_usize(hf, "n_shared_experts")?
        .ok_or_else(|| fail("config.json lacks 'n_shared_experts' (dots1 always has shared experts)"))?;
    let n_group = opt_usize(hf, "n_group")?.unwrap_or(1);
    let topk_group = opt_usize(hf, "topk_group")?.unwrap_or(1);
    let moe = MoeConfig {
        norm_topk_prob: opt_bool(hf, "norm_topk_prob")?.unwrap_or(false),
        shared_expert_ffn: f * n_shared,
        scoring: Scoring::Sigmoid,
        choice_bias: true,
        groups: (n_group > 1).then_some(ExpertGroups { n_group, topk_group, score: GroupScore::Top2Sum }),
        routed_scaling: opt_f64(hf, "routed_scaling_factor")?.unwrap_or(1.0),
        ..MoeConfig::plain(n_experts, top_k, f)
    };
    Ok((moe, opt_usize(hf, "intermediate_size")?.unwrap_or(10944)))
}

/// Layer `i` is a MoE layer (Dots1DecoderLayer: from `first_k_dense_replace` on, default 0).
pub fn moe_layer(hf: &Value, i: usize) -> Result<bool> {
    Ok(i >= opt_usize(hf, "first_k_dense_replace")?.unwrap_or(0))
}

/// Dots1Config's `layer_types` when config.json has none: sliding from layer
/// `max_window_layers` (default 62) on, when there is a `sliding_window`.
pub fn default_windows(hf: &Value, window: Option<usize>, n_layers: usize) -> Result<Vec<Option<usize>>> {
    let from = opt_usize(hf, "max_window_layers")?.unwrap_or(62);
    Ok((0..n_layers).map(|i| if i >= from { window } else { None }).collect())
}

#[cfg(test)]
mod tests {
    use crate::hf_config::config_from_hf;
    use serde_json::json;

    fn dots1() -> serde_json::Value {
        json!({
            "architectures": ["Dots1ForCausalLM"], "model_type": "dots1", "vocab_size": 64, "hidden_size": 32,
            "intermediate_size": 48, "moe_intermediate_size": 16, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 2,
            "first_k_dense_replace": 1, "sliding_window": 16, "max_window_layers": 3
        })
    }

    #[test]
    fn dots1_defaults_follow_dots1config() {
        let c = config_from_hf(&dots1()).unwrap();
        c.validate().unwrap();
        assert_eq!(
            c.layers.iter().map(|l| (l.moe, l.sliding_window)).collect::<Vec<_>>(),
            [(false, None), (true, None), (true, None), (true, Some(16))]
        );
        assert_eq!((c.moe.shared_expert_ffn, c.moe.norm_topk_prob, c.moe.routed_scaling), (32, false, 1.0));
        assert!(c.moe.groups.is_none() && c.moe.choice_bias);
    }

    #[test]
    fn a_dots1_config_without_shared_experts_is_refused_naming_the_key() {
        let mut hf = dots1();
        hf.as_object_mut().unwrap().remove("n_shared_experts");
        let e = config_from_hf(&hf).unwrap_err().to_string();
        assert!(e.contains("n_shared_experts") && !e.contains('\n'), "{e}");
    }
}
