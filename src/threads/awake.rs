//! Keeping a pool's workers awake through one forward step.
//!
//! A decode step forks and joins a few dozen times (each projection, the experts, the lm_head)
//! with serial work between (norms, routing, one row's attention). rayon puts an idle worker to
//! sleep after a few tens of microseconds, and the next region then waits for its wake-up: a
//! futex wake and, on a virtual machine, an interrupt to a halted vCPU, of varying latency.
//! `while_awake` runs a step with the pool's other workers held in a loop that takes the step's
//! work as soon as it is queued (`rayon::yield_now`) and waits between regions on the CPU —
//! spinning for `SPIN_ALONE`, then yielding the CPU between looks — until the step ends or no
//! work has come for `IDLE_LIMIT`. llama.cpp's workers poll the same way between a graph's
//! nodes. `COLIBRI_SPIN=off` lets them sleep (rayon's own waiting).
//!
//! A hold can run above other frames on a worker's stack (rayon runs a queued broadcast
//! wherever the worker next looks for work), where it delays what is below it until it returns.
//! So a hold returns at once on the step's own thread and on a thread already in a hold, holds
//! only while its step is the only one running on its pool (two steps keep the workers busy
//! without it), and never outlasts `IDLE_LIMIT` without work: a delay is bounded, never a deadlock.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How long a held worker waits without work before it leaves the hold (and sleeps as rayon
/// does), and how much of that on the CPU alone.
pub(super) const IDLE_LIMIT: Duration = Duration::from_millis(1);
const SPIN_ALONE: Duration = Duration::from_micros(20);

thread_local! {
    /// Whether this thread runs a hold's loop (further down its stack).
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// Whether holds are on: unless `COLIBRI_SPIN=off` (read once).
fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("COLIBRI_SPIN").map_or(true, |v| v.trim() != "off"))
}

/// A pool's steps in this process: how many run now, how long a held worker waits for work, and
/// counts of holds entered and of the jobs held workers took. (A forked child builds its pool
/// anew, with fresh counts: a step the parent was running at the fork never ends there.)
#[derive(Debug)]
pub(super) struct Steps {
    running: AtomicUsize,
    idle_limit: Duration,
    holds: AtomicUsize,
    held_jobs: AtomicUsize,
}

impl Steps {
    /// No step yet; a held worker waits `idle_limit` for work.
    pub(super) fn new(idle_limit: Duration) -> Steps {
        Steps { running: AtomicUsize::new(0), idle_limit, holds: AtomicUsize::new(0), held_jobs: AtomicUsize::new(0) }
    }
}

/// One step's hold on the workers.
struct Hold {
    /// Set when the step has ended.
    done: AtomicBool,
    /// The pool index of the thread running the step (not held).
    owner: usize,
    steps: Arc<Steps>,
}

/// Run `f` (a step, on a worker of the pool whose steps are `steps`) with the pool's other
/// workers held awake for it. In a pool of one, or with holds off: just `f()`.
pub(super) fn while_awake<R>(steps: &Arc<Steps>, f: impl FnOnce() -> R) -> R {
    let Some(owner) = rayon::current_thread_index() else { return f() };
    if rayon::current_num_threads() < 2 || !enabled() {
        return f();
    }
    let hold = Arc::new(Hold { done: AtomicBool::new(false), owner, steps: Arc::clone(steps) });
    steps.running.fetch_add(1, Ordering::AcqRel);
    let _end = StepEnd(&hold);
    let held = Arc::clone(&hold);
    rayon::spawn_broadcast(move |ctx| held.keep(ctx.index()));
    f()
}

/// Ends the step's hold when the step returns or unwinds.
struct StepEnd<'a>(&'a Hold);

impl Drop for StepEnd<'_> {
    fn drop(&mut self) {
        self.0.done.store(true, Ordering::Release);
        self.0.steps.running.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Clears `HOLDING` when a hold's loop ends.
struct Holding;

impl Holding {
    /// Mark this thread as holding; None if it already is.
    fn enter() -> Option<Holding> {
        (!HOLDING.replace(true)).then_some(Holding)
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        HOLDING.set(false);
    }
}

impl Hold {
    /// Worker `me`'s part: run queued work until the step ends, another step starts, or no work
    /// has come for the idle limit.
    fn keep(&self, me: usize) {
        if me == self.owner {
            return;
        }
        let Some(_holding) = Holding::enter() else { return };
        self.steps.holds.fetch_add(1, Ordering::AcqRel);
        let mut last = Instant::now();
        while !self.done.load(Ordering::Acquire) && self.steps.running.load(Ordering::Acquire) == 1 {
            if let Some(rayon::Yield::Executed) = rayon::yield_now() {
                self.steps.held_jobs.fetch_add(1, Ordering::Relaxed);
                last = Instant::now();
                continue;
            }
            match last.elapsed() {
                idle if idle >= self.steps.idle_limit => return,
                idle if idle >= SPIN_ALONE => std::thread::yield_now(),
                _ => (0..32).for_each(|_| std::hint::spin_loop()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::threads::{Pool, ThreadOptions};
    use rayon::prelude::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    /// Wait (yielding the CPU) until `ready()`; false after 10 s.
    fn wait_for(ready: impl Fn() -> bool) -> bool {
        let t = Instant::now();
        while !ready() {
            if t.elapsed() > Duration::from_secs(10) {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }

    /// Every part of a step's parallel regions runs once; the other worker, once held, takes a
    /// region's work queued after a serial gap that outlasts rayon's own spinning; a step nested
    /// in a step and two steps at once on one pool finish, and every hold ends with its step.
    #[test]
    fn held_workers_take_the_steps_work_and_steps_finish() {
        let mut pool = Pool::new(ThreadOptions { n_threads: 2, pin: false }).unwrap();
        // A hold that waits for work as long as the test may take (the default gives up after
        // 1 ms without work, which a loaded test machine can exceed between any two lines).
        pool.hold_idle = Duration::from_secs(60);
        let sum = |n: u64| pool.step(|| (0..n).into_par_iter().map(|i| i * i).sum::<u64>()).unwrap();
        for n in [0, 1, 1000, 100_000] {
            assert_eq!(sum(n), (0..n).map(|i| i * i).sum::<u64>());
        }
        if super::enabled() {
            let steps = &pool.get().unwrap().steps;
            let before = steps.held_jobs.load(Ordering::Acquire);
            let holds = steps.holds.load(Ordering::Acquire);
            pool.step(|| {
                assert!(wait_for(|| steps.holds.load(Ordering::Acquire) > holds), "no worker was held");
                std::thread::sleep(Duration::from_millis(2));
                // The second half can run only on the other worker: the first waits for it.
                let second = AtomicBool::new(false);
                rayon::join(
                    || assert!(wait_for(|| second.load(Ordering::Acquire)), "the second half never ran"),
                    || second.store(true, Ordering::Release),
                )
            })
            .unwrap();
            assert!(steps.held_jobs.load(Ordering::Acquire) > before, "the held worker did not take the work");
        }
        assert_eq!(pool.step(|| pool.step(|| rayon::join(|| 1, || 2))).unwrap().unwrap(), (1, 2));
        std::thread::scope(|s| {
            let a = s.spawn(|| sum(200_000));
            let b = s.spawn(|| sum(300_000));
            assert_eq!(a.join().unwrap(), (0..200_000u64).map(|i| i * i).sum::<u64>());
            assert_eq!(b.join().unwrap(), (0..300_000u64).map(|i| i * i).sum::<u64>());
        });
        assert_eq!(pool.get().unwrap().steps.running.load(Ordering::Acquire), 0, "every step ended");
    }
}
