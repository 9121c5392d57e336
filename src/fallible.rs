//! Allocation that may fail: the library's input-sized allocations (KV cache, step buffers,
//! logits, a model read into memory) run inside `scope`, where a refused allocation is an
//! `Error::OutOfMemory` the caller handles. A program's global allocator may ask `active()` to
//! tell those apart from the ordinary allocations whose failure Rust cannot report (the CLI exits
//! with one `error:` line for those, instead of aborting).

use std::cell::Cell;
use std::collections::TryReserveError;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Run `f` with this thread's allocations marked as fallible (their failure is handled).
pub fn scope<T>(f: impl FnOnce() -> T) -> T {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        }
    }
    DEPTH.with(|d| d.set(d.get().saturating_add(1)));
    let _leave = Leave;
    f()
}

/// True inside `scope` on this thread. Never allocates (safe to call from an allocator).
pub fn active() -> bool {
    DEPTH.try_with(|d| d.get() > 0).unwrap_or(false)
}

/// `v.try_reserve_exact(additional)` inside a fallible scope.
pub fn reserve_exact<T>(v: &mut Vec<T>, additional: usize) -> Result<(), TryReserveError> {
    scope(|| v.try_reserve_exact(additional))
}

/// `v.try_reserve(additional)` inside a fallible scope.
pub fn reserve<T>(v: &mut Vec<T>, additional: usize) -> Result<(), TryReserveError> {
    scope(|| v.try_reserve(additional))
}
