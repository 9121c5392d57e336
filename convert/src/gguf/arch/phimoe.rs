//! `phimoe` (Phi-3.5-MoE): LayerNorm with bias (`*_norm.bias`, eps from
//! `attention.layer_norm_rms_epsilon`), q/k/v/o and output biases, the sparsemixer router (two
//! experts; jitter eps 0.01, PhimoeConfig's and the released model's, which GGUF does not carry),
//! LongRoPE from the `rope_factors_short` / `rope_factors_long` tensors over
//! `rope.scaling.original_context_length`. llama.cpp keeps one attention factor
//! (`rope.scaling.attn_factor`, its converter's sqrt(1 + ln(ctx/original) / ln original)) for
//! both factor sets: it is both mscales here, where transformers reads short_mscale /
//! long_mscale from the config.

use super::common::{base, Defaults, Hparams};
use super::Mapping;
use crate::error::{fail, Result};
use colibri::model::{Config, Family, NormKind, QkNorm, RopeScaling, Scoring};

pub static PHIMOE: Mapping = Mapping { arch: "phimoe", family: Family::Phimoe, permuted_qk: false, config };

fn config(h: &Hparams) -> Result<Config> {
    let d = Defaults { family: Family::Phimoe, norm_topk: false, qk_norm: QkNorm::None, ffn_is_expert: true };
    let mut c = base(h, &d)?;
    if c.moe.top_k != 2 {
        return Err(fail(format!(
            "GGUF phimoe.expert_used_count {}: the sparsemixer routes to exactly 2",
            c.moe.top_k
        )));
    }
    c.norm = NormKind::LayerNorm;
    c.attention_out_bias = h.has("blk.0.attn_output.bias");
    c.lm_head_bias = h.has("output.bias");
    c.moe.scoring = Scoring::SparseMixer { jitter_eps: 0.01 };
    let window = h.u("attention.sliding_window")?.filter(|&w| w > 0);
    for l in &mut c.layers {
        l.sliding_window = window;
    }
    if let (Some(short_factor), Some(long_factor)) =
        (h.f32s("rope_factors_short.weight")?, h.f32s("rope_factors_long.weight")?)
    {
        let mscale = h.f("rope.scaling.attn_factor")?.unwrap_or(1.0);
        c.rope.scaling = RopeScaling::LongRope {
            short_factor,
            long_factor,
            original_max_position_embeddings: h.need("rope.scaling.original_context_length")? as u64,
            short_mscale: mscale,
            long_mscale: mscale,
        };
    }
    Ok(c)
}
