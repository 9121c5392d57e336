//! `qwen3next` (Qwen3-Next): Gated DeltaNet layers (`attention.recurrent_layers` flags, else
//! every `full_attention_interval`-th layer attends) of `ssm.group_count` q/k heads of
//! `ssm.state_size` and `ssm.time_step_rank` v heads of `ssm.inner_size / time_step_rank`, conv
//! `ssm.conv_kernel`; gated full attention (q_proj's per-head output gate) with per-head q/k
//! norms; Qwen2-MoE's sigmoid-gated shared expert; top-k always renormalised (llama.cpp's
//! rule, and the released models'). llama.cpp's converter adds 1 to every zero-centred norm
//! (layer, q/k, final; not the DeltaNet's gated norm): those weights are the gains themselves
//! here (`norm_offset` 0), the same f32 sums transformers forms. A file whose `attn_qkv` and
//! `attn_gate` differ in type in some layer (llama-quantize's K-quant mixes: Q4_K_M gives the
//! former more bits) keeps the two as their own matrices (`DeltaNetConfig::split_z`).

use super::common::{base, Defaults, Hparams};
use super::Mapping;
use crate::error::{fail, Result};
use crate::gguf::value::Value;
use colibri::model::{Config, DeltaNetConfig, Family, LayerKind, QkNorm};

pub static QWEN3NEXT: Mapping = Mapping { arch: "qwen3next", family: Family::Qwen3Next, permuted_qk: false, config };

/// Whether each layer is a DeltaNet layer.
fn recurrent(h: &Hparams, n_layers: usize) -> Result<Vec<bool>> {
    let key = format!("{}.attention.recurrent_layers", h.arch);
    if let Some(Value::Array(flags)) = h.file.metadata().get(&key) {
        if flags.len() < n_layers {
            return Err(fail(format!("GGUF {key} has {} entries for {n_layers} layers", flags.len())));
        }
        return flags[..n_layers]
            .iter()
            .map(|f| f.as_bool().ok_or_else(|| fail(format!("GGUF {key} holds a non-boolean"))))
            .collect();
    }
    let interval = h.u("full_attention_interval")?.unwrap_or(4).max(1);
    Ok((0..n_layers).map(|l| !(l + 1).is_multiple_of(interval)).collect())
}

/// Whether layer l's `attn_qkv` and `attn_gate` are both present and of different types (older
/// files' one `ssm_in` has one type).
fn qkv_and_gate_differ(h: &Hparams, l: usize) -> bool {
    let ty = |leaf: &str| h.file.tensor(&format!("blk.{l}.{leaf}.weight")).map(|t| t.info.ggml.name);
    matches!((ty("attn_qkv"), ty("attn_gate")), (Some(a), Some(b)) if a != b)
}

fn config(h: &Hparams) -> Result<Config> {
    let d = Defaults { family: Family::Qwen3Next, norm_topk: true, qk_norm: QkNorm::PerHead, ffn_is_expert: false };
    let mut c = base(h, &d)?;
    let (n_k_heads, n_v_heads) = (h.need("ssm.group_count")?, h.need("ssm.time_step_rank")?);
    if n_k_heads == 0 || n_v_heads == 0 || !n_v_heads.is_multiple_of(n_k_heads) {
        return Err(fail(format!("GGUF qwen3next: {n_v_heads} v heads do not share {n_k_heads} q/k heads evenly")));
    }
    c.delta_net = Some(DeltaNetConfig {
        n_k_heads,
        n_v_heads,
        k_head_dim: h.need("ssm.state_size")?,
        v_head_dim: h.need("ssm.inner_size")? / n_v_heads,
        conv_kernel: h.need("ssm.conv_kernel")?,
        split_z: false,
    });
    let rec = recurrent(h, c.n_layers)?;
    for (l, &rec) in c.layers.iter_mut().zip(&rec) {
        l.kind = if rec { LayerKind::DeltaNet } else { LayerKind::Attention };
    }
    if let Some(d) = &mut c.delta_net {
        d.split_z = (0..c.n_layers).filter(|&l| rec[l]).any(|l| qkv_and_gate_differ(h, l));
    }
    c.attn_output_gate = true;
    c.norm_offset = 0.0;
    Ok(c)
}
