//! The CLI's global allocator: the system allocator, except that an allocation Rust cannot
//! report as an error (anything outside `colibri::fallible::scope`) ends the process with one
//! `error:` line and exit status 1 instead of an abort (status 134) — the contract of every
//! command under `ulimit -v` or a cgroup limit. Fallible allocations are returned as refused, for
//! the library to turn into `Error::OutOfMemory`.

use std::alloc::{GlobalAlloc, Layout, System};

pub struct ExitOnOom;

/// Write "error: out of memory: could not allocate N bytes" to stderr without allocating, and
/// exit 1.
fn exit_out_of_memory(size: usize) -> ! {
    let mut buf = [0u8; 96];
    let head = b"error: out of memory: could not allocate ";
    buf[..head.len()].copy_from_slice(head);
    let mut at = head.len();
    let mut digits = [0u8; 20];
    let mut n = size;
    let mut k = 0;
    loop {
        digits[k] = b'0' + (n % 10) as u8;
        k += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for d in digits[..k].iter().rev() {
        buf[at] = *d;
        at += 1;
    }
    let tail = b" bytes\n";
    buf[at..at + tail.len()].copy_from_slice(tail);
    at += tail.len();
    // SAFETY: writing a stack buffer to fd 2 and ending the process; no Rust state is touched.
    unsafe {
        libc::write(2, buf.as_ptr().cast(), at);
        libc::_exit(1)
    }
}

fn checked(p: *mut u8, size: usize) -> *mut u8 {
    if p.is_null() && !colibri::fallible::active() {
        exit_out_of_memory(size);
    }
    p
}

// SAFETY: every call is forwarded unchanged to the system allocator; only a null result is
// inspected.
unsafe impl GlobalAlloc for ExitOnOom {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is System's.
        checked(unsafe { System.alloc(layout) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        checked(unsafe { System.alloc_zeroed(layout) }, layout.size())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        checked(unsafe { System.realloc(ptr, layout, new_size) }, new_size)
    }
}

/// Under an address-space limit (`ulimit -v`), one malloc arena for the whole process. glibc
/// gives a thread that allocates while another holds the main arena an arena of its own,
/// reserving 64 MiB of address space (HEAP_MAX_SIZE) at that moment: which thread gets one, and
/// when, depends on scheduling, and when a pool worker's reservation left the address space a
/// page short, glibc's own allocations — the record of a thread-local destructor at thread
/// start, std's signal stack — failed, and those abort the process (seen under load in
/// cli_contract's sweep). With one arena the address space follows what is allocated. Without
/// a limit (or under a cgroup limit, which counts memory, not reservations) nothing changes.
pub fn one_arena_under_address_limit() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes the struct it is given; mallopt sets a malloc parameter and is
        // called at the start of main, before any other thread exists.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_AS, &mut lim) == 0 && lim.rlim_cur != libc::RLIM_INFINITY {
                libc::mallopt(libc::M_ARENA_MAX, 1);
            }
        }
    }
}
