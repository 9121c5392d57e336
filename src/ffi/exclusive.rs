//! One call at a time on a handle C may reach from anywhere (a session): an in-use flag that
//! every entry point takes before it touches the state, so that a second call meanwhile — from
//! another thread, or from a callback of the running call — gets COLIBRI_STATUS_BUSY instead of
//! a second reference to state the first call is changing.

use super::panic::Failure;
use super::status::COLIBRI_STATUS_BUSY;
use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// `T` behind an in-use flag.
pub(crate) struct Exclusive<T> {
    busy: AtomicBool,
    value: UnsafeCell<T>,
}

impl<T> Exclusive<T> {
    pub(crate) fn new(value: T) -> Exclusive<T> {
        Exclusive { busy: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    /// The state for one call, or None while another call holds it.
    pub(crate) fn try_take(&self) -> Option<Held<'_, T>> {
        self.busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).ok()?;
        Some(Held { owner: self })
    }
}

/// The state of a handle during one call; dropping it (also when unwinding) frees the handle
/// for the next call.
pub(crate) struct Held<'a, T> {
    owner: &'a Exclusive<T>,
}

impl<T> Deref for Held<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the flag is set by this guard alone until it drops: no other reference to the
        // value exists meanwhile.
        unsafe { &*self.owner.value.get() }
    }
}

impl<T> DerefMut for Held<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`.
        unsafe { &mut *self.owner.value.get() }
    }
}

impl<T> Drop for Held<'_, T> {
    fn drop(&mut self) {
        self.owner.busy.store(false, Ordering::Release);
    }
}

/// Take `x` (argument `arg`) for one call: BUSY while another call uses it.
pub(crate) fn take<'a, T>(x: &'a Exclusive<T>, arg: &str) -> Result<Held<'a, T>, Failure> {
    x.try_take().ok_or_else(|| {
        Failure::new(
            COLIBRI_STATUS_BUSY,
            format!(
                "'{arg}' is busy: another call is using it (another thread, or a callback of its own \
                 running call); a session serves one call at a time"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time() {
        let x = Exclusive::new(5);
        let mut a = take(&x, "x").ok().expect("free");
        *a += 1;
        assert_eq!(take(&x, "x").err().map(|f| f.status), Some(COLIBRI_STATUS_BUSY));
        drop(a);
        assert_eq!(*take(&x, "x").ok().expect("free again"), 6);
    }
}
