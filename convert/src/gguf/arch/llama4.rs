//! `llama4` (Llama-4 Scout / Maverick text model) as llama.cpp runs it, which fixes what the file
//! does not say: chunked attention of 8192 positions on the layers l % p < p − 1
//! (`attention.sliding_window_pattern` p, default 4), NoPE every 4th layer, whose queries take the
//! temperature ln(1 + floor((pos + 1) / 8192)) · 0.1 + 1; with `attention.sliding_window` 0 no
//! chunks, no temperature and only the last layer NoPE (llama.cpp's `n_no_rope_layer_step` =
//! n_layer). The weightless q/k norm after RoPE unless there are 128 experts (Maverick). The router
//! weighs the top-k logits by their sigmoid on the experts' inputs; the shared expert's width is its
//! tensors'. RoPE on interleaved pairs (llama.cpp's converter does not permute Llama-4's q/k); a
//! llama3-scaled model's `rope_freqs` (per-dimension divisors of the inverse frequencies) are read
//! as one LongRoPE factor set for every position.

use super::common::{base, Defaults, Hparams};
use super::Mapping;
use crate::error::{fail, Result};
use colibri::model::{AttnTemperature, Config, Family, QkNorm, RopeScaling, Scoring};

pub static LLAMA4: Mapping = Mapping { arch: "llama4", family: Family::Llama4, permuted_qk: false, config };

/// llama.cpp's Llama-4 chunk and temperature constants (`llama_model_llama4::load_arch_hparams`).
const CHUNK: usize = 8192;
const TEMPERATURE: AttnTemperature = AttnTemperature { floor_scale: 8192.0, attn_scale: 0.1 };

fn config(h: &Hparams) -> Result<Config> {
    let d = Defaults { family: Family::Llama4, norm_topk: false, qk_norm: QkNorm::None, ffn_is_expert: false };
    let mut c = base(h, &d)?;
    c.rope.interleaved = true;
    c.moe.scoring = Scoring::SigmoidOfTopK;
    c.moe.weights_on_input = true;
    c.moe.norm_topk_prob = false;
    c.moe.shared_expert_ffn = h.rows_of("ffn_gate_shexp.weight").unwrap_or(0);
    c.moe.shared_expert_gate = false;
    let chunked = h.u("attention.sliding_window")? != Some(0);
    let period = h.u("attention.sliding_window_pattern")?.unwrap_or(4);
    if period == 0 {
        return Err(fail("GGUF llama4.attention.sliding_window_pattern 0 is not supported"));
    }
    let nope_every = if chunked { 4 } else { c.n_layers };
    for (i, l) in c.layers.iter_mut().enumerate() {
        l.no_rope = (i + 1).is_multiple_of(nope_every);
        l.attention_chunk = (chunked && i % period < period - 1).then_some(CHUNK);
    }
    c.attn_temperature = chunked.then_some(TEMPERATURE);
    if c.moe.n_experts != 128 {
        (c.qk_norm, c.qk_norm_after_rope) = (QkNorm::Weightless, true);
    }
    if let Some(factors) = h.f32s("rope_freqs.weight")? {
        c.rope.scaling = RopeScaling::LongRope {
            short_factor: factors.clone(),
            long_factor: factors,
            original_max_position_embeddings: u64::MAX,
            short_mscale: 1.0,
            long_mscale: 1.0,
        };
    }
    Ok(c)
}
