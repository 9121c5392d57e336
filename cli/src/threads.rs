//! The worker threads of the CLI's engine calls: every command's model gets a pool of its own
//! (`LoadOptions::threads`, from `-t` and `COLIBRI_PIN`), and `colibri bench`, which compares
//! several thread counts on one model, also keeps private pools for its bandwidth probe.

use colibri::threads::ThreadOptions;
use colibri::Error;

/// Largest thread count accepted on the command line.
const MAX_THREADS: usize = 1024;

/// The model's pool for `-t THREADS` (None: one worker per physical core), pinned when
/// `COLIBRI_PIN=1` (read by the CLI only; the library reads no thread setting from the
/// environment).
pub fn options(threads: Option<usize>) -> ThreadOptions {
    ThreadOptions { n_threads: threads.unwrap_or(0), pin: std::env::var_os("COLIBRI_PIN").is_some_and(|v| v == "1") }
}

/// A pool of `t` threads, each creating its thread-locals at start (`crate::prepare_thread`).
pub fn pool(t: usize) -> Result<rayon::ThreadPool, Error> {
    if t == 0 || t > MAX_THREADS {
        return Err(Error::InvalidArgument { reason: format!("--threads {t} outside 1..={MAX_THREADS}") });
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(t)
        .start_handler(|_| crate::prepare_thread())
        .build()
        .map_err(|e| Error::InvalidArgument { reason: format!("thread pool of {t}: {e}") })
}

/// Physical cores available to this process (the default thread count).
pub fn default_threads() -> usize {
    colibri::threads::physical_cores()
}
