//! HuggingFace config.json (transformers 4 and 5 key spellings) → colibri `Config`, plus the
//! special-token ids gathered from config.json, generation_config.json and tokenizer_config.json.
//! Family rules mirror transformers' configuration_<family>.py and modeling_<family>.py.

use crate::error::{fail, Result};
use crate::json_keys::{get, opt_bool, opt_f64, opt_usize, usize_key};
use crate::{deepseek, dots1, ernie, hunyuan, llama4};
use colibri::model::{
    Config, DeltaNetConfig, ExpertAct, ExpertGroups, Family, GroupScore, LayerKind, LayerSpec, MoeConfig, NormKind,
    QkNorm, Rope, RopeScaling, Scales, Scoring,
};
use serde_json::Value;

/// Token ids given as an int or a list of ints.
pub fn ids(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a.iter().filter_map(|x| x.as_u64()).map(|x| x as u32).collect(),
        _ => Vec::new(),
    }
}

/// Which family a config.json describes.
pub fn family(hf: &Value) -> Result<Family> {
    let arch = hf.get("architectures").and_then(|a| a.get(0)).and_then(|a| a.as_str());
    let model_type = hf.get("model_type").and_then(|m| m.as_str());
    let fam = match (arch, model_type) {
        (Some("MixtralForCausalLM"), _) | (None, Some("mixtral")) => Family::Mixtral,
        (Some("Qwen2MoeForCausalLM"), _) | (None, Some("qwen2_moe")) => Family::Qwen2Moe,
        (Some("Qwen3MoeForCausalLM"), _) | (None, Some("qwen3_moe")) => Family::Qwen3Moe,
        (Some("OlmoeForCausalLM"), _) | (None, Some("olmoe")) => Family::Olmoe,
        (Some("GraniteMoeForCausalLM"), _) | (None, Some("granitemoe")) => Family::GraniteMoe,
        (Some("Glm4MoeForCausalLM"), _) | (None, Some("glm4_moe")) => Family::Glm4Moe,
        (Some("DeepseekV2ForCausalLM"), _) | (None, Some("deepseek_v2")) => Family::DeepseekV2,
        // Kimi-K2 (model_type kimi_k2) and Moonlight name the V3 class.
        (Some("DeepseekV3ForCausalLM"), _) | (None, Some("deepseek_v3" | "kimi_k2")) => Family::DeepseekV3,
        (Some("GptOssForCausalLM"), _) | (None, Some("gpt_oss")) => Family::GptOss,
        (Some("PhimoeForCausalLM"), _) | (None, Some("phimoe")) => Family::Phimoe,
        (Some("Qwen3NextForCausalLM"), _) | (None, Some("qwen3_next")) => Family::Qwen3Next,
        (Some("Dots1ForCausalLM"), _) | (None, Some("dots1")) => Family::Dots1,
        (Some("Ernie4_5_MoeForCausalLM"), _) | (None, Some("ernie4_5_moe")) => Family::Ernie45Moe,
        (Some("HunYuanMoEV1ForCausalLM"), _) | (None, Some("hunyuan_v1_moe")) => Family::HunyuanV1Moe,
        (Some("Llama4ForCausalLM" | "Llama4ForConditionalGeneration"), _) | (None, Some("llama4_text" | "llama4")) => {
            Family::Llama4
        }
        (a, m) => {
            return Err(fail(format!(
                "unsupported model family (architectures {:?}, model_type {:?}); supported: \
                 MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, OlmoeForCausalLM, \
                 GraniteMoeForCausalLM, Glm4MoeForCausalLM, DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, GptOssForCausalLM, \
                 PhimoeForCausalLM, Qwen3NextForCausalLM, Dots1ForCausalLM, Ernie4_5_MoeForCausalLM, \
                 HunYuanMoEV1ForCausalLM, Llama4ForCausalLM, Llama4ForConditionalGeneration",
                a.unwrap_or("?"),
                m.unwrap_or("?")
            )))
        }
    };
    Ok(fam)
}

/// The RoPE parameters dictionary: transformers 5 `rope_parameters`, else transformers 4
/// `rope_scaling` merged with top-level `rope_theta`.
fn rope(hf: &Value, fam: Family, head_dim: usize, max_pos: usize) -> Result<Rope> {
    let params = get(hf, "rope_parameters").or_else(|| get(hf, "rope_scaling"));
    // GptOssConfig: YaRN ×32 over 4096 positions unless the config says otherwise.
    let gpt_oss_default = serde_json::json!({
        "rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": false,
        "original_max_position_embeddings": 4096
    });
    let params = params.or((fam == Family::GptOss).then_some(&gpt_oss_default));
    let p = |k: &str| params.and_then(|p| get(p, k));
    let pf = |k: &str| -> Result<Option<f64>> {
        match p(k) {
            None => Ok(None),
            Some(x) => x.as_f64().map(Some).ok_or_else(|| fail(format!("rope parameter '{k}' must be a number"))),
        }
    };
    let default_theta = match fam {
        Family::Mixtral | Family::Phimoe => 1e6,
        Family::GptOss => 150000.0,
        Family::Ernie45Moe | Family::Llama4 => 500000.0,
        _ => 10000.0,
    };
    let theta = pf("rope_theta")?.or(opt_f64(hf, "rope_theta")?).unwrap_or(default_theta);
    if fam == Family::HunyuanV1Moe {
        let theta = hunyuan::rope_theta(params, theta, head_dim)?;
        return Ok(Rope { theta, partial_rotary_factor: 1.0, scaling: RopeScaling::None, interleaved: false });
    }
    // GLM-4.5 rotates half of each head, Qwen3-Next a quarter, unless told otherwise (the
    // defaults of Glm4MoeConfig / Qwen3NextConfig).
    let default_partial = match fam {
        Family::Glm4Moe => 0.5,
        Family::Qwen3Next => 0.25,
        _ => 1.0,
    };
    let partial = pf("partial_rotary_factor")?.or(opt_f64(hf, "partial_rotary_factor")?).unwrap_or(default_partial);
    let kind = p("rope_type").or_else(|| p("type")).and_then(|t| t.as_str()).unwrap_or("default");
    let original =
        pf("original_max_position_embeddings")?.or(opt_f64(hf, "original_max_position_embeddings")?).map(|x| x as u64);
    let factor = pf("factor")?;
    let need_factor = || factor.ok_or_else(|| fail(format!("rope type '{kind}' needs 'factor'")));
    let scaling = match kind {
        "default" | "none" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: need_factor()? },
        "dynamic" => RopeScaling::Dynamic {
            factor: need_factor()?,
            original_max_position_embeddings: original.unwrap_or(max_pos as u64),
        },
        "yarn" => {
            let original = original.unwrap_or(max_pos as u64);
            let factor = factor.unwrap_or(max_pos as f64 / original as f64);
            let get_mscale = |scale: f64, m: f64| if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 };
            let attention_factor = match (pf("attention_factor")?, pf("mscale")?, pf("mscale_all_dim")?) {
                (Some(a), _, _) => a,
                (None, Some(m), Some(md)) if m != 0.0 && md != 0.0 => get_mscale(factor, m) / get_mscale(factor, md),
                _ => get_mscale(factor, 1.0),
            };
            let beta_fast = pf("beta_fast")?.filter(|&b| b != 0.0).unwrap_or(32.0);
            let beta_slow = pf("beta_slow")?.filter(|&b| b != 0.0).unwrap_or(1.0);
            let truncate = p("truncate").and_then(|t| t.as_bool()).unwrap_or(true);
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings: original,
                beta_fast,
                beta_slow,
                attention_factor,
                truncate,
            }
        }
        "llama3" => RopeScaling::Llama3 {
            factor: need_factor()?,
            low_freq_factor: pf("low_freq_factor")?.unwrap_or(1.0),
            high_freq_factor: pf("high_freq_factor")?.unwrap_or(4.0),
            original_max_position_embeddings: original.unwrap_or(8192),
        },
        "longrope" => longrope(hf, params, max_pos)?,
        other => return Err(fail(format!("unsupported rope type '{other}'"))),
    };
    Ok(Rope { theta, partial_rotary_factor: partial, scaling, interleaved: interleaved(hf, fam)? })
}

/// Whether RoPE rotates interleaved pairs: ERNIE-4.5 (cos/sin repeat_interleave'd, GLM's
/// rotate_half), Llama-4 (complex pairs), DeepSeek (`deepseek::rope_interleaved`).
fn interleaved(hf: &Value, fam: Family) -> Result<bool> {
    let deepseek = deepseek::is_deepseek(fam) && deepseek::rope_interleaved(hf, fam)?;
    Ok(deepseek || matches!(fam, Family::Ernie45Moe | Family::Llama4))
}

/// LongRoPE's parameters (`_compute_longrope_parameters` + PhimoeRotaryEmbedding): the factor
/// lists, the original context (config.json's top level first, as transformers'
/// `standardize_rope_params`), and the two mscales, which PhimoeConfig requires.
fn longrope(hf: &Value, params: Option<&Value>, max_pos: usize) -> Result<RopeScaling> {
    let p = |k: &str| params.and_then(|p| get(p, k));
    let list = |k: &str| -> Result<Vec<f64>> {
        p(k).and_then(|v| v.as_array())
            .and_then(|a| a.iter().map(|x| x.as_f64()).collect::<Option<Vec<f64>>>())
            .ok_or_else(|| fail(format!("longrope needs '{k}' as a list of numbers")))
    };
    let num = |k: &str| -> Result<f64> {
        p(k).and_then(|v| v.as_f64()).ok_or_else(|| fail(format!("longrope needs the number '{k}' (PhimoeConfig)")))
    };
    let original = match opt_usize(hf, "original_max_position_embeddings")? {
        Some(o) => o as u64,
        None => p("original_max_position_embeddings").and_then(|v| v.as_u64()).unwrap_or(max_pos as u64),
    };
    Ok(RopeScaling::LongRope {
        short_factor: list("short_factor")?,
        long_factor: list("long_factor")?,
        original_max_position_embeddings: original,
        short_mscale: num("short_mscale")?,
        long_mscale: num("long_mscale")?,
    })
}

/// Sliding windows per layer: transformers 5 `layer_types`, else the family's rule.
fn sliding(hf: &Value, fam: Family, n_layers: usize) -> Result<Vec<Option<usize>>> {
    let window = opt_usize(hf, "sliding_window")?.filter(|&w| w > 0);
    let use_sw = opt_bool(hf, "use_sliding_window")?;
    if let Some(types) = get(hf, "layer_types").and_then(|t| t.as_array()) {
        if types.len() != n_layers {
            return Err(fail(format!("layer_types has {} entries for {n_layers} layers", types.len())));
        }
        return types
            .iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => {
                    window.map(Some).ok_or_else(|| fail("a sliding_attention layer but no sliding_window"))
                }
                // Qwen3-Next's DeltaNet layers have no window (their kind: `layer_kinds`).
                // Llama-4's chunks are not windows (`llama4::finish` sets them).
                Some("full_attention") => Ok(None),
                Some("chunked_attention") if fam == Family::Llama4 => Ok(None),
                Some("linear_attention") if fam == Family::Qwen3Next => Ok(None),
                other => Err(fail(format!("unsupported layer type {other:?}"))),
            })
            .collect();
    }
    Ok(match fam {
        Family::Mixtral | Family::Phimoe => vec![window; n_layers],
        Family::GraniteMoe
        | Family::Glm4Moe
        | Family::DeepseekV2
        | Family::DeepseekV3
        | Family::Qwen3Next
        | Family::Ernie45Moe
        | Family::HunyuanV1Moe
        | Family::Llama4 => vec![None; n_layers],
        Family::Dots1 => dots1::default_windows(hf, window, n_layers)?,
        // GptOssConfig's default layer_types: sliding, full, sliding, …
        Family::GptOss => (0..n_layers).map(|i| if i % 2 == 0 { window } else { None }).collect(),
        Family::Qwen3Moe => vec![if use_sw == Some(true) { window } else { None }; n_layers],
        Family::Qwen2Moe => {
            let max_window_layers = opt_usize(hf, "max_window_layers")?.unwrap_or(28);
            (0..n_layers)
                .map(|i| if use_sw == Some(true) && (i + 1) % 2 == 1 && i < max_window_layers { window } else { None })
                .collect()
        }
        Family::Olmoe => vec![None; n_layers],
    })
}

/// The routed experts (count, top-k, widths, renormalisation, shared expert) and the dense
/// layers' FFN width.
fn moe_config(hf: &Value, fam: Family) -> Result<(MoeConfig, usize)> {
    // transformers 5 writes `num_local_experts` for most families; transformers 4 `num_experts`
    // for all but Mixtral; GLM-4.5 (and DeepSeek) `n_routed_experts`.
    let n_experts = match (opt_usize(hf, "num_local_experts")?, opt_usize(hf, "n_routed_experts")?) {
        (Some(n), _) | (None, Some(n)) => n,
        (None, None) => usize_key(hf, "num_experts")?,
    };
    let top_k = usize_key(hf, "num_experts_per_tok")?;
    // Granite takes the softmax over the top-k logits: the renormalised top-k probabilities.
    // GPT-OSS too: top-k of the logits, softmax over the chosen ones.
    // Qwen3NextConfig's norm_topk_prob defaults to true.
    let norm_topk_prob = matches!(fam, Family::Mixtral | Family::GraniteMoe | Family::GptOss)
        || opt_bool(hf, "norm_topk_prob")?.unwrap_or(fam == Family::Qwen3Next);
    let (expert_ffn, dense_ffn, shared) = match fam {
        Family::Mixtral | Family::Olmoe | Family::GraniteMoe | Family::GptOss | Family::Phimoe => {
            (usize_key(hf, "intermediate_size")?, 0, 0)
        }
        Family::Llama4 => return llama4::moe(hf, n_experts, top_k),
        Family::Qwen2Moe | Family::Qwen3Next => (
            usize_key(hf, "moe_intermediate_size")?,
            opt_usize(hf, "intermediate_size")?.unwrap_or(0),
            opt_usize(hf, "shared_expert_intermediate_size")?.unwrap_or(0),
        ),
        Family::Qwen3Moe => {
            (usize_key(hf, "moe_intermediate_size")?, opt_usize(hf, "intermediate_size")?.unwrap_or(0), 0)
        }
        Family::Glm4Moe => {
            let f = usize_key(hf, "moe_intermediate_size")?;
            let n_shared = opt_usize(hf, "n_shared_experts")?.unwrap_or(1);
            (f, opt_usize(hf, "intermediate_size")?.unwrap_or(0), f * n_shared)
        }
        Family::DeepseekV2 | Family::DeepseekV3 => deepseek::ffn_sizes(hf, fam)?,
        Family::Dots1 => return dots1::moe(hf, n_experts, top_k),
        Family::Ernie45Moe => return ernie::moe(hf), // (config_from_hf calls it directly)
        Family::HunyuanV1Moe => return hunyuan::moe(hf), // (likewise)
    };
    let glm = fam == Family::Glm4Moe;
    let groups = match (opt_usize(hf, "n_group")?, opt_usize(hf, "topk_group")?) {
        (Some(n_group), topk_group) if glm && n_group > 1 => {
            Some(ExpertGroups { n_group, topk_group: topk_group.unwrap_or(1), score: GroupScore::Top2Sum })
        }
        _ => None,
    };
    if deepseek::is_deepseek(fam) {
        let r = deepseek::routing(hf, fam)?;
        let moe = MoeConfig {
            norm_topk_prob: r.norm_topk_prob,
            shared_expert_ffn: shared,
            scoring: r.scoring,
            choice_bias: r.choice_bias,
            groups: r.groups,
            routed_scaling: r.routed_scaling,
            ..MoeConfig::plain(n_experts, top_k, expert_ffn)
        };
        return Ok((moe, dense_ffn));
    }
    let moe = MoeConfig {
        n_experts,
        top_k,
        expert_ffn,
        norm_topk_prob,
        shared_expert_ffn: shared,
        // Qwen2-MoE gates its shared expert; GLM-4.5 adds it as it is.
        shared_expert_gate: shared > 0 && matches!(fam, Family::Qwen2Moe | Family::Qwen3Next),
        scoring: scoring(hf, fam, top_k)?,
        choice_bias: glm,
        groups,
        routed_scaling: if glm { opt_f64(hf, "routed_scaling_factor")?.unwrap_or(1.0) } else { 1.0 },
        router_bias: fam == Family::GptOss,
        expert_bias: fam == Family::GptOss,
        expert_act: expert_act(hf, fam)?,
        weights_on_input: false,
    };
    Ok((moe, dense_ffn))
}

/// GPT-OSS's clamped gated activation (GptOssConfig `swiglu_alpha` 1.702, `swiglu_limit` 7.0);
/// SwiGLU elsewhere.
fn expert_act(hf: &Value, fam: Family) -> Result<ExpertAct> {
    if fam != Family::GptOss {
        return Ok(ExpertAct::Silu);
    }
    Ok(ExpertAct::ClampedSwiglu {
        alpha: opt_f64(hf, "swiglu_alpha")?.unwrap_or(1.702),
        limit: opt_f64(hf, "swiglu_limit")?.unwrap_or(7.0),
    })
}

/// How the router's logits become choices and weights.
fn scoring(hf: &Value, fam: Family, top_k: usize) -> Result<Scoring> {
    Ok(match fam {
        Family::Glm4Moe => Scoring::Sigmoid,
        Family::Phimoe => {
            // modeling_phimoe's sparsemixer always takes two experts, whatever the config says.
            if top_k != 2 {
                return Err(fail(format!(
                    "num_experts_per_tok = {top_k}: Phi-MoE's sparsemixer routes to exactly 2 experts"
                )));
            }
            Scoring::SparseMixer { jitter_eps: opt_f64(hf, "router_jitter_noise")?.unwrap_or(0.01) }
        }
        _ => Scoring::Softmax,
    })
}

/// Each layer: MoE or dense, and its sliding window.
fn layer_specs(hf: &Value, fam: Family, n_layers: usize, n_experts: usize) -> Result<Vec<LayerSpec>> {
    let windows = sliding(hf, fam, n_layers)?;
    // modeling_qwen2_moe / qwen3_moe: sparse iff not in mlp_only_layers and (i+1) % step == 0.
    let moe_layer = |i: usize| -> Result<bool> {
        match fam {
            // modeling_glm4_moe: the first `first_k_dense_replace` layers are dense.
            Family::Glm4Moe => Ok(i >= opt_usize(hf, "first_k_dense_replace")?.unwrap_or(1)),
            Family::DeepseekV2 | Family::DeepseekV3 => deepseek::moe_layer(hf, fam, i),
            Family::Dots1 => dots1::moe_layer(hf, i),
            Family::Ernie45Moe => ernie::moe_layer(hf, i, n_layers),
            Family::Llama4 => llama4::moe_layer(hf, i),
            Family::Qwen2Moe | Family::Qwen3Moe | Family::Qwen3Next => {
                let step = opt_usize(hf, "decoder_sparse_step")?.unwrap_or(1).max(1);
                let mlp_only: Vec<u64> = get(hf, "mlp_only_layers")
                    .and_then(|m| m.as_array())
                    .map(|a| a.iter().filter_map(|x| x.as_u64()).collect())
                    .unwrap_or_default();
                Ok(!mlp_only.contains(&(i as u64)) && n_experts > 0 && (i + 1).is_multiple_of(step))
            }
            _ => Ok(true),
        }
    };
    let kinds = layer_kinds(hf, fam, n_layers)?;
    (0..n_layers)
        .map(|i| Ok(LayerSpec { sliding_window: windows[i], kind: kinds[i], ..LayerSpec::attention(moe_layer(i)?) }))
        .collect()
}

/// Each layer's token mixer: Qwen3-Next's `layer_types` ("linear_attention" = Gated DeltaNet),
/// else its `full_attention_interval` rule (every interval-th layer attends; default 4, as
/// Qwen3NextConfig); attention everywhere for the other families.
fn layer_kinds(hf: &Value, fam: Family, n_layers: usize) -> Result<Vec<LayerKind>> {
    if fam != Family::Qwen3Next {
        return Ok(vec![LayerKind::Attention; n_layers]);
    }
    if let Some(types) = get(hf, "layer_types").and_then(|t| t.as_array()) {
        let kind = |t: &Value| match t.as_str() {
            Some("linear_attention") => LayerKind::DeltaNet,
            _ => LayerKind::Attention,
        };
        return Ok(types.iter().map(kind).collect());
    }
    let interval = opt_usize(hf, "full_attention_interval")?.unwrap_or(4).max(1);
    Ok((0..n_layers)
        .map(|i| if (i + 1).is_multiple_of(interval) { LayerKind::Attention } else { LayerKind::DeltaNet })
        .collect())
}

/// Qwen3-Next's Gated DeltaNet shape (`linear_*` keys, Qwen3NextConfig's defaults).
fn delta_net(hf: &Value, fam: Family) -> Result<Option<DeltaNetConfig>> {
    if fam != Family::Qwen3Next {
        return Ok(None);
    }
    Ok(Some(DeltaNetConfig {
        n_k_heads: opt_usize(hf, "linear_num_key_heads")?.unwrap_or(16),
        n_v_heads: opt_usize(hf, "linear_num_value_heads")?.unwrap_or(32),
        k_head_dim: opt_usize(hf, "linear_key_head_dim")?.unwrap_or(128),
        v_head_dim: opt_usize(hf, "linear_value_head_dim")?.unwrap_or(128),
        conv_kernel: opt_usize(hf, "linear_conv_kernel_dim")?.unwrap_or(4),
        split_z: false,
    }))
}

/// q/k/v biases and q/k normalisation.
fn attention_config(hf: &Value, fam: Family) -> Result<(bool, QkNorm)> {
    let attention_bias = match fam {
        Family::Qwen2Moe => opt_bool(hf, "qkv_bias")?.or(opt_bool(hf, "attention_bias")?).unwrap_or(true),
        // GPT-OSS: q/k/v/o biases (`Config::attention_out_bias` takes the same value).
        Family::GptOss => opt_bool(hf, "attention_bias")?.unwrap_or(true),
        _ => opt_bool(hf, "attention_bias")?.unwrap_or(false),
    };
    // GLM-4.5's attention_bias is on q/k/v only, as Qwen2-MoE's; GPT-OSS's and Phi-MoE's on q/k/v/o.
    if attention_bias
        && !matches!(
            fam,
            Family::Qwen2Moe
                | Family::Glm4Moe
                | Family::GptOss
                | Family::Phimoe
                | Family::Dots1
                | Family::HunyuanV1Moe
                | Family::Llama4
        )
    {
        return Err(fail("attention_bias=true is not supported for this family (o_proj bias)"));
    }
    let qk_norm = match fam {
        Family::Qwen3Moe | Family::Qwen3Next | Family::Dots1 | Family::HunyuanV1Moe => QkNorm::PerHead,
        Family::Glm4Moe if opt_bool(hf, "use_qk_norm")?.unwrap_or(false) => QkNorm::PerHead,
        Family::Olmoe => QkNorm::Full,
        _ => QkNorm::None,
    };
    Ok((attention_bias, qk_norm))
}

/// The residual-stream multipliers (GraniteMoeConfig: embedding_multiplier,
/// attention_multiplier, residual_multiplier, logits_scaling; defaults as transformers').
fn scales(hf: &Value, fam: Family) -> Result<Scales> {
    if fam != Family::GraniteMoe {
        return Ok(Scales::default());
    }
    Ok(Scales {
        embedding: opt_f64(hf, "embedding_multiplier")?.unwrap_or(1.0),
        attention: Some(opt_f64(hf, "attention_multiplier")?.unwrap_or(1.0)),
        residual: opt_f64(hf, "residual_multiplier")?.unwrap_or(1.0),
        logits_divisor: opt_f64(hf, "logits_scaling")?.unwrap_or(1.0),
    })
}

/// True for the one quantised checkpoint colibri reads: GPT-OSS with MXFP4 experts
/// (`quantization_config.quant_method` "mxfp4", as the hub ships it), kept as MXFP4.
fn mxfp4_experts(hf: &Value, fam: Family) -> bool {
    let method = get(hf, "quantization_config").and_then(|q| get(q, "quant_method")).and_then(|m| m.as_str());
    fam == Family::GptOss && method == Some("mxfp4")
}

/// Build the colibri config from a parsed config.json (Llama4ForConditionalGeneration's: from its
/// `text_config`).
pub fn config_from_hf(hf: &Value) -> Result<Config> {
    let text = llama4::text_config(hf);
    let hf = text.as_ref().unwrap_or(hf);
    let mut config = config_of(hf)?;
    if config.family == Family::Llama4 {
        llama4::finish(hf, &mut config)?;
    }
    Ok(config)
}

/// The config by the rules every family shares, with each family's keys and defaults.
fn config_of(hf: &Value) -> Result<Config> {
    let fam = family(hf)?;
    // GPT-OSS's MXFP4 experts are read as they are; of the other schemes only DeepSeek's
    // block-scaled fp8 is read (and dequantised); any other is refused.
    if !mxfp4_experts(hf, fam) {
        crate::fp8::block_size(hf)?;
    }
    let hidden_size = usize_key(hf, "hidden_size")?;
    let n_layers = usize_key(hf, "num_hidden_layers")?;
    let n_heads = usize_key(hf, "num_attention_heads")?;
    let mut n_kv_heads = opt_usize(hf, "num_key_value_heads")?.unwrap_or(n_heads);
    if n_heads == 0 {
        return Err(fail("num_attention_heads is 0"));
    }
    let mut head_dim = opt_usize(hf, "head_dim")?.unwrap_or(hidden_size / n_heads);
    let mut scales = scales(hf, fam)?;
    let mla = if deepseek::is_deepseek(fam) {
        deepseek::check_unsupported(hf)?;
        let m = deepseek::mla(hf)?;
        // MLA expands one latent into every head's key and value.
        (head_dim, n_kv_heads) = (m.qk_nope_head_dim + m.qk_rope_head_dim, n_heads);
        scales.attention = Some(deepseek::attention_scale(hf, &m)?);
        Some(m)
    } else {
        None
    };
    let max_pos = opt_usize(hf, "max_position_embeddings")?.unwrap_or(4096);
    // ERNIE-4.5 names its expert counts differently (moe_num_experts, moe_k).
    let (moe, dense_ffn) = match fam {
        Family::Ernie45Moe => ernie::moe(hf)?,
        Family::HunyuanV1Moe => hunyuan::moe(hf)?,
        _ => moe_config(hf, fam)?,
    };
    let layers = layer_specs(hf, fam, n_layers, moe.n_experts)?;
    let (attention_bias, qk_norm) = attention_config(hf, fam)?;
    let config = Config {
        family: fam,
        vocab_size: usize_key(hf, "vocab_size")?,
        hidden_size,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        rms_norm_eps: opt_f64(hf, "rms_norm_eps")?.unwrap_or(match fam {
            Family::Ernie45Moe | Family::Llama4 => 1e-5,
            _ => 1e-6,
        }),
        rope: rope(hf, fam, head_dim, max_pos)?,
        max_position_embeddings: max_pos,
        attention_bias,
        attention_out_bias: attention_bias
            && matches!(fam, Family::Phimoe | Family::GptOss | Family::Dots1 | Family::HunyuanV1Moe | Family::Llama4),
        // PhimoeDecoderLayer / PhimoeModel: nn.LayerNorm(eps=rms_norm_eps).
        norm: if fam == Family::Phimoe { NormKind::LayerNorm } else { NormKind::Rms },
        lm_head_bias: fam == Family::Phimoe && opt_bool(hf, "lm_head_bias")?.unwrap_or(false),
        qk_norm,
        clip_qkv: if fam == Family::Olmoe { opt_f64(hf, "clip_qkv")? } else { None },
        moe,
        dense_ffn,
        layers,
        // Ernie4_5_MoeConfig ties them unless told otherwise.
        tie_embeddings: opt_bool(hf, "tie_word_embeddings")?.unwrap_or(fam == Family::Ernie45Moe),
        hidden_act: get(hf, "hidden_act").and_then(|a| a.as_str()).unwrap_or("silu").to_string(),
        bos_token_id: ids(get(hf, "bos_token_id")).first().copied(),
        eos_token_ids: ids(get(hf, "eos_token_id")),
        pad_token_id: ids(get(hf, "pad_token_id")).first().copied(),
        scales,
        mla,
        attention_sinks: fam == Family::GptOss,
        delta_net: delta_net(hf, fam)?,
        // Qwen3-Next: q_proj yields the output gate; every RMSNorm but the DeltaNet's gated one
        // is zero-centred (gain 1 + weight).
        attn_output_gate: fam == Family::Qwen3Next,
        norm_offset: if fam == Family::Qwen3Next { 1.0 } else { 0.0 },
        qk_norm_after_rope: fam == Family::HunyuanV1Moe,
        attn_temperature: None,
    };
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A Phi-3.5-MoE config.json as the hub writes it (transformers 4 spelling), shrunk.
    fn phimoe() -> Value {
        json!({
            "architectures": ["PhimoeForCausalLM"], "model_type": "phimoe", "vocab_size": 64, "hidden_size": 32,
            "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "num_local_experts": 4, "num_experts_per_tok": 2, "attention_bias": true, "lm_head_bias": true,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "original_max_position_embeddings": 4096,
            "max_position_embeddings": 131072, "sliding_window": 131072,
            "rope_scaling": {"type": "longrope", "original_max_position_embeddings": 2048,
                "short_factor": [1.0, 1.1, 1.2, 1.3], "long_factor": [2.0, 3.0, 4.0, 5.0],
                "short_mscale": 1.243, "long_mscale": 1.3}
        })
    }

    #[test]
    fn phimoe_config_maps_to_layer_norms_biases_sparsemixer_and_longrope() {
        let c = config_from_hf(&phimoe()).unwrap();
        c.validate().unwrap();
        assert_eq!(
            (c.family, c.norm, c.attention_bias, c.attention_out_bias, c.lm_head_bias),
            (Family::Phimoe, NormKind::LayerNorm, true, true, true)
        );
        assert_eq!(c.moe.scoring, Scoring::SparseMixer { jitter_eps: 0.01 });
        assert_eq!(c.layers[0].sliding_window, Some(131072));
        // The top-level original context wins over the rope parameters' (standardize_rope_params).
        let RopeScaling::LongRope { original_max_position_embeddings, short_mscale, long_mscale, .. } = c.rope.scaling
        else {
            panic!("{:?}", c.rope.scaling)
        };
        assert_eq!((original_max_position_embeddings, short_mscale, long_mscale), (4096, 1.243, 1.3));
    }

    #[test]
    fn phimoe_configs_transformers_would_not_run_as_written_are_refused() {
        let mut hf = phimoe();
        hf["num_experts_per_tok"] = json!(3);
        assert!(config_from_hf(&hf).unwrap_err().to_string().contains("sparsemixer"));
        let mut hf = phimoe();
        hf["rope_scaling"].as_object_mut().unwrap().remove("long_mscale");
        assert!(config_from_hf(&hf).unwrap_err().to_string().contains("long_mscale"));
        // A factor list that does not cover head_dim / 2 dimensions.
        let mut hf = phimoe();
        hf["rope_scaling"]["long_factor"] = json!([1.0, 2.0]);
        assert!(config_from_hf(&hf).unwrap().validate().is_err());
    }
}
