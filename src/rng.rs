//! A small, fast, seedable PRNG (xoshiro256**, seeded through SplitMix64). Every user owns its
//! own instance (a session's sampler, a session's Gumbel router): there is no global RNG, so
//! results depend only on the seed, never on threads or call order elsewhere.

/// The seed value that asks for a fresh, unpredictable seed (llama.cpp's `LLAMA_DEFAULT_SEED`
/// convention: the largest u64). Every other value, 0 included, is reproducible.
pub const SEED_RANDOM: u64 = u64::MAX;

/// `seed` itself, or a fresh seed from the OS (never `SEED_RANDOM`) when it is `SEED_RANDOM`.
pub fn resolve_seed(seed: u64) -> u64 {
    if seed != SEED_RANDOM {
        return seed;
    }
    let mut bytes = [0u8; 8];
    #[cfg(target_os = "linux")]
    // SAFETY: getrandom writes at most `bytes.len()` bytes into the buffer passed.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) } == bytes.len() as isize;
    #[cfg(not(target_os = "linux"))]
    let got = false;
    let fresh = if got {
        u64::from_le_bytes(bytes)
    } else {
        // No OS randomness: std's per-process random hash keys, the time and a counter.
        use std::hash::{BuildHasher, Hasher};
        static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        h.write_u64(CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        h.finish()
    };
    if fresh == SEED_RANDOM {
        0
    } else {
        fresh
    }
}

/// xoshiro256** state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator whose whole sequence is determined by `seed`.
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        Rng { s: [splitmix64(&mut x), splitmix64(&mut x), splitmix64(&mut x), splitmix64(&mut x)] }
    }

    /// The generator's whole state (to save it; `from_state` restores it).
    pub fn state(&self) -> [u64; 4] {
        self.s
    }

    /// A generator continuing exactly where the one whose `state` this was stood. An all-zero
    /// state (which xoshiro never leaves) is replaced by the state of seed 0.
    pub fn from_state(s: [u64; 4]) -> Rng {
        if s == [0; 4] {
            Rng::new(0)
        } else {
            Rng { s }
        }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in the open interval (0, 1): never exactly 0 or 1 (safe for log(-log u)).
    pub fn next_open01(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_different_seed_different_sequence() {
        let a: Vec<u64> = {
            let mut r = Rng::new(42);
            (0..8).map(|_| r.next_u64()).collect()
        };
        let mut r = Rng::new(42);
        assert_eq!(a, (0..8).map(|_| r.next_u64()).collect::<Vec<_>>());
        let mut r = Rng::new(43);
        assert_ne!(a, (0..8).map(|_| r.next_u64()).collect::<Vec<_>>());
    }

    #[test]
    fn open_interval_and_rough_uniformity() {
        let mut r = Rng::new(7);
        let n = 100_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let u = r.next_open01();
            assert!(u > 0.0 && u < 1.0);
            sum += u;
        }
        let mean = sum / n as f64;
        assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
    }
}
