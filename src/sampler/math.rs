//! Vector math of the sampler on plain `f32` slices: the softmax weights (by the branch-free
//! `kernels::vexp::exp_nonpositive`), the whole-vocabulary weight pass, NaN-ignoring max / argmax
//! and the `f64` sum. Knows nothing of candidates or parameters.

use crate::kernels::vexp::exp_nonpositive;

/// Lanes of the reductions below (and of the chunked scans elsewhere in the sampler): independent
/// accumulators let them vectorise, and their fixed combination order keeps results deterministic.
pub(super) const LANES: usize = 8;

/// Softmax weight of `logit` given the step's maximum and 1/T: `exp((logit − max) / T)`, so the
/// maximum weighs exactly 1; NaN and −∞ weigh 0. When `max` is +∞ the +∞ logits weigh 1 and all
/// others 0 (they share all the mass).
pub(super) fn weight(logit: f32, max: f32, inv_t: f32) -> f32 {
    if max == f32::INFINITY {
        return if logit == f32::INFINITY { 1.0 } else { 0.0 };
    }
    exp_nonpositive((logit - max) * inv_t)
}

/// Steps 5–6 over the whole vocabulary: `weights` [vocab] ← [`weight`] of every logit against the
/// NaN-ignoring maximum of `logits` [vocab], with `inv_t` = 1/T.
pub(super) fn weigh_vocabulary(logits: &[f32], inv_t: f32, weights: &mut Vec<f32>) {
    let max = max_ignoring_nan(logits);
    weights.resize(logits.len(), 0.0);
    if max == f32::INFINITY {
        weights.iter_mut().zip(logits.iter()).for_each(|(w, &l)| *w = weight(l, max, inv_t));
    } else {
        // The common case, kept free of branches so that it vectorises.
        weights.iter_mut().zip(logits.iter()).for_each(|(w, &l)| *w = exp_nonpositive((l - max) * inv_t));
    }
}

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
pub(super) fn sum_f64(x: &[f32]) -> f64 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

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
}
