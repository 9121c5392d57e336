//! `hunyuan-moe` (Hunyuan-MoE): per-head q/k RMSNorm after RoPE (rotate-half), softmax top-k
//! renormalised (llama.cpp always does), an ungated shared MLP in every layer (`ffn_*_shexp`, its
//! width read from the tensors), optional q/k/v/o biases. llama.cpp's converter resolves
//! Hunyuan's NTK-alpha RoPE into `rope.freq_base` (θ·α^(d/(d−2))), which is read as it is.

use super::common::{base, Defaults, Hparams};
use super::Mapping;
use crate::error::Result;
use colibri::model::{Config, Family, QkNorm};

pub static HUNYUAN_MOE: Mapping =
    Mapping { arch: "hunyuan-moe", family: Family::HunyuanV1Moe, permuted_qk: false, config };

fn config(h: &Hparams) -> Result<Config> {
    let d = Defaults { family: Family::HunyuanV1Moe, norm_topk: true, qk_norm: QkNorm::PerHead, ffn_is_expert: false };
    let mut c = base(h, &d)?;
    c.qk_norm_after_rope = true;
    c.moe.shared_expert_ffn = h.rows_of("ffn_gate_shexp.weight").unwrap_or(0);
    c.moe.shared_expert_gate = false;
    c.attention_out_bias = h.has("blk.0.attn_output.bias");
    Ok(c)
}
