//! Memory-bandwidth probe: how fast `t` threads can stream a buffer much larger than the caches.
//! Each thread of the pool sums its own contiguous slice with wide reads; the best of several
//! passes, in GB/s (1e9 bytes), is the machine's practical read bandwidth that decode speed is
//! measured against.

use colibri::Error;
use std::time::Instant;

/// Size of the probe buffer.
pub const PROBE_BYTES: usize = 2 << 30;
/// Timed passes; the fastest counts.
const PASSES: usize = 5;

/// Sum of `xs` with eight independent u64 accumulators (vectorised by the compiler).
fn sum_lanes(xs: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let chunks = xs.chunks_exact(8);
    let tail = chunks.remainder().iter().fold(0u64, |a, &x| a.wrapping_add(x));
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(x);
        }
    }
    acc.iter().fold(tail, |a, &x| a.wrapping_add(x))
}

/// A filled buffer of `bytes` bytes (every page touched, so reads hit real memory).
pub fn allocate(bytes: usize) -> Result<Vec<u64>, Error> {
    let n = bytes / 8;
    let mut buf: Vec<u64> = Vec::new();
    buf.try_reserve_exact(n).map_err(|e| Error::InvalidArgument {
        reason: format!("cannot allocate the {} MiB bandwidth probe buffer ({e}); pass --no-probe", bytes >> 20),
    })?;
    buf.extend((0..n as u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    Ok(buf)
}

/// Best read bandwidth in GB/s of `buf` over `PASSES` passes, each thread of `pool` reading its
/// own contiguous slice.
pub fn bandwidth(pool: &rayon::ThreadPool, buf: &[u64]) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..PASSES {
        let t0 = Instant::now();
        let sums = pool.broadcast(|ctx| {
            let (i, n) = (ctx.index(), ctx.num_threads());
            let slice = &buf[buf.len() * i / n..buf.len() * (i + 1) / n];
            sum_lanes(std::hint::black_box(slice))
        });
        let secs = t0.elapsed().as_secs_f64();
        std::hint::black_box(sums);
        best = best.min(secs);
    }
    (buf.len() * 8) as f64 / best.max(1e-9) / 1e9
}

#[cfg(test)]
mod tests {
    use super::sum_lanes;

    #[test]
    fn lanes_sum_equals_the_plain_sum_for_every_tail_length() {
        for n in 0..40u64 {
            let xs: Vec<u64> = (0..n).map(|i| i * 7 + 3).collect();
            assert_eq!(sum_lanes(&xs), xs.iter().sum::<u64>(), "n = {n}");
        }
    }
}
