//! Validation of a `Config`: every field checked for range and consistency before anything is
//! sized from it (called on every open, and by the converter before it writes).

use super::config::*;
use crate::error::{Error, Result};

/// Caps that keep a hostile config from sizing absurd buffers.
const MAX_VOCAB: usize = 1 << 22;
const MAX_HIDDEN: usize = 1 << 16;
const MAX_LAYERS: usize = 1024;
const MAX_HEADS: usize = 1024;
const MAX_EXPERTS: usize = 4096;
const MAX_FFN: usize = 1 << 20;
const MAX_CONTEXT: usize = 1 << 24;

fn within(what: &str, v: usize, lo: usize, hi: usize) -> Result<()> {
    if v < lo || v > hi {
        return Err(Error::config(format!("{what} = {v} outside {lo}..={hi}")));
    }
    Ok(())
}

impl Config {
    /// Check every field for consistency. Called on every open.
    pub fn validate(&self) -> Result<()> {
        within("vocab_size", self.vocab_size, 1, MAX_VOCAB)?;
        within("hidden_size", self.hidden_size, 1, MAX_HIDDEN)?;
        within("n_layers", self.n_layers, 1, MAX_LAYERS)?;
        within("n_heads", self.n_heads, 1, MAX_HEADS)?;
        within("n_kv_heads", self.n_kv_heads, 1, self.n_heads)?;
        within("head_dim", self.head_dim, 2, MAX_HIDDEN)?;
        within("max_position_embeddings", self.max_position_embeddings, 1, MAX_CONTEXT)?;
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(Error::config(format!(
                "n_heads {} is not a multiple of n_kv_heads {}",
                self.n_heads, self.n_kv_heads
            )));
        }
        // Under MLA only the rope part rotates (its evenness is checked with the MLA fields).
        if self.mla.is_none() && !self.head_dim.is_multiple_of(2) {
            return Err(Error::config(format!("head_dim {} must be even for RoPE", self.head_dim)));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0 && self.rms_norm_eps < 1.0) {
            return Err(Error::config(format!("rms_norm_eps {} must be in (0, 1)", self.rms_norm_eps)));
        }
        if !(self.rope.theta.is_finite() && self.rope.theta > 1.0) {
            return Err(Error::config(format!("rope theta {} must be finite and > 1", self.rope.theta)));
        }
        if !(self.rope.partial_rotary_factor > 0.0 && self.rope.partial_rotary_factor <= 1.0) {
            return Err(Error::config("partial_rotary_factor must be in (0, 1]"));
        }
        self.validate_rope_scaling()?;
        let sc = &self.scales;
        for (what, v) in [
            ("scales.embedding", sc.embedding),
            ("scales.residual", sc.residual),
            ("scales.logits_divisor", sc.logits_divisor),
            ("scales.attention", sc.attention.unwrap_or(1.0)),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::config(format!("{what} {v} must be finite and > 0")));
            }
        }
        if let Some(c) = self.clip_qkv {
            if !(c.is_finite() && c > 0.0) {
                return Err(Error::config(format!("clip_qkv {c} must be finite and > 0")));
            }
        }
        self.validate_moe()?;
        self.validate_mla()?;
        self.validate_delta_net()?;
        if self.layers.len() != self.n_layers {
            return Err(Error::config(format!("{} layer specs for {} layers", self.layers.len(), self.n_layers)));
        }
        if !self.layers.iter().any(|l| l.moe) {
            return Err(Error::config("no MoE layer: colibri runs Mixture-of-Experts models"));
        }
        if self.layers.iter().any(|l| !l.moe) {
            within("dense_ffn", self.dense_ffn, 1, MAX_FFN)?;
        }
        for (i, l) in self.layers.iter().enumerate() {
            if l.sliding_window == Some(0) || l.attention_chunk == Some(0) {
                return Err(Error::config(format!("layer {i}: sliding window or attention chunk of 0")));
            }
        }
        if let Some(t) = self.attn_temperature {
            if !(t.floor_scale.is_finite() && t.floor_scale > 0.0 && t.attn_scale.is_finite()) {
                return Err(Error::config(format!(
                    "attention temperature {t:?}: floor_scale must be > 0, both finite"
                )));
            }
        }
        if self.hidden_act != "silu" {
            return Err(Error::config(format!("hidden_act '{}' is not supported (only silu)", self.hidden_act)));
        }
        let ids = self.bos_token_id.iter().chain(&self.eos_token_ids).chain(&self.pad_token_id);
        for &id in ids {
            if id as usize >= self.vocab_size {
                return Err(Error::config(format!("special token id {id} ≥ vocab_size {}", self.vocab_size)));
            }
        }
        Ok(())
    }

    fn validate_moe(&self) -> Result<()> {
        let m = &self.moe;
        within("moe.n_experts", m.n_experts, 1, MAX_EXPERTS)?;
        within("moe.top_k", m.top_k, 1, m.n_experts)?;
        within("moe.expert_ffn", m.expert_ffn, 1, MAX_FFN)?;
        within("moe.shared_expert_ffn", m.shared_expert_ffn, 0, MAX_FFN)?;
        if m.shared_expert_gate && m.shared_expert_ffn == 0 {
            return Err(Error::config("shared_expert_gate without a shared expert"));
        }
        if let ExpertAct::ClampedSwiglu { alpha, limit } = m.expert_act {
            if !(alpha.is_finite() && limit.is_finite() && limit > 0.0) {
                return Err(Error::config(format!(
                    "expert activation alpha {alpha}, limit {limit} must be finite, limit > 0"
                )));
            }
        }
        if let Scoring::SparseMixer { jitter_eps } = m.scoring {
            if !(jitter_eps.is_finite() && jitter_eps >= 0.0) || m.choice_bias || m.groups.is_some() {
                return Err(Error::config(format!(
                    "sparsemixer routing needs a finite jitter_eps >= 0 (got {jitter_eps}) and no choice bias or groups"
                )));
            }
        }
        if m.scoring == Scoring::SigmoidOfTopK && (m.choice_bias || m.groups.is_some() || m.norm_topk_prob) {
            return Err(Error::config("sigmoid-of-top-k routing takes no choice bias, groups or renormalisation"));
        }
        if !(m.routed_scaling.is_finite() && m.routed_scaling > 0.0) {
            return Err(Error::config(format!("moe.routed_scaling {} must be finite and > 0", m.routed_scaling)));
        }
        if let Some(g) = m.groups {
            within("moe.groups.n_group", g.n_group, 1, m.n_experts)?;
            within("moe.groups.topk_group", g.topk_group, 1, g.n_group)?;
            let per = m.n_experts / g.n_group;
            if !m.n_experts.is_multiple_of(g.n_group) || per < 2 || g.topk_group * per < m.top_k {
                return Err(Error::config(format!(
                    "{} experts in {} groups, {} of them chosen, cannot give top-{} (groups must be equal, of at \
                     least 2 experts, and hold top_k experts between them)",
                    m.n_experts, g.n_group, g.topk_group, m.top_k
                )));
            }
        }
        Ok(())
    }

    fn validate_mla(&self) -> Result<()> {
        let Some(m) = &self.mla else { return Ok(()) };
        within("mla.q_lora_rank", m.q_lora_rank, 0, MAX_HIDDEN)?;
        within("mla.kv_lora_rank", m.kv_lora_rank, 1, MAX_HIDDEN)?;
        within("mla.qk_nope_head_dim", m.qk_nope_head_dim, 1, MAX_HIDDEN)?;
        within("mla.qk_rope_head_dim", m.qk_rope_head_dim, 2, MAX_HIDDEN)?;
        within("mla.v_head_dim", m.v_head_dim, 1, MAX_HIDDEN)?;
        if !m.qk_rope_head_dim.is_multiple_of(2) {
            return Err(Error::config(format!("mla.qk_rope_head_dim {} must be even", m.qk_rope_head_dim)));
        }
        if self.head_dim != m.qk_nope_head_dim + m.qk_rope_head_dim || self.n_kv_heads != self.n_heads {
            return Err(Error::config("MLA needs head_dim = qk_nope + qk_rope and n_kv_heads = n_heads"));
        }
        if !(m.latent_norm_eps.is_finite() && m.latent_norm_eps > 0.0 && m.latent_norm_eps < 1.0) {
            return Err(Error::config(format!("mla.latent_norm_eps {} must be in (0, 1)", m.latent_norm_eps)));
        }
        Ok(())
    }

    fn validate_delta_net(&self) -> Result<()> {
        if !(self.norm_offset == 0.0 || self.norm_offset == 1.0) {
            return Err(Error::config(format!("norm_offset {} must be 0 or 1", self.norm_offset)));
        }
        let linear = self.layers.iter().any(|l| l.kind == LayerKind::DeltaNet);
        let Some(d) = self.delta_net else {
            return match linear {
                true => Err(Error::config("DeltaNet layers without a delta_net config")),
                false => Ok(()),
            };
        };
        within("delta_net.n_k_heads", d.n_k_heads, 1, MAX_HEADS)?;
        within("delta_net.n_v_heads", d.n_v_heads, 1, MAX_HEADS)?;
        within("delta_net.k_head_dim", d.k_head_dim, 1, 4096)?;
        within("delta_net.v_head_dim", d.v_head_dim, 1, 4096)?;
        within("delta_net.conv_kernel", d.conv_kernel, 1, 64)?;
        if !d.n_v_heads.is_multiple_of(d.n_k_heads) {
            return Err(Error::config(format!(
                "delta_net: {} value heads are not a multiple of {} key heads",
                d.n_v_heads, d.n_k_heads
            )));
        }
        Ok(())
    }

    fn validate_rope_scaling(&self) -> Result<()> {
        let factor_ok = |f: f64| f.is_finite() && f >= 1.0;
        let ok = match &self.rope.scaling {
            RopeScaling::None => true,
            RopeScaling::Linear { factor } => factor_ok(*factor),
            RopeScaling::Dynamic { factor, original_max_position_embeddings } => {
                factor_ok(*factor) && *original_max_position_embeddings > 0
            }
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings,
                beta_fast,
                beta_slow,
                attention_factor,
                ..
            } => {
                factor_ok(*factor)
                    && *original_max_position_embeddings > 0
                    && beta_fast.is_finite()
                    && beta_slow.is_finite()
                    && attention_factor.is_finite()
                    && *attention_factor > 0.0
            }
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                factor_ok(*factor)
                    && low_freq_factor.is_finite()
                    && high_freq_factor.is_finite()
                    && high_freq_factor >= low_freq_factor
                    && *original_max_position_embeddings > 0
            }
            RopeScaling::LongRope {
                short_factor,
                long_factor,
                original_max_position_embeddings,
                short_mscale,
                long_mscale,
            } => {
                let half = self.rope_dim() / 2;
                let factors_ok = |f: &[f64]| f.len() == half && f.iter().all(|x| x.is_finite() && *x > 0.0);
                factors_ok(short_factor)
                    && factors_ok(long_factor)
                    && *original_max_position_embeddings > 0
                    && [short_mscale, long_mscale].iter().all(|m| m.is_finite() && **m > 0.0)
            }
        };
        if ok {
            Ok(())
        } else {
            Err(Error::config(format!("rope scaling {:?} has invalid parameters", self.rope.scaling)))
        }
    }
}
