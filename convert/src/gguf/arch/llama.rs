//! `llama` with `expert_count` > 0: Mixtral. llama.cpp's converter permutes q/k rows for its
//! interleaved RoPE; the router weights are renormalised (build_moe_ffn norm_w = true).

use super::common::{base, Defaults, Hparams};
use super::Mapping;
use crate::error::{fail, Result};
use colibri::model::{Config, Family, QkNorm};

pub static LLAMA: Mapping = Mapping { arch: "llama", family: Family::Mixtral, permuted_qk: true, config };

fn config(h: &Hparams) -> Result<Config> {
    if h.u("expert_count")?.unwrap_or(0) == 0 {
        return Err(fail(
            "GGUF 'llama' model without experts (a dense Llama/Mistral): colibri runs Mixture-of-Experts models",
        ));
    }
    let d = Defaults { family: Family::Mixtral, norm_topk: true, qk_norm: QkNorm::None, ffn_is_expert: true };
    let mut c = base(h, &d)?;
    let window = h.u("attention.sliding_window")?.filter(|&w| w > 0);
    for l in &mut c.layers {
        l.sliding_window = window;
    }
    Ok(c)
}
