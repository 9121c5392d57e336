//! ERNIE-4.5-MoE (`Ernie4_5_MoeConfig`, modeling_ernie4_5_moe) config rules: `moe_num_experts`
//! experts, `moe_k` per token, softmax scores with a per-expert choice bias added to the
//! probabilities (`moe_statics.e_score_correction_bias`, choosing only), the chosen
//! probabilities renormalised (clamped at `moe_norm_min`, a bound no softmax sum reaches); ungated
//! shared experts of moe_intermediate_size × moe_num_shared_experts; MoE layers where
//! (i + 1) % moe_layer_interval == 0 and moe_layer_start_index ≤ i ≤ moe_layer_end_index (−1: the
//! last layer). `use_bias` (biased attention, MLP and lm_head) is refused.

use crate::error::{fail, Result};
use crate::json_keys::{get, opt_bool, opt_usize};
use colibri::model::MoeConfig;
use serde_json::Value;

/// The first of `keys` present (an attribute_map alias), or `default`.
fn usize_or(hf: &Value, keys: &[&str], default: usize) -> Result<usize> {
    for k in keys {
        if let Some(v) = opt_usize(hf, k)? {
            return Ok(v);
        }
    }
    Ok(default)
}

/// An integer key that may be negative (moe_layer_end_index −1).
fn opt_i64(hf: &Value, key: &str) -> Result<Option<i64>> {
    match get(hf, key) {
        None => Ok(None),
        Some(x) => x.as_i64().map(Some).ok_or_else(|| fail(format!("config.json '{key}' must be an integer, got {x}"))),
    }
}

/// Refuse what transformers would run but colibri cannot (biased MLPs).
fn check_unsupported(hf: &Value) -> Result<()> {
    if opt_bool(hf, "use_bias")?.unwrap_or(false) {
        return Err(fail("use_bias = true (biased MLP projections) is not supported for ERNIE-4.5-MoE"));
    }
    Ok(())
}

/// The routed and shared experts, and the dense layers' FFN width (Ernie4_5_MoeConfig defaults).
pub fn moe(hf: &Value) -> Result<(MoeConfig, usize)> {
    check_unsupported(hf)?;
    let f = usize_or(hf, &["moe_intermediate_size"], 1536)?;
    let n_experts = usize_or(hf, &["moe_num_experts", "num_experts"], 64)?;
    let top_k = usize_or(hf, &["moe_k", "num_experts_per_tok"], 6)?;
    let moe = MoeConfig {
        norm_topk_prob: true,
        shared_expert_ffn: f * usize_or(hf, &["moe_num_shared_experts"], 2)?,
        choice_bias: true,
        ..MoeConfig::plain(n_experts, top_k, f)
    };
    Ok((moe, usize_or(hf, &["intermediate_size"], 12288)?))
}

/// Layer `i` is a MoE layer (Ernie4_5_MoeDecoderLayer).
pub fn moe_layer(hf: &Value, i: usize, n_layers: usize) -> Result<bool> {
    let start = opt_i64(hf, "moe_layer_start_index")?.unwrap_or(1);
    let end = match opt_i64(hf, "moe_layer_end_index")?.unwrap_or(-1) {
        -1 => n_layers as i64 - 1,
        e => e,
    };
    let interval = opt_usize(hf, "moe_layer_interval")?.unwrap_or(1);
    if interval == 0 {
        return Err(fail("config.json 'moe_layer_interval' must be at least 1"));
    }
    let i64_i = i as i64;
    Ok((i + 1).is_multiple_of(interval) && i64_i >= start && i64_i <= end)
}

#[cfg(test)]
mod tests {
    use crate::hf_config::config_from_hf;
    use serde_json::json;

    /// An ERNIE-4.5-MoE config.json with the hub's keys (moe_num_experts, moe_k, ...), shrunk.
    fn ernie() -> serde_json::Value {
        json!({
            "architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe", "vocab_size": 64,
            "hidden_size": 32, "intermediate_size": 48, "moe_intermediate_size": 16, "num_hidden_layers": 5,
            "num_attention_heads": 4, "num_key_value_heads": 2, "moe_num_experts": 8, "moe_k": 2,
            "moe_num_shared_experts": 2, "moe_layer_start_index": 1, "moe_layer_end_index": -1,
            "moe_layer_interval": 2, "use_bias": false
        })
    }

    #[test]
    fn ernie_layers_experts_and_defaults_follow_ernie4_5_moeconfig() {
        let c = config_from_hf(&ernie()).unwrap();
        c.validate().unwrap();
        // (i + 1) % 2 == 0 and 1 <= i <= 4.
        assert_eq!(c.layers.iter().map(|l| l.moe).collect::<Vec<_>>(), [false, true, false, true, false]);
        assert_eq!((c.moe.n_experts, c.moe.top_k, c.moe.shared_expert_ffn), (8, 2, 32));
        assert!(c.rope.interleaved && c.tie_embeddings && c.moe.norm_topk_prob && c.moe.choice_bias);
        assert_eq!((c.rope.theta, c.rms_norm_eps), (500000.0, 1e-5));
    }

    #[test]
    fn ernie_configs_colibri_cannot_run_are_refused_naming_the_key() {
        for (key, value) in
            [("use_bias", json!(true)), ("moe_layer_interval", json!(0)), ("moe_layer_end_index", json!(1.5))]
        {
            let mut hf = ernie();
            hf[key] = value;
            let e = config_from_hf(&hf).unwrap_err().to_string();
            assert!(e.contains(key) && !e.contains('\n'), "{key}: {e}");
        }
    }
}
