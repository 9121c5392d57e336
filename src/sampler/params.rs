//! Sampling parameters: [`SamplerParams`], its defaults, the greedy preset and range validation.
//! No sampling logic lives here.

use crate::error::{Error, Result};

/// Sampling knobs. `Default` = sampling on, with llama.cpp-like defaults: temperature 0.8, top_k 40,
/// top_p 0.95, min_p 0.05, repetition_penalty 1.0 (off), presence 0.0, frequency 0.0,
/// penalty_last_n 64, seed `SEED_RANDOM` (a fresh seed per sampler, as llama.cpp does).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerParams {
    /// Softmax temperature, finite and ≥ 0; 0 = greedy argmax.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; 0 = off.
    pub top_k: usize,
    /// Nucleus mass in (0, 1]; 1 = off.
    pub top_p: f32,
    /// Drop tokens below `min_p · p_max`, in [0, 1]; 0 = off.
    pub min_p: f32,
    /// Divides positive / multiplies non-positive logits of recent tokens; > 0, 1 = off.
    pub repetition_penalty: f32,
    /// Subtracted once from the logit of every token present in the window; finite, 0 = off.
    pub presence_penalty: f32,
    /// Subtracted per occurrence in the window; finite, 0 = off.
    pub frequency_penalty: f32,
    /// How many of the last history ids the penalties look at; 0 = penalties off.
    pub penalty_last_n: usize,
    /// Seed of the sampler's [`Rng`](crate::rng::Rng); [`SEED_RANDOM`](crate::rng::SEED_RANDOM)
    /// draws a fresh one when the sampler is made (which `Sampler::params` then reports).
    pub seed: u64,
}

impl Default for SamplerParams {
    fn default() -> Self {
        SamplerParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            seed: crate::rng::SEED_RANDOM,
        }
    }
}

fn invalid_param(name: &str, value: f32, rule: &str) -> Error {
    Error::InvalidArgument { reason: format!("sampler parameter {name} = {value}: {rule}") }
}

impl SamplerParams {
    /// Deterministic argmax: temperature 0, every filter and penalty off.
    pub fn greedy() -> Self {
        SamplerParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 0,
            seed: 0,
        }
    }

    /// Check every knob's range; the error names the offending parameter.
    pub fn validate(&self) -> Result<()> {
        let t = self.temperature;
        if !t.is_finite() || t < 0.0 {
            return Err(invalid_param("temperature", t, "must be finite and >= 0"));
        }
        let p = self.top_p;
        if !(p > 0.0 && p <= 1.0) {
            return Err(invalid_param("top_p", p, "must be in (0, 1]"));
        }
        let m = self.min_p;
        if !(0.0..=1.0).contains(&m) {
            return Err(invalid_param("min_p", m, "must be in [0, 1]"));
        }
        let r = self.repetition_penalty;
        if !(r.is_finite() && r > 0.0) {
            return Err(invalid_param("repetition_penalty", r, "must be finite and > 0"));
        }
        if !self.presence_penalty.is_finite() {
            return Err(invalid_param("presence_penalty", self.presence_penalty, "must be finite"));
        }
        if !self.frequency_penalty.is_finite() {
            return Err(invalid_param("frequency_penalty", self.frequency_penalty, "must be finite"));
        }
        Ok(())
    }
}
