//! `granitemoe`: Llama-style (q/k rows permuted by llama.cpp's converter, top-k renormalised) with
//! Granite's multipliers: `embedding_scale`, `attention.scale`, `residual_scale`, `logit_scale`.

use super::common::{base, Defaults, Hparams};
use super::Mapping;
use crate::error::Result;
use colibri::model::{Config, Family, QkNorm};

pub static GRANITEMOE: Mapping = Mapping { arch: "granitemoe", family: Family::GraniteMoe, permuted_qk: true, config };

fn config(h: &Hparams) -> Result<Config> {
    let d = Defaults { family: Family::GraniteMoe, norm_topk: true, qk_norm: QkNorm::None, ffn_is_expert: true };
    let mut c = base(h, &d)?;
    c.scales.embedding = h.f("embedding_scale")?.unwrap_or(1.0);
    c.scales.attention = Some(h.f("attention.scale")?.unwrap_or(1.0));
    c.scales.residual = h.f("residual_scale")?.unwrap_or(1.0);
    c.scales.logits_divisor = h.f("logit_scale")?.unwrap_or(1.0);
    Ok(c)
}
