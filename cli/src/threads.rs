//! Private worker pools for `colibri bench`, which may compare several thread counts in one
//! process (the other commands size rayon's global pool once, with `run::init_threads`).
//! Engine calls made inside `pool.install(..)` run on that pool.

use colibri::Error;

/// Largest thread count accepted on the command line.
const MAX_THREADS: usize = 1024;

/// A pool of `t` threads.
pub fn pool(t: usize) -> Result<rayon::ThreadPool, Error> {
    if t == 0 || t > MAX_THREADS {
        return Err(Error::InvalidArgument { reason: format!("--threads {t} outside 1..={MAX_THREADS}") });
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(t)
        .build()
        .map_err(|e| Error::InvalidArgument { reason: format!("thread pool of {t}: {e}") })
}

/// Number of cores available to this process (the default thread count).
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}
