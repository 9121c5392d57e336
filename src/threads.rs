//! The worker pool the kernels run on: rayon's global pool, sized once per process, with
//! optional pinning of worker i to the i-th CPU the process may run on (Linux).
//! This module only decides the pool's size and placement.

use crate::error::{Error, Result};

/// How many workers and where.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadOptions {
    /// Worker count (None: one per CPU the process may use).
    pub threads: Option<usize>,
    /// Pin worker i to allowed CPU i (mod the allowed count).
    pub pin: bool,
}

/// CPUs this process may run on, in ascending order (all online CPUs when unknown).
pub fn allowed_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
        if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } == 0 {
            let cpus: Vec<usize> =
                // SAFETY: `set` was filled by sched_getaffinity; c < CPU_SETSIZE.
                (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect();
            if !cpus.is_empty() {
                return cpus;
            }
        }
    }
    (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
}

#[cfg(target_os = "linux")]
fn pin_current_thread(cpu: usize) {
    // SAFETY: as above; failure leaves the thread unpinned, which is only slower.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(not(target_os = "linux"))]
fn pin_current_thread(_cpu: usize) {}

/// Build the global pool. Call once, before the first forward pass; returns the worker count.
/// Fails when the count is outside 1..=1024 or the pool already exists.
pub fn init(opts: ThreadOptions) -> Result<usize> {
    let cpus = allowed_cpus();
    let n = opts.threads.unwrap_or(cpus.len());
    if n == 0 || n > 1024 {
        return Err(Error::InvalidArgument { reason: format!("thread count {n} outside 1..=1024") });
    }
    let mut b = rayon::ThreadPoolBuilder::new().num_threads(n);
    if opts.pin {
        b = b.start_handler(move |i| pin_current_thread(cpus[i % cpus.len()]));
    }
    b.build_global().map_err(|e| Error::InvalidArgument { reason: format!("thread pool: {e}") })?;
    Ok(n)
}

/// Workers of the pool in use.
pub fn current() -> usize {
    rayon::current_num_threads()
}
