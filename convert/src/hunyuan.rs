//! Hunyuan-MoE (`HunYuanMoEV1Config`, modeling_hunyuan_v1_moe) config rules, as transformers
//! ports it: `num_experts` experts, `moe_topk` per token (each an int, or a per-layer list that
//! colibri takes only when all its entries are equal), softmax top-k renormalised; every layer
//! has the routed experts and an ungated shared MLP, both of `intermediate_size`; per-head q/k
//! RMSNorm after RoPE; RoPE "dynamic" with a fixed `alpha` is NTK-alpha: base θ·α^(d/(d−2)).
//! Keys of the hub's remote-code config that the port ignores but that would change the model
//! (`use_cla`, a `moe_intermediate_size` or `num_shared_expert` other than the port's) are refused.

use crate::error::{fail, Result};
use crate::json_keys::{get, opt_bool, opt_usize};
use colibri::model::MoeConfig;
use serde_json::Value;

/// An int, or a list of equal ints (the hub's per-layer lists), under `key`.
fn uniform(hf: &Value, key: &str) -> Result<Option<usize>> {
    let Some(list) = get(hf, key).and_then(|v| v.as_array()) else { return opt_usize(hf, key) };
    let values: Vec<u64> = list.iter().filter_map(|x| x.as_u64()).collect();
    match values.first() {
        Some(&v) if values.len() == list.len() && values.iter().all(|&x| x == v) => Ok(Some(v as usize)),
        _ => Err(fail(format!("config.json '{key}' must be an integer or a list of one repeated integer"))),
    }
}

/// Refuse what the transformers port would silently run differently from the checkpoint's model.
fn check_unsupported(hf: &Value) -> Result<()> {
    if opt_bool(hf, "use_cla")?.unwrap_or(false) {
        return Err(fail("use_cla = true (cross-layer attention) is not supported for Hunyuan-MoE"));
    }
    let ffn = opt_usize(hf, "intermediate_size")?.unwrap_or(11008);
    if uniform(hf, "moe_intermediate_size")?.is_some_and(|f| f != ffn) {
        return Err(fail(
            "moe_intermediate_size differs from intermediate_size: transformers' Hunyuan-MoE has one size",
        ));
    }
    if uniform(hf, "num_shared_expert")?.is_some_and(|n| n != 1) {
        return Err(fail("num_shared_expert other than 1 is not supported for Hunyuan-MoE"));
    }
    Ok(())
}

/// The routed experts and the shared MLP (HunYuanMoEV1Config defaults); no dense layers.
pub fn moe(hf: &Value) -> Result<(MoeConfig, usize)> {
    check_unsupported(hf)?;
    let f = opt_usize(hf, "intermediate_size")?.unwrap_or(11008);
    let (n_experts, top_k) = (uniform(hf, "num_experts")?.unwrap_or(1), uniform(hf, "moe_topk")?.unwrap_or(1));
    let moe = MoeConfig { norm_topk_prob: true, shared_expert_ffn: f, ..MoeConfig::plain(n_experts, top_k, f) };
    Ok((moe, 0))
}

/// θ·α^(d/(d−2)) for RoPE "dynamic" with an `alpha` (HunYuanDenseV1RotaryEmbedding's
/// ntk_alpha), else θ; other scalings are refused here (the port knows no others).
pub fn rope_theta(params: Option<&Value>, theta: f64, head_dim: usize) -> Result<f64> {
    let p = |k: &str| params.and_then(|p| get(p, k));
    let kind = p("rope_type").or_else(|| p("type")).and_then(|t| t.as_str()).unwrap_or("default");
    match (kind, p("alpha").and_then(|a| a.as_f64())) {
        ("default", _) => Ok(theta),
        ("dynamic", Some(alpha)) if head_dim > 2 => Ok(theta * alpha.powf(head_dim as f64 / (head_dim as f64 - 2.0))),
        (other, _) => Err(fail(format!("rope type '{other}' without 'alpha' is not supported for Hunyuan-MoE"))),
    }
}

#[cfg(test)]
mod tests {
    use crate::hf_config::config_from_hf;
    use serde_json::json;

    /// A Hunyuan-MoE config.json with per-layer lists as the hub writes them, shrunk.
    fn hunyuan() -> serde_json::Value {
        json!({
            "architectures": ["HunYuanMoEV1ForCausalLM"], "model_type": "hunyuan_v1_moe", "vocab_size": 64,
            "hidden_size": 32, "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 8, "num_experts": 4, "moe_topk": [2, 2],
            "moe_intermediate_size": [16, 16], "num_shared_expert": [1, 1], "use_cla": false,
            "rope_parameters": {"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0, "rope_theta": 10000.0}
        })
    }

    #[test]
    fn hunyuan_takes_uniform_lists_and_resolves_ntk_alpha_into_the_base() {
        let c = config_from_hf(&hunyuan()).unwrap();
        c.validate().unwrap();
        assert_eq!((c.moe.n_experts, c.moe.top_k, c.moe.expert_ffn, c.moe.shared_expert_ffn), (4, 2, 16, 16));
        assert!(c.qk_norm_after_rope && c.moe.norm_topk_prob && c.layers.iter().all(|l| l.moe));
        let want = 10000.0 * 1000f64.powf(8.0 / 6.0);
        assert!((c.rope.theta - want).abs() < 1e-6 * want, "{}", c.rope.theta);
        assert_eq!(c.rope.scaling, colibri::model::RopeScaling::None);
    }

    #[test]
    fn hunyuan_configs_the_port_would_run_differently_are_refused_naming_the_key() {
        for (key, value) in [
            ("use_cla", json!(true)),
            ("moe_topk", json!([2, 1])),
            ("moe_intermediate_size", json!(32)),
            ("num_shared_expert", json!([2, 2])),
            ("rope_parameters", json!({"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})),
        ] {
            let mut hf = hunyuan();
            hf[key] = value;
            let e = config_from_hf(&hf).unwrap_err().to_string();
            let named = if key == "rope_parameters" { "rope type" } else { key };
            assert!(e.contains(named) && !e.contains('\n'), "{key}: {e}");
        }
    }
}
