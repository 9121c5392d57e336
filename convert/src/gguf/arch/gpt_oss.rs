//! `gpt-oss`: q/k/v/o biases, attention sinks (`attn_sinks`), a router bias
//! (`ffn_gate_inp.bias`), experts with biases whose gate/up llama.cpp's converter already
//! de-interleaved (gate = even rows of gate_up, up = odd: colibri's own split), MXFP4 experts
//! in ggml's layout (colibri's MXFP4 dtype, copied as they are), softmax over the chosen
//! logits (renormalised top-k). Sliding window `attention.sliding_window` on the layers of
//! `attention.sliding_window_pattern` (an array of flags, or a period; llama.cpp's default 2:
//! even layers slide). The clamped SwiGLU takes llama.cpp's constants (alpha 1.702, limit 7, as
//! the released models): GGUF does not carry GptOssConfig's swiglu_limit. YaRN without
//! truncation of the correction range (GptOssConfig's `truncate: false`).

use super::common::{base, Defaults, Hparams};
use super::Mapping;
use crate::error::{fail, Result};
use crate::gguf::value::Value;
use colibri::model::{Config, ExpertAct, Family, QkNorm, RopeScaling};

pub static GPT_OSS: Mapping = Mapping { arch: "gpt-oss", family: Family::GptOss, permuted_qk: false, config };

/// Which layers slide: the pattern's flags, or every layer but each period-th.
fn sliding(h: &Hparams, n_layers: usize) -> Result<Vec<bool>> {
    let key = format!("{}.attention.sliding_window_pattern", h.arch);
    if let Some(Value::Array(flags)) = h.file.metadata().get(&key) {
        if flags.len() != n_layers {
            return Err(fail(format!("GGUF {key} has {} entries for {n_layers} layers", flags.len())));
        }
        return flags
            .iter()
            .map(|f| f.as_bool().ok_or_else(|| fail(format!("GGUF {key} holds a non-boolean"))))
            .collect();
    }
    let period = h.u("attention.sliding_window_pattern")?.unwrap_or(2);
    Ok((0..n_layers).map(|l| period == 0 || l % period < period - 1).collect())
}

fn config(h: &Hparams) -> Result<Config> {
    let d = Defaults { family: Family::GptOss, norm_topk: true, qk_norm: QkNorm::None, ffn_is_expert: true };
    let mut c = base(h, &d)?;
    let window = h.need("attention.sliding_window")?;
    for (l, slides) in c.layers.iter_mut().zip(sliding(h, c.n_layers)?) {
        l.sliding_window = (slides && window > 0).then_some(window);
    }
    c.attention_out_bias = c.attention_bias;
    c.attention_sinks = true;
    c.moe.router_bias = true;
    c.moe.expert_bias = true;
    c.moe.expert_act = ExpertAct::ClampedSwiglu { alpha: 1.702, limit: 7.0 };
    if let RopeScaling::Yarn { truncate, .. } = &mut c.rope.scaling {
        *truncate = false;
    }
    Ok(c)
}
