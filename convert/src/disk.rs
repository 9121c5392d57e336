//! The free-space check before a conversion writes its output (statvfs on the output directory):
//! a conversion that cannot fit stops at once with the figures, not after hours of writing.

use crate::error::{fail, Result};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Bytes available to this user on the file system holding `dir`, if statvfs answers.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let c = CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain old data, for which all-zero bytes are a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a live statvfs the call fills.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return None;
    }
    (st.f_bavail as u64).checked_mul(st.f_frsize as u64)
}

/// Refuse when the file system of `output` has less than `need` bytes free.
pub fn ensure_space(output: &Path, need: u64) -> Result<()> {
    let dir = output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match free_bytes(dir) {
        Some(free) if free < need => Err(fail(format!(
            "not enough disk space in {}: the output needs {:.2} GB, {:.2} GB are free",
            dir.display(),
            need as f64 / 1e9,
            free as f64 / 1e9
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statvfs_answers_and_an_impossible_size_is_refused() {
        let tmp = std::env::temp_dir();
        assert!(free_bytes(&tmp).is_some_and(|b| b > 0));
        assert!(ensure_space(&tmp.join("x.colibri"), 1).is_ok());
        let e = ensure_space(&tmp.join("x.colibri"), u64::MAX).unwrap_err().to_string();
        assert!(e.contains("not enough disk space") && e.contains("GB are free"), "{e}");
    }
}
