//! Worker pools owned by what computes — a model, a layer of the C ABI's MoE primitive — each
//! sized by its own options, built on first use and rebuilt in a forked child (whose copy of
//! the parent's pool has no threads). The library never uses rayon's global pool: its entry
//! points run their parallel regions inside the owner's `Pool::install`, and code reached
//! outside any pool runs on the calling thread (`current()` is 1 there). This module decides
//! the pools' size and placement, and how a caller joins its pool's work (`run_parts`); the
//! kernels decide how work is split.

mod awake;

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Largest worker count a pool accepts.
pub const MAX_THREADS: usize = 1024;

/// How many workers and where.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadOptions {
    /// Worker count, 1..=1024; 0 = one per physical core the process may run on
    /// (`physical_cores`).
    pub n_threads: usize,
    /// Pin worker i to allowed CPU i (mod the allowed count; Linux).
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

/// Physical cores among the CPUs this process may run on: distinct (package, core) pairs of
/// the allowed CPUs' topology (Linux sysfs); the allowed CPU count where the topology is
/// unknown.
pub fn physical_cores() -> usize {
    let cpus = allowed_cpus();
    let read = |cpu: usize, field: &str| -> Option<u64> {
        let path = format!("/sys/devices/system/cpu/cpu{cpu}/topology/{field}");
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    };
    let cores: Option<std::collections::HashSet<(u64, u64)>> =
        cpus.iter().map(|&c| Some((read(c, "physical_package_id")?, read(c, "core_id")?))).collect();
    cores.map_or(cpus.len(), |set| set.len()).max(1)
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

/// Workers of the pool running the caller; 1 outside any pool (the caller's thread alone).
/// Never touches rayon's global pool.
pub fn current() -> usize {
    if rayon::current_thread_index().is_some() {
        rayon::current_num_threads()
    } else {
        1
    }
}

/// A pool built in process `pid`. Dropped (only ever in that process) it stops its workers and
/// waits for them to exit: `pool` is dropped before `workers`.
struct Built {
    pid: u32,
    pool: rayon::ThreadPool,
    /// The calls under way on it and its steps' holds (`awake::Steps`), in this process only.
    steps: Arc<awake::Steps>,
    #[allow(dead_code)] // held for its Drop
    workers: Workers,
    /// The next pool in `FORKED`.
    next: AtomicPtr<Built>,
}

/// The threads of a pool, joined on drop — unless dropped on one of them (a pool dropped by a
/// job it runs), whose workers then exit on their own.
struct Workers(Vec<std::thread::JoinHandle<()>>);

impl Drop for Workers {
    fn drop(&mut self) {
        let me = std::thread::current().id();
        if self.0.iter().all(|h| h.thread().id() != me) {
            for h in self.0.drain(..) {
                // A worker's own panics are caught by rayon; nothing to report.
                let _ = h.join();
            }
        }
    }
}

/// Pools inherited through `fork()` and replaced in the child: kept (reachable, for leak
/// checkers) and never touched again. A stack that is only pushed, without a lock: a lock could
/// have been held by a thread that does not exist in the child.
static FORKED: AtomicPtr<Built> = AtomicPtr::new(std::ptr::null_mut());

/// Keep `b`, a pool of the process this one was forked from, in `FORKED`.
fn keep_forked(b: *mut Built) {
    // SAFETY: `b` came from Box::into_raw and is owned by no one else any more (it was just
    // replaced); it is never freed.
    let next = unsafe { &(*b).next };
    let mut head = FORKED.load(Ordering::Acquire);
    loop {
        next.store(head, Ordering::Relaxed);
        match FORKED.compare_exchange(head, b, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(h) => head = h,
        }
    }
}

/// A worker pool of its own: sized by `ThreadOptions`, built by the first `install`, and built
/// again by the first `install` in a forked child. Shared by reference between threads (each
/// `install` queues its work on the same workers). Dropped, it stops its workers and waits for
/// them to exit.
///
/// After `fork()` the child's copy of the parent's pool is leaked (kept in `FORKED`), never
/// joined or dropped: its threads do not exist there, and its locks may have been held by them
/// at the fork. What those threads had allocated (about 2.4 KB each) stays unreachable in the
/// child.
pub struct Pool {
    opts: ThreadOptions,
    /// How long a held worker waits without work (`step`; tests lengthen it).
    hold_idle: Duration,
    /// NULL until built; then a `Box<Built>` freed only by `Drop` (which has `&mut self`).
    built: AtomicPtr<Built>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("opts", &self.opts).finish()
    }
}

impl Pool {
    /// A pool for `opts` (no thread starts yet). Fails when n_threads is above 1024.
    pub fn new(opts: ThreadOptions) -> Result<Pool> {
        if opts.n_threads > MAX_THREADS {
            return Err(Error::InvalidArgument {
                reason: format!("thread count {} outside 1..={MAX_THREADS} (0 = the physical cores)", opts.n_threads),
            });
        }
        Ok(Pool { opts, hold_idle: awake::IDLE_LIMIT, built: AtomicPtr::new(std::ptr::null_mut()) })
    }

    /// The options it was made with.
    pub fn options(&self) -> ThreadOptions {
        self.opts
    }

    /// Workers of this pool: n_threads, or the physical cores when n_threads is 0.
    pub fn threads(&self) -> usize {
        match self.opts.n_threads {
            0 => physical_cores(),
            n => n,
        }
    }

    /// Run `f` on this pool's workers (the caller waits); parallel regions inside it use them.
    /// Fails, running nothing, when the workers cannot be started.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> Result<R> {
        let built = self.get()?;
        let _active = built.steps.enter();
        Ok(built.pool.install(f))
    }

    /// `install` for a step of many short parallel regions (a decode step): while it is the only
    /// work on the pool, the other workers wait for its next region on the CPU instead of
    /// sleeping between regions, each until the step ends or 1 ms passes without work (`awake`;
    /// not when the pool has more workers than CPUs, nor with `COLIBRI_SPIN=off`).
    pub fn step<R: Send>(&self, f: impl FnOnce() -> R + Send) -> Result<R> {
        let built = self.get()?;
        let _active = built.steps.enter();
        Ok(built.pool.install(|| awake::while_awake(&built.steps, f)))
    }

    /// Run `f` on every part and return when all have run: the first part on the calling
    /// thread, the others queued on this pool's workers (so n parts want n − 1 workers: the
    /// caller is one of the n threads). A call of a few tens of microseconds cannot afford a
    /// sleep and wake-up at its end, so once its own part is done the caller spins for the
    /// others (up to `SPIN_WAIT`) before it blocks. A panic in any part reaches the caller once
    /// all have run. Fails, running nothing, when the workers cannot be started.
    pub fn run_parts<T: Send>(&self, parts: impl IntoIterator<Item = T>, f: impl Fn(T) + Sync) -> Result<()> {
        let built = self.get()?;
        let _active = built.steps.enter();
        let mut parts = parts.into_iter();
        let Some(first) = parts.next() else { return Ok(()) };
        let (f, done) = (&f, &AtomicUsize::new(0));
        built.pool.in_place_scope(|s| {
            let mut queued = 0;
            for part in parts {
                queued += 1;
                s.spawn(move |_| {
                    let _count = Done(done);
                    f(part)
                });
            }
            f(first);
            spin_until(|| done.load(Ordering::Acquire) == queued);
        });
        Ok(())
    }

    /// This process's pool, built now if it has none.
    fn get(&self) -> Result<&Built> {
        let pid = std::process::id();
        loop {
            let seen = self.built.load(Ordering::Acquire);
            // SAFETY: a non-NULL pointer here came from Box::into_raw below and is freed only in
            // Drop, which has exclusive access; pools of other processes are never freed.
            if let Some(b) = unsafe { seen.as_ref() } {
                if b.pid == pid {
                    return Ok(b);
                }
            }
            let (pool, workers) = self.build()?;
            let steps = Arc::new(awake::Steps::new(self.hold_idle, self.threads() <= allowed_cpus().len()));
            let built = Built { pid, pool, steps, workers, next: AtomicPtr::new(std::ptr::null_mut()) };
            let fresh = Box::into_raw(Box::new(built));
            match self.built.compare_exchange(seen, fresh, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    // `seen` was NULL or the pool of the process this one was forked from.
                    if !seen.is_null() {
                        keep_forked(seen);
                    }
                    // SAFETY: `fresh` is now owned by `self.built` (see above).
                    return Ok(unsafe { &*fresh });
                }
                // Another thread of this process built one first: use that one.
                // SAFETY: `fresh` was never shared.
                Err(_) => drop(unsafe { Box::from_raw(fresh) }),
            }
        }
    }

    /// Start the workers (named colibri-i, worker i pinned to allowed CPU i when asked), keeping
    /// their handles to join them when the pool goes. Refuses (`OutOfMemory`) when the address
    /// space cannot hold the workers' stacks and start-up mappings, instead of letting a thread
    /// die half-started (std and glibc abort then). Returns only when every worker has finished
    /// its start-up (rayon allocates each worker's queues there): a `fork()` right after cannot
    /// inherit an allocator lock held by a starting worker (sanitizer allocators do not reset
    /// theirs in the child).
    fn build(&self) -> Result<(rayon::ThreadPool, Workers)> {
        let n = self.threads();
        reserve_address_space(n)?;
        let cpus = if self.opts.pin { allowed_cpus() } else { Vec::new() };
        let started = Arc::new((Mutex::new(0usize), std::sync::Condvar::new()));
        let signal = Arc::clone(&started);
        let mut handles = Vec::new();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .start_handler(move |_| {
                prepare_thread();
                let (count, cv) = &*signal;
                *count.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                cv.notify_all();
            })
            .spawn_handler(|worker| {
                let i = worker.index();
                let cpu = cpus.get(i % cpus.len().max(1)).copied();
                let handle = std::thread::Builder::new().name(format!("colibri-{i}")).stack_size(STACK_BYTES).spawn(
                    move || {
                        if let Some(cpu) = cpu {
                            pin_current_thread(cpu);
                        }
                        worker.run()
                    },
                )?;
                handles.push(handle);
                Ok(())
            })
            .build()
            // rayon stops the workers it started; they are not waited for.
            .map_err(|e| Error::io("start the worker threads", std::io::Error::other(e.to_string())))?;
        let (count, cv) = &*started;
        let mut done = count.lock().unwrap_or_else(|e| e.into_inner());
        while *done < n {
            done = cv.wait(done).unwrap_or_else(|e| e.into_inner());
        }
        drop(done);
        Ok((pool, Workers(handles)))
    }
}

/// How long a caller of `run_parts` spins for the workers' parts before it blocks, and how
/// much of that without yielding the CPU.
const SPIN_WAIT: Duration = Duration::from_micros(100);
const SPIN_ALONE: Duration = Duration::from_micros(5);

/// Counts a part of `run_parts` as done when dropped (also when the part panics).
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

/// Spin until `ready()` or `SPIN_WAIT` has passed: on the CPU alone for `SPIN_ALONE`, then
/// yielding it between looks — on a busy machine the worker being waited for is often queued
/// on this very CPU (the scheduler places a woken thread beside its waker) and runs only when
/// this one gives way.
fn spin_until(ready: impl Fn() -> bool) {
    let start = Instant::now();
    while !ready() {
        let waited = start.elapsed();
        if waited >= SPIN_WAIT {
            return;
        }
        if waited < SPIN_ALONE {
            for _ in 0..32 {
                std::hint::spin_loop();
            }
        } else {
            std::thread::yield_now();
        }
    }
}

/// Create now, at thread start (or program start), every thread-local with a destructor that
/// this thread would otherwise create at a first use in the middle of its work. glibc allocates
/// a record per thread-local destructor at that first use and aborts the process ("failed to
/// register TLS destructor: out of memory") when the allocation fails, which under a tight
/// address-space limit happened whenever the first use came while another thread held nearly
/// all of it: every other refusal is an error value. The thread-locals: the kernels' buffers
/// and the per-thread handle of crossbeam's epoch, which rayon's work-stealing deques create at
/// a worker's first steal or look at its own deque — right after the worker starts, while the
/// thread that built the pool goes on with its work. (A thread that tokenizes or renders
/// templates also runs `tokenizer::prepare_thread`.) Each registration was found with a shim of
/// glibc's `__cxa_thread_atexit_impl` that logs its callers (docs/reliability.md). The pools'
/// workers run this at start (before the pool is reported built) and the CLI at the start of
/// `main`.
pub fn prepare_thread() {
    crate::kernels::prepare_thread();
    drop(crossbeam_epoch::pin());
}

/// Stack of each worker thread.
const STACK_BYTES: usize = 2 << 20;

/// Address space a worker needs besides its stack: guard page, TLS, the signal stack std maps
/// and what glibc and rayon map or allocate at thread start.
const THREAD_SLACK_BYTES: usize = 1 << 20;

/// Check that `n` workers' stacks and start-up mappings fit in the address space (RLIMIT_AS):
/// map that much as inaccessible, reserved-nothing memory and unmap it at once.
fn reserve_address_space(n: usize) -> Result<()> {
    let bytes = n.saturating_mul(STACK_BYTES + THREAD_SLACK_BYTES);
    let refused = || Error::OutOfMemory { what: format!("address space for {n} worker threads"), bytes: bytes as u64 };
    #[cfg(unix)]
    {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        // SAFETY: an anonymous PROT_NONE mapping at an address of the kernel's choosing touches
        // no existing memory; it is unmapped below with the same length.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_NONE, flags, -1, 0) };
        if p == libc::MAP_FAILED {
            return Err(refused());
        }
        // SAFETY: `p` is the mapping of `bytes` made just above, used by nothing.
        unsafe { libc::munmap(p, bytes) };
    }
    #[cfg(not(unix))]
    let _ = refused;
    Ok(())
}

impl Drop for Pool {
    fn drop(&mut self) {
        let p = *self.built.get_mut();
        if !p.is_null() {
            // SAFETY: from Box::into_raw in `get`, and `&mut self` excludes every other user.
            let b = unsafe { Box::from_raw(p) };
            if b.pid != std::process::id() {
                // A forked copy: see the type's comment.
                keep_forked(Box::into_raw(b));
            }
        }
    }
}

/// The pool of `opts` shared by every holder of the same options (the C ABI's MoE layers: the
/// layers of one model run one after another and need one set of workers, not one each). It
/// lives while a holder does.
pub fn shared(opts: ThreadOptions) -> Result<Arc<Pool>> {
    static SHARED: Mutex<Vec<(ThreadOptions, Weak<Pool>)>> = Mutex::new(Vec::new());
    let mut pools = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    pools.retain(|(_, w)| w.strong_count() > 0);
    if let Some(p) = pools.iter().find(|(o, _)| *o == opts).and_then(|(_, w)| w.upgrade()) {
        return Ok(p);
    }
    let p = Arc::new(Pool::new(opts)?);
    pools.push((opts, Arc::downgrade(&p)));
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_limits() {
        assert!(Pool::new(ThreadOptions { n_threads: MAX_THREADS + 1, pin: false }).is_err());
        let p = Pool::new(ThreadOptions { n_threads: 3, pin: false }).unwrap();
        assert_eq!(p.install(current).unwrap(), 3);
        assert_eq!(current(), 1, "outside a pool the caller runs alone");
        let cores = physical_cores();
        assert!((1..=allowed_cpus().len()).contains(&cores));
        assert_eq!(Pool::new(ThreadOptions::default()).unwrap().threads(), cores);
    }

    #[test]
    fn run_parts_runs_each_part_once_the_first_on_the_caller() {
        let p = Pool::new(ThreadOptions { n_threads: 2, pin: false }).unwrap();
        let mut seen = [None; 5];
        p.run_parts(seen.iter_mut().enumerate(), |(i, s)| *s = Some((i, std::thread::current().id()))).unwrap();
        assert_eq!(seen[0].map(|(_, t)| t), Some(std::thread::current().id()));
        assert!(seen.iter().enumerate().all(|(i, s)| s.is_some_and(|(j, _)| j == i)));
        p.run_parts(std::iter::empty::<usize>(), |_| unreachable!()).unwrap();
        let part_2_panics = || p.run_parts(0..3, |i| assert_ne!(i, 2, "part 2 panics"));
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(part_2_panics));
        assert!(panicked.is_err(), "a worker's panic reaches the caller");
    }

    #[test]
    fn shared_pools_are_shared_per_options_while_held() {
        let two = ThreadOptions { n_threads: 2, pin: false };
        let (a, b) = (shared(two).unwrap(), shared(two).unwrap());
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &shared(ThreadOptions { n_threads: 3, pin: false }).unwrap()));
        assert_eq!(a.install(current).unwrap(), 2);
    }
}
