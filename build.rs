//! Sets the SONAME of the shared library to libcolibri.so.<ABI major>, the ABI version read
//! from `COLIBRI_ABI_VERSION` in src/ffi/mod.rs (its one definition), so that installed copies
//! follow the usual versioned-symlink scheme.

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
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/ffi/mod.rs");
}
