//! Contract of `colibri perplexity`: PPL is exp(mean NLL) of the second half of every chunk,
//! recomputed here from `colibri logits` on the same chunk tokens (BOS first); sub-batches change
//! it only by f32 rounding; `--kl-base` against the model itself gives KL 0 and full top-1
//! agreement, against an f16 copy a small positive KL; a base with another vocabulary, a text
//! shorter than two chunks and bad arguments get one `error:` line.

use colibri::tokenizer::Tokenizer;
use colibri::{LoadOptions, Model};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Chunk size used throughout (small: the fixtures are tiny).
const CTX: usize = 32;

fn colibri(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_colibri")).args(args).output().expect("run colibri")
}

fn tmp() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

/// A fixture converted once (with `--dtype` when given) into this test binary's temp dir.
fn model(name: &str, dtype: Option<&str>) -> PathBuf {
    let out = tmp().join(format!("{name}.{}.colibri", dtype.unwrap_or("src")));
    if !out.exists() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models").join(name);
        let part = tmp().join(format!("{name}.{:?}.partial", std::thread::current().id()));
        let mut args = vec!["convert", src.to_str().unwrap(), "-o", part.to_str().unwrap()];
        args.extend(dtype.map(|d| ["--dtype", d]).into_iter().flatten());
        let o = colibri(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::rename(&part, &out).unwrap();
    }
    out
}

/// The text scored: the repository's MIT licence.
fn text() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../LICENSE-MIT")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn json_ok(o: &Output) -> Value {
    assert!(o.status.success(), "failed: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("bad JSON {e}: {}", String::from_utf8_lossy(&o.stdout)))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn fails(o: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "expected exit 1: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one error line expected: {err}");
    assert!(lines[0].starts_with("error: ") && lines[0].contains(needle), "{:?} should mention {needle:?}", lines[0]);
}

/// Minimal reader of a 2-D little-endian float32 .npy file.
fn read_npy(path: &Path) -> (usize, usize, Vec<f32>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..6], b"\x93NUMPY");
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
    let dims = &header[header.find('(').unwrap() + 1..header.find(')').unwrap()];
    let d: Vec<usize> = dims.split(',').filter(|x| !x.trim().is_empty()).map(|x| x.trim().parse().unwrap()).collect();
    let data: Vec<f32> = b[10 + hlen..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    assert_eq!(data.len(), d[0] * d[1]);
    (d[0], d[1], data)
}

/// exp(mean NLL) over `n_chunks` chunks of CTX tokens, each with BOS first, scoring positions
/// CTX/2 .. CTX−1 from the logits `colibri logits` writes.
fn reference_ppl(m: &Path, n_chunks: usize) -> (f64, usize) {
    let model = Model::open(m, &LoadOptions::default()).unwrap();
    let tok = Tokenizer::from_model(&model).unwrap();
    let ids = tok.encode(&std::fs::read_to_string(text()).unwrap(), true).unwrap();
    let bos = tok.bos_id().unwrap();
    assert_eq!(ids[0], bos, "the fixture's tokenizer adds BOS");
    let (mut sum, mut count) = (0f64, 0usize);
    for c in 0..n_chunks {
        let mut chunk = ids[c * CTX..(c + 1) * CTX].to_vec();
        chunk[0] = bos;
        let list: Vec<String> = chunk.iter().map(|i| i.to_string()).collect();
        let npy = tmp().join(format!("chunk{c}.npy"));
        let o = colibri(&["logits", "-m", s(m), "--tokens", &list.join(","), "-o", s(&npy)]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let (rows, vocab, logits) = read_npy(&npy);
        assert_eq!(rows, CTX);
        for i in CTX / 2..CTX - 1 {
            let row = &logits[i * vocab..(i + 1) * vocab];
            let lse = row.iter().map(|&x| (x as f64).exp()).sum::<f64>().ln();
            sum += lse - row[chunk[i + 1] as usize] as f64;
            count += 1;
        }
    }
    ((sum / count as f64).exp(), count)
}

#[test]
fn ppl_is_exp_mean_nll_of_the_second_half_of_each_chunk() {
    let m = model("mixtral_gqa", None);
    let ctx = CTX.to_string();
    let r =
        json_ok(&colibri(&["perplexity", "-m", s(&m), "-f", s(&text()), "-c", &ctx, "--chunks", "3", "-o", "json"]));
    assert_eq!((r["n_chunks"].as_u64(), r["n_ctx"].as_u64()), (Some(3), Some(CTX as u64)));
    let (want, count) = reference_ppl(&m, 3);
    assert_eq!(r["n_scored"].as_u64(), Some(count as u64));
    let ppl = f(&r["ppl"]);
    assert!((ppl - want).abs() <= 1e-4 * want, "ppl {ppl} vs recomputed {want}");
    assert!((ppl - f(&r["mean_nll"]).exp()).abs() <= 1e-12 * ppl);
    assert!(f(&r["ppl_err"]) > 0.0 && r["kl"].is_null());
    assert_eq!(r["chunk_ppl"].as_array().map(|a| a.len()), Some(3));

    // Sub-batches of 5 tokens give the same figure.
    let b = json_ok(&colibri(&[
        "perplexity",
        "-m",
        s(&m),
        "-f",
        s(&text()),
        "-c",
        &ctx,
        "--chunks",
        "3",
        "-b",
        "5",
        "-o",
        "json",
    ]));
    // Equal up to f32 summation order (kernels may block a batch of 5 differently from 32).
    assert!((f(&b["ppl"]) - ppl).abs() <= 1e-5 * ppl, "batch 5: {} vs {ppl}", b["ppl"]);

    // Text output: the final line on stdout, running estimates on stderr.
    let o = colibri(&["perplexity", "-m", s(&m), "-f", s(&text()), "-c", &ctx, "--chunks", "3"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with(&format!("PPL = {ppl:.4} ± ")), "{out}");
    assert_eq!(String::from_utf8_lossy(&o.stderr).lines().filter(|l| l.starts_with('[')).count(), 3);
}

#[test]
fn kl_against_itself_is_zero_and_against_an_f16_copy_small_but_positive() {
    let m = model("mixtral_gqa", None);
    let ctx = CTX.to_string();
    let run = |model: &Path, base: &Path| {
        json_ok(&colibri(&[
            "perplexity",
            "-m",
            s(model),
            "-f",
            s(&text()),
            "-c",
            &ctx,
            "--chunks",
            "2",
            "--kl-base",
            s(base),
            "-o",
            "json",
        ]))
    };
    let same = run(&m, &m);
    let kl = &same["kl"];
    assert!(f(&kl["kl_mean"]).abs() < 1e-9, "{kl}");
    assert_eq!(f(&kl["top1_agreement"]), 1.0);
    assert_eq!(f(&kl["base_ppl"]), f(&same["ppl"]));

    let half = model("mixtral_gqa", Some("f16"));
    let d = run(&half, &m);
    let kl = &d["kl"];
    assert!(f(&kl["kl_mean"]) > 0.0 && f(&kl["kl_mean"]) < 1e-3, "{kl}");
    assert!(f(&kl["top1_agreement"]) > 0.5, "{kl}");
    assert_eq!(f(&kl["base_ppl"]), f(&same["ppl"]), "the base is the f32 model in both runs");
    assert!((f(&d["ppl"]) / f(&same["ppl"]) - 1.0).abs() < 1e-2, "f16 rounding moves PPL a little");
}

#[test]
fn mismatched_base_short_text_and_bad_arguments_get_one_error_line() {
    let m = model("mixtral_gqa", None);
    let other = model("qwen3_moe_yarn", None);
    let ctx = CTX.to_string();
    let (m, t) = (s(&m), text());
    fails(&colibri(&["perplexity", "-m", m, "-f", s(&t), "-c", &ctx, "--kl-base", s(&other)]), "vocabulary");
    fails(&colibri(&["perplexity", "-m", m, "-f", s(&t), "-c", "2048"]), "smaller -c");
    fails(&colibri(&["perplexity", "-m", m, "-f", "/nonexistent.txt"]), "/nonexistent.txt");
    fails(&colibri(&["perplexity", "-m", m, "-f", s(&t), "-c", "2"]), "-c 2");
    fails(&colibri(&["perplexity", "-m", m, "-f", s(&t), "-b", "0"]), "-b");
}
