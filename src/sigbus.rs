//! Surviving a model file rewritten in place (`cp new.colibri model.colibri`, a truncate): reading
//! a mapped page past the file's new end raises SIGBUS, which kills the process by default.
//!
//! With the guard installed (`install`, opt-in for library hosts, always on in `colibri serve`),
//! a SIGBUS whose address lies inside a registered model mapping is absorbed: zero pages are
//! mapped over the range from the faulting page to the end of the mapping (so the access, and
//! every later one, completes), and the mapping is marked poisoned. The forward pass checks the
//! mark after every step and fails with `Error::ModelChanged`, so no output computed from those
//! zeros is ever returned. Any other SIGBUS goes to the handler installed before ours (or the
//! default action). The handler runs on the alternate signal stack when the thread has one
//! (SA_ONSTACK, as Go's runtime requires), takes no locks and allocates nothing.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

const SLOTS: usize = 256;
const PAGE: usize = 4096;

/// One registered mapping: [start, start + len), and whether a fault was absorbed in it.
struct Slot {
    start: AtomicUsize,
    len: AtomicUsize,
    poisoned: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot { start: AtomicUsize::new(0), len: AtomicUsize::new(0), poisoned: AtomicBool::new(false) };
static REGISTRY: [Slot; SLOTS] = [FREE; SLOTS];

/// A mapping registered with the guard, unregistered on drop.
pub struct Registration {
    slot: usize,
}

impl Registration {
    /// Register `bytes` (a live mapping). None when every slot is taken (the mapping then has
    /// no guard: a fault in it takes the default action, as without the guard).
    pub fn new(bytes: &[u8]) -> Option<Registration> {
        let start = bytes.as_ptr() as usize;
        for (i, s) in REGISTRY.iter().enumerate() {
            if s.start.compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                s.poisoned.store(false, Ordering::Relaxed);
                s.len.store(bytes.len(), Ordering::Release);
                return Some(Registration { slot: i });
            }
        }
        None
    }

    /// True once a SIGBUS inside this mapping was absorbed (its tail now reads as zeros).
    pub fn poisoned(&self) -> bool {
        REGISTRY[self.slot].poisoned.load(Ordering::Acquire)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let s = &REGISTRY[self.slot];
        s.len.store(0, Ordering::Release);
        s.start.store(0, Ordering::Release);
    }
}

#[cfg(target_os = "linux")]
mod handler {
    use super::{Ordering, PAGE, REGISTRY};
    use std::sync::Mutex;

    /// Serialises `install`.
    static LOCK: Mutex<()> = Mutex::new(());
    /// The action installed before ours (chained to for faults outside model mappings), written
    /// once before our handler is installed, read only by the handler.
    static mut PREVIOUS_RAW: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();
    static INSTALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    /// Map zero pages over [fault page, end of the slot's mapping) and mark it; false when
    /// `addr` is in no registered mapping.
    fn absorb(addr: usize) -> bool {
        for s in REGISTRY.iter() {
            let (start, len) = (s.start.load(Ordering::Acquire), s.len.load(Ordering::Acquire));
            if start == 0 || len == 0 || addr < start || addr >= start + len {
                continue;
            }
            let page = addr & !(PAGE - 1);
            let end = (start + len).next_multiple_of(PAGE);
            // SAFETY: the range lies inside a live read-only mapping owned by a registered
            // model; replacing its pages with anonymous zero pages keeps every address valid, and
            // the mapping's owner unmaps the whole range as before.
            let p = unsafe {
                libc::mmap(
                    page as *mut libc::c_void,
                    end - page,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return false;
            }
            s.poisoned.store(true, Ordering::Release);
            return true;
        }
        false
    }

    extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
        let addr = if info.is_null() { 0 } else { unsafe { (*info).si_addr() as usize } };
        if addr != 0 && absorb(addr) {
            return;
        }
        // SAFETY: PREVIOUS_RAW was written once, before the handler was installed.
        let prev = unsafe { (*std::ptr::addr_of!(PREVIOUS_RAW)).assume_init_ref() };
        let h = prev.sa_sigaction;
        if h == libc::SIG_DFL || h == libc::SIG_IGN {
            // Restore the default action; returning re-executes the access, which faults again
            // and ends the process as it would have without us.
            // SAFETY: plain sigaction / signal calls (async-signal-safe).
            unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
        } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
            // SAFETY: the previous handler was installed as a three-argument handler.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(h) };
            f(sig, info, ctx);
        } else {
            // SAFETY: the previous handler was installed as a one-argument handler.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
            f(sig);
        }
    }

    pub fn install() -> std::io::Result<()> {
        let _lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        if INSTALLED.load(Ordering::Acquire) {
            return Ok(());
        }
        // SAFETY: a zeroed sigaction is valid; the fields are set below.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = on_sigbus as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
        // SAFETY: filling the mask of our own struct.
        unsafe { libc::sigemptyset(&mut act.sa_mask) };
        // SAFETY: reading the current action into a zeroed struct, then installing ours; the
        // previous action is stored before the handler can run (it is installed only after).
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            (*std::ptr::addr_of_mut!(PREVIOUS_RAW)).write(old);
            if libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        INSTALLED.store(true, Ordering::Release);
        Ok(())
    }
}

/// Install the process-wide SIGBUS handler (idempotent; thread-safe). Mappings are guarded once
/// they are registered (`LoadOptions::sigbus_guard`).
#[cfg(target_os = "linux")]
pub fn install() -> crate::Result<()> {
    handler::install().map_err(|e| crate::Error::io("install the SIGBUS handler", e))
}

#[cfg(not(target_os = "linux"))]
pub fn install() -> crate::Result<()> {
    Err(crate::Error::Unsupported { what: "the SIGBUS guard (Linux only)".into() })
}
