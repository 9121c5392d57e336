//! `ernie4_5-moe` (ERNIE-4.5-MoE): RoPE on interleaved pairs (llama.cpp's NORM rope; its
//! converter does not permute ERNIE's q/k rows), softmax scores with the `exp_probs_b` choice bias
//! added to the probabilities, the chosen renormalised (llama.cpp always does), ungated shared
//! experts, dense layers where there is no router (`leading_dense_block_count` and
//! `interleave_moe_layer_step` say the same; the file's tensors are what counts). The shared
//! experts' width is read from `ffn_gate_shexp`: llama.cpp's converter writes
//! `expert_shared_feed_forward_length` as intermediate_size / num_key_value_heads, which is the
//! width only for the released models' numbers.

use super::common::{base, Defaults, Hparams};
use super::Mapping;
use crate::error::Result;
use colibri::model::{Config, Family, QkNorm};

pub static ERNIE4_5_MOE: Mapping =
    Mapping { arch: "ernie4_5-moe", family: Family::Ernie45Moe, permuted_qk: false, config };

fn config(h: &Hparams) -> Result<Config> {
    let d = Defaults { family: Family::Ernie45Moe, norm_topk: true, qk_norm: QkNorm::None, ffn_is_expert: false };
    let mut c = base(h, &d)?;
    c.rope.interleaved = true;
    c.moe.choice_bias = h.any_layer_has("exp_probs_b.bias");
    c.moe.shared_expert_ffn = h.rows_of("ffn_gate_shexp.weight").unwrap_or(0);
    c.moe.routed_scaling = h.f("expert_weights_scale")?.filter(|&s| s != 0.0).unwrap_or(1.0);
    c.attention_out_bias = h.has("blk.0.attn_output.bias");
    Ok(c)
}
