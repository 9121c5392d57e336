//! Token masks: a step's logits [vocab] restricted to the ids a bit set allows (a grammar's
//! next-token mask), every other logit set to −∞ so that no sampling step can choose it.

/// Set `logits[i]` to −∞ for every id `i` whose bit is clear in `allowed` (bit `i % 32` of word
/// `i / 32`); ids past the words' end are not allowed either.
pub fn apply_mask(logits: &mut [f32], allowed: &[u32]) {
    for (w, chunk) in logits.chunks_mut(32).enumerate() {
        let bits = allowed.get(w).copied().unwrap_or(0);
        if bits == u32::MAX {
            continue;
        }
        if bits == 0 {
            chunk.fill(f32::NEG_INFINITY);
            continue;
        }
        for (i, l) in chunk.iter_mut().enumerate() {
            if bits & (1 << i) == 0 {
                *l = f32::NEG_INFINITY;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::apply_mask;

    #[test]
    fn only_allowed_ids_keep_their_logits() {
        let mut logits: Vec<f32> = (0..70).map(|i| i as f32).collect();
        // ids 1, 33 and 64..: word 2 allows 64 and 65 but the slice ends the mask after it.
        apply_mask(&mut logits, &[0b10, 0b10, 0b11]);
        let kept: Vec<usize> = (0..70).filter(|&i| logits[i].is_finite()).collect();
        assert_eq!(kept, vec![1, 33, 64, 65]);
        assert_eq!(logits[33], 33.0);
        let mut all = vec![1.0f32; 40];
        apply_mask(&mut all, &[u32::MAX]);
        assert!(all[..32].iter().all(|&v| v == 1.0) && all[32..].iter().all(|&v| v == f32::NEG_INFINITY));
    }
}
