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
        link_soname_in_profile_dir(abi);
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/ffi/mod.rs");
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
