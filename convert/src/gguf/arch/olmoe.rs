//! `olmoe`: q/k RMSNorm over the whole projection, optional q/k/v clamp
//! (`attention.clamp_kqv`), top-k weights not renormalised.

use super::common::{base, Defaults, Hparams};
use super::Mapping;
use crate::error::Result;
use colibri::model::{Config, Family, QkNorm};

pub static OLMOE: Mapping = Mapping { arch: "olmoe", family: Family::Olmoe, permuted_qk: false, config };

fn config(h: &Hparams) -> Result<Config> {
    let d = Defaults { family: Family::Olmoe, norm_topk: false, qk_norm: QkNorm::Full, ffn_is_expert: true };
    let mut c = base(h, &d)?;
    c.clip_qkv = h.f("attention.clamp_kqv")?;
    Ok(c)
}
