//! Steps 1–2 of the sampler chain: repetition, then presence / frequency penalties, applied to the
//! logits in place over the last `penalty_last_n` ids of the history.

use super::params::SamplerParams;

/// Apply steps 1–2 of the chain (repetition, then presence/frequency penalties) to `logits` in
/// place, looking at the last `params.penalty_last_n` ids of `history`. Ids outside the vocabulary
/// (≥ `logits.len()`) are ignored. Allocates a window-sized scratch; [`Sampler`](super::Sampler)
/// reuses its own.
pub fn apply_penalties(params: &SamplerParams, logits: &mut [f32], history: &[u32]) {
    let mut window = Vec::new();
    penalise(params, logits, history, &mut window);
}

/// [`apply_penalties`] with a caller-owned scratch `window` ([<= penalty_last_n] ids, sorted here).
pub(super) fn penalise(params: &SamplerParams, logits: &mut [f32], history: &[u32], window: &mut Vec<u32>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn penalties_ignore_ids_outside_the_vocabulary() {
        let params = SamplerParams { repetition_penalty: 2.0, presence_penalty: 1.0, ..SamplerParams::greedy() };
        let params = SamplerParams { penalty_last_n: 8, ..params };
        let mut logits = vec![1.0, 1.0];
        apply_penalties(&params, &mut logits, &[1, 7, u32::MAX]);
        assert_eq!(logits, vec![1.0, -0.5]);
    }
}
