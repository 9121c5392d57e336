//! Contract of the C side: the committed header is exactly what cbindgen generates, compiles
//! alone as C99 and C++17 with every warning an error, agrees with Cargo.toml and the runtime
//! version, the shared library carries SONAME libcolibri.so.<ABI> and exports only `colibri_*`,
//! and a C program links against both the shared and the static library.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// target/<profile>, where cargo put libcolibri.{so,a} for this test run.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    assert!(
        dir.join("libcolibri.so").is_file() && dir.join("libcolibri.a").is_file(),
        "{} lacks libcolibri.so/.a: `cargo test` does not build the cdylib/staticlib — run `cargo build` \
         (with the same profile) first, as scripts/test-all.sh does",
        dir.display()
    );
    dir
}

fn run(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn committed_header_is_what_cbindgen_generates() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("colibri.h");
    run(Command::new("cbindgen")
        .current_dir(root())
        .args(["--quiet", "--config", "cbindgen.toml", "--crate", "colibri", "--output"])
        .arg(&out)
        .arg("."));
    let fresh = std::fs::read_to_string(&out).unwrap();
    let committed = std::fs::read_to_string(root().join("include/colibri.h")).unwrap();
    assert!(fresh == committed, "include/colibri.h is stale: regenerate it with cbindgen (see cbindgen.toml)");
}

#[test]
fn header_compiles_alone_as_c99_and_cpp17() {
    let tmp = tempfile::tempdir().unwrap();
    let c = tmp.path().join("only_header.c");
    std::fs::write(&c, "#include <colibri.h>\nint main(void) { return 0; }\n").unwrap();
    let cpp = tmp.path().join("only_header.cpp");
    std::fs::write(&cpp, "#include <colibri.h>\nint main() { return 0; }\n").unwrap();
    let inc = root().join("include");
    for (compiler, std, src) in [("cc", "-std=c99", &c), ("c++", "-std=c++17", &cpp)] {
        run(Command::new(compiler)
            .args([std, "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only", "-I"])
            .arg(&inc)
            .arg(src));
    }
}

#[test]
fn header_version_macros_match_cargo() {
    let h = std::fs::read_to_string(root().join("include/colibri.h")).unwrap();
    let mut parts = env!("CARGO_PKG_VERSION").split('.');
    for name in ["MAJOR", "MINOR", "PATCH"] {
        let want = format!("#define COLIBRI_VERSION_{name} {}", parts.next().unwrap());
        assert!(h.contains(&want), "header lacks `{want}`");
    }
    assert!(h.contains(&format!("#define COLIBRI_ABI_VERSION {}", colibri::ffi::COLIBRI_ABI_VERSION)));
}

/// The name a top-level line of the header declares, if it declares one: a macro, a typedef
/// (also of a function pointer), the end of a struct, or a function.
fn declared_name(line: &str) -> Option<&str> {
    let line = line.split("//").next()?.trim();
    if line.ends_with('{') || line == "}" {
        return None;
    }
    if let Some(rest) = line.strip_prefix("#define ") {
        return rest.split_whitespace().next();
    }
    if line.starts_with("typedef") && line.contains("(*") {
        return line.split("(*").nth(1)?.split(')').next();
    }
    if line.starts_with("typedef") || line.starts_with('}') {
        return line.trim_end_matches(';').split_whitespace().last();
    }
    if line.contains('(') && !line.starts_with('#') && !line.starts_with("extern") {
        return line.split('(').next()?.split_whitespace().last().map(|n| n.trim_start_matches('*'));
    }
    None
}

/// Every name the header declares (macros, typedefs, structs, functions, constants) is in the
/// colibri_ / COLIBRI_ namespace: nothing of the crate outside the C ABI leaks into it.
#[test]
fn header_declares_only_prefixed_names() {
    let h = std::fs::read_to_string(root().join("include/colibri.h")).unwrap();
    let top_level = h.lines().filter(|l| !l.starts_with(' ') && !l.starts_with('/') && !l.starts_with('*'));
    let names: Vec<&str> = top_level.filter_map(declared_name).collect();
    let foreign: Vec<&&str> = names
        .iter()
        .filter(|n| !n.starts_with("colibri_") && !n.starts_with("COLIBRI_") && **n != "COLIBRI_H")
        .collect();
    assert!(names.len() > 80, "too few declarations found: {names:?}");
    assert!(foreign.is_empty(), "the header declares names outside the colibri namespace: {foreign:?}");
}

#[test]
fn shared_library_has_soname_and_exports_only_colibri_symbols() {
    let so = lib_dir().join("libcolibri.so");
    let dynamic = run(Command::new("readelf").arg("-d").arg(&so));
    let want = format!("[libcolibri.so.{}]", colibri::ffi::COLIBRI_ABI_VERSION);
    assert!(dynamic.contains(&want), "SONAME {want} missing:\n{dynamic}");
    let syms = run(Command::new("nm").args(["-D", "--defined-only"]).arg(&so));
    let exported: Vec<&str> = syms
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && matches!(f[1], "T" | "D" | "B" | "R")).then(|| f[2])
        })
        .collect();
    assert!(exported.contains(&"colibri_version"), "{exported:?}");
    let foreign: Vec<&&str> = exported.iter().filter(|s| !s.starts_with("colibri_")).collect();
    assert!(foreign.is_empty(), "symbols outside the colibri_ namespace are exported: {foreign:?}");
}

#[test]
fn c_example_links_against_shared_and_static_library() {
    let tmp = tempfile::tempdir().unwrap();
    let src = root().join("c_examples/version.c");
    let inc = root().join("include");
    // Lay the shared library out as an install would: the real file under its SONAME plus the
    // development symlink.
    let libs = tmp.path().join("lib");
    std::fs::create_dir(&libs).unwrap();
    let soname = format!("libcolibri.so.{}", colibri::ffi::COLIBRI_ABI_VERSION);
    std::fs::copy(lib_dir().join("libcolibri.so"), libs.join(&soname)).unwrap();
    std::os::unix::fs::symlink(&soname, libs.join("libcolibri.so")).unwrap();
    let shared = tmp.path().join("version_shared");
    run(Command::new("cc")
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I"])
        .arg(&inc)
        .arg(&src)
        .arg("-L")
        .arg(&libs)
        .arg(format!("-Wl,-rpath,{}", libs.display()))
        .args(["-lcolibri", "-o"])
        .arg(&shared));
    let out = run(&mut Command::new(&shared));
    assert!(out.contains(env!("CARGO_PKG_VERSION")), "{out}");
    let stat = tmp.path().join("version_static");
    run(Command::new("cc")
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I"])
        .arg(&inc)
        .arg(&src)
        .arg(lib_dir().join("libcolibri.a"))
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&stat));
    let out = run(&mut Command::new(&stat));
    assert!(out.contains(env!("CARGO_PKG_VERSION")), "{out}");
}
