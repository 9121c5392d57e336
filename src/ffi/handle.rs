//! Converting C arguments safely: NULL checks, C strings, (pointer, length) slices, params
//! structs with a struct_size prefix, boxed handles.

use super::panic::Failure;
use super::status::*;
use std::ffi::{c_char, CStr};

/// `&T` from a pointer, or a NULL_ARGUMENT failure naming the argument.
pub(crate) fn borrow<'a, T>(p: *const T, arg: &str) -> Result<&'a T, Failure> {
    // SAFETY: non-NULL pointers handed in by C point to live objects of this type (the ABI
    // contract); NULL is rejected.
    unsafe { p.as_ref() }.ok_or_else(|| Failure::null(arg))
}

/// A UTF-8 C string.
pub(crate) fn c_str<'a>(p: *const c_char, arg: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::null(arg));
    }
    // SAFETY: non-NULL and NUL-terminated by contract.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, format!("argument '{arg}' is not valid UTF-8")))
}

/// A slice from (pointer, length); NULL is allowed only when the length is 0.
pub(crate) fn slice<'a, T>(p: *const T, len: usize, arg: &str) -> Result<&'a [T], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::null(arg));
    }
    if len > isize::MAX as usize / std::mem::size_of::<T>().max(1) {
        return Err(Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, format!("length of '{arg}' is absurd")));
    }
    // SAFETY: the caller guarantees `len` readable elements at p.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// A mutable slice from (pointer, length); NULL allowed only when the length is 0.
pub(crate) fn slice_mut<'a, T>(p: *mut T, len: usize, arg: &str) -> Result<&'a mut [T], Failure> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Failure::null(arg));
    }
    if len > isize::MAX as usize / std::mem::size_of::<T>().max(1) {
        return Err(Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, format!("length of '{arg}' is absurd")));
    }
    // SAFETY: the caller guarantees `len` writable elements at p.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// Token ids from a C (pointer, count) array: each must be non-negative.
pub(crate) fn token_ids(p: *const i32, n: usize, arg: &str) -> Result<Vec<u32>, Failure> {
    slice(p, n, arg)?
        .iter()
        .map(|&id| {
            u32::try_from(id).map_err(|_| {
                Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, format!("token id {id} in '{arg}' is negative"))
            })
        })
        .collect()
}

/// Read a params struct whose first field is `struct_size`: an older published (shorter) size is
/// completed with defaults, any other size rejected. NULL gives the defaults.
pub(crate) fn params<T: Versioned>(p: *const T, defaults: T, arg: &str) -> Result<T, Failure> {
    let Some(size) = versioned_size(p, arg)? else { return Ok(defaults) };
    let mut out = defaults;
    // SAFETY: copy the caller's `size` bytes over the defaults; both are at least `size` long.
    unsafe { std::ptr::copy_nonoverlapping(p as *const u8, &mut out as *mut T as *mut u8, size) };
    Ok(out)
}

/// Write `value` to an out-pointer (checked non-NULL before any work by the caller).
pub(crate) fn put<T>(out: *mut T, value: T) {
    // SAFETY: out was checked non-NULL by the entry point and points to writable storage.
    unsafe { out.write(value) };
}

/// Copy `text` into a caller buffer of `cap` bytes with a NUL; report the length (without NUL)
/// through `len_out`; BUFFER_TOO_SMALL when it does not fit (len_out still says what is needed).
pub(crate) fn write_text(text: &str, buf: *mut c_char, cap: usize, len_out: *mut usize) -> Result<(), Failure> {
    if buf.is_null() && cap > 0 {
        return Err(Failure::null("buf"));
    }
    if !len_out.is_null() {
        put(len_out, text.len());
    }
    if text.len() + 1 > cap {
        return Err(Failure::new(
            COLIBRI_STATUS_BUFFER_TOO_SMALL,
            format!("the text needs {} bytes including the NUL; the buffer has {cap}", text.len() + 1),
        ));
    }
    let out = slice_mut(buf, cap, "buf")?;
    for (o, &b) in out.iter_mut().zip(text.as_bytes()) {
        *o = b as c_char;
    }
    out[text.len()] = 0;
    Ok(())
}

/// A C struct versioned by its leading `u32 struct_size`. Only the sizes it has been published
/// with are accepted — every one the end of a whole field — so no size can end inside a field
/// (half a pointer copied over a default would be dereferenced).
pub(crate) trait Versioned: Copy {
    /// Every size this struct has had in a released ABI, the current one last.
    const SIZES: &'static [usize];
}

/// The struct_size a caller set in the versioned struct at `p`: None for NULL, BAD_STRUCT_SIZE
/// when it is not one of T's published sizes.
pub(crate) fn versioned_size<T: Versioned>(p: *const T, arg: &str) -> Result<Option<usize>, Failure> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: every versioned struct starts with a u32 struct_size; p is non-NULL and readable.
    let size = unsafe { *(p as *const u32) } as usize;
    if !T::SIZES.contains(&size) {
        return Err(Failure::new(
            COLIBRI_STATUS_BAD_STRUCT_SIZE,
            format!("{arg}.struct_size is {size}; this library knows sizes {:?} (use the *_init function)", T::SIZES),
        ));
    }
    Ok(Some(size))
}

/// Fill the caller's struct at `p`, `size` bytes long (the `sizeof` of its header's version), with
/// T's defaults and struct_size = `size`: what every `*_init_sized` entry point does. A size T
/// was never published with (a newer header than this library, or no struct at all) is refused
/// and nothing is written — so a program built against an older header never has bytes written
/// past its struct, whatever this library's struct has grown to.
pub(crate) fn init_sized<T: Versioned + Default>(p: *mut T, size: usize, arg: &str) -> Result<(), Failure> {
    if p.is_null() {
        return Err(Failure::null(arg));
    }
    if !T::SIZES.contains(&size) {
        return Err(Failure::new(
            COLIBRI_STATUS_BAD_STRUCT_SIZE,
            format!(
                "{arg} is {size} bytes; this library knows sizes {:?} (a newer header than the library?)",
                T::SIZES
            ),
        ));
    }
    let mut value = T::default();
    // SAFETY: every versioned struct starts with its u32 struct_size; `size` fits in u32 (it is
    // one of T's sizes).
    unsafe { (&mut value as *mut T as *mut u32).write(size as u32) };
    put_versioned(p, value, size);
    Ok(())
}

/// Write the first `size` bytes of `value` to `out` (a versioned struct the caller sized with
/// `versioned_size`): an older caller's shorter struct gets only the fields it has.
pub(crate) fn put_versioned<T>(out: *mut T, value: T, size: usize) {
    debug_assert!(size <= std::mem::size_of::<T>());
    // SAFETY: out is writable for `size` bytes (checked by versioned_size), value has at least
    // that many.
    unsafe { std::ptr::copy_nonoverlapping(&value as *const T as *const u8, out as *mut u8, size) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A struct published twice: version 1 ended after `a`, version 2 added a pointer.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Two {
        struct_size: u32,
        a: i32,
        ptr: *const u8,
        n: usize,
    }

    impl Versioned for Two {
        const SIZES: &'static [usize] = &[8, std::mem::size_of::<Two>()];
    }

    #[test]
    fn older_sizes_get_defaults_and_sizes_inside_a_field_are_refused() {
        let d = Two { struct_size: 24, a: 1, ptr: std::ptr::null(), n: 0 };
        let byte = 7u8;
        let mut caller = Two { struct_size: 8, a: 5, ptr: &byte, n: 3 };
        let got = params(&caller, d, "p").ok().expect("version 1 is accepted");
        assert_eq!((got.a, got.ptr, got.n), (5, std::ptr::null(), 0), "fields past version 1 keep their defaults");
        caller.struct_size = 24;
        assert_eq!(params(&caller, d, "p").ok().expect("version 2").ptr, &byte as *const u8);
        for bad in [0, 4, 12, 16, 20, 4096] {
            caller.struct_size = bad;
            let err = params(&caller, d, "p").expect_err("refused");
            assert_eq!(err.status, COLIBRI_STATUS_BAD_STRUCT_SIZE, "size {bad}");
        }
        assert_eq!(params(std::ptr::null(), d, "p").ok(), Some(d));
    }

    impl Default for Two {
        fn default() -> Two {
            Two { struct_size: std::mem::size_of::<Two>() as u32, a: 1, ptr: std::ptr::null(), n: 9 }
        }
    }

    #[test]
    fn a_sized_init_writes_only_the_callers_bytes() {
        // A version-1 caller's struct (8 bytes) followed by bytes it does not own.
        let mut mem = [0xa5u8; 40];
        let p = mem.as_mut_ptr() as *mut Two;
        init_sized(p, 8, "p").ok().expect("version 1 is published");
        assert_eq!(&mem[..8], &[8, 0, 0, 0, 1, 0, 0, 0], "struct_size 8 and a's default");
        assert!(mem[8..].iter().all(|&b| b == 0xa5), "nothing past the caller's 8 bytes");
        init_sized(p, 24, "p").ok().expect("version 2 is published");
        assert_eq!(mem[0], 24);
        assert_eq!(&mem[16..24], &9usize.to_ne_bytes());
        assert!(mem[24..].iter().all(|&b| b == 0xa5));
        for bad in [0, 4, 12, 32, 4096] {
            let before = mem;
            let err = init_sized(p, bad, "p").expect_err("refused");
            assert_eq!(err.status, COLIBRI_STATUS_BAD_STRUCT_SIZE, "size {bad}");
            assert_eq!(mem, before, "a refused size writes nothing");
        }
        let err = init_sized(std::ptr::null_mut::<Two>(), 8, "p").expect_err("NULL");
        assert_eq!(err.status, COLIBRI_STATUS_NULL_ARGUMENT);
    }
}
