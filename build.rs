//! Sets the SONAME of the shared library to libcolibri.so.<ABI major> so that installed copies
//! follow the usual versioned-symlink scheme.

fn main() {
    let abi = 0;
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcolibri.so.{abi}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
