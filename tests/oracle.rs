//! Contract: colibri reproduces HuggingFace transformers on every fixture family.
//! f32 files, and bf16 files with f32 activations: max |Δlogit| ≤ 1e-4 · max|logit|; bf16 files
//! in the default activation mode (activations rounded to bf16 per product) and f16 files
//! (against transformers in f32 on the same rounded weights): ≤ 2e-2 · max|logit|; greedy
//! tokens identical; routed expert ids
//! identical on every token and MoE layer. Also: decoding token by token through the KV cache
//! gives the same logits as one batched prefill — except for LongRoPE (Phi-MoE) past its
//! original context, where transformers too gives other logits (the factors are chosen per call
//! and cached keys keep theirs): there token-by-token decoding matches transformers'
//! token-by-token logits (oracle/logits_incremental_f32.npy), and greedy generation goes through
//! `generate`, which re-encodes the sequence where transformers' generate() does. A checkpoint's own
//! block-quantised tensors (GPT-OSS's MXFP4 experts, kept as MXFP4) hold their values exactly: the
//! tight tolerance is checked with f32 activations, the default (int8-activation) mode at 2e-2.

mod common;

use colibri::forward::{forward, ForwardOptions, Input, LogitsMode};
use colibri::kernels::QuantActivations;
use colibri::session::{Session, SessionOptions};
use colibri::{LoadOptions, Model};
use common::{argmax, convert, fixture_dirs, ids, read_npy_f32};
use std::path::Path;

fn session(model: &Model, quant_act: QuantActivations) -> Session {
    Session::new(model.config(), &SessionOptions { n_ctx: 256, quant_act, ..Default::default() }).unwrap()
}

struct Report {
    worst: f64,
}

fn check_fixture(dir: &Path, dtype: &str, act: QuantActivations, tol: f64, tmp: &Path, report: &mut Report) {
    let name = dir.file_name().unwrap().to_string_lossy().to_string();
    let meta = common::meta(dir);
    let file = tmp.join(format!("{name}-{dtype}.colibri"));
    convert(dir, &file, dtype);
    let model = Model::open(&file, &LoadOptions::default()).unwrap();
    let vocab = model.config().vocab_size;
    // Block-quantised tensors kept from the checkpoint (GPT-OSS's MXFP4 experts) meet int8
    // activations in the default mode: the tight tolerance holds with f32 activations, the
    // default mode is held to the loose one (the bf16 runs).
    let blocks = model.parsed().tensors.iter().any(|t| t.dtype.is_quantized());
    let act = if blocks && tol < 1e-3 { QuantActivations::Float } else { act };

    // Teacher-forced logits and routing over input_ids.
    let input = ids(&meta["input_ids"]);
    let mut s = session(&model, act);
    s.set_trace(true);
    let opts = ForwardOptions { logits: LogitsMode::All, ..Default::default() };
    forward(&model, &mut s, Input::Tokens(&input), &opts).unwrap();
    let (shape, want) = read_npy_f32(&dir.join(format!("oracle/logits_{dtype}.npy")));
    assert_eq!(shape, vec![input.len(), vocab], "{name}: oracle shape");
    let got = s.logits().to_vec();
    let max_abs = want.iter().fold(0f64, |m, &v| m.max(f64::from(v).abs()));
    let max_diff = got.iter().zip(&want).fold(0f64, |m, (&a, &b)| m.max((f64::from(a) - f64::from(b)).abs()));
    let rel = max_diff / max_abs;
    eprintln!("{name:<22} {dtype:<5} {:<7} max|Δlogit| = {max_diff:.3e} = {rel:.3e} × max|logit|", act.name());
    report.worst = report.worst.max(rel);
    assert!(rel <= tol, "{name} {dtype}: max|Δ| {max_diff} is {rel:.2e} of max|logit| (tolerance {tol:.0e})");

    let trace = s.take_trace();
    let routing = &meta[format!("routing_{dtype}")];
    for (layer, per_token) in routing.as_array().unwrap().iter().enumerate() {
        let Some(per_token) = per_token.as_array() else {
            assert!(trace.iter().all(|r| r.layer != layer), "{name}: dense layer {layer} was routed");
            continue;
        };
        for (t, want_ids) in per_token.iter().enumerate() {
            let rec = trace.iter().find(|r| r.layer == layer && r.position == t).expect("trace record");
            assert_eq!(rec.experts, ids(want_ids), "{name} {dtype}: experts of token {t} in layer {layer}");
        }
    }

    // The same logits when decoding one token at a time through the KV cache (LongRoPE past its
    // original context: transformers' own token-by-token logits, kept for f32).
    let longrope = model.config().longrope_original();
    let incremental = match longrope {
        Some(o) if input.len() > o => {
            (dtype == "f32").then(|| read_npy_f32(&dir.join("oracle/logits_incremental_f32.npy")).1)
        }
        _ => Some(got.clone()),
    };
    // bf16 files in the default activation mode: on a path with bf16 dot instructions, a prefill
    // of ≥ 16 rows takes the bf16 GEMM, whose sums differ from the one-row kernel's in the last
    // bit; the bf16 rounding of the next product's activations can turn that into a 2⁻⁸ step
    // (seen on phimoe_hub: 5e-4 of max|logit| from row 12 on). Their tolerance is the mode's.
    // A DeltaNet model decodes with the recurrent form of the delta rule and prefills with the
    // chunked one, as transformers does: equal up to f32 rounding, which activations rounded to
    // bf16 per product can turn into a bf16 step; there too the mode's own tolerance applies.
    let reduced = act == QuantActivations::Reduced && dtype != "f32";
    let inc_tol = if (dtype == "bf16" && act == QuantActivations::Reduced)
        || (reduced && model.config().n_delta_net_layers() > 0)
    {
        tol.max(1e-4)
    } else {
        1e-4
    };
    let mut s1 = session(&model, act);
    let last = ForwardOptions { logits: LogitsMode::Last, ..Default::default() };
    for (t, &id) in input.iter().enumerate() {
        forward(&model, &mut s1, Input::Tokens(&[id]), &last).unwrap();
        let Some(want) = incremental.as_deref() else { continue };
        let d = common::max_diff(s1.logits(), &want[t * vocab..(t + 1) * vocab]);
        assert!(d <= inc_tol * max_abs, "{name} {dtype}: incremental decode differs at {t}: {d}");
    }

    // Greedy generation: prefill the prompt, then 32 argmax steps through the KV cache.
    let prompt = ids(&meta["greedy_prompt"]);
    let out = match longrope {
        Some(_) => greedy_generate(&model, session(&model, act), &prompt),
        None => {
            let mut g = session(&model, act);
            forward(&model, &mut g, Input::Tokens(&prompt), &last).unwrap();
            let mut out = Vec::new();
            for _ in 0..32 {
                let next = argmax(g.logits());
                out.push(next);
                forward(&model, &mut g, Input::Tokens(&[next]), &last).unwrap();
            }
            out
        }
    };
    assert_eq!(out, ids(&meta[format!("greedy_{dtype}")]), "{name} {dtype}: greedy tokens");
}

/// 32 greedy tokens from `prompt` through `colibri::generate` (end-of-sequence ignored).
fn greedy_generate(model: &Model, mut s: Session, prompt: &[u32]) -> Vec<u32> {
    use colibri::decoder::DecodeParams;
    use colibri::generate::{generate, GenerateParams};
    use colibri::sampler::SamplerParams;
    let decode = DecodeParams {
        max_tokens: 32,
        sampler: SamplerParams::greedy(),
        ignore_eos: true,
        stop: Vec::new(),
        grammar: None,
        end_ids: Vec::new(),
    };
    let params = GenerateParams { decode, ..Default::default() };
    generate(model, &mut s, None, Input::Tokens(prompt), &params, |_| true).unwrap().tokens
}

#[test]
fn f32_files_match_transformers() {
    let tmp = tempfile::tempdir().unwrap();
    let mut r = Report { worst: 0.0 };
    for d in fixture_dirs() {
        check_fixture(&d, "f32", QuantActivations::Reduced, 1e-4, tmp.path(), &mut r);
    }
    eprintln!("worst f32 relative error: {:.3e}", r.worst);
}

#[test]
fn bf16_files_match_transformers_on_rounded_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let mut r = Report { worst: 0.0 };
    for d in fixture_dirs() {
        check_fixture(&d, "bf16", QuantActivations::Reduced, 2e-2, tmp.path(), &mut r);
    }
    eprintln!("worst bf16 relative error: {:.3e}", r.worst);
}

#[test]
fn bf16_files_with_f32_activations_match_transformers_closely() {
    let tmp = tempfile::tempdir().unwrap();
    let mut r = Report { worst: 0.0 };
    for d in fixture_dirs() {
        check_fixture(&d, "bf16", QuantActivations::Float, 1e-4, tmp.path(), &mut r);
    }
    eprintln!("worst bf16 (f32 activations) relative error: {:.3e}", r.worst);
}

#[test]
fn f16_files_match_transformers_on_rounded_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let mut r = Report { worst: 0.0 };
    for d in fixture_dirs() {
        check_fixture(&d, "f16", QuantActivations::Reduced, 2e-2, tmp.path(), &mut r);
    }
    eprintln!("worst f16 relative error: {:.3e}", r.worst);
}

/// Teacher-forced logits of fixture `name` (f32 file) with a half-precision KV cache stay within
/// 2e-2 · max|logit| of transformers'.
fn half_precision_kv_cache_stays_close(tmp: &Path, name: &str) {
    let dir = fixture_dirs().into_iter().find(|d| d.ends_with(name)).unwrap();
    let file = tmp.join(format!("{name}.colibri"));
    convert(&dir, &file, "f32");
    let model = Model::open(&file, &LoadOptions::default()).unwrap();
    let input = ids(&common::meta(&dir)["input_ids"]);
    let (_, want) = read_npy_f32(&dir.join("oracle/logits_f32.npy"));
    let max_abs = want.iter().fold(0f64, |m, &v| m.max(f64::from(v).abs()));
    let all = ForwardOptions { logits: LogitsMode::All, ..Default::default() };
    for kv_dtype in [colibri::session::KvDtype::F16, colibri::session::KvDtype::BF16] {
        let mut s =
            Session::new(model.config(), &SessionOptions { n_ctx: 64, kv_dtype, ..Default::default() }).unwrap();
        forward(&model, &mut s, Input::Tokens(&input), &all).unwrap();
        let d = s.logits().iter().zip(&want).fold(0f64, |m, (&a, &b)| m.max((f64::from(a) - f64::from(b)).abs()));
        assert!(d <= 2e-2 * max_abs, "{name} {kv_dtype:?} KV cache: {d}");
    }
}

#[test]
fn half_precision_kv_cache_stays_close_and_a_failed_call_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    // GQA K/V rows, and MLA latent rows.
    half_precision_kv_cache_stays_close(tmp.path(), "deepseek_v3_mtp");
    half_precision_kv_cache_stays_close(tmp.path(), "qwen3_moe_fused");
    let dir = fixture_dirs().into_iter().find(|d| d.ends_with("qwen3_moe_fused")).unwrap();
    let meta = common::meta(&dir);
    let file = tmp.path().join("m.colibri");
    convert(&dir, &file, "f32");
    let model = Model::open(&file, &LoadOptions::default()).unwrap();
    let input = ids(&meta["input_ids"]);
    let (_, want) = read_npy_f32(&dir.join("oracle/logits_f32.npy"));
    let max_abs = want.iter().fold(0f64, |m, &v| m.max(f64::from(v).abs()));
    let all = ForwardOptions { logits: LogitsMode::All, ..Default::default() };
    // A rejected call (bad id, context overflow) leaves the session as it was.
    let last = ForwardOptions { logits: LogitsMode::Last, ..Default::default() };
    let mut s = Session::new(model.config(), &SessionOptions { n_ctx: 32, ..Default::default() }).unwrap();
    forward(&model, &mut s, Input::Tokens(&input[..4]), &last).unwrap();
    let vocab = model.config().vocab_size as u32;
    assert!(forward(&model, &mut s, Input::Tokens(&[1, vocab]), &last).is_err());
    assert!(forward(&model, &mut s, Input::Tokens(&[1; 40]), &last).is_err());
    assert!(forward(&model, &mut s, Input::Tokens(&[]), &last).is_err());
    assert_eq!(s.position(), 4);
    forward(&model, &mut s, Input::Tokens(&input[4..]), &all).unwrap();
    let tail = &want[4 * vocab as usize..];
    let d = s.logits().iter().zip(tail).fold(0f64, |m, (&a, &b)| m.max((f64::from(a) - f64::from(b)).abs()));
    assert!(d <= 1e-4 * max_abs, "logits after rejected calls differ: {d}");
}

/// `scripts/test-all.sh` runs this file once per CPU path with `COLIBRI_CPU` set: make sure the
/// path asked for is the one the oracle comparisons above actually ran on.
#[test]
fn the_requested_cpu_path_is_the_one_running() {
    let active = colibri::kernels::active_path();
    assert!(colibri::kernels::available_paths().contains(&active));
    if let Ok(req) = std::env::var("COLIBRI_CPU") {
        match colibri::kernels::available_paths().into_iter().find(|p| p.name() == req) {
            Some(p) => assert_eq!(active, p, "COLIBRI_CPU={req} was not honoured"),
            None => assert!(colibri::kernels::path_note().is_some(), "COLIBRI_CPU={req} fell back silently"),
        }
    }
    eprintln!("kernel path: {}", active.name());
}
