//! What a new user meets first: model-open errors that name the path and say what to do, no
//! Rust debug text, quiet exits into a closed pipe, usage errors (exit 2) for a missing prompt
//! or a negative temperature, `colibri tokenize`, `chat`'s own help and banner, and a bench
//! whose efficiency above 100 % says why.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn colibri(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_colibri")).args(args).output().expect("run colibri")
}

fn model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/default.colibri")
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn model_open_errors_name_the_path_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let o = colibri(&["run", "-m", d, "-p", "a"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains(&format!("convert it first: colibri convert {d} -o ")), "{}", err(&o));
    let missing = format!("{d}/none.colibri");
    let o = colibri(&["inspect", &missing]);
    assert!(err(&o).contains(&missing) && err(&o).contains("no such file"), "{}", err(&o));
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hello, not a model").unwrap();
    let o = colibri(&["tokenize", "-m", text.to_str().unwrap(), "a"]);
    assert!(err(&o).contains("notes.txt") && err(&o).contains("colibri convert"), "{}", err(&o));
}

#[test]
fn usage_errors_exit_2_with_a_clear_message() {
    let m = model();
    let o = colibri(&["run", "-m", m.to_str().unwrap(), "-n", "2"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("no prompt: give -p TEXT or -f FILE"), "{}", err(&o));
    let o = colibri(&["run", "-m", m.to_str().unwrap(), "--temp", "-1", "-p", "a"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("the temperature must be a number ≥ 0"), "{}", err(&o));
    let o = colibri(&["run", "-m", m.to_str().unwrap(), "--temp", "0", "-n", "2", "-p", "a"]);
    assert!(o.status.success(), "{}", err(&o));
}

#[test]
fn no_debug_formatting_in_user_text() {
    let m = model();
    let o = colibri(&["inspect", m.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("tokens       bos 0, eos 0, pad 0"), "{text}");
    assert!(text.contains("scoring softmax") && text.contains("sliding windows none"), "{text}");
    let o = colibri(&["run", "-m", m.to_str().unwrap(), "-p", "And", "-n", "2", "--temp", "0", "--ignore-eos"]);
    assert!(err(&o).contains("stop: length (-n)]"), "{}", err(&o));
    for t in [&String::from_utf8_lossy(&o.stdout).into_owned(), &err(&o), &text.to_string()] {
        for debug in ["Some(", "None", "Avx2", "Avx512", "Length", "Softmax"] {
            assert!(!t.contains(debug), "{debug:?} in {t}");
        }
    }
}

#[test]
fn a_closed_pipe_ends_quietly() {
    let m = model();
    let mut child = Command::new(env!("CARGO_BIN_EXE_colibri"))
        .args(["run", "-m", m.to_str().unwrap(), "-p", "And", "-n", "400", "--ignore-eos", "-c", "512"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let code = std::os::unix::process::ExitStatusExt::signal(&o.status);
    assert!(o.status.success() || code == Some(libc::SIGPIPE), "{:?} {}", o.status, err(&o));
    assert!(!err(&o).contains("error"), "{}", err(&o));
}

#[test]
fn tokenize_prints_ids_and_pieces() {
    let m = model();
    let o = colibri(&["tokenize", "-m", m.to_str().unwrap(), "And the LORD"]);
    assert!(o.status.success(), "{}", err(&o));
    let ids: Vec<u32> = String::from_utf8_lossy(&o.stdout).split_whitespace().map(|t| t.parse().unwrap()).collect();
    assert!(!ids.is_empty());
    let o = colibri(&["tokenize", "-m", m.to_str().unwrap(), "And the LORD", "--pieces"]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let lines: Vec<(u32, &str)> =
        out.lines().map(|l| l.split_once('\t').map(|(a, b)| (a.parse().unwrap(), b)).unwrap()).collect();
    assert_eq!(lines.iter().map(|l| l.0).collect::<Vec<_>>(), ids);
    assert_eq!(lines.iter().map(|l| l.1).collect::<String>(), "And the LORD");
    assert_eq!(colibri(&["tokenize", "-m", m.to_str().unwrap()]).status.code(), Some(2), "no text: usage");
}

#[test]
fn chat_has_its_own_help_and_a_banner() {
    let help = String::from_utf8_lossy(&colibri(&["chat", "--help"]).stdout).into_owned();
    for hidden in ["--embedding", "--debug-routing", "--chat ", "--file"] {
        assert!(!help.contains(hidden), "{hidden} in chat --help:\n{help}");
    }
    assert!(help.contains("--system") && help.contains("--temp"));
    let m = model();
    let mut child = Command::new(env!("CARGO_BIN_EXE_colibri"))
        .args(["chat", "-m", m.to_str().unwrap(), "-n", "2", "--temp", "0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"Hello\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", err(&o));
    let first = err(&o).lines().next().unwrap_or("").to_string();
    assert!(first.starts_with("colibri chat: mixtral (4 layers, 8 experts), context 512 tokens."), "{first}");
}

#[test]
fn bench_explains_an_efficiency_above_100_percent() {
    let m = model();
    let o = colibri(&["bench", "-m", m.to_str().unwrap(), "-p", "0", "-n", "8", "-r", "1", "-t", "1"]);
    assert!(o.status.success(), "{}", err(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let probe = out.lines().find(|l| l.starts_with("memory bandwidth:")).unwrap_or_default();
    assert!(
        probe.contains(" MiB, as one stream and as 8 per thread)"),
        "the probe names its (scaled) buffer and streams: {out}"
    );
    let over = out.lines().any(|l| l.contains(" % *"));
    assert_eq!(over, out.contains("* above 100 %: the active weights per token"), "{out}");
    for l in out.lines().filter(|l| l.starts_with('|') && l.contains(" %")) {
        let pct: f64 =
            l.split('|').nth(9).unwrap().trim().trim_end_matches(" *").trim_end_matches(" %").parse().unwrap();
        assert!(pct <= 100.0 || l.contains(" % *"), "{l}");
    }
}
