//! Keeping a pool's workers awake through one forward step.
//!
//! A decode step forks and joins a few dozen times (each projection, the experts, the lm_head)
//! with serial work between (norms, routing, one row's attention). rayon puts an idle worker to
//! sleep after a few tens of microseconds, and the next region then waits for its wake-up: a
//! futex wake and, on a virtual machine, an interrupt to a halted vCPU, of varying latency.
//! `while_awake` runs a step with the pool's other workers held in a loop that takes the step's
//! work as soon as it is queued (`rayon::yield_now`) and waits between regions on the CPU —
//! spinning for `SPIN_ALONE`, then yielding the CPU between looks — until the step ends or no
//! work has come for the idle limit (`IDLE_LIMIT`, 1 ms). llama.cpp's workers poll the same way
//! between a graph's nodes. `COLIBRI_SPIN=off` lets them sleep (rayon's own waiting), and a
//! pool with more workers than CPUs never holds (a spinning worker would take a CPU from one
//! with work).
//!
//! A hold can run above other frames on a worker's stack (rayon runs a queued broadcast
//! wherever the worker next looks for work, also while it waits inside a job), where it delays
//! what is below it until it returns. So a hold returns at once on the step's own thread and on
//! a thread already in a hold, and holds only while its step is the only work on the pool
//! (`Steps::active` counts every `Pool::install`, `step` and `run_parts` under way): the
//! frames below a hold are then its own step's, which waits for nothing but work the hold
//! takes, or for the hold itself — a worker preempted between looking for its broadcast and
//! stealing a job of the step can hold above that job, and the step then waits until the hold
//! has seen no work for the idle limit. A delay is bounded by the idle limit, never a deadlock.

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

/// A pool's work in this process: how many calls run on it now, whether its steps hold workers
/// and how long a held worker waits for work, and counts of holds entered and of the jobs held
/// workers took. (A forked child builds its pool anew, with fresh counts: a call the parent was
/// running at the fork never ends there.)
#[derive(Debug)]
pub(super) struct Steps {
    active: AtomicUsize,
    hold: bool,
    idle_limit: Duration,
    holds: AtomicUsize,
    held_jobs: AtomicUsize,
}

impl Steps {
    /// Nothing under way; steps hold workers if `hold` (and holds are on), each waiting
    /// `idle_limit` for work.
    pub(super) fn new(idle_limit: Duration, hold: bool) -> Steps {
        let zero = || AtomicUsize::new(0);
        Steps { active: zero(), hold: hold && enabled(), idle_limit, holds: zero(), held_jobs: zero() }
    }

    /// Count a call on the pool as under way until the guard drops.
    pub(super) fn enter(&self) -> Active<'_> {
        self.active.fetch_add(1, Ordering::AcqRel);
        Active(self)
    }
}

/// A call under way on a pool (`Steps::enter`).
pub(super) struct Active<'a>(&'a Steps);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
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

/// Run `f` (a step, on a worker of the pool whose work `steps` counts, the step itself
/// included) with the pool's other workers held awake for it. In a pool of one, or where the
/// pool does not hold: just `f()`.
pub(super) fn while_awake<R>(steps: &Arc<Steps>, f: impl FnOnce() -> R) -> R {
    let Some(owner) = rayon::current_thread_index() else { return f() };
    if rayon::current_num_threads() < 2 || !steps.hold {
        return f();
    }
    let hold = Arc::new(Hold { done: AtomicBool::new(false), owner, steps: Arc::clone(steps) });
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
    /// Whether the step is under way and the only work on its pool.
    fn wanted(&self) -> bool {
        !self.done.load(Ordering::Acquire) && self.steps.active.load(Ordering::Acquire) == 1
    }

    /// Worker `me`'s part: run queued work until the step ends, other work comes to the pool,
    /// or no work has come for the idle limit.
    fn keep(&self, me: usize) {
        if me == self.owner || !self.wanted() {
            return;
        }
        let Some(_holding) = Holding::enter() else { return };
        self.steps.holds.fetch_add(1, Ordering::AcqRel);
        let mut last = Instant::now();
        while self.wanted() {
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
        // A hold that waits for work longer than a loaded test machine may pause between two
        // lines (the default gives up after 1 ms without work).
        pool.hold_idle = Duration::from_secs(3);
        let sum = |n: u64| pool.step(|| (0..n).into_par_iter().map(|i| i * i).sum::<u64>()).unwrap();
        for n in [0, 1, 1000, 100_000] {
            assert_eq!(sum(n), (0..n).map(|i| i * i).sum::<u64>());
        }
        let steps = &pool.get().unwrap().steps;
        if steps.hold {
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
            // Counted once the job has run (and released the join): wait for the count.
            assert!(
                wait_for(|| steps.held_jobs.load(Ordering::Acquire) > before),
                "the held worker did not take the work"
            );
        }
        assert_eq!(pool.step(|| pool.step(|| rayon::join(|| 1, || 2))).unwrap().unwrap(), (1, 2));
        std::thread::scope(|s| {
            let a = s.spawn(|| sum(200_000));
            let b = s.spawn(|| sum(300_000));
            assert_eq!(a.join().unwrap(), (0..200_000u64).map(|i| i * i).sum::<u64>());
            assert_eq!(b.join().unwrap(), (0..300_000u64).map(|i| i * i).sum::<u64>());
        });
        assert_eq!(steps.active.load(Ordering::Acquire), 0, "every call ended");
    }
}
