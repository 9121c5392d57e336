//! The one panic boundary every entry point runs inside, and the per-thread last error message.
//! A panic never crosses into C: it becomes COLIBRI_STATUS_PANIC with its message recorded.

use super::status::*;
use crate::error::Error;
use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Record `msg` as this thread's last error message.
pub(crate) fn set_last_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// A failure of an entry point: a status and its message.
pub(crate) struct Failure {
    pub status: colibri_status,
    pub message: String,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure { status: status_of(&e), message: e.to_string() }
    }
}

impl Failure {
    pub fn new(status: colibri_status, message: impl Into<String>) -> Failure {
        Failure { status, message: message.into() }
    }

    pub fn null(arg: &str) -> Failure {
        Failure::new(COLIBRI_STATUS_NULL_ARGUMENT, format!("argument '{arg}' is NULL"))
    }
}

/// Run `f` inside the panic boundary; failures and panics become statuses with a message.
pub(crate) fn guard(f: impl FnOnce() -> Result<(), Failure>) -> colibri_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => COLIBRI_STATUS_OK,
        Ok(Err(fail)) => {
            set_last_error(&fail.message);
            fail.status
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(&format!("internal error (panic): {what}"));
            COLIBRI_STATUS_PANIC
        }
    }
}

/// Run `f` inside the panic boundary for functions that cannot report a status (free, getters).
pub(crate) fn guard_or<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// The message of the calling thread's last failed call (empty if none). Valid until the next
/// failing call on the same thread; do not free. A Go caller must read it on the same OS thread
/// (runtime.LockOSThread) or use `colibri_last_error_message_copy`.
#[no_mangle]
pub extern "C" fn colibri_last_error_message() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Copy the calling thread's last error message into `buf` (capacity `len` bytes, always
/// NUL-terminated when len > 0, truncated if needed). Returns the bytes needed including the
/// NUL, so a caller can retry with a larger buffer. `buf` may be NULL when `len` is 0.
///
/// # Safety
/// `buf` must point to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn colibri_last_error_message_copy(buf: *mut c_char, len: usize) -> usize {
    guard_or(0, || {
        LAST_ERROR.with(|e| {
            let msg = e.borrow();
            let bytes = msg.as_bytes();
            if !buf.is_null() && len > 0 {
                let n = bytes.len().min(len - 1);
                // SAFETY: the caller guarantees len writable bytes at buf; n < len.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, n);
                    *buf.add(n) = 0;
                }
            }
            bytes.len() + 1
        })
    })
}

/// Always panics inside the library and returns COLIBRI_STATUS_PANIC: lets tests and bindings
/// check that the boundary holds. Thread-safe.
#[no_mangle]
pub extern "C" fn colibri_debug_panic() -> colibri_status {
    guard(|| panic!("colibri_debug_panic was called"))
}
