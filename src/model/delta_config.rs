//! The Gated DeltaNet shape of a model with linear-attention layers (Qwen3-Next), part of its
//! `Config`.

use serde::{Deserialize, Serialize};

/// Gated DeltaNet linear attention (Qwen3-Next `linear_*` keys): q/k heads of `k_head_dim`, v
/// heads of `v_head_dim` (each q/k head serves n_v_heads / n_k_heads consecutive v heads), a
/// causal depthwise conv of `conv_kernel` taps over q, k and v.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaNetConfig {
    pub n_k_heads: usize,
    pub n_v_heads: usize,
    pub k_head_dim: usize,
    pub v_head_dim: usize,
    pub conv_kernel: usize,
    /// The input projection as two matrices, q k v (`delta.in_qkv`) and the output gate z
    /// (`delta.in_z`), instead of one (`delta.in_qkvz`): a GGUF whose `attn_qkv` and
    /// `attn_gate` differ in type (llama-quantize's K-quant mixes) keeps each in its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub split_z: bool,
}

impl DeltaNetConfig {
    /// Width of q and of k (n_k_heads · k_head_dim).
    pub fn key_dim(&self) -> usize {
        self.n_k_heads * self.k_head_dim
    }

    /// Width of v and of the output gate z (n_v_heads · v_head_dim).
    pub fn value_dim(&self) -> usize {
        self.n_v_heads * self.v_head_dim
    }

    /// Channels of the conv: q, k and v.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    /// f32 values of one layer's recurrent state: the conv's last kernel-1 inputs and the
    /// delta-rule matrix of every v head.
    pub fn state_floats(&self) -> usize {
        (self.conv_kernel - 1) * self.conv_dim() + self.n_v_heads * self.k_head_dim * self.v_head_dim
    }
}
