//! Sets the SONAME of the shared library to libcolibri.so.<ABI major>, the ABI version read
//! from `COLIBRI_ABI_VERSION` in src/ffi/mod.rs (its one definition), so that installed copies
//! follow the usual versioned-symlink scheme; and makes the build tree usable as it is: a
//! program linked against target/<profile>/libcolibri.so records the SONAME, so the profile
//! directory gets the symlink libcolibri.so.<ABI> -> libcolibri.so.

fn main() {
    let src = std::fs::read_to_string("src/ffi/mod.rs").expect("read src/ffi/mod.rs");
    let abi: u32 = src
        .lines()
        .find_map(|l| l.trim().strip_prefix("pub const COLIBRI_ABI_VERSION: u32 = "))
        .and_then(|v| v.trim_end_matches(';').trim().parse().ok())
        .expect("src/ffi/mod.rs defines `pub const COLIBRI_ABI_VERSION: u32 = N;`");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcolibri.so.{abi}");
        hide_dependency_exports();
        link_soname_in_profile_dir(abi);
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/ffi/mod.rs");
}

/// The grammar engine (llguidance) has a C API of its own (`llg_*`, `#[no_mangle]`): kept out
/// of libcolibri.so's exports by a second version script, so that the library exports only
/// `colibri_*`. Only when the `grammar` feature links it in (a version script naming a symbol
/// that does not exist fails the link).
fn hide_dependency_exports() {
    if std::env::var_os("CARGO_FEATURE_GRAMMAR").is_none() {
        return;
    }
    let Some(out) = std::env::var_os("OUT_DIR") else { return };
    let script = std::path::Path::new(&out).join("hide-llg.map");
    let names: String = LLG_EXPORTS.iter().map(|n| format!("{n};")).collect();
    if std::fs::write(&script, format!("{{ local: {names} }};\n")).is_ok() {
        println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", script.display());
    }
}

/// target/<profile>/libcolibri.so.<abi> -> libcolibri.so (OUT_DIR is
/// target/<profile>/build/<crate>-<hash>/out). Best effort: a failure only means the build tree
/// needs LD_LIBRARY_PATH tricks, as before.
fn link_soname_in_profile_dir(abi: u32) {
    let Some(out) = std::env::var_os("OUT_DIR") else { return };
    let Some(profile) = std::path::Path::new(&out).ancestors().nth(3) else { return };
    let link = profile.join(format!("libcolibri.so.{abi}"));
    if std::fs::read_link(&link).is_ok_and(|t| t == std::path::Path::new("libcolibri.so")) {
        return;
    }
    let _ = std::fs::remove_file(&link);
    #[cfg(unix)]
    let _ = std::os::unix::fs::symlink("libcolibri.so", &link);
}

/// llguidance 1.9's `#[no_mangle]` functions (c_header.rs fails if a newer one adds another).
const LLG_EXPORTS: &[&str] = &[
    "llg_cancel",
    "llg_clone_cancellation_handle",
    "llg_clone_constraint",
    "llg_clone_matcher",
    "llg_clone_stop_controller",
    "llg_clone_tokenizer",
    "llg_commit_token",
    "llg_compute_mask",
    "llg_constraint_init_set_defaults",
    "llg_decode_tokens",
    "llg_flush_logs",
    "llg_free_cancellation_handle",
    "llg_free_constraint",
    "llg_free_matcher",
    "llg_free_stop_controller",
    "llg_free_tokenizer",
    "llg_get_error",
    "llg_get_temperature",
    "llg_get_version",
    "llg_is_stopped",
    "llg_matcher_compute_ff_tokens",
    "llg_matcher_compute_mask",
    "llg_matcher_compute_mask_into",
    "llg_matcher_consume_token",
    "llg_matcher_consume_tokens",
    "llg_matcher_get_cancellation_handle",
    "llg_matcher_get_error",
    "llg_matcher_get_mask",
    "llg_matcher_get_mask_byte_size",
    "llg_matcher_is_accepting",
    "llg_matcher_is_cancelled",
    "llg_matcher_is_error",
    "llg_matcher_is_stopped",
    "llg_matcher_reset",
    "llg_matcher_rollback",
    "llg_matcher_validate_tokens",
    "llg_new_constraint",
    "llg_new_constraint_any",
    "llg_new_constraint_json",
    "llg_new_constraint_lark",
    "llg_new_constraint_regex",
    "llg_new_matcher",
    "llg_new_stop_controller",
    "llg_new_tokenizer",
    "llg_new_tokenizer_v2",
    "llg_par_compute_mask",
    "llg_stop_commit_token",
    "llg_stringify_tokens",
    "llg_tokenize_bytes",
    "llg_tokenize_bytes_marker",
    "llg_validate_grammar",
];
