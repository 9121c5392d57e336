//! Memory-bandwidth probe: how fast `t` threads can stream a buffer much larger than the caches.
//! Each thread of the pool sums its own contiguous slice with wide reads, in some passes as one
//! stream and in others as `STREAMS` parts read side by side (one core reads several streams
//! faster than one where the hardware prefetcher keeps few lines of a stream in flight: 10.5
//! against 14–15 GB/s on one Emerald Rapids VM core, as the decode kernels that read 8 rows in
//! lockstep do); the best pass, in GB/s (1e9 bytes), is the machine's practical read bandwidth
//! that decode speed is measured against. Memory is read through 4 KiB or 2 MiB pages at
//! different speeds (TLB reach: one Zen 4 thread streams ~25 GB/s through 4 KiB pages, ~33
//! through 2 MiB ones), and
//! the weights' mapping may use either (2 MiB where the page cache holds the file in
//! PMD-sized folios), so the probe reads a buffer of each kind and decode is measured against
//! the mix its own mapping has (`huge_share`, `mixed`).

use colibri::Error;
use std::time::Instant;

/// Largest and smallest probe buffer.
const MAX_PROBE: usize = 2 << 30;
const MIN_PROBE: usize = 64 << 20;

/// The last-level cache in bytes (sysfs; 32 MiB when unknown).
pub fn cache_bytes() -> usize {
    let read = |i: u32| std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu0/cache/index{i}/size")).ok();
    let parse = |s: String| {
        let s = s.trim();
        let (num, mul) = match s.strip_suffix('K') {
            Some(n) => (n, 1 << 10),
            None => s.strip_suffix('M').map_or((s, 1), |n| (n, 1 << 20)),
        };
        num.parse::<usize>().ok().map(|n| n * mul)
    };
    (0..8).rev().filter_map(read).find_map(parse).unwrap_or(32 << 20)
}

/// The probe buffer for this machine: 16 × the last-level cache (so reads come from memory),
/// within [64 MiB, 2 GiB] and at most a quarter of MemAvailable.
pub fn probe_bytes() -> usize {
    let available = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemAvailable:"))?.to_string();
        line.split_whitespace().nth(1)?.parse::<usize>().ok().map(|kib| kib << 10)
    });
    let want = cache_bytes().saturating_mul(16).clamp(MIN_PROBE, MAX_PROBE);
    available.map_or(want, |a| want.min(a / 4).max(MIN_PROBE.min(a / 4)))
}
/// Timed passes, alternately one stream and `STREAMS`; the fastest counts.
pub const PASSES: usize = 6;

/// Parts of a thread's slice read side by side in the multi-stream passes.
pub const STREAMS: usize = 8;

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

/// `sum_lanes` of `xs` read as `K` contiguous parts side by side: 64 bytes of each part in turn
/// (K hardware prefetch streams at once), then what is left after the parts' whole chunks.
fn sum_streams<const K: usize>(xs: &[u64]) -> u64 {
    let per = xs.len() / K / 8 * 8;
    let mut parts: [std::slice::ChunksExact<'_, u64>; K] =
        std::array::from_fn(|p| xs[p * per..(p + 1) * per].chunks_exact(8));
    let mut acc = [0u64; 8];
    for _ in 0..per / 8 {
        for part in parts.iter_mut() {
            let Some(c) = part.next() else { break };
            for (a, &x) in acc.iter_mut().zip(c) {
                *a = a.wrapping_add(x);
            }
        }
    }
    acc.iter().fold(sum_lanes(&xs[K * per..]), |a, &x| a.wrapping_add(x))
}

/// The page size a probe buffer asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pages {
    Small,
    /// Transparent huge pages (`MADV_HUGEPAGE`; the kernel may still give small ones).
    Huge,
}

const HUGE: usize = 2 << 20;

/// A filled buffer of `bytes` bytes (every page touched, so reads hit real memory).
pub fn allocate(bytes: usize, pages: Pages) -> Result<Vec<u64>, Error> {
    let n = bytes / 8;
    let mut buf: Vec<u64> = Vec::new();
    buf.try_reserve_exact(n).map_err(|e| Error::InvalidArgument {
        reason: format!("cannot allocate the {} MiB bandwidth probe buffer ({e}); pass --no-probe", bytes >> 20),
    })?;
    if pages == Pages::Huge {
        // Before the first touch, so that the faults can map 2 MiB pages.
        let (start, end) = (buf.as_ptr() as usize, buf.as_ptr() as usize + n * 8);
        let (a, b) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
        #[cfg(target_os = "linux")]
        if b > a {
            // SAFETY: [a, b) lies inside the reserved, not yet touched allocation; advice only.
            unsafe { libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_HUGEPAGE) };
        }
    }
    buf.extend((0..n as u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    Ok(buf)
}

/// Best read bandwidth in GB/s of `buf` over `PASSES` passes, each thread of `pool` reading its
/// own contiguous slice, alternately as one stream and as `STREAMS`.
pub fn bandwidth(pool: &rayon::ThreadPool, buf: &[u64]) -> f64 {
    let mut best = f64::INFINITY;
    for pass in 0..PASSES {
        let t0 = Instant::now();
        let sums = pool.broadcast(|ctx| {
            let (i, n) = (ctx.index(), ctx.num_threads());
            let slice = &buf[buf.len() * i / n..buf.len() * (i + 1) / n];
            let slice = std::hint::black_box(slice);
            if pass % 2 == 0 {
                sum_lanes(slice)
            } else {
                sum_streams::<STREAMS>(slice)
            }
        });
        let secs = t0.elapsed().as_secs_f64();
        std::hint::black_box(sums);
        best = best.min(secs);
    }
    (buf.len() * 8) as f64 / best.max(1e-9) / 1e9
}

/// Share of the resident bytes of `path`'s mappings in this process that are mapped with
/// 2 MiB pages (`FilePmdMapped` / `Rss` in /proc/self/smaps); None when unknown.
pub fn huge_share(path: &std::path::Path) -> Option<f64> {
    let name = std::fs::canonicalize(path).ok()?.to_string_lossy().into_owned();
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let (mut rss, mut pmd, mut inside) = (0u64, 0u64, false);
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(key) = fields.next() else { continue };
        if !key.ends_with(':') {
            inside = line.ends_with(name.as_str());
            continue;
        }
        let mut kib = || fields.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        match key {
            "Rss:" if inside => rss += kib(),
            "FilePmdMapped:" if inside => pmd += kib(),
            _ => {}
        }
    }
    (rss > 0).then(|| pmd as f64 / rss as f64)
}

/// The bandwidth of reading a share `huge` of the bytes through 2 MiB pages and the rest
/// through 4 KiB pages (time-weighted: 1 / (h / huge_gbs + (1 − h) / small_gbs)).
pub fn mixed(small_gbs: f64, huge_gbs: f64, huge: f64) -> f64 {
    let h = huge.clamp(0.0, 1.0);
    1.0 / (h / huge_gbs + (1.0 - h) / small_gbs)
}

#[cfg(test)]
mod tests {
    use super::{mixed, sum_lanes, sum_streams};

    #[test]
    fn mixed_bandwidth_is_time_weighted() {
        assert_eq!(mixed(20.0, 40.0, 0.0), 20.0);
        assert_eq!(mixed(20.0, 40.0, 1.0), 40.0);
        // Half the bytes at each speed: 0.5/40 + 0.5/20 = 3/80 s per GB.
        assert!((mixed(20.0, 40.0, 0.5) - 80.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn this_process_maps_no_unknown_file() {
        assert_eq!(super::huge_share(std::path::Path::new("/nonexistent/model.colibri")), None);
    }

    #[test]
    fn lanes_sum_equals_the_plain_sum_for_every_tail_length() {
        for n in 0..40u64 {
            let xs: Vec<u64> = (0..n).map(|i| i * 7 + 3).collect();
            assert_eq!(sum_lanes(&xs), xs.iter().sum::<u64>(), "n = {n}");
        }
    }

    #[test]
    fn streams_sum_every_element_once_for_every_length_and_part_count() {
        for n in 0..300u64 {
            let xs: Vec<u64> = (0..n).map(|i| (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
            let want = xs.iter().fold(0u64, |a, &x| a.wrapping_add(x));
            assert_eq!(sum_streams::<1>(&xs), want, "n = {n}, one part");
            assert_eq!(sum_streams::<3>(&xs), want, "n = {n}, 3 parts");
            assert_eq!(sum_streams::<8>(&xs), want, "n = {n}, 8 parts");
        }
    }
}
