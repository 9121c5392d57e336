//! Sampling: one step's logits → the next token id. Owns the sampler chain (penalties, top-k,
//! temperature, softmax, top-p, min-p, the seeded draw), its [`Rng`] and its scratch buffers; the
//! forward pass that produces the logits and the tokenizer that reads the ids live elsewhere.
//!
//! The chain, in order (llama.cpp `common/sampling.cpp` chain + `src/llama-sampling.cpp`; HF
//! `generation/logits_process.py`):
//! 1. **Repetition penalty** (HF `RepetitionPenaltyLogitsProcessor`, llama.cpp `penalties`): for each
//!    *distinct* id in the last `penalty_last_n` entries of `history`, a logit > 0 is divided by
//!    `repetition_penalty`, any other is multiplied by it.
//! 2. **Presence / frequency** (llama.cpp `penalties`, OpenAI semantics): over the same window,
//!    `logit -= frequency_penalty · count + presence_penalty · [count > 0]`.
//! 3. **temperature == 0 → greedy**: [`argmax`] (ties to the lowest id); nothing below runs and no
//!    random number is drawn.
//! 4. **Top-k** (`top_k > 0`): keep the `top_k` largest logits (ties to the lowest id), in one pass
//!    with partial selection (`select_nth_unstable`), never a full sort.
//! 5. **Temperature**: `logit / temperature`.
//! 6. **Softmax** over the survivors.
//! 7. **Top-p** (`top_p < 1`): keep the smallest prefix of the candidates, sorted by probability
//!    descending (ties by id ascending), whose probability sum is ≥ `top_p`; at least one.
//! 8. **Min-p** (`min_p > 0`): drop candidates with `p < min_p · p_max`.
//! 9. **Renormalise** and **draw**: one uniform `u` from the sampler's [`Rng`], inverse CDF over the
//!    candidates sorted by probability descending, ties by id ascending. The result depends only on
//!    the logits, the history, the parameters and the seed.
//!
//! Non-finite logits: NaN and −∞ get probability 0 (NaN never wins [`argmax`]); if any logit is +∞,
//! the +∞ logits share all the mass equally. A step where every logit is NaN or −∞ is an error.
//!
//! Implementation notes. Top-p and min-p both keep a prefix of the same sorted order, and min-p is a
//! ratio test (`w ≥ min_p · w_max`) unaffected by renormalisation, so the code applies min-p as an
//! O(n) filter first and then finds top-p's cut, with top-p's cumulative sum taken against the
//! softmax of *all* top-k survivors: the kept set is exactly the one of the documented order.
//! Probabilities are kept as unnormalised weights `exp((logit − max) / temperature)` (the largest is
//! exactly 1; a branch-free Cephes `expf`, relative error < 3e-7) with sums in `f64`. Nothing is
//! fully sorted: top-k is one pass with partial selection, and both the top-p cut and the draw find
//! their position on the sorted cumulative axis with a mass histogram over value buckets plus
//! mass-steered median partitions (expected O(n)), so a 150k-token vocabulary with top-k off still
//! costs O(n). [`Sampler::top_logprobs`] sorts only the prefix it returns. Candidates are packed
//! `u64` keys (see `Candidate`) so every comparison is one integer compare.
//!
//! Layout (imports go one way, top to bottom):
//! - `mod.rs`: `Sampler` — its buffers, and `Sampler::sample` as the chain above, a call or a few
//!   lines per step; `Sampler::top_logprobs`, `Sampler::reset`.
//! - `penalties.rs`: steps 1–2 (`apply_penalties`).
//! - `mask.rs`: a grammar's token mask applied before step 1 (`apply_mask`: disallowed ids → −∞).
//! - `params.rs`: `SamplerParams`, its defaults and validation.
//! - `select.rs`: the packed `Candidate` keys and the selections over them: top-k, the weight and
//!   min-p passes over candidates, the lazily sorted prefix, and the mass walk behind top-p and the
//!   draw.
//! - `math.rs`: slice math: the `expf` of the weights, the whole-vocabulary weight pass, NaN-ignoring
//!   max / `argmax`, the `f64` sum.

mod mask;
mod math;
mod params;
mod penalties;
mod select;
#[cfg(test)]
mod tests;

pub use mask::apply_mask;
pub use math::argmax;
pub use params::SamplerParams;
pub use penalties::apply_penalties;

use crate::error::{Error, Result};
use crate::rng::Rng;
use math::{sum_f64, weigh_vocabulary};
use penalties::penalise;
use select::{
    collect_min_p, collect_top_k, ensure_sorted, retain_min_p, select_by_mass, weigh_candidates, Candidate, Reach,
};

fn no_candidate() -> Error {
    Error::InvalidArgument { reason: "logits: every value is NaN or -inf, nothing to sample".to_string() }
}

/// Reject a step's `logits` [vocab] that cannot be sampled from by shape: empty, or with ids that
/// do not fit in `u32`.
fn check_vocab_size(logits: &[f32]) -> Result<()> {
    if logits.is_empty() {
        return Err(Error::InvalidArgument { reason: "logits is empty (vocab_size 0)".to_string() });
    }
    if logits.len() - 1 > u32::MAX as usize {
        return Err(Error::InvalidArgument {
            reason: format!("logits has {} entries, token ids must fit in u32", logits.len()),
        });
    }
    Ok(())
}

/// The sampler of one generation stream: parameters, its own seeded [`Rng`], and buffers that are
/// allocated on the first step and reused afterwards (no allocation per token for a fixed vocabulary
/// size and window).
#[derive(Clone)]
pub struct Sampler {
    params: SamplerParams,
    rng: Rng,
    /// [<= vocab] candidates of the current step: (id, logit), then (id, unnormalised weight).
    /// After `sample`, exactly the final distribution's support.
    candidates: Vec<Candidate>,
    /// Length of the prefix of `candidates` sorted by weight descending, id ascending.
    sorted_len: usize,
    /// Sum of the weights in `candidates` after `sample`: the final distribution's normaliser.
    total: f64,
    /// [vocab] scratch: the weight of every token, when top-k does not cut the vocabulary first.
    weights: Vec<f32>,
    /// [HIST_LANES · 2^BUCKET_BITS] scratch: mass histograms of `select_by_mass`.
    hist: Vec<f64>,
    /// [<= penalty_last_n] scratch copy of the penalty window.
    window: Vec<u32>,
    /// [<= n] output buffer of `top_logprobs`.
    logprobs: Vec<(u32, f32)>,
}

impl std::fmt::Debug for Sampler {
    /// Parameters and the size of the last distribution; not the vocabulary-sized buffers.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("params", &self.params)
            .field("last_distribution_len", &self.candidates.len())
            .finish_non_exhaustive()
    }
}

impl Sampler {
    /// A sampler with validated `params`, its [`Rng`] seeded from `params.seed` (a fresh seed
    /// for `SEED_RANDOM`, kept in its params so the run can be repeated).
    pub fn new(mut params: SamplerParams) -> Result<Sampler> {
        params.validate()?;
        params.seed = crate::rng::resolve_seed(params.seed);
        let rng = Rng::new(params.seed);
        let window = Vec::with_capacity(params.penalty_last_n.min(1 << 16));
        Ok(Sampler {
            params,
            rng,
            candidates: Vec::new(),
            sorted_len: 0,
            total: 0.0,
            weights: Vec::new(),
            hist: Vec::new(),
            window,
            logprobs: Vec::new(),
        })
    }

    /// The parameters this sampler runs with (`seed` follows [`Sampler::reset`]).
    pub fn params(&self) -> &SamplerParams {
        &self.params
    }

    /// Choose the next token. `logits` has vocab_size entries and is modified in place (penalties);
    /// `history` is the prompt + generated ids so far (penalties look at its last `penalty_last_n`).
    /// temperature == 0 → greedy argmax, ties to the lowest id, penalties still applied first.
    /// Errors: empty `logits`, more than 2³² entries, or no logit that is neither NaN nor −∞.
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> Result<u32> {
        self.forget_last_step();
        check_vocab_size(logits)?;
        // 1–2. Repetition, then presence / frequency penalties, in place.
        penalise(&self.params, logits, history, &mut self.window);
        // 3. Greedy: nothing below runs, no random number is drawn.
        if self.params.temperature == 0.0 {
            return self.greedy(logits);
        }
        // 5. Temperature as 1/T, capped so that 0 · (1/T) stays 0 for a subnormal T.
        let inv_t = (1.0 / self.params.temperature).min(f32::MAX);
        let (top_k, min_p) = (self.params.top_k, self.params.min_p);
        // 4–6 and 8: the candidates become weights exp((logit − max) / T) (the largest exactly 1)
        // that pass min-p (w >= min_p · w_max, w_max = 1; zero weights go too). `sum_all` is the
        // mass of all top-k survivors, top-p's reference.
        let sum_all = if top_k > 0 && top_k < logits.len() {
            // 4. Top-k in one pass; 5–6 and 8 then over the k survivors only.
            collect_top_k(logits, top_k, &mut self.candidates);
            let sum_all = weigh_candidates(&mut self.candidates, inv_t);
            retain_min_p(&mut self.candidates, min_p);
            sum_all
        } else {
            // 5–6 over the whole vocabulary in a contiguous buffer; 8 makes its survivors the candidates.
            weigh_vocabulary(logits, inv_t, &mut self.weights);
            collect_min_p(&self.weights, min_p, &mut self.candidates);
            sum_f64(&self.weights)
        };
        if self.candidates.is_empty() {
            return Err(no_candidate());
        }
        // 7. Top-p.
        if self.params.top_p < 1.0 {
            self.cut_top_p(sum_all);
        }
        // 9. Renormalise + draw.
        self.draw()
    }

    /// Empty the last step's distribution (`candidates`, its sorted prefix and normaliser).
    fn forget_last_step(&mut self) {
        self.candidates.clear();
        self.sorted_len = 0;
        self.total = 0.0;
    }

    /// Step 3: the argmax of `logits` [vocab], recorded as a one-token distribution; an error if it
    /// is NaN or −∞ (no candidate).
    fn greedy(&mut self, logits: &[f32]) -> Result<u32> {
        let id = argmax(logits);
        match logits.get(id) {
            Some(v) if *v > f32::NEG_INFINITY => {}
            _ => return Err(no_candidate()),
        }
        self.candidates.push(Candidate::new(id as u32, 1.0));
        self.sorted_len = 1;
        self.total = 1.0;
        Ok(id as u32)
    }

    /// Step 7: keep the shortest sorted prefix of `candidates` whose mass (against `sum_all`, the
    /// mass of all top-k survivors) reaches top_p, i.e. up to the first candidate whose cumulative
    /// weight is >= top_p · sum_all.
    fn cut_top_p(&mut self, sum_all: f64) {
        let target = f64::from(self.params.top_p) * sum_all;
        let last = select_by_mass(&mut self.candidates, &mut self.sorted_len, &mut self.hist, target, Reach::AtLeast);
        self.candidates.truncate(last + 1);
        self.sorted_len = self.sorted_len.min(last + 1);
    }

    /// Step 9: renormalise (`total` = the candidates' mass) and make one uniform draw, inverse CDF in
    /// sorted order.
    fn draw(&mut self) -> Result<u32> {
        self.total = self.candidates.iter().map(|c| f64::from(c.value())).sum();
        let target = self.rng.next_f64() * self.total;
        let chosen = select_by_mass(&mut self.candidates, &mut self.sorted_len, &mut self.hist, target, Reach::Beyond);
        self.candidates.get(chosen).map(|c| c.id()).ok_or_else(no_candidate)
    }

    /// The top `n` (id, natural-log probability) pairs of the distribution the last [`Sampler::sample`]
    /// drew from (after penalties, top-k, temperature, top-p, min-p and renormalisation), most likely
    /// first, ties by id ascending. Fewer than `n` when the distribution has fewer candidates; a greedy
    /// step gives its one token with logprob 0; empty before the first step or after an error.
    pub fn top_logprobs(&mut self, n: usize) -> &[(u32, f32)] {
        let n = n.min(self.candidates.len());
        ensure_sorted(&mut self.candidates, &mut self.sorted_len, n);
        self.logprobs.clear();
        let total = self.total;
        self.logprobs.extend(self.candidates[..n].iter().map(|c| (c.id(), (f64::from(c.value()) / total).ln() as f32)));
        &self.logprobs
    }

    /// Restart the random stream from `seed` (and record it in the parameters); forget the last step.
    pub fn reset(&mut self, seed: u64) {
        let seed = crate::rng::resolve_seed(seed);
        self.params.seed = seed;
        self.rng = Rng::new(seed);
        self.forget_last_step();
    }
}
