//! A model file truncated or rewritten in place while mapped: with the SIGBUS guard the process
//! survives, the forward pass fails with `Error::ModelChanged` (never output from the changed
//! bytes), a fault outside model mappings still reaches the handler installed before ours, and
//! without the guard the same read kills the process (so the tests below do reach the fault).

use colibri::forward::{forward, ForwardOptions, Input};
use colibri::session::{Session, SessionOptions};
use colibri::{Error, LoadOptions, Model};
use std::path::{Path, PathBuf};
use std::process::Command;

fn default_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/default.colibri")
}

fn copy_model(dir: &Path) -> PathBuf {
    let p = dir.join("m.colibri");
    std::fs::copy(default_model(), &p).unwrap();
    p
}

fn guarded() -> LoadOptions {
    LoadOptions { sigbus_guard: true, ..LoadOptions::default() }
}

fn step(model: &Model) -> colibri::Result<()> {
    let mut s = Session::new(model.config(), &SessionOptions { n_ctx: 8, ..SessionOptions::default() })?;
    forward(model, &mut s, Input::Tokens(&[1, 2, 3]), &ForwardOptions::default())
}

/// Read the last byte of the mapping (volatile: the read happens).
fn touch_end(model: &Model) -> u8 {
    let b = model.bytes();
    // SAFETY: the pointer is inside the live mapping.
    unsafe { std::ptr::read_volatile(b.as_ptr().add(b.len() - 1)) }
}

/// Run this test binary again for one test with `COLIBRI_SIGBUS_CHILD` set; its exit status.
fn child(test: &str) -> std::process::ExitStatus {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env("COLIBRI_SIGBUS_CHILD", "1")
        .status()
        .unwrap()
}

fn in_child() -> bool {
    std::env::var_os("COLIBRI_SIGBUS_CHILD").is_some()
}

#[test]
fn a_truncated_file_is_a_model_changed_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy_model(dir.path());
    let model = Model::open(&path, &guarded()).unwrap();
    step(&model).unwrap();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(4096).unwrap();
    // The read past the new end faults; the guard maps zeros there and marks the model.
    assert_eq!(touch_end(&model), 0);
    match model.check_unchanged() {
        Err(Error::ModelChanged { reason }) => assert!(reason.contains("absorbed"), "{reason}"),
        other => panic!("expected ModelChanged, got {other:?}"),
    }
    let e = step(&model).unwrap_err();
    assert_eq!(e.code(), "model_changed", "{e}");
    // Another model, opened fresh, works in the same process.
    let fresh = Model::open(&default_model(), &guarded()).unwrap();
    step(&fresh).unwrap();
}

#[test]
fn a_file_rewritten_in_place_is_noticed_without_any_fault() {
    // `cp other.colibri m.colibri` writes into the same inode: the mapping then shows other
    // bytes, possibly without any SIGBUS. The size / modification time check catches it.
    let dir = tempfile::tempdir().unwrap();
    let path = copy_model(dir.path());
    let model = Model::open(&path, &LoadOptions::default()).unwrap();
    step(&model).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let bytes = std::fs::read(default_model()).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(step(&model).unwrap_err().code(), "model_changed");
}

#[test]
fn without_the_guard_the_same_read_kills_the_process() {
    if in_child() {
        let dir = tempfile::tempdir().unwrap();
        let path = copy_model(dir.path());
        let model = Model::open(&path, &LoadOptions::default()).unwrap();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(4096).unwrap();
        touch_end(&model);
        std::process::exit(0);
    }
    use std::os::unix::process::ExitStatusExt;
    let st = child("without_the_guard_the_same_read_kills_the_process");
    assert_eq!(st.signal(), Some(libc::SIGBUS), "{st:?}");
}

#[test]
fn faults_outside_model_mappings_reach_the_previous_handler() {
    if in_child() {
        extern "C" fn previous(_: libc::c_int) {
            // SAFETY: ending the process from a signal handler.
            unsafe { libc::_exit(42) };
        }
        // SAFETY: installing a plain handler before the guard.
        unsafe { libc::signal(libc::SIGBUS, previous as *const () as libc::sighandler_t) };
        let dir = tempfile::tempdir().unwrap();
        let model = Model::open(&copy_model(dir.path()), &guarded()).unwrap();
        step(&model).unwrap();
        // A mapping of another file, truncated: not a model mapping.
        let other = dir.path().join("other.bin");
        std::fs::write(&other, vec![1u8; 1 << 16]).unwrap();
        let f = std::fs::File::open(&other).unwrap();
        // SAFETY: a read-only mapping of a file this test owns.
        let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
        std::fs::OpenOptions::new().write(true).open(&other).unwrap().set_len(0).unwrap();
        // SAFETY: the pointer is inside the mapping (the read faults: the file is empty).
        unsafe { std::ptr::read_volatile(map.as_ptr().add(8192)) };
        std::process::exit(0);
    }
    let st = child("faults_outside_model_mappings_reach_the_previous_handler");
    assert_eq!(st.code(), Some(42), "{st:?}");
}
