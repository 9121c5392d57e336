//! Contract of `colibri run` / `colibri logits`: stdout carries only generated text; the same
//! seed gives the same text at 1 and 2 threads; Gumbel routing is reproducible with a seed and
//! differs from top-k; the per-call top-k override changes routing; `logits` writes the
//! teacher-forced logits transformers computes; bad input gets a one-line error, never a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn colibri(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_colibri")).args(args).output().expect("run colibri")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models").join(name)
}

/// Converted fixtures, shared by the tests of this file.
fn model(name: &str) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
    let out = dir.path().join(format!("{name}.colibri"));
    if !out.exists() {
        let tmp = dir.path().join(format!("{name}.{:?}.partial", std::thread::current().id()));
        let o = colibri(&["convert", fixture(name).to_str().unwrap(), "-o", tmp.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::rename(&tmp, &out).unwrap();
    }
    out
}

fn ok(o: &Output) -> (String, String) {
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned());
    assert!(o.status.success(), "failed: {err}");
    (out, err)
}

fn fails(o: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "expected exit 1: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one error line expected: {err}");
    assert!(lines[0].starts_with("error: ") && lines[0].contains(needle), "{:?} should mention {needle:?}", lines[0]);
}

fn routing_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.starts_with("token[")).collect()
}

#[test]
fn same_seed_same_text_at_one_and_two_threads() {
    for name in ["qwen2_moe_shared", "mixtral_gqa"] {
        let m = model(name);
        let m = m.to_str().unwrap();
        let run = |t: &str, seed: &str| {
            ok(&colibri(&["run", "-m", m, "-p", "The licence", "-n", "24", "--temp", "1.0", "--seed", seed, "-t", t]))
        };
        let (a, err) = run("1", "7");
        let (b, _) = run("2", "7");
        assert!(!a.trim().is_empty(), "{name}: no text generated");
        assert_eq!(a, b, "{name}: thread count changed the text");
        assert!(err.contains("tokens/s") && !a.contains("tokens/s"), "statistics belong on stderr");
        let (c, _) = run("2", "8");
        assert_ne!(a, c, "{name}: another seed should give another sample");
    }
}

#[test]
fn gumbel_routing_is_reproducible_and_differs_from_topk() {
    let m = model("qwen2_moe_shared");
    let m = m.to_str().unwrap();
    let run = |mode: &str, seed: &str| {
        let (_, err) = ok(&colibri(&[
            "run",
            "-m",
            m,
            "-p",
            "Hello world",
            "-n",
            "4",
            "--temp",
            "0",
            "--debug-routing",
            "--routing",
            mode,
            "--seed",
            seed,
        ]));
        routing_lines(&err).iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let topk = run("topk", "1");
    let g1 = run("gumbel", "1");
    let g1b = run("gumbel", "1");
    let g2 = run("gumbel", "2");
    assert!(!topk.is_empty() && topk.len() == g1.len());
    assert!(topk[0].contains("layer 1 -> experts["), "{}", topk[0]);
    assert_eq!(g1, g1b, "Gumbel routing with a fixed seed must be reproducible");
    assert_ne!(g1, topk, "Gumbel routing should differ from deterministic top-k");
    assert_ne!(g1, g2, "another seed should route differently");
}

#[test]
fn moe_top_k_override_changes_routing() {
    let m = model("qwen2_moe_shared");
    let m = m.to_str().unwrap();
    let experts_per_line = |k: Option<&str>| {
        let mut args = vec!["run", "-m", m, "-p", "Hello world", "-n", "2", "--temp", "0", "--debug-routing"];
        if let Some(k) = k {
            args.extend(["--moe-top-k", k]);
        }
        let (_, err) = ok(&colibri(&args));
        routing_lines(&err)
            .iter()
            .map(|l| {
                let inner = &l[l.find("experts[").unwrap() + 8..];
                inner[..inner.find(']').unwrap()].split(',').count()
            })
            .collect::<Vec<_>>()
    };
    assert!(experts_per_line(None).iter().all(|&k| k == 4), "the model's top-k is 4");
    assert!(experts_per_line(Some("1")).iter().all(|&k| k == 1));
    assert!(experts_per_line(Some("8")).iter().all(|&k| k == 8));
    fails(&colibri(&["run", "-m", m, "-p", "Hi", "--moe-top-k", "9"]), "top-k override 9");
    fails(&colibri(&["run", "-m", m, "-p", "Hi", "--moe-top-k", "0"]), "top-k override 0");
}

#[test]
fn logits_command_writes_the_oracle_logits() {
    let dir = fixture("olmoe");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("oracle/meta.json")).unwrap()).unwrap();
    let ids: Vec<String> = meta["input_ids"].as_array().unwrap().iter().map(|v| v.to_string()).collect();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("l.npy");
    let m = model("olmoe");
    ok(&colibri(&["logits", "-m", m.to_str().unwrap(), "--tokens", &ids.join(","), "-o", out.to_str().unwrap()]));
    let got = std::fs::read(&out).unwrap();
    let want = std::fs::read(dir.join("oracle/logits_f32.npy")).unwrap();
    let body = |b: &[u8]| {
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        let header = String::from_utf8_lossy(&b[10..10 + hlen]).to_string();
        let vals: Vec<f32> =
            b[10 + hlen..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        (header, vals)
    };
    let (gh, gv) = body(&got);
    let (_, wv) = body(&want);
    assert!(gh.contains(&format!("'shape': ({}, {})", ids.len(), meta["vocab_size"])), "{gh}");
    let max = wv.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = gv.iter().zip(&wv).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(diff <= 1e-4 * max, "max diff {diff} vs max {max}");
}

#[test]
fn bad_input_gets_a_clear_error() {
    let m = model("qwen2_moe_shared");
    let m = m.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("l.npy");
    let out = out.to_str().unwrap();
    fails(&colibri(&["logits", "-m", m, "--tokens", "1,2,400", "-o", out]), "outside the vocabulary");
    fails(&colibri(&["logits", "-m", m, "--tokens", "1,x", "-o", out]), "not a token id");
    fails(&colibri(&["run", "-m", m, "-p", ""]), "empty prompt");
    let long = "word ".repeat(200);
    fails(&colibri(&["run", "-m", m, "-p", &long, "-c", "16"]), "does not fit the context");
    fails(&colibri(&["run", "-m", "/nonexistent/model.colibri", "-p", "hi"]), "no such file");

    // --embedding: wrong shape, wrong dtype, then the right thing.
    let npy = |name: &str, descr: &str, shape: (usize, usize), elem: usize| {
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({}, {}), }}", shape.0, shape.1);
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&(header.len() as u16).to_le_bytes());
        b.extend_from_slice(header.as_bytes());
        b.extend(std::iter::repeat_n(0u8, shape.0 * shape.1 * elem));
        let p = tmp.path().join(name);
        std::fs::write(&p, b).unwrap();
        p
    };
    let hidden = 64;
    let wrong_shape = npy("a.npy", "<f4", (3, hidden + 1), 4);
    fails(&colibri(&["run", "-m", m, "--embedding", wrong_shape.to_str().unwrap()]), "does not match");
    let wrong_dtype = npy("b.npy", "<f8", (3, hidden), 8);
    fails(&colibri(&["run", "-m", m, "--embedding", wrong_dtype.to_str().unwrap()]), "float32");
    let good = npy("c.npy", "<f4", (3, hidden), 4);
    let (_, err) = ok(&colibri(&["run", "-m", m, "--embedding", good.to_str().unwrap(), "-n", "3", "--temp", "0"]));
    assert!(err.contains("prompt: 3 tokens"), "{err}");
}

#[test]
fn run_without_a_model_uses_the_shipped_default_model() {
    let o = Command::new(env!("CARGO_BIN_EXE_colibri"))
        .args(["run", "-p", "And God said", "-n", "40", "--temp", "0", "--repeat-penalty", "1.1"])
        .env_remove("COLIBRI_MODEL")
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    let (text, err) = ok(&o);
    assert!(err.contains("tokens/s"), "{err}");
    // English-like: mostly letters, spaces and punctuation, several words.
    let plain = text.chars().filter(|c| c.is_ascii_alphabetic() || " ,.;:'\n".contains(*c)).count();
    assert!(text.len() > 40 && plain * 10 >= text.chars().count() * 9, "not English-like: {text:?}");
    assert!(text.split_whitespace().filter(|w| w.len() >= 3).count() >= 5, "too few words: {text:?}");
}

#[test]
fn a_huge_context_is_a_limit_not_an_allocation() {
    // 2^24 positions of this model's KV cache would be 16 GiB of f32: the session must not
    // allocate them up front (it aborted the process before), only what the tokens use.
    let m = model("qwen2_moe_shared");
    let (text, err) =
        ok(&colibri(&["run", "-m", m.to_str().unwrap(), "-p", "hello", "-c", "16777216", "-n", "4", "--temp", "0"]));
    let (small, _) =
        ok(&colibri(&["run", "-m", m.to_str().unwrap(), "-p", "hello", "-c", "64", "-n", "4", "--temp", "0"]));
    assert_eq!(text, small, "the same text whatever the context: {err}");
}
