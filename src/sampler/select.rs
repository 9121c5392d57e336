//! Candidate selection: the packed [`Candidate`] keys and every algorithm that picks among them
//! without a full sort — the lazily sorted prefix ([`ensure_sorted`]), one-pass top-k
//! ([`collect_top_k`]), the weight and min-p passes over candidates, and the position of a target
//! mass on the sorted cumulative axis ([`select_by_mass`], for top-p's cut and the draw).

use super::math::{weight, LANES};

/// One entry of the candidate list: a token id and its current value (a logit, then a weight),
/// packed in one `u64` whose natural order is the sampler's order, value descending then id
/// ascending: the high half is the value's bits mapped to an order-reversing integer, the low half
/// the id. Integer comparisons keep partial selection and sorting fast.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Candidate(u64);

impl Candidate {
    /// `value` must not be NaN; −0.0 is stored as 0.0 (so it ties with 0.0, as in
    /// [`argmax`](super::math::argmax)).
    pub(super) fn new(id: u32, value: f32) -> Self {
        let bits = (value + 0.0).to_bits();
        let ascending = if bits >> 31 == 1 { !bits } else { bits | 0x8000_0000 };
        Candidate((u64::from(!ascending) << 32) | u64::from(id))
    }

    pub(super) fn id(self) -> u32 {
        self.0 as u32
    }

    /// The top [`BUCKET_BITS`] bits of the key: buckets in the same order as candidates, each
    /// spanning a factor 2^(1/8) of positive values.
    fn bucket(self) -> usize {
        (self.0 >> (64 - BUCKET_BITS)) as usize
    }

    pub(super) fn value(self) -> f32 {
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
pub(super) fn ensure_sorted(cands: &mut [Candidate], sorted_len: &mut usize, want: usize) {
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

/// Step 4. The top `k` (order [`Candidate`], left unsorted) of the logits that are neither NaN nor
/// −∞, into `out`, in one pass: a buffer of up to 2·max(k, 64) entries is cut back to its top k by
/// partial selection whenever it fills, and from then on only logits above the k-th kept one enter
/// (an equal one has a larger id, so it ranks below). Random logits cost one compare each; even an
/// ascending input costs O(n) selection work in total. `k >= 1`.
pub(super) fn collect_top_k(logits: &[f32], k: usize, out: &mut Vec<Candidate>) {
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

/// Steps 5–6 over top-k's survivors: each candidate's logit becomes its [`weight`] against the
/// survivors' maximum (1/T = `inv_t`). Returns the sum of the weights in `f64`, in candidate order.
pub(super) fn weigh_candidates(cands: &mut [Candidate], inv_t: f32) -> f64 {
    let max = cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.value()));
    let mut sum = 0.0f64;
    for c in cands.iter_mut() {
        let w = weight(c.value(), max, inv_t);
        sum += f64::from(w);
        *c = Candidate::new(c.id(), w);
    }
    sum
}

/// Min-p's test on a weight whose distribution's largest weight is 1: `w >= min_p`; a zero weight
/// never passes.
fn min_p_keeps(w: f32, min_p: f32) -> bool {
    w > 0.0 && w >= min_p
}

/// Step 8 over weighted candidates: drop those that fail [`min_p_keeps`].
pub(super) fn retain_min_p(cands: &mut Vec<Candidate>, min_p: f32) {
    cands.retain(|c| min_p_keeps(c.value(), min_p));
}

/// Step 8 over the whole vocabulary: append to `out` the entries of `weights` [vocab] that pass
/// [`min_p_keeps`], as candidates (id = index, value = weight), in id order.
pub(super) fn collect_min_p(weights: &[f32], min_p: f32, out: &mut Vec<Candidate>) {
    out.reserve(weights.len());
    for (c, chunk) in weights.chunks(LANES).enumerate() {
        // Usually few survive: one branch-free test skips a chunk without any.
        if chunk.iter().fold(false, |any, &w| any | min_p_keeps(w, min_p)) {
            let survivors = chunk.iter().enumerate().filter(|(_, &w)| min_p_keeps(w, min_p));
            out.extend(survivors.map(|(j, &w)| Candidate::new((c * LANES + j) as u32, w)));
        }
    }
}

/// How [`select_by_mass`] compares the target with a cumulative weight.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Reach {
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
/// `cands` must not be empty (returns 0 then). `hist` is scratch of [HIST_LANES · 2^BUCKET_BITS].
pub(super) fn select_by_mass(
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
        let mass = bucket_masses(&cands[lo..hi], hist);
        let b = find_bucket(mass, target, reach, &mut cum);
        (lo, hi) = partition_bucket(cands, lo, hi, b);
    }
    (lo, hi) = halve_by_mass(cands, lo, hi, target, reach, &mut cum);
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

/// The histogram pass of [`select_by_mass`]: the weight of `cands` per value bucket
/// ([2^BUCKET_BITS], in bucket order), accumulated in `hist` [HIST_LANES · 2^BUCKET_BITS] as
/// HIST_LANES interleaved histograms, so that runs of one bucket do not serialise the adds, then
/// folded into the first.
fn bucket_masses<'h>(cands: &[Candidate], hist: &'h mut Vec<f64>) -> &'h [f64] {
    hist.clear();
    hist.resize(HIST_LANES << BUCKET_BITS, 0.0);
    let chunks = cands.chunks_exact(HIST_LANES);
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
    first
}

/// The bucket of `mass` [2^BUCKET_BITS] in which the cumulative weight, starting from `*cum`,
/// reaches `target`; adds the mass of the buckets before it to `*cum`. If it is never reached, the
/// last non-empty bucket (which holds the last candidate).
fn find_bucket(mass: &[f64], target: f64, reach: Reach, cum: &mut f64) -> usize {
    let mut hit = None;
    let mut last_used = 0;
    for (b, &m) in mass.iter().enumerate() {
        if m > 0.0 {
            last_used = b;
            if reach.hit(target, *cum + m) {
                hit = Some(b);
                break;
            }
            *cum += m;
        }
    }
    // Never reached: the answer is the last candidate, in the last non-empty bucket.
    match hit {
        Some(b) => b,
        None => {
            *cum -= mass[last_used];
            last_used
        }
    }
}

/// Three-way partition of `cands[lo..hi]` by bucket: those of buckets before `b` first, then
/// bucket `b`, then the rest. Returns bucket `b`'s range.
fn partition_bucket(cands: &mut [Candidate], lo: usize, hi: usize, b: usize) -> (usize, usize) {
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
    (above, below)
}

/// The median-partition walk of [`select_by_mass`]: halves `cands[lo..hi]` (which holds the
/// answer; `*cum` is the weight before `lo`) with `select_nth_unstable`, keeping the half where the
/// cumulative weight reaches `target`, until at most [`MIN_SORT_CHUNK`] remain. Returns that range;
/// `*cum` is then the weight before its start.
fn halve_by_mass(
    cands: &mut [Candidate],
    mut lo: usize,
    mut hi: usize,
    target: f64,
    reach: Reach,
    cum: &mut f64,
) -> (usize, usize) {
    while hi - lo > MIN_SORT_CHUNK {
        let mid = lo + (hi - lo) / 2;
        cands[lo..hi].select_nth_unstable(mid - lo);
        let left: f64 = cands[lo..mid].iter().map(|c| f64::from(c.value())).sum();
        if reach.hit(target, *cum + left) {
            hi = mid;
        } else {
            *cum += left;
            lo = mid;
        }
    }
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use crate::sampler::tests::random_logits;

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
}
