//! Contract of the `colibri` commands around the format: exit 0 only on success, otherwise one
//! line `error: ...` on stderr and exit status 1 (never a signal); conversion errors name what is
//! wrong; output files appear atomically; inspect/dump/validate report what the file holds.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn colibri(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_colibri")).args(args).output().expect("run colibri")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models").join(name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Assert a failure: status 1 (not a signal), one stderr line starting with "error:" that
/// contains `needle`.
fn assert_fails(o: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "expected exit 1, got {:?}; stderr: {err}", o.status);
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("warning:")).collect();
    assert_eq!(lines.len(), 1, "expected one error line, got: {err}");
    assert!(lines[0].starts_with("error: "), "error line: {}", lines[0]);
    assert!(lines[0].contains(needle), "error line {:?} should mention {needle:?}", lines[0]);
}

/// Copy a fixture directory so a test can damage it.
fn copy_fixture(name: &str, to: &Path) -> PathBuf {
    let dst = to.join(name);
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(fixture(name)).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, dst.join(p.file_name().unwrap())).unwrap();
        }
    }
    dst
}

fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let p = dir.join("config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

fn convert_ok(dir: &Path, out: &Path, extra: &[&str]) {
    let mut args = vec!["convert", s(dir), "-o", s(out)];
    args.extend_from_slice(extra);
    let o = colibri(&args);
    assert!(o.status.success(), "convert failed: {}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("converted") && err.contains("params") && err.contains("active"), "summary line: {err}");
}

#[test]
fn version_flag_prints_the_crate_version() {
    let o = colibri(&["--version"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn convert_rejects_bad_checkpoints_with_a_named_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.colibri");

    let d = copy_fixture("mixtral_gqa", &tmp.path().join("a"));
    std::fs::remove_file(d.join("tokenizer.json")).unwrap();
    assert_fails(&colibri(&["convert", s(&d), "-o", s(&out)]), "tokenizer.json");

    let d = copy_fixture("mixtral_gqa", &tmp.path().join("b"));
    edit_config(&d, |v| v["quantization_config"] = serde_json::json!({"quant_method": "gptq", "bits": 4}));
    assert_fails(&colibri(&["convert", s(&d), "-o", s(&out)]), "already quantised");

    let d = copy_fixture("mixtral_gqa", &tmp.path().join("c"));
    edit_config(&d, |v| {
        v["architectures"] = serde_json::json!(["LlamaForCausalLM"]);
        v["model_type"] = serde_json::json!("llama");
    });
    assert_fails(&colibri(&["convert", s(&d), "-o", s(&out)]), "unsupported model family");

    // A config that disagrees with the stored shapes names the mis-shaped tensor.
    let d = copy_fixture("mixtral_gqa", &tmp.path().join("d"));
    edit_config(&d, |v| v["intermediate_size"] = serde_json::json!(v["intermediate_size"].as_u64().unwrap() + 8));
    assert_fails(&colibri(&["convert", s(&d), "-o", s(&out)]), "experts");

    // A missing tensor is named.
    let d = copy_fixture("olmoe", &tmp.path().join("e"));
    let st_path = d.join("model.safetensors");
    let data = std::fs::read(&st_path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&data).unwrap();
    let kept: Vec<(String, safetensors::tensor::TensorView)> =
        st.tensors().into_iter().filter(|(n, _)| n != "model.layers.1.self_attn.k_norm.weight").collect();
    safetensors::serialize_to_file(kept, None, &st_path).unwrap();
    assert_fails(&colibri(&["convert", s(&d), "-o", s(&out)]), "layers.1.self_attn.k_norm.weight");

    // A finite weight that overflows f16 is an error naming the tensor, not a silent Inf.
    let d = copy_fixture("mixtral_gqa", &tmp.path().join("f"));
    let st_path = d.join("model.safetensors");
    let data = std::fs::read(&st_path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&data).unwrap();
    let q = st.tensor("model.layers.0.self_attn.q_proj.weight").unwrap();
    let mut big = q.data().to_vec();
    big[..4].copy_from_slice(&1.0e6f32.to_le_bytes());
    let mut views: Vec<(String, safetensors::tensor::TensorView)> = st.tensors();
    for (n, v) in views.iter_mut() {
        if n == "model.layers.0.self_attn.q_proj.weight" {
            *v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, q.shape().to_vec(), &big).unwrap();
        }
    }
    safetensors::serialize_to_file(views, None, &st_path).unwrap();
    assert_fails(&colibri(&["convert", s(&d), "-o", s(&out), "--dtype", "f16"]), "layers.0.attn.q");
    convert_ok(&d, &out, &["--dtype", "bf16"]);
    std::fs::remove_file(&out).unwrap();

    // A tokenizer with a token past the model's vocabulary (every loader would refuse the file).
    let d = copy_fixture("mixtral_gqa", &tmp.path().join("g"));
    let tok_path = d.join("tokenizer.json");
    let mut tok: serde_json::Value = serde_json::from_slice(&std::fs::read(&tok_path).unwrap()).unwrap();
    tok["added_tokens"].as_array_mut().unwrap().push(serde_json::json!({"id": 100000, "content": "<|past|>",
        "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}));
    std::fs::write(&tok_path, serde_json::to_vec(&tok).unwrap()).unwrap();
    assert_fails(&colibri(&["convert", s(&d), "-o", s(&out)]), "<|past|>");

    // Not a directory.
    assert_fails(&colibri(&["convert", s(&st_path), "-o", s(&out)]), "not a checkpoint directory");
    assert!(!out.exists(), "no output may appear after failures");
}

#[test]
fn a_failed_conversion_leaves_an_existing_output_untouched_and_no_temp_files() {
    let tmp = tempfile::tempdir().unwrap();
    let outdir = tmp.path().join("out");
    std::fs::create_dir(&outdir).unwrap();
    let out = outdir.join("model.colibri");
    std::fs::write(&out, b"precious").unwrap();
    let d = copy_fixture("mixtral_gqa", &tmp.path().join("src"));
    // Truncate a shard so the conversion fails after the output was started.
    let st = d.join("model.safetensors");
    let len = std::fs::metadata(&st).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&st).unwrap().set_len(len - 100).unwrap();
    let o = colibri(&["convert", s(&d), "-o", s(&out)]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");
    let names: Vec<String> =
        std::fs::read_dir(&outdir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, vec!["model.colibri".to_string()], "temp files left behind");
    // A good conversion then replaces it.
    convert_ok(&fixture("mixtral_gqa"), &out, &[]);
    assert!(std::fs::metadata(&out).unwrap().len() > 1000);
    let names: Vec<_> = std::fs::read_dir(&outdir).unwrap().collect();
    assert_eq!(names.len(), 1);
}

#[test]
fn inspect_reports_shapes_params_and_user_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("q.colibri");
    let meta = tmp.path().join("meta.txt");
    std::fs::write(&meta, "trained on the unit-test corpus").unwrap();
    convert_ok(&fixture("qwen2_moe_shared"), &out, &["--user-metadata", s(&meta), "--dtype", "bf16"]);
    let o = colibri(&["inspect", s(&out), "--json"]);
    assert!(o.status.success());
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let hf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("qwen2_moe_shared").join("config.json")).unwrap())
            .unwrap();
    let h = hf["hidden_size"].as_u64().unwrap();
    let e = hf["num_experts"].as_u64().or(hf["num_local_experts"].as_u64()).unwrap();
    let f = hf["moe_intermediate_size"].as_u64().unwrap();
    assert_eq!(r["config"]["hidden_size"], h);
    assert_eq!(r["config"]["moe"]["n_experts"], e);
    assert_eq!(r["header"]["num_experts"], e);
    assert_eq!(r["user_metadata"]["text"], "trained on the unit-test corpus");
    let tensors = r["tensors"].as_array().unwrap();
    let gate = tensors.iter().find(|t| t["name"] == "layers.1.moe.experts.gate").expect("layer 1 is a MoE layer");
    assert_eq!(gate["shape"], serde_json::json!([e, f, h]));
    assert_eq!(gate["dtype"], "bf16");
    assert_eq!(gate["offset"].as_u64().unwrap() % 4096, 0);
    assert_eq!(gate["expert_stride"].as_u64().unwrap() % 4096, 0);
    assert!(r["params"].as_u64().unwrap() > r["active_params_per_token"].as_u64().unwrap());
    assert!(r["kv_cache_bytes_per_token"]["f32"].as_u64().unwrap() > 0);
    assert_eq!(r["tokenizer"]["model"], "BPE");
    // Text output carries the same facts.
    let text = String::from_utf8(colibri(&["inspect", s(&out)]).stdout).unwrap();
    assert!(text.contains("layers.1.moe.experts.gate") && text.contains("active per token"));
}

#[test]
fn validate_and_dump_succeed_on_good_files_and_fail_cleanly_on_bad_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.colibri");
    convert_ok(&fixture("mixtral_gqa"), &out, &[]);
    let o = colibri(&["validate", s(&out)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("ok:"));

    let o = colibri(&["dump", s(&out), "--gate", "--layer", "1", "--rows", "3"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.starts_with("layers.1.moe.router"), "{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with('[')).count(), 3);
    let o = colibri(&["dump", s(&out), "--tensor", "attn.q", "--layer", "0", "--rows", "2", "--cols", "3"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("[1] ["));
    assert_fails(&colibri(&["dump", s(&out), "--tensor", "nope"]), "no tensor named 'nope'");

    // Flip one byte inside the last tensor's data: open still works (no weights are read), the
    // full validation catches the checksum mismatch.
    let mut bytes = std::fs::read(&out).unwrap();
    let n = bytes.len();
    bytes[n - 10] ^= 0x40;
    let bad = tmp.path().join("bad.colibri");
    std::fs::write(&bad, &bytes).unwrap();
    assert!(colibri(&["inspect", s(&bad)]).status.success());
    assert_fails(&colibri(&["validate", s(&bad)]), "checksum");
    assert_fails(&colibri(&["validate", s(&bad), "--no-mmap"]), "checksum");

    // Not a model file at all, a directory, a missing path, a truncated file.
    for (path, needle) in [
        (fixture("mixtral_gqa").join("config.json"), "magic"),
        (tmp.path().to_path_buf(), "directory"),
        (tmp.path().join("missing.colibri"), "no such file"),
    ] {
        for cmd in ["inspect", "validate"] {
            assert_fails(&colibri(&[cmd, s(&path)]), needle);
        }
    }
    let trunc = tmp.path().join("trunc.colibri");
    std::fs::write(&trunc, &bytes[..n / 2]).unwrap();
    assert_fails(&colibri(&["inspect", s(&trunc)]), "truncated");
}

/// A huge file is judged by its 256-byte header before anything of its size is allocated: a
/// 1 TiB sparse file of zeros is "bad magic" (not "out of memory") with and without --no-mmap,
/// and a real header followed by a terabyte of zeros is refused by its declared size.
#[test]
fn validate_checks_the_header_before_reading_a_huge_file() {
    let tmp = tempfile::tempdir().unwrap();
    let zeros = tmp.path().join("zeros.colibri");
    std::fs::File::create(&zeros).unwrap().set_len(1 << 40).unwrap();
    for extra in [&[][..], &["--no-mmap"][..]] {
        let mut args = vec!["validate", s(&zeros)];
        args.extend_from_slice(extra);
        assert_fails(&colibri(&args), "magic");
    }
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/default.colibri");
    let head = std::fs::read(&model).unwrap()[..4096].to_vec();
    let big = tmp.path().join("big.colibri");
    std::fs::write(&big, &head).unwrap();
    std::fs::OpenOptions::new().write(true).open(&big).unwrap().set_len(1 << 40).unwrap();
    assert_fails(&colibri(&["validate", "--no-mmap", s(&big)]), "trailing");
}

/// `colibri ARGS` under `ulimit -v KIB`.
fn under_limit(kib: u64, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_colibri"))
        .args(args)
        .output()
        .expect("run sh")
}

/// A command's outcome under `ulimit -v kib`: success, or exit 1 with one `error:` line — never a
/// panic (101) or an abort (134; glibc's "failed to register TLS destructor" was one, when a
/// thread-local was first used mid-work: `threads::prepare_thread`). Returns whether it succeeded.
fn succeeds_or_fails_cleanly(kib: u64, args: &[&str]) -> bool {
    let o = under_limit(kib, args);
    if o.status.success() {
        return true;
    }
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{args:?} under ulimit -v {kib}: {:?}; stderr: {err}", o.status);
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("warning:")).collect();
    assert_eq!(lines.len(), 1, "{args:?} under ulimit -v {kib}: one error line expected, got: {err}");
    assert!(lines[0].starts_with("error: "), "{args:?} under ulimit -v {kib}: {err}");
    false
}

/// Under an address-space limit (`ulimit -v`) every command either works or exits 1 with one
/// `error:` line: no panic (101) and no abort (134), whatever the limit. The sweep starts at the
/// smallest limit the binary can start under at all (below it the dynamic loader fails, before
/// any of our code runs) and crosses the limits where the mapping, the thread pool, the
/// tokenizer and the KV cache each fail first, in 1 MiB steps; then, for each command, it finds
/// by bisection the smallest limit it works under and sweeps the 8 MiB below that in 20 KiB
/// steps — the windows where a half-started thread used to abort are ~100 KiB wide.
#[test]
fn every_command_fails_cleanly_under_an_address_space_limit() {
    let start = (4_000..64_000).step_by(1_000).find(|&k| under_limit(k, &["--version"]).status.success()).unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/default.colibri");
    let m = s(&model);
    let commands: [&[&str]; 4] = [
        &["validate", m],
        &["validate", "--no-mmap", m],
        &["inspect", m],
        &["run", "-m", m, "-p", "Hello there", "-n", "4", "-t", "2"],
    ];
    let end = start + 96_000;
    for kib in (start..=end).step_by(1_000) {
        for args in commands {
            succeeds_or_fails_cleanly(kib, args);
        }
    }
    for args in commands {
        let (mut lo, mut hi) = (start, end);
        assert!(succeeds_or_fails_cleanly(hi, args), "{args:?} works under ulimit -v {hi}");
        while hi - lo > 20 {
            let mid = lo + (hi - lo) / 2;
            if succeeds_or_fails_cleanly(mid, args) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        for kib in (hi.saturating_sub(8_192).max(start)..hi).step_by(20) {
            succeeds_or_fails_cleanly(kib, args);
        }
    }
}

/// The largest finite value of a float dtype, as its bytes.
fn max_finite(dtype: colibri::format::DType) -> Vec<u8> {
    use colibri::format::DType;
    match dtype {
        DType::F32 => f32::MAX.to_le_bytes().to_vec(),
        DType::F16 => 0x7BFFu16.to_le_bytes().to_vec(),
        DType::BF16 => 0x7F7Fu16.to_le_bytes().to_vec(),
        d => panic!("routers are float, not {d}"),
    }
}

/// Files that are intact (every checksum right, every value finite) but cannot serve are refused
/// by `validate`: routers at the dtype's largest finite value (the canary forward pass overflows),
/// a tokenizer that is the JSON number 42, a tokenizer with an added token past the model's
/// vocabulary, a chat template that does not compile.
#[test]
fn validate_refuses_intact_files_that_cannot_serve() {
    let tmp = tempfile::tempdir().unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/default.colibri");
    let keep = |_: &str, v: Vec<u8>| v;
    let same = |_: &colibri::format::TensorRecord, v: Vec<u8>| v;
    let copy = tmp.path().join("copy.colibri");
    common::rewrite_model(&model, &copy, keep, same);
    let o = colibri(&["validate", s(&copy)]);
    assert!(o.status.success(), "the faithful copy validates: {}", String::from_utf8_lossy(&o.stderr));

    let routers = tmp.path().join("routers.colibri");
    common::rewrite_model(&model, &routers, keep, |t, v| {
        if t.kind != colibri::format::TensorKind::Router {
            return v;
        }
        max_finite(t.dtype).iter().copied().cycle().take(v.len()).collect()
    });
    assert_fails(&colibri(&["validate", s(&routers)]), "non-finite logit");

    let number = tmp.path().join("number.colibri");
    common::rewrite_model(&model, &number, |k, v| if k == "tokenizer" { b"42".to_vec() } else { v }, same);
    assert_fails(&colibri(&["validate", s(&number)]), "tokenizer does not load");

    let vocab = colibri::Model::open(&model, &Default::default()).unwrap().config().vocab_size;
    let added = tmp.path().join("added.colibri");
    common::rewrite_model(
        &model,
        &added,
        |k, v| {
            if k != "tokenizer" {
                return v;
            }
            let mut j: serde_json::Value = serde_json::from_slice(&v).unwrap();
            let evil = serde_json::json!({"id": vocab + 7, "content": "<|evil|>", "single_word": false, "lstrip": false,
                                          "rstrip": false, "normalized": false, "special": true});
            j["added_tokens"].as_array_mut().unwrap().push(evil);
            serde_json::to_vec(&j).unwrap()
        },
        same,
    );
    assert_fails(&colibri(&["validate", s(&added)]), "<|evil|>");

    let template = tmp.path().join("template.colibri");
    common::rewrite_model(&model, &template, |k, v| if k == "chat_template" { b"{% if %}".to_vec() } else { v }, same);
    assert_fails(&colibri(&["validate", s(&template)]), "chat template does not compile");
}

/// A GGUF model given to a command that reads .colibri files: one line naming the exact
/// conversion to run, for the path given with -m, as a positional file, or in $COLIBRI_MODEL.
#[test]
fn a_gguf_model_gets_the_conversion_command() {
    let gguf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gguf/mixtral_gqa.q8_0.gguf");
    let g = s(&gguf);
    let want = format!("colibri convert {g} -o {}", s(&gguf.with_extension("colibri")));
    for args in [vec!["inspect", g], vec!["validate", g], vec!["run", "-m", g, "-p", "hi", "-n", "1"]] {
        assert_fails(&colibri(&args), &want);
    }
    let o =
        Command::new(env!("CARGO_BIN_EXE_colibri")).args(["run", "-p", "hi"]).env("COLIBRI_MODEL", g).output().unwrap();
    assert_fails(&o, &want);
}

/// `inspect` of a file converted from GGUF shows where it came from: GGUF version, llama.cpp
/// architecture and file type, the stored dtypes per tensor class.
#[test]
fn inspect_shows_the_gguf_source() {
    let tmp = tempfile::tempdir().unwrap();
    let (gguf, hf) = (
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gguf/mixtral_gqa.q8_0.gguf"),
        fixture("mixtral_gqa"),
    );
    let read = |f: &str| std::fs::read_to_string(hf.join(f)).unwrap();
    let tok = colibri_convert::gguf::tokenizer::HfTokenizerFiles {
        tokenizer_json: read("tokenizer.json"),
        tokenizer_config_json: read("tokenizer_config.json"),
    };
    let out = tmp.path().join("m.colibri");
    let args = colibri_convert::ConvertArgs {
        input: gguf,
        output: out.clone(),
        dtype: None,
        quantize: None,
        user_metadata: None,
    };
    struct Quiet;
    impl colibri_convert::Progress for Quiet {
        fn start(&self, _: u64) {}
        fn advance(&self, _: u64) {}
        fn finish(&self) {}
    }
    colibri_convert::gguf::convert::convert(&args, &Quiet, Some(tok)).unwrap();
    let o = colibri(&["inspect", s(&out)]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    let line = text.lines().find(|l| l.starts_with("gguf source")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("v3 llama, file type 7 (MOSTLY_Q8_0)"), "{line}");
    assert!(
        line.contains("experts f16/q8r8") && line.contains("attention q8r8") && line.contains("norm f32"),
        "{line}"
    );
}
