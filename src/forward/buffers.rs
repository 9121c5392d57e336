//! The f32 buffers a model's forward steps reuse: what a step allocates by its size (the
//! activation buffers, the MoE block's gathered rows and expert outputs, the MLPs' intermediates)
//! is taken from here and given back when done, so that a prefill does not map, fault in and
//! unmap fresh pages layer after layer and step after step. Owned by the `Model` and shared by
//! the steps running on it (the lock is held only to pick or return a buffer). It keeps at most
//! `KEEP` buffers, the largest, and after each step (`settle`) no more values than twice what
//! that step took: a long prefill's buffers are kept while prefill steps follow and released by
//! the first decode step after them.
//!
//! `COLIBRI_POISON_BUFFERS=1` fills every taken buffer with NaN, so that a value read before it
//! is written reaches the logits (a test mode: scripts/test-all.sh runs the oracle suites so).

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Most buffers kept between uses.
const KEEP: usize = 32;

/// Whether taken buffers are filled with NaN (`COLIBRI_POISON_BUFFERS=1`), read once.
fn poisoned() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("COLIBRI_POISON_BUFFERS").is_ok_and(|v| v.trim() == "1"))
}

/// Buffers given back, for the next taker.
#[derive(Debug)]
pub struct Buffers {
    free: Mutex<Vec<Vec<f32>>>,
    /// Values taken since the last `settle`.
    taken: AtomicUsize,
    /// Taken buffers are filled with NaN (`COLIBRI_POISON_BUFFERS=1`).
    poison: bool,
}

impl Default for Buffers {
    fn default() -> Self {
        Buffers { free: Mutex::default(), taken: AtomicUsize::new(0), poison: poisoned() }
    }
}

impl Buffers {
    /// `v` as a taker receives it: filled with NaN in the poison test mode.
    fn handed(&self, mut v: Vec<f32>) -> Vec<f32> {
        if self.poison {
            v.fill(f32::NAN);
        }
        v
    }

    fn free(&self) -> MutexGuard<'_, Vec<Vec<f32>>> {
        // A taker that panicked left the list whole (every change is one push or remove).
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The smallest kept buffer that holds `len` values, resized to `len` (truncating keeps
    /// values, growing within the capacity writes zeros).
    fn reuse(&self, len: usize) -> Option<Vec<f32>> {
        let mut v = {
            let mut free = self.free();
            let fit = free.iter().enumerate().filter(|(_, b)| b.capacity() >= len).min_by_key(|(_, b)| b.capacity());
            let i = fit.map(|(i, _)| i)?;
            free.swap_remove(i)
        };
        v.truncate(len);
        v.resize(len, 0.0);
        Some(v)
    }

    /// A buffer of `len` values whose contents are unspecified (the caller writes every value
    /// before reading it): a kept one, or a new one (allocated as `vec!` does).
    pub fn take(&self, len: usize) -> Vec<f32> {
        self.taken.fetch_add(len, Ordering::Relaxed);
        match len {
            0 => Vec::new(),
            _ => self.handed(self.reuse(len).unwrap_or_else(|| vec![0.0; len])),
        }
    }

    /// `take`, but a new buffer is allocated fallibly: `Error::OutOfMemory` with `what` in the
    /// message.
    pub fn try_take(&self, len: usize, what: &dyn Fn() -> String) -> Result<Vec<f32>> {
        self.taken.fetch_add(len, Ordering::Relaxed);
        if len == 0 {
            return Ok(Vec::new());
        }
        if let Some(v) = self.reuse(len) {
            return Ok(self.handed(v));
        }
        let mut v = Vec::new();
        crate::fallible::reserve_exact(&mut v, len)
            .map_err(|_| Error::OutOfMemory { what: what(), bytes: (len as u64).saturating_mul(4) })?;
        v.resize(len, 0.0);
        Ok(self.handed(v))
    }

    /// End of a step: drop the largest kept buffers until they hold at most twice the values
    /// taken since the last call.
    pub fn settle(&self) {
        let budget = self.taken.swap(0, Ordering::Relaxed).saturating_mul(2);
        let mut free = self.free();
        free.sort_by_key(|b| b.capacity());
        let mut kept: usize = free.iter().map(|b| b.capacity()).sum();
        while kept > budget {
            let Some(big) = free.pop() else { break };
            kept -= big.capacity();
        }
    }

    /// Keep `v` for a later `take` (dropping the smallest kept buffer when there are `KEEP`).
    pub fn give(&self, v: Vec<f32>) {
        if v.capacity() == 0 {
            return;
        }
        let mut free = self.free();
        free.push(v);
        if free.len() > KEEP {
            let small = free.iter().enumerate().min_by_key(|(_, b)| b.capacity()).map(|(i, _)| i);
            if let Some(i) = small {
                drop(free.swap_remove(i));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn what() -> String {
        "test".into()
    }

    #[test]
    fn a_given_buffer_is_taken_again_by_the_smallest_fit() {
        let b = Buffers::default();
        let (small, big) = (b.take(10), b.take(1000));
        assert_eq!((small.len(), big.len()), (10, 1000));
        let (ps, pb) = (small.as_ptr(), big.as_ptr());
        b.give(big);
        b.give(small);
        // 8 values fit both: the smaller is taken; 500 only fit the big one.
        let a = b.take(8);
        assert_eq!((a.as_ptr(), a.len()), (ps, 8));
        let c = b.take(500);
        assert_eq!((c.as_ptr(), c.len()), (pb, 500));
        // Nothing left: a new buffer.
        let d = b.take(8);
        assert!(d.as_ptr() != ps && d.as_ptr() != pb);
    }

    #[test]
    fn take_keeps_values_and_grows_with_zeros() {
        let b = Buffers { poison: false, ..Buffers::default() };
        let mut v = b.take(16);
        v.iter_mut().for_each(|x| *x = 7.0);
        v.truncate(4);
        b.give(v);
        // The kept buffer (capacity 16, len 4) grows to 12: the first 4 keep their values, the
        // rest are zeros.
        let v = b.take(12);
        assert_eq!(v, [[7.0; 4].as_slice(), &[0.0; 8]].concat());
        b.give(v);
        assert_eq!(b.try_take(16, &what).unwrap().len(), 16);
        assert_eq!(b.free().len(), 0, "the kept buffer was reused");
    }

    #[test]
    fn the_poison_mode_hands_out_nan_new_and_kept() {
        let b = Buffers { poison: true, ..Buffers::default() };
        assert!(b.take(5).iter().all(|x| x.is_nan()), "a new buffer");
        b.give(vec![1.0; 8]);
        assert!(b.take(6).iter().all(|x| x.is_nan()), "a kept buffer");
        assert!(b.try_take(3, &what).unwrap().iter().all(|x| x.is_nan()));
        let plain = Buffers { poison: false, ..Buffers::default() };
        plain.give(vec![1.0; 8]);
        assert_eq!(plain.take(6), [1.0; 6], "no fill outside the test mode");
    }

    #[test]
    fn at_most_keep_buffers_are_kept_the_largest() {
        let b = Buffers::default();
        for len in 1..=KEEP + 5 {
            b.give(vec![0.0; len]);
        }
        let free = b.free();
        assert_eq!(free.len(), KEEP);
        assert_eq!(free.iter().map(|v| v.capacity()).min(), Some(6));
    }

    #[test]
    fn a_small_step_releases_what_a_large_one_kept() {
        let b = Buffers::default();
        // A large step: its buffers are kept.
        let big: Vec<Vec<f32>> = (0..4).map(|_| b.take(1 << 16)).collect();
        big.into_iter().for_each(|v| b.give(v));
        b.settle();
        assert_eq!(b.free().len(), 4);
        // A small step takes from them and gives back: the big ones go, what it used stays.
        let small = b.take(10);
        b.give(small);
        b.settle();
        let kept: usize = b.free().iter().map(|v| v.capacity()).sum();
        assert!(kept <= 20, "{kept} values kept after a step that took 10");
        // Nothing taken: nothing kept.
        b.settle();
        assert!(b.free().is_empty());
    }

    #[test]
    fn an_impossible_size_is_out_of_memory() {
        let b = Buffers::default();
        assert!(matches!(b.try_take(usize::MAX / 2, &what), Err(Error::OutOfMemory { .. })));
    }
}
