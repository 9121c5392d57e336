//! Embeddings: one vector per token sequence, pooled from the final-normed hidden states (the
//! forward pass's `LogitsMode::Hidden`: the lm_head is not run). Every sequence gets a session of
//! its own that lives only for the call, so no caller's session (its cache, position, RNG) is
//! touched, and sequences embedded together run as one batched step (weights read once).

use crate::error::{Error, Result};
use crate::forward::{forward_batch, ForwardOptions, Input, LogitsMode, Sequence};
use crate::kernels::QuantActivations;
use crate::model::Model;
use crate::session::{KvDtype, Session, SessionOptions};

/// How the per-token hidden states of a sequence become one vector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over every token (sentence-transformers' default for decoder models).
    #[default]
    Mean,
    /// The last token's state (what a causal model has seen everything at).
    Last,
    /// The first token's state (BERT's [CLS] convention; for a causal model it sees one token).
    Cls,
}

impl Pooling {
    /// Parse "mean" / "last" / "cls".
    pub fn from_name(s: &str) -> Option<Pooling> {
        match s {
            "mean" => Some(Pooling::Mean),
            "last" => Some(Pooling::Last),
            "cls" => Some(Pooling::Cls),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Last => "last",
            Pooling::Cls => "cls",
        }
    }
}

/// Options of `embed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbedOptions {
    pub pooling: Pooling,
    /// Scale each vector to unit L2 norm (default true; a zero vector stays zero).
    pub normalize: bool,
    /// How reduced-precision weights meet their activations (default: the process default).
    pub quant_act: QuantActivations,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        EmbedOptions { pooling: Pooling::Mean, normalize: true, quant_act: QuantActivations::from_env() }
    }
}

/// The final-normed hidden states of each input ([its tokens, hidden] per input), all inputs in
/// one batched forward over fresh sessions (f32 KV cache, top-k routing). Each input needs at
/// least one token; ids must be in the vocabulary.
pub fn hidden_states(model: &Model, inputs: &[&[u32]], quant_act: QuantActivations) -> Result<Vec<Vec<f32>>> {
    if inputs.is_empty() {
        return Err(Error::InvalidArgument { reason: "no input to embed".into() });
    }
    let mut sessions = Vec::with_capacity(inputs.len());
    for (i, ids) in inputs.iter().enumerate() {
        if ids.is_empty() {
            return Err(Error::InvalidArgument { reason: format!("input {i} has no tokens") });
        }
        // Top-k routing draws nothing from the RNG: a fixed seed spares the OS call.
        let opts = SessionOptions { n_ctx: ids.len(), kv_dtype: KvDtype::F32, routing_seed: 0, quant_act };
        sessions.push(Session::new(model.config(), &opts)?);
    }
    let opts = ForwardOptions { logits: LogitsMode::Hidden, ..ForwardOptions::default() };
    let mut batch: Vec<Sequence<'_>> = sessions
        .iter_mut()
        .zip(inputs)
        .map(|(session, ids)| Sequence { session, input: Input::Tokens(ids), opts })
        .collect();
    forward_batch(model, &mut batch)?;
    drop(batch);
    Ok(sessions.into_iter().map(|mut s| std::mem::take(&mut s.hidden)).collect())
}

/// One pooled vector ([hidden]) per input: `hidden_states`, then `pool`.
pub fn embed(model: &Model, inputs: &[&[u32]], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
    let h = model.config().hidden_size;
    let states = hidden_states(model, inputs, opts.quant_act)?;
    Ok(states.iter().map(|s| pool(s, h, opts.pooling, opts.normalize)).collect())
}

/// Pool hidden states [n, h] (n ≥ 1) into one vector [h]; with `normalize`, to unit L2 norm.
pub fn pool(states: &[f32], h: usize, pooling: Pooling, normalize: bool) -> Vec<f32> {
    let n = states.len() / h.max(1);
    let mut v: Vec<f32> = match pooling {
        Pooling::Cls => states[..h.min(states.len())].to_vec(),
        Pooling::Last => states[n.saturating_sub(1) * h..n * h].to_vec(),
        Pooling::Mean => {
            let mut sum = vec![0f64; h];
            for row in states.chunks_exact(h.max(1)) {
                sum.iter_mut().zip(row).for_each(|(s, &x)| *s += f64::from(x));
            }
            sum.iter().map(|&s| (s / n.max(1) as f64) as f32).collect()
        }
    };
    if normalize {
        let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x = (f64::from(*x) / norm) as f32);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_picks_rows_and_normalises() {
        // Two tokens, hidden 2: rows [3, 4] and [1, 0].
        let s = [3.0, 4.0, 1.0, 0.0];
        assert_eq!(pool(&s, 2, Pooling::Cls, false), vec![3.0, 4.0]);
        assert_eq!(pool(&s, 2, Pooling::Last, false), vec![1.0, 0.0]);
        assert_eq!(pool(&s, 2, Pooling::Mean, false), vec![2.0, 2.0]);
        assert_eq!(pool(&s, 2, Pooling::Cls, true), vec![0.6, 0.8]);
        let m = pool(&s, 2, Pooling::Mean, true);
        assert!((m[0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-7 && (m[0] - m[1]).abs() < 1e-7);
        assert_eq!(pool(&[0.0, 0.0], 2, Pooling::Mean, true), vec![0.0, 0.0], "a zero vector stays zero");
        for p in [Pooling::Mean, Pooling::Last, Pooling::Cls] {
            assert_eq!(Pooling::from_name(p.name()), Some(p));
        }
        assert_eq!(Pooling::from_name("max"), None);
    }
}
