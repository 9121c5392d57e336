//! The huge-page advice on the model mapping: on by default (`LoadOptions::hugepages`,
//! `colibri_model_params.use_hugepages`), off on request. The kernel records the advice as the
//! mapping's `hg` VmFlag in /proc/self/smaps, read here for the mapping of the model file.

use colibri::ffi::*;
use std::ffi::CString;
use std::path::PathBuf;
use std::ptr::null_mut;
use std::sync::Mutex;

/// The tests count this process's mappings of one file: one test at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn model_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/default.colibri")
}

/// The VmFlags of this process's mappings of `file` (one line per mapping).
fn vm_flags(file: &std::path::Path) -> Vec<Vec<String>> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read /proc/self/smaps");
    let name = file.canonicalize().unwrap();
    let mut out = Vec::new();
    let mut inside = false;
    for line in smaps.lines() {
        let head = line.split_whitespace().next().unwrap_or("");
        if head.contains('-') && !head.ends_with(':') {
            // A mapping's first line: "start-end perms offset dev inode path".
            inside = line.split_whitespace().nth(5).map(PathBuf::from).as_ref() == Some(&name);
        } else if inside && head == "VmFlags:" {
            out.push(line.split_whitespace().skip(1).map(str::to_string).collect());
        }
    }
    out
}

/// Open the model through the C ABI with `use_hugepages` = `on` (None: the default) and return
/// the VmFlags of its mapping.
fn flags_when_opened(on: Option<i32>) -> Vec<String> {
    let path = CString::new(model_path().to_str().unwrap()).unwrap();
    unsafe {
        let mut p = colibri_model_params::default();
        colibri_model_params_init(&mut p);
        if let Some(v) = on {
            p.use_hugepages = v;
        }
        let mut m = null_mut();
        assert_eq!(colibri_model_open(path.as_ptr(), &p, &mut m), COLIBRI_STATUS_OK);
        let mut maps = vm_flags(&model_path());
        colibri_model_free(m);
        assert_eq!(maps.len(), 1, "one mapping of the model file while it is open: {maps:?}");
        maps.pop().unwrap()
    }
}

#[test]
fn the_mapping_is_advised_huge_pages_unless_asked_not_to() {
    assert!(
        std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists(),
        "this test needs a kernel with transparent huge pages"
    );
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let default = flags_when_opened(None);
    assert!(default.iter().any(|f| f == "hg"), "default: MADV_HUGEPAGE recorded as `hg`: {default:?}");
    let off = flags_when_opened(Some(0));
    assert!(!off.iter().any(|f| f == "hg"), "use_hugepages = 0: no advice: {off:?}");
    assert!(vm_flags(&model_path()).is_empty(), "the mapping is gone once the model is freed");
}

/// The one-call path (`colibri_init`) takes the same switch in `colibri_params`.
#[test]
fn colibri_init_takes_the_huge_page_switch_too() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let path = CString::new(model_path().to_str().unwrap()).unwrap();
    let flags_with = |on: i32| unsafe {
        let mut p = colibri_params::default();
        colibri_params_init(&mut p);
        p.use_hugepages = on;
        let mut ctx = null_mut();
        assert_eq!(colibri_init(path.as_ptr(), &p, &mut ctx), COLIBRI_STATUS_OK);
        let mut maps = vm_flags(&model_path());
        colibri_free(ctx);
        assert_eq!(maps.len(), 1, "one mapping of the model file while it is open: {maps:?}");
        maps.pop().unwrap()
    };
    assert!(flags_with(1).iter().any(|f| f == "hg"), "use_hugepages = 1: MADV_HUGEPAGE");
    assert!(!flags_with(0).iter().any(|f| f == "hg"), "use_hugepages = 0: no advice");
}
