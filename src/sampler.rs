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

use crate::error::{Error, Result};
use crate::rng::Rng;

/// Sampling knobs. `Default` = sampling on, with llama.cpp-like defaults: temperature 0.8, top_k 40,
/// top_p 0.95, min_p 0.05, repetition_penalty 1.0 (off), presence 0.0, frequency 0.0,
/// penalty_last_n 64, seed 0.
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
    /// Seed of the sampler's [`Rng`].
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
            seed: 0,
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

/// One entry of the candidate list: a token id and its current value (a logit, then a weight),
/// packed in one `u64` whose natural order is the sampler's order, value descending then id
/// ascending: the high half is the value's bits mapped to an order-reversing integer, the low half
/// the id. Integer comparisons keep partial selection and sorting fast.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate(u64);

impl Candidate {
    /// `value` must not be NaN; −0.0 is stored as 0.0 (so it ties with 0.0, as in [`argmax`]).
    fn new(id: u32, value: f32) -> Self {
        let bits = (value + 0.0).to_bits();
        let ascending = if bits >> 31 == 1 { !bits } else { bits | 0x8000_0000 };
        Candidate((u64::from(!ascending) << 32) | u64::from(id))
    }

    fn id(self) -> u32 {
        self.0 as u32
    }

    /// The top [`BUCKET_BITS`] bits of the key: buckets in the same order as candidates, each
    /// spanning a factor 2^(1/8) of positive values.
    fn bucket(self) -> usize {
        (self.0 >> (64 - BUCKET_BITS)) as usize
    }

    fn value(self) -> f32 {
        let ascending = !((self.0 >> 32) as u32);
        f32::from_bits(if ascending >> 31 == 1 { ascending & 0x7FFF_FFFF } else { !ascending })
    }
}

/// Bits of the value buckets of [`select_by_mass`] (sign, 8 exponent and 3 mantissa bits).
const BUCKET_BITS: u32 = 12;

/// Ranges longer than this get [`select_by_mass`]'s histogram pass.
const BUCKET_MIN: usize = 4096;

/// Interleaved histograms of [`select_by_mass`].
const HIST_LANES: usize = 4;

/// Smallest chunk [`ensure_sorted`] sorts at a time; [`select_by_mass`] sorts ranges up to this size.
const MIN_SORT_CHUNK: usize = 64;

/// Extend the sorted prefix `cands[..*sorted_len]` (order [`Candidate`]) to at least `want`
/// entries (capped at `cands.len()`), growing it by chunks of at least its own length so that
/// walking a prefix of length m costs O(n · log(m) + m · log(m)), not a full sort.
fn ensure_sorted(cands: &mut [Candidate], sorted_len: &mut usize, want: usize) {
    let n = cands.len();
    let want = want.min(n);
    while *sorted_len < want {
        let start = *sorted_len;
        let end = want.max(start + start.max(MIN_SORT_CHUNK)).min(n);
        let rest = &mut cands[start..];
        if end < n {
            rest.select_nth_unstable(end - start - 1);
        }
        rest[..end - start].sort_unstable();
        *sorted_len = end;
    }
}

/// The top `k` (order [`Candidate`], left unsorted) of the logits that are neither NaN nor −∞,
/// into `out`, in one pass: a buffer of up to 2·max(k, 64) entries is cut back to its top k by
/// partial selection whenever it fills, and from then on only logits above the k-th kept one enter
/// (an equal one has a larger id, so it ranks below). Random logits cost one compare each; even an
/// ascending input costs O(n) selection work in total. `k >= 1`.
fn collect_top_k(logits: &[f32], k: usize, out: &mut Vec<Candidate>) {
    let cap = 2 * k.max(MIN_SORT_CHUNK);
    out.reserve(cap);
    // Admit a logit known to be above the threshold; may raise the threshold.
    let mut admit = |id: usize, logit: f32, threshold: &mut f32| {
        if out.len() >= cap {
            out.select_nth_unstable(k - 1);
            out.truncate(k);
            if let Some(kth) = out.last() {
                *threshold = kth.value();
            }
            if logit <= *threshold {
                return;
            }
        }
        out.push(Candidate::new(id as u32, logit));
    };
    let mut threshold = f32::NEG_INFINITY;
    let chunks = logits.chunks_exact(LANES);
    let tail = chunks.remainder();
    for (c, chunk) in chunks.enumerate() {
        // Most chunks hold nothing above the threshold: one branch-free test skips them.
        if !chunk.iter().fold(false, |any, &l| any | (l > threshold)) {
            continue;
        }
        for (j, &logit) in chunk.iter().enumerate() {
            if logit > threshold {
                admit(c * LANES + j, logit, &mut threshold);
            }
        }
    }
    let tail_start = logits.len() - tail.len();
    for (j, &logit) in tail.iter().enumerate() {
        if logit > threshold {
            admit(tail_start + j, logit, &mut threshold);
        }
    }
    if out.len() > k {
        out.select_nth_unstable(k - 1);
        out.truncate(k);
    }
}

/// `e^x` for `x <= 0` (or −∞), as weights need it: Cephes `expf` (range reduction by ln 2 in two
/// parts, degree-6 polynomial), relative error below 3e-7 on [−87, 0], exactly 1 at 0, and 0 below
/// −87 (where `f32` results would be subnormal), 0 for NaN. Branch-free, so the weight loop over a
/// whole vocabulary vectorises (`f32::exp` is a libm call per element).
fn exp_nonpositive(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding 1.5 · 2^23 rounds to an integer, readable in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let xc = x.clamp(-87.0, 0.0);
    // k = round(x / ln 2) in [-126, 0].
    let z = xc * std::f32::consts::LOG2_E + ROUND;
    let k = (z.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let kf = z - ROUND;
    let r = xc - kf * LN2_HI - kf * LN2_LO;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    let scale = f32::from_bits((k.wrapping_add(127) as u32) << 23);
    // Written so that NaN also gives 0.
    if x >= -87.0 {
        y * scale
    } else {
        0.0
    }
}

/// Softmax weight of `logit` given the step's maximum and 1/T: `exp((logit − max) / T)`, so the
/// maximum weighs exactly 1; NaN and −∞ weigh 0. When `max` is +∞ the +∞ logits weigh 1 and all
/// others 0 (they share all the mass).
fn weight(logit: f32, max: f32, inv_t: f32) -> f32 {
    if max == f32::INFINITY {
        return if logit == f32::INFINITY { 1.0 } else { 0.0 };
    }
    exp_nonpositive((logit - max) * inv_t)
}

/// Lanes of the reductions below: independent accumulators let them vectorise, and their fixed
/// combination order keeps results deterministic.
const LANES: usize = 8;

/// The largest value that is not NaN (−∞ if there is none).
fn max_ignoring_nan(x: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (m, &v) in lanes.iter_mut().zip(chunk) {
            *m = if v > *m { v } else { *m };
        }
    }
    tail.iter().chain(&lanes).fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// Sum in `f64`.
fn sum_f64(x: &[f32]) -> f64 {
    let mut lanes = [0.0f64; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (s, &v) in lanes.iter_mut().zip(chunk) {
            *s += f64::from(v);
        }
    }
    lanes.iter().sum::<f64>() + tail.iter().map(|&v| f64::from(v)).sum::<f64>()
}

/// How [`select_by_mass`] compares the target with a cumulative weight.
#[derive(Clone, Copy, PartialEq)]
enum Reach {
    /// First candidate whose cumulative weight is `>= target` (top-p's nucleus end).
    AtLeast,
    /// First candidate whose cumulative weight is `> target` (inverse-CDF draw).
    Beyond,
}

impl Reach {
    fn hit(self, target: f64, cum: f64) -> bool {
        match self {
            Reach::AtLeast => cum >= target,
            Reach::Beyond => cum > target,
        }
    }
}

/// Walk the weights of `cands` in [`Candidate`] order without sorting them all: returns the
/// position of the first candidate at which the cumulative weight reaches `target` (per `reach`),
/// or the last position if it never does (rounding, or a target past the total). Reorders `cands`
/// so that every candidate before the returned position ranks above it and every one after ranks
/// below; keeps the sorted prefix `cands[..*sorted_len]` (walked first) and extends it when the
/// answer's sorted chunk adjoins it. Expected O(n): over a large range, a mass histogram over value
/// buckets and a partition isolate the answer's bucket; then halving median partitions
/// (`select_nth_unstable`) steered by the left half's mass, then a sort of the last ≤ 64.
/// `cands` must not be empty (returns 0 then).
fn select_by_mass(
    cands: &mut [Candidate],
    sorted_len: &mut usize,
    hist: &mut Vec<f64>,
    target: f64,
    reach: Reach,
) -> usize {
    let n = cands.len();
    let mut cum = 0.0f64;
    for (i, c) in cands[..*sorted_len].iter().enumerate() {
        cum += f64::from(c.value());
        if reach.hit(target, cum) {
            return i;
        }
    }
    // Invariant: the answer is in cands[lo..hi]; `cum` is the weight of everything before lo.
    let (mut lo, mut hi) = (*sorted_len, n);
    if hi - lo > BUCKET_MIN {
        // Large ranges: a histogram of mass over value buckets finds the answer's bucket in one
        // pass, a three-way partition isolates it in another.
        // HIST_LANES interleaved histograms, so that runs of one bucket do not serialise the adds.
        hist.clear();
        hist.resize(HIST_LANES << BUCKET_BITS, 0.0);
        let chunks = cands[lo..hi].chunks_exact(HIST_LANES);
        let tail = chunks.remainder();
        for chunk in chunks {
            for (lane, c) in chunk.iter().enumerate() {
                hist[(lane << BUCKET_BITS) | c.bucket()] += f64::from(c.value());
            }
        }
        for c in tail {
            hist[c.bucket()] += f64::from(c.value());
        }
        let (first, rest) = hist.split_at_mut(1 << BUCKET_BITS);
        for lane in rest.chunks_exact(1 << BUCKET_BITS) {
            first.iter_mut().zip(lane).for_each(|(m, &x)| *m += x);
        }
        let mass = &*first;
        let mut hit = None;
        let mut last_used = 0;
        for (b, &m) in mass.iter().enumerate() {
            if m > 0.0 {
                last_used = b;
                if reach.hit(target, cum + m) {
                    hit = Some(b);
                    break;
                }
                cum += m;
            }
        }
        // Never reached: the answer is the last candidate, in the last non-empty bucket.
        let b = match hit {
            Some(b) => b,
            None => {
                cum -= mass[last_used];
                last_used
            }
        };
        let (mut above, mut i, mut below) = (lo, lo, hi);
        while i < below {
            let ib = cands[i].bucket();
            if ib < b {
                cands.swap(above, i);
                above += 1;
                i += 1;
            } else if ib > b {
                below -= 1;
                cands.swap(i, below);
            } else {
                i += 1;
            }
        }
        (lo, hi) = (above, below);
    }
    while hi - lo > MIN_SORT_CHUNK {
        let mid = lo + (hi - lo) / 2;
        cands[lo..hi].select_nth_unstable(mid - lo);
        let left: f64 = cands[lo..mid].iter().map(|c| f64::from(c.value())).sum();
        if reach.hit(target, cum + left) {
            hi = mid;
        } else {
            cum += left;
            lo = mid;
        }
    }
    cands[lo..hi].sort_unstable();
    if lo == *sorted_len {
        *sorted_len = hi;
    }
    for (i, c) in cands[lo..hi].iter().enumerate() {
        cum += f64::from(c.value());
        if reach.hit(target, cum) {
            return lo + i;
        }
    }
    hi.saturating_sub(1)
}

/// Index of the largest value, ties to the lowest index; NaN never wins (−∞ can, if nothing larger
/// is present). Returns 0 for an empty or all-NaN slice: callers check the value there.
pub fn argmax(x: &[f32]) -> usize {
    // Two passes that vectorise beat one index-tracking pass.
    let max = max_ignoring_nan(x);
    first_equal(x, max).unwrap_or(0)
}

/// Index of the first element `== value` (so −0.0 matches 0.0; NaN matches nothing).
fn first_equal(x: &[f32], value: f32) -> Option<usize> {
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for (c, chunk) in chunks.enumerate() {
        // One branch per chunk; the chunk with a match is then scanned.
        if chunk.iter().fold(false, |any, &v| any | (v == value)) {
            return chunk.iter().position(|&v| v == value).map(|j| c * LANES + j);
        }
    }
    tail.iter().position(|&v| v == value).map(|j| x.len() - tail.len() + j)
}

/// Apply steps 1–2 of the chain (repetition, then presence/frequency penalties) to `logits` in
/// place, looking at the last `params.penalty_last_n` ids of `history`. Ids outside the vocabulary
/// (≥ `logits.len()`) are ignored. Allocates a window-sized scratch; [`Sampler`] reuses its own.
pub fn apply_penalties(params: &SamplerParams, logits: &mut [f32], history: &[u32]) {
    let mut window = Vec::new();
    penalise(params, logits, history, &mut window);
}

/// [`apply_penalties`] with a caller-owned scratch `window` ([<= penalty_last_n] ids, sorted here).
fn penalise(params: &SamplerParams, logits: &mut [f32], history: &[u32], window: &mut Vec<u32>) {
    let rep = params.repetition_penalty;
    let off = rep == 1.0 && params.presence_penalty == 0.0 && params.frequency_penalty == 0.0;
    if params.penalty_last_n == 0 || off {
        return;
    }
    let start = history.len().saturating_sub(params.penalty_last_n);
    window.clear();
    window.extend_from_slice(&history[start..]);
    window.sort_unstable();
    // One run of equal ids per distinct token: count = run length.
    let mut i = 0;
    while i < window.len() {
        let id = window[i];
        let mut j = i + 1;
        while j < window.len() && window[j] == id {
            j += 1;
        }
        let count = (j - i) as f32;
        if let Some(logit) = logits.get_mut(id as usize) {
            if rep != 1.0 {
                *logit = if *logit > 0.0 { *logit / rep } else { *logit * rep };
            }
            *logit -= params.frequency_penalty * count + params.presence_penalty;
        }
        i = j;
    }
}

fn no_candidate() -> Error {
    Error::InvalidArgument { reason: "logits: every value is NaN or -inf, nothing to sample".to_string() }
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
    /// A sampler with validated `params`, its [`Rng`] seeded from `params.seed`.
    pub fn new(params: SamplerParams) -> Result<Sampler> {
        params.validate()?;
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
        self.candidates.clear();
        self.sorted_len = 0;
        self.total = 0.0;
        if logits.is_empty() {
            return Err(Error::InvalidArgument { reason: "logits is empty (vocab_size 0)".to_string() });
        }
        if logits.len() - 1 > u32::MAX as usize {
            return Err(Error::InvalidArgument {
                reason: format!("logits has {} entries, token ids must fit in u32", logits.len()),
            });
        }
        penalise(&self.params, logits, history, &mut self.window);

        if self.params.temperature == 0.0 {
            let id = argmax(logits);
            match logits.get(id) {
                Some(v) if *v > f32::NEG_INFINITY => {}
                _ => return Err(no_candidate()),
            }
            self.candidates.push(Candidate::new(id as u32, 1.0));
            self.sorted_len = 1;
            self.total = 1.0;
            return Ok(id as u32);
        }

        // Top-k, temperature, softmax (as weights exp((logit - max) / T), the largest exactly 1) and
        // min-p (w >= min_p * w_max, w_max = 1; zero weights go too). 1/T is capped so that
        // 0 · (1/T) stays 0 for a subnormal T.
        let inv_t = (1.0 / self.params.temperature).min(f32::MAX);
        let min_p = self.params.min_p;
        let top_k = self.params.top_k;
        let sum_all = if top_k > 0 && top_k < logits.len() {
            // One pass for the top k, then weights of the survivors only.
            collect_top_k(logits, top_k, &mut self.candidates);
            let max = self.candidates.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.value()));
            let mut sum = 0.0f64;
            for c in self.candidates.iter_mut() {
                let w = weight(c.value(), max, inv_t);
                sum += f64::from(w);
                *c = Candidate::new(c.id(), w);
            }
            self.candidates.retain(|c| c.value() > 0.0 && c.value() >= min_p);
            sum
        } else {
            // The whole vocabulary: weights in a contiguous buffer, candidates for min-p's survivors.
            let max = max_ignoring_nan(logits);
            self.weights.resize(logits.len(), 0.0);
            if max == f32::INFINITY {
                self.weights.iter_mut().zip(logits.iter()).for_each(|(w, &l)| *w = weight(l, max, inv_t));
            } else {
                // The common case, kept free of branches so that it vectorises.
                self.weights.iter_mut().zip(logits.iter()).for_each(|(w, &l)| *w = exp_nonpositive((l - max) * inv_t));
            }
            self.candidates.reserve(logits.len());
            let kept = |w: f32| w > 0.0 && w >= min_p;
            for (c, chunk) in self.weights.chunks(LANES).enumerate() {
                // Usually few survive: one branch-free test skips a chunk without any.
                if chunk.iter().fold(false, |any, &w| any | kept(w)) {
                    let survivors = chunk.iter().enumerate().filter(|(_, &w)| kept(w));
                    self.candidates.extend(survivors.map(|(j, &w)| Candidate::new((c * LANES + j) as u32, w)));
                }
            }
            sum_f64(&self.weights)
        };
        if self.candidates.is_empty() {
            return Err(no_candidate());
        }

        // Top-p: the shortest sorted prefix whose mass (against all top-k survivors) reaches top_p,
        // i.e. up to the first candidate whose cumulative weight is >= top_p · sum_all.
        let top_p = self.params.top_p;
        if top_p < 1.0 {
            let target = f64::from(top_p) * sum_all;
            let last =
                select_by_mass(&mut self.candidates, &mut self.sorted_len, &mut self.hist, target, Reach::AtLeast);
            self.candidates.truncate(last + 1);
            self.sorted_len = self.sorted_len.min(last + 1);
        }

        // Renormalise + one uniform draw: inverse CDF in sorted order.
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
        self.params.seed = seed;
        self.rng = Rng::new(seed);
        self.candidates.clear();
        self.sorted_len = 0;
        self.total = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_logits(rng: &mut Rng, n: usize, scale: f64) -> Vec<f32> {
        (0..n).map(|_| ((rng.next_f64() - 0.5) * scale) as f32).collect()
    }

    /// The documented chain, literally: full sorts, top-p before min-p. Shares the weight formula
    /// with `Sampler::sample` so the two agree to the bit.
    fn reference_sample(params: &SamplerParams, logits: &[f32], history: &[u32], rng: &mut Rng) -> Option<u32> {
        let mut logits = logits.to_vec();
        apply_penalties(params, &mut logits, history);
        if params.temperature == 0.0 {
            let id = argmax(&logits);
            return (logits[id] > f32::NEG_INFINITY).then_some(id as u32);
        }
        let mut c: Vec<Candidate> = logits
            .iter()
            .enumerate()
            .filter(|(_, &l)| l > f32::NEG_INFINITY)
            .map(|(i, &l)| Candidate::new(i as u32, l))
            .collect();
        let mut max = c.iter().map(|c| c.value()).fold(f32::NEG_INFINITY, f32::max);
        if max == f32::INFINITY {
            c.retain(|c| c.value() == f32::INFINITY);
            c.iter_mut().for_each(|c| *c = Candidate::new(c.id(), 0.0));
            max = 0.0;
        }
        c.sort();
        if params.top_k > 0 {
            c.truncate(params.top_k);
        }
        let inv_t = (1.0 / params.temperature).min(f32::MAX);
        for x in c.iter_mut() {
            *x = Candidate::new(x.id(), weight(x.value(), max, inv_t));
        }
        // Sorted by probability (ties by id), as documented.
        c.sort();
        let sum_all: f64 = c.iter().map(|x| f64::from(x.value())).sum();
        if params.top_p < 1.0 {
            let mut cum = 0.0;
            let keep = c
                .iter()
                .position(|x| {
                    cum += f64::from(x.value());
                    cum >= f64::from(params.top_p) * sum_all
                })
                .map_or(c.len(), |i| i + 1);
            c.truncate(keep);
        }
        c.retain(|x| x.value() > 0.0 && x.value() >= params.min_p);
        let total: f64 = c.iter().map(|x| f64::from(x.value())).sum();
        let target = rng.next_f64() * total;
        let mut cum = 0.0;
        for x in &c {
            cum += f64::from(x.value());
            if target < cum {
                return Some(x.id());
            }
        }
        c.last().map(|x| x.id())
    }

    #[test]
    fn argmax_ties_nan_and_empty() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5, f32::NAN, 0.7]), 3);
        assert_eq!(argmax(&[f32::NAN, f32::NEG_INFINITY, f32::NEG_INFINITY]), 1);
        assert_eq!(argmax(&[-0.0, 0.0]), 0);
        assert_eq!(argmax(&[f32::NAN, f32::NAN]), 0);
        assert_eq!(argmax(&[]), 0);
        // Against the one-line definition, on lengths around the lane width, with ties, NaN and ±inf.
        let naive = |x: &[f32]| {
            let mut best: Option<usize> = None;
            for (i, &v) in x.iter().enumerate() {
                if !v.is_nan() && !best.is_some_and(|b| v <= x[b]) {
                    best = Some(i);
                }
            }
            best.unwrap_or(0)
        };
        let mut rng = Rng::new(2);
        let palette = [f32::NAN, f32::NEG_INFINITY, -1.0, -0.0, 0.0, 2.0, 3.0, f32::INFINITY];
        for len in 0..40 {
            for trial in 0..200 {
                // Fewer distinct values in some trials: more ties, or nothing but NaN and -inf.
                let distinct = [2, 3, 6, 8][trial % 4];
                let x: Vec<f32> = (0..len).map(|_| palette[(rng.next_u64() % distinct) as usize]).collect();
                assert_eq!(argmax(&x), naive(&x), "{x:?}");
            }
        }
    }

    #[test]
    fn lazy_sorted_prefix_matches_full_sort() {
        let mut rng = Rng::new(11);
        for &n in &[1usize, 5, 63, 64, 65, 200, 1000, 5000] {
            // Coarse values so ties are common: the id tie-break must hold too.
            let mut c: Vec<Candidate> =
                (0..n as u32).map(|id| Candidate::new(id, (rng.next_f64() * 20.0).floor() as f32)).collect();
            let mut full = c.clone();
            full.sort();
            let mut sorted_len = 0;
            for want in [1, 3, 70, 130, 900, n] {
                ensure_sorted(&mut c, &mut sorted_len, want);
                assert!(sorted_len >= want.min(n));
                let got: Vec<u32> = c[..sorted_len].iter().map(|x| x.id()).collect();
                let expect: Vec<u32> = full[..sorted_len].iter().map(|x| x.id()).collect();
                assert_eq!(got, expect, "n {n} want {want}");
            }
        }
    }

    #[test]
    fn fast_exp_matches_exp() {
        let mut worst = 0.0f64;
        for i in 0..=870_000 {
            let x = -(i as f32) * 1e-4;
            let got = f64::from(exp_nonpositive(x));
            let want = f64::from(x).exp();
            worst = worst.max((got - want).abs() / want);
        }
        assert!(worst < 3e-7, "max relative error {worst}");
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-0.0), 1.0);
        assert_eq!(exp_nonpositive(-87.5), 0.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(-f32::MAX), 0.0);
    }

    #[test]
    fn select_by_mass_matches_a_sorted_walk() {
        let mut rng = Rng::new(8);
        for &n in &[1usize, 2, 64, 65, 300, 5000, 20_000] {
            for trial in 0..30 {
                // Dyadic weights over many octaves (many histogram buckets), few mantissas (ties, so
                // the id tie-break matters); every fifth trial all in one bucket.
                let octaves = if trial % 5 == 0 { 0 } else { 40 };
                let mut c: Vec<Candidate> = (0..n as u32)
                    .map(|id| {
                        let mantissa = ((rng.next_f64() * 8.0).floor() as f32 + 8.0) / 16.0;
                        let octave = (rng.next_u64() % (octaves + 1)) as i32;
                        Candidate::new(id, mantissa * 2f32.powi(-octave))
                    })
                    .collect();
                let mut full = c.clone();
                full.sort();
                let total: f64 = full.iter().map(|x| f64::from(x.value())).sum();
                let reach = if trial % 2 == 0 { Reach::AtLeast } else { Reach::Beyond };
                // Exact dyadic weights: every cumulative sum is exact, so boundaries are hit exactly.
                let cums: Vec<f64> = full
                    .iter()
                    .scan(0.0, |acc, x| {
                        *acc += f64::from(x.value());
                        Some(*acc)
                    })
                    .collect();
                let target = match trial % 3 {
                    0 => rng.next_f64() * total,
                    1 => cums[(rng.next_u64() % n as u64) as usize],
                    _ => total * 1.5,
                };
                let expect = cums.iter().position(|&cum| reach.hit(target, cum)).unwrap_or(n - 1);
                // Start from a partly sorted prefix half of the time.
                let mut sorted_len = 0;
                if trial % 4 < 2 {
                    ensure_sorted(&mut c, &mut sorted_len, n / 3);
                }
                let pos = select_by_mass(&mut c, &mut sorted_len, &mut Vec::new(), target, reach);
                assert_eq!(c[pos].id(), full[expect].id(), "n {n} trial {trial}");
                assert!(c[..pos].iter().all(|x| *x < c[pos]));
                assert!(c[pos + 1..].iter().all(|x| *x > c[pos]));
                let ids = |c: &[Candidate]| c.iter().map(|x| x.id()).collect::<Vec<_>>();
                assert_eq!(ids(&c[..sorted_len]), ids(&full[..sorted_len]), "sorted prefix, n {n} trial {trial}");
            }
        }
    }

    #[test]
    fn streaming_top_k_matches_full_sort() {
        let mut rng = Rng::new(4);
        let inputs: Vec<Vec<f32>> = vec![
            (0..5000).map(|i| i as f32).collect(),
            (0..5000).map(|i| -(i as f32)).collect(),
            (0..5000).map(|i| (i % 7) as f32).collect(),
            (0..5000).map(|i| if i % 3 == 0 { f32::NAN } else { (i % 11) as f32 }).collect(),
            (0..5000).map(|i| [f32::NEG_INFINITY, f32::INFINITY, 0.0, -0.0][i % 4]).collect(),
            random_logits(&mut rng, 5000, 4.0),
            vec![f32::NAN; 300],
        ];
        for (n, logits) in inputs.iter().enumerate() {
            for k in [1, 2, 40, 63, 64, 65, 200, 1000, 4999] {
                let mut got = Vec::new();
                collect_top_k(logits, k, &mut got);
                got.sort();
                let mut full: Vec<Candidate> = logits
                    .iter()
                    .enumerate()
                    .filter(|(_, &l)| l > f32::NEG_INFINITY)
                    .map(|(i, &l)| Candidate::new(i as u32, l))
                    .collect();
                full.sort();
                full.truncate(k);
                let ids = |c: &[Candidate]| c.iter().map(|x| x.id()).collect::<Vec<_>>();
                assert_eq!(ids(&got), ids(&full), "input {n} k {k}");
            }
        }
    }

    #[test]
    fn sampler_matches_the_literal_reference_chain() {
        let mut gen = Rng::new(5);
        let configs = [
            SamplerParams::default(),
            SamplerParams { top_k: 0, top_p: 0.9, min_p: 0.0, ..Default::default() },
            SamplerParams { top_k: 0, top_p: 1.0, min_p: 0.0, temperature: 1.3, ..Default::default() },
            SamplerParams { top_k: 0, top_p: 0.97, min_p: 0.0, temperature: 3.0, ..Default::default() },
            SamplerParams { top_k: 9000, top_p: 0.999, min_p: 0.0, temperature: 2.0, ..Default::default() },
            SamplerParams { top_k: 0, top_p: 0.5, min_p: 0.2, temperature: 0.5, ..Default::default() },
            SamplerParams { top_k: 7, top_p: 0.99, min_p: 0.01, ..Default::default() },
            SamplerParams {
                repetition_penalty: 1.3,
                presence_penalty: 0.4,
                frequency_penalty: 0.2,
                penalty_last_n: 16,
                ..Default::default()
            },
            SamplerParams { repetition_penalty: 1.5, ..SamplerParams::greedy() },
        ];
        for (ci, params) in configs.iter().enumerate() {
            for seed in 0..20u64 {
                let n = 50 + (gen.next_u64() % 12_000) as usize;
                let logits = random_logits(&mut gen, n, 12.0);
                let history: Vec<u32> = (0..40).map(|_| (gen.next_u64() % n as u64) as u32).collect();
                let params = SamplerParams { seed, ..params.clone() };
                let mut s = Sampler::new(params.clone()).unwrap();
                let mut ref_rng = Rng::new(seed);
                for step in 0..5 {
                    let got = s.sample(&mut logits.clone(), &history).unwrap();
                    let expect = reference_sample(&params, &logits, &history, &mut ref_rng).unwrap();
                    assert_eq!(got, expect, "config {ci} seed {seed} step {step}");
                }
            }
        }
    }

    #[test]
    fn penalties_ignore_ids_outside_the_vocabulary() {
        let params = SamplerParams { repetition_penalty: 2.0, presence_penalty: 1.0, ..SamplerParams::greedy() };
        let params = SamplerParams { penalty_last_n: 8, ..params };
        let mut logits = vec![1.0, 1.0];
        apply_penalties(&params, &mut logits, &[1, 7, u32::MAX]);
        assert_eq!(logits, vec![1.0, -0.5]);
    }

    #[test]
    fn buffers_are_reused_across_steps() {
        // Vocabulary above BUCKET_MIN with min-p off, so the histogram pass runs too.
        let params = SamplerParams { top_k: 0, min_p: 0.0, top_p: 0.9, penalty_last_n: 8, ..Default::default() };
        let mut s = Sampler::new(params).unwrap();
        let logits = random_logits(&mut Rng::new(1), 10_000, 8.0);
        s.sample(&mut logits.clone(), &[1, 2, 3]).unwrap();
        let caps =
            |s: &Sampler| (s.candidates.capacity(), s.weights.capacity(), s.hist.capacity(), s.window.capacity());
        let first = caps(&s);
        assert!(first.2 > 0, "histogram pass not exercised");
        for _ in 0..10 {
            s.sample(&mut logits.clone(), &[1, 2, 3, 4, 5, 6, 7, 8, 9]).unwrap();
        }
        assert_eq!(caps(&s), first);
    }
}
