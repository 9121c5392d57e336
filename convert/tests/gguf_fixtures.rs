//! Contract: a GGUF written by llama.cpp's own converter (tools/make_gguf_fixtures.py, from the
//! fixture checkpoints) converts to the same model as the checkpoint itself. f32 GGUFs: the same
//! config, tensor list and bytes (every llama.cpp transformation undone exactly: stacked experts,
//! q/k permutation, shared experts, choice bias, dense layers) and bit-identical logits. Q8_0
//! GGUFs: the tensors keep their GGUF types (q8_0, the f16 fallbacks, f32 norms) and hold the
//! checkpoint's values within each type's rounding (q8_0 matrices of whole 8-row groups as q8r8,
//! its interleaved twin: tests/gguf_interleaved.rs); logits close to the checkpoint's. Split files
//! and merged qkv give the same model; unknown architectures and types are refused by name.
//! deepseek2 (V2 and V3), gpt-oss (MXFP4 experts), qwen3next and phimoe: the same, up to what
//! llama.cpp's file expresses otherwise (Qwen3-Next's 1 + w norms and −exp(A_log); Phi-MoE's one
//! attention factor), each test saying exactly what; their logits match transformers.
//! The tokenizer files come from the checkpoint here (the GGUF tokenizer builder is tested on its
//! own), so these tests stay at the config / tensor / logits level.

#[path = "../../tests/common/fixtures.rs"]
mod fixtures;
#[path = "support/gguf.rs"]
mod gguf;

use colibri::format::{DType, TensorKind};
use colibri::forward::{forward, ForwardOptions, Input};
use colibri::kernels::QuantActivations;
use colibri::session::{Session, SessionOptions};
use colibri::{LoadOptions, Model};
use colibri_convert::ConvertArgs;
use fixtures::{argmax, convert_as, f32_twin, ids, meta, models_root};
use gguf::{convert_gguf, gguf_root, logits_with};
use std::path::{Path, PathBuf};

fn logits(model: &Model, input: &[u32]) -> Vec<f32> {
    logits_with(model, input, QuantActivations::default())
}

/// The HF-converted and the GGUF-converted files of fixture `name`.
fn both(name: &str, outtype: &str, tmp: &Path) -> (Model, Model, Vec<u32>) {
    let dir = models_root().join(name);
    let (a, b) = (tmp.join(format!("{name}.hf.colibri")), tmp.join(format!("{name}.{outtype}.colibri")));
    convert_as(&dir, &a, None);
    convert_gguf(&gguf_root().join(format!("{name}.{outtype}.gguf")), &dir, &b);
    let open = |p: &Path| Model::open(p, &LoadOptions::default()).unwrap();
    let (hf, gg) = (open(&a), open(&b));
    gg.verify().unwrap();
    (hf, gg, ids(&meta(&dir)["input_ids"]))
}

const F32: &[&str] =
    &["mixtral_gqa", "qwen2_moe_shared", "qwen3_moe_yarn", "olmoe", "granitemoe_hub", "glm4_moe_groups"];

#[test]
fn f32_gguf_is_the_checkpoint_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    for name in F32 {
        let (hf, gg, input) = both(name, "f32", tmp.path());
        let mut want = hf.config().clone();
        let mut got = gg.config().clone();
        // Special-token ids come from different places (generation_config vs the GGUF vocab).
        (want.eos_token_ids, got.eos_token_ids) = (vec![], vec![]);
        (want.pad_token_id, got.pad_token_id) = (None, None);
        assert_eq!(got, want, "{name}: config");
        let (rw, rg) = (&hf.parsed().tensors, &gg.parsed().tensors);
        assert_eq!(rw.len(), rg.len(), "{name}: tensor count");
        for (w, g) in rw.iter().zip(rg) {
            assert_eq!((&g.name, g.dtype, &g.shape, g.kind), (&w.name, w.dtype, &w.shape, w.kind), "{name}: record");
            assert!(
                hf.tensor(&w.name).unwrap().bytes == gg.tensor(&g.name).unwrap().bytes,
                "{name}: {} bytes differ",
                w.name
            );
        }
        let (lw, lg) = (logits(&hf, &input), logits(&gg, &input));
        assert!(lw.iter().zip(&lg).all(|(a, b)| a.to_bits() == b.to_bits()), "{name}: logits not bit-identical");
    }
}

/// The elements of a stored matrix (or expert) as f32.
fn values(dtype: DType, bytes: &[u8], cols: usize) -> Vec<f32> {
    let n = bytes.len() / dtype.info().block_bytes as usize * dtype.info().block as usize;
    let mut out = vec![0f32; n];
    (dtype.info().dequantize)(bytes, cols, 0, &mut out);
    out
}

#[test]
fn q8_0_gguf_keeps_its_types_and_values() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["mixtral_gqa", "qwen3_moe_yarn", "deepseek_v2_greedy"] {
        let (hf, gg, input) = both(name, "q8_0", tmp.path());
        let mut seen = Vec::new();
        for g in &gg.parsed().tensors {
            seen.push(g.dtype);
            let (vw, vg) = (hf.tensor(&g.name).unwrap(), gg.tensor(&g.name).unwrap());
            let cols = vg.cols();
            // Expert stacks have per-expert padding: compare expert by expert.
            let units = if g.kind == TensorKind::Experts { vg.n_experts() } else { 1 };
            for e in 0..units {
                let (bw, bg) = match units {
                    1 => (vw.bytes, vg.bytes),
                    _ => (vw.expert(e).unwrap().bytes, vg.expert(e).unwrap().bytes),
                };
                let (w, gv) = (values(DType::F32, bw, cols), values(g.dtype, bg, cols));
                assert_eq!(w.len(), gv.len(), "{name}: {} element count", g.name);
                for (blk, (wb, gb)) in w.chunks(32).zip(gv.chunks(32)).enumerate() {
                    let amax = wb.iter().fold(0f32, |m, x| m.max(x.abs()));
                    let q8 = amax / 127.0 * 0.5 + amax * 1e-3;
                    let tol = match g.dtype {
                        DType::Q8_0 | DType::Q8R8 => q8,
                        DType::F16 => amax * 1e-3,
                        _ => 0.0,
                    };
                    for (x, y) in wb.iter().zip(gb) {
                        assert!((x - y).abs() <= tol, "{name}: {}[{e}] block {blk}: {x} vs {y} ({})", g.name, g.dtype);
                    }
                }
            }
        }
        assert!([DType::Q8R8, DType::F16, DType::F32].iter().all(|d| seen.contains(d)), "{name}: {seen:?}");
        if name == "deepseek_v2_greedy" {
            // llama.cpp's F16 attn_k_b (rows of 16: no Q8_0) and Q8_0 attn_v_b, both kept: MLA's
            // per-head binding slices whole rows of self-contained blocks.
            let dtype = |n: &str| gg.parsed().tensors.iter().find(|t| t.name == n).map(|t| t.dtype);
            assert_eq!((dtype("layers.1.attn.k_b"), dtype("layers.1.attn.v_b")), (Some(DType::F16), Some(DType::Q8_0)));
        }
        // f32 activations: the difference is the weights' Q8_0 rounding alone (int8 activations
        // add their own rounding, whose flips in these random tiny models depend on summation
        // order).
        let (lw, lg) =
            (logits_with(&hf, &input, QuantActivations::Float), logits_with(&gg, &input, QuantActivations::Float));
        let max_abs = lw.iter().fold(0f32, |m, x| m.max(x.abs()));
        let diff = lw.iter().zip(&lg).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        let same_argmax = lw
            .chunks(hf.config().vocab_size)
            .zip(lg.chunks(gg.config().vocab_size))
            .filter(|(a, b)| argmax(a) == argmax(b))
            .count();
        eprintln!("{name} q8_0: max |Δlogit| {diff} = {:.4} of max |logit|; greedy token equal at {same_argmax} of {} positions", diff / max_abs, input.len());
        // The HF path's tolerance for rounded weights (tests/oracle.rs), and the same greedy tokens.
        assert!(diff <= 2e-2 * max_abs, "{name}: q8_0 logits differ by {diff} (max |logit| {max_abs})");
        assert_eq!(same_argmax, input.len(), "{name}: greedy tokens");
    }
}

/// llama.cpp's Q8_0 files store token_embd as Q8_0: the import keeps it so (the forward pass
/// dequantises the rows it looks up) and gives, in prefill and token by token with float and
/// int8 activations, the logits bit for bit of the same file with an f32 embedding (the former
/// import), which is larger.
#[test]
fn a_block_typed_embedding_keeps_its_type_and_the_logits() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["mixtral_gqa", "deepseek_v2_greedy", "qwen3_next_hybrid"] {
        let (dir, out) = (models_root().join(name), tmp.path().join(format!("{name}.colibri")));
        convert_gguf(&gguf_root().join(format!("{name}.q8_0.gguf")), &dir, &out);
        let gg = Model::open(&out, &LoadOptions::default()).unwrap();
        gg.verify().unwrap();
        let wide_path = tmp.path().join(format!("{name}.f32-embedding.colibri"));
        let wide = f32_twin(&gg, &wide_path, &|t| t.name == "tok_embeddings");
        let dtype = |m: &Model| m.parsed().tensor("tok_embeddings").map(|t| t.dtype);
        assert_eq!((dtype(&gg), dtype(&wide)), (Some(DType::Q8_0), Some(DType::F32)), "{name}");
        let size = |p: &Path| std::fs::metadata(p).unwrap().len();
        eprintln!("{name}: {} bytes with the Q8_0 embedding, {} with it as f32", size(&out), size(&wide_path));
        assert!(size(&out) < size(&wide_path), "{name}");
        let input = ids(&meta(&dir)["input_ids"]);
        for act in [QuantActivations::Float, QuantActivations::default()] {
            let (a, b) = (logits_with(&gg, &input, act), logits_with(&wide, &input, act));
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{name} {act:?}: prefill logits");
            let last = |m: &Model| {
                let opts = SessionOptions { n_ctx: 256, quant_act: act, ..Default::default() };
                let mut s = Session::new(m.config(), &opts).unwrap();
                for id in &input {
                    forward(m, &mut s, Input::Tokens(std::slice::from_ref(id)), &ForwardOptions::default()).unwrap();
                }
                s.logits().to_vec()
            };
            assert_eq!(last(&gg), last(&wide), "{name} {act:?}: decoded logits");
        }
    }
}

/// Fixture `name`'s GGUF `base` and its other `layouts` convert to the same model (config and
/// every tensor's bytes); the base model is returned.
fn same_model(name: &str, base: &str, layouts: &[&str], tmp: &Path) -> Model {
    let dir = models_root().join(name);
    let whole = tmp.join(format!("{name}.{base}.colibri"));
    convert_gguf(&gguf_root().join(format!("{name}.{base}.gguf")), &dir, &whole);
    let whole = Model::open(&whole, &LoadOptions::default()).unwrap();
    for layout in layouts {
        let out = tmp.join(format!("{name}.{layout}.colibri"));
        convert_gguf(&gguf_root().join(format!("{name}.{layout}.gguf")), &dir, &out);
        let other = Model::open(&out, &LoadOptions::default()).unwrap();
        assert_eq!(other.config(), whole.config(), "{layout}");
        assert_eq!(other.parsed().tensors.len(), whole.parsed().tensors.len(), "{layout}");
        for r in &whole.parsed().tensors {
            let same = other.tensor(&r.name).unwrap().bytes == whole.tensor(&r.name).unwrap().bytes;
            assert!(same, "{layout}: {}", r.name);
        }
    }
    whole
}

/// The same model in other layouts: split in two (opened from either part), and with merged
/// `attn_qkv` tensors (tools/make_gguf_fixtures.py merge_qkv).
#[test]
fn split_and_merged_qkv_layouts_give_the_same_model() {
    let tmp = tempfile::tempdir().unwrap();
    let layouts = ["q8_0-split-00001-of-00002", "q8_0-split-00002-of-00002", "q8_0-qkv"];
    same_model("mixtral_gqa", "q8_0", &layouts, tmp.path());
}

/// Qwen3-Next Q8_0 GGUFs: with llama.cpp's fused `ffn_gate_up_exps` (`--fuse-gate-up-exps`) and
/// in its earlier converter's layout (one grouped `ssm_in` per DeltaNet layer,
/// make_gguf_fixtures.py legacy_ssm_in) they give the same model as the plain file, whose
/// logits stay within the q8_0 tolerance of transformers' with the same argmax everywhere.
#[test]
fn qwen3next_fused_gate_up_and_legacy_ssm_in_layouts_give_the_same_model() {
    let tmp = tempfile::tempdir().unwrap();
    let name = "qwen3_next_hybrid";
    let m = same_model(name, "q8_0", &["q8_0-gate_up", "q8_0-ssm_in"], tmp.path());
    assert!(m.parsed().tensors.iter().any(|t| t.dtype == DType::Q8_0), "{name}: Q8_0 kept");
    let (rel, same, _) = against_oracle(&m, &models_root().join(name));
    eprintln!("{name} q8_0 GGUF vs transformers: {rel:.3e} × max|logit|");
    assert!(rel <= 2e-2 && same, "{name} q8_0: {rel:e} of max|logit|, argmax equal: {same}");
}

/// Qwen3-Next Q4_K_M (llama-quantize's type mix; in this small model each DeltaNet layer's
/// `attn_qkv` is Q8_0 and its `attn_gate` Q5_0 — Q6_K and Q4_K at full size): it converts, each
/// part keeping its own type as its own matrix (`split_z`: `delta.in_qkv`, `delta.in_z`), with
/// the values of the same weights dequantised into one F32 matrix (make_gguf_fixtures.py
/// float_in_proj, which the converter fuses into `delta.in_qkvz`), every other tensor the same
/// bytes, and — float activations, in prefill and token by token — those weights' logits up to
/// summation order.
#[test]
fn qwen3next_q4_k_m_keeps_attn_qkv_and_attn_gate_apart_in_their_types() {
    let tmp = tempfile::tempdir().unwrap();
    let name = "qwen3_next_hybrid";
    let dir = models_root().join(name);
    let open = |outtype: &str| {
        let out = tmp.path().join(format!("{name}.{outtype}.colibri"));
        convert_gguf(&gguf_root().join(format!("{name}.{outtype}.gguf")), &dir, &out);
        let m = Model::open(&out, &LoadOptions::default()).unwrap();
        m.verify().unwrap();
        m
    };
    let (split, fused) = (open("q4_k_m"), open("q4_k_m-f32_in"));
    let (ds, df) = (split.config().delta_net.unwrap(), fused.config().delta_net.unwrap());
    assert!(ds.split_z && !df.split_z, "split_z: {} / {}", ds.split_z, df.split_z);
    let stored = |m: &Model, n: &str| {
        let t = m.tensor(n).unwrap_or_else(|| panic!("{n} missing"));
        (t.dtype, values(t.dtype, t.bytes, t.cols()))
    };
    let mut layers = 0;
    for (l, spec) in split.config().layers.iter().enumerate() {
        if spec.kind != colibri::model::LayerKind::DeltaNet {
            continue;
        }
        let (tq, qkv) = stored(&split, &format!("layers.{l}.delta.in_qkv"));
        let (tz, z) = stored(&split, &format!("layers.{l}.delta.in_z"));
        let (tf, qkvz) = stored(&fused, &format!("layers.{l}.delta.in_qkvz"));
        assert!(tq != tz && tf == DType::F32, "layer {l}: {tq} / {tz} / {tf}");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&qkvz), bits(&[qkv, z].concat()), "layer {l}: in_qkvz is not [in_qkv; in_z]");
        layers += 1;
    }
    assert_eq!(layers, 3, "DeltaNet layers seen");
    let joined_or_split =
        |name: &str| [".delta.in_qkv", ".delta.in_z", ".delta.in_qkvz"].iter().any(|s| name.ends_with(s));
    for t in split.parsed().tensors.iter().filter(|t| !joined_or_split(&t.name)) {
        assert_eq!(split.tensor(&t.name).unwrap().bytes, fused.tensor(&t.name).unwrap().bytes, "{}", t.name);
    }
    let input = ids(&meta(&dir)["input_ids"]);
    let step_by_step = |m: &Model| {
        let opts = SessionOptions { n_ctx: 256, quant_act: QuantActivations::Float, ..Default::default() };
        let mut s = Session::new(m.config(), &opts).unwrap();
        let mut all = Vec::new();
        for t in &input {
            forward(m, &mut s, Input::Tokens(std::slice::from_ref(t)), &ForwardOptions::default()).unwrap();
            all.extend_from_slice(s.logits());
        }
        all
    };
    let prefill = |m: &Model| logits_with(m, &input, QuantActivations::Float);
    for (how, a, b) in
        [("prefill", prefill(&split), prefill(&fused)), ("token by token", step_by_step(&split), step_by_step(&fused))]
    {
        let max_abs = b.iter().fold(0f32, |m, x| m.max(x.abs()));
        let diff = a.iter().zip(&b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        let vocab = split.config().vocab_size;
        let same = a.chunks(vocab).zip(b.chunks(vocab)).all(|(x, y)| argmax(x) == argmax(y));
        eprintln!("{name} q4_k_m {how}: max |Δlogit| {diff} = {:.2e} of max |logit|", diff / max_abs);
        assert!(diff <= 1e-5 * max_abs && same, "{how}: {diff} of {max_abs}, argmax equal: {same}");
    }
}

/// A copy of a fixture GGUF with `from` replaced by `to` (same length) at its first occurrence.
fn patched(name: &str, from: &[u8], to: &[u8], tmp: &Path) -> PathBuf {
    let mut b = std::fs::read(gguf_root().join(name)).unwrap();
    let at = b.windows(from.len()).position(|w| w == from).unwrap();
    b[at..at + to.len()].copy_from_slice(to);
    let out = tmp.join(name);
    std::fs::write(&out, b).unwrap();
    out
}

fn map_error(path: &Path) -> String {
    match colibri_convert::gguf::map(path) {
        Ok(_) => panic!("{} accepted", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn unknown_architectures_and_types_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let arch = patched("mixtral_gqa.q8_0.gguf", b"\x05\0\0\0\0\0\0\0llama", b"\x05\0\0\0\0\0\0\0lxama", tmp.path());
    let e = map_error(&arch);
    assert!(e.contains("architecture 'lxama' is not supported") && !e.contains('\n'), "{e}");
    // output_norm.weight: name, n_dims 1, ne [64], type 0 (F32) → 26 (I32, the same size).
    let mut info = b"output_norm.weight\x01\0\0\0\x40\0\0\0\0\0\0\0".to_vec();
    let mut to = info.clone();
    info.extend([0, 0, 0, 0]);
    to.extend([26, 0, 0, 0]);
    let e = map_error(&patched("mixtral_gqa.q8_0.gguf", &info, &to, tmp.path()));
    assert!(e.contains("output_norm.weight has type I32") && !e.contains('\n'), "{e}");
    // Found by the fuzzer: a huge block count must not size the layer list.
    let key = b"llama.block_count\x04\0\0\0";
    let huge = patched(
        "mixtral_gqa.q8_0.gguf",
        &[&key[..], &[2, 0, 0, 0]].concat(),
        &[&key[..], &[0xff; 4]].concat(),
        tmp.path(),
    );
    let e = map_error(&huge);
    assert!(e.contains("block_count 4294967295 is above"), "{e}");
}

/// Tied embeddings and one kv head (mixtral_mqa_swa_tied): the same tensors bit for bit. The
/// GGUF lacks what llama.cpp's converter does not carry for `llama`: the sliding window (6); the
/// config equals the checkpoint's up to exactly that field.
#[test]
fn tied_mqa_gguf_matches_up_to_what_llama_cpp_drops() {
    let tmp = tempfile::tempdir().unwrap();
    let (hf, gg, _) = both("mixtral_mqa_swa_tied", "f32", tmp.path());
    let (mut want, got) = (hf.config().clone(), gg.config().clone());
    assert!(got.tie_embeddings && got.n_kv_heads == 1);
    assert!(
        want.layers.iter().all(|l| l.sliding_window == Some(6))
            && got.layers.iter().all(|l| l.sliding_window.is_none())
    );
    for l in &mut want.layers {
        l.sliding_window = None;
    }
    (want.eos_token_ids, want.pad_token_id) = (got.eos_token_ids.clone(), got.pad_token_id);
    assert_eq!(got, want);
    for r in &hf.parsed().tensors {
        assert!(hf.tensor(&r.name).unwrap().bytes == gg.tensor(&r.name).unwrap().bytes, "{}", r.name);
    }
}

#[test]
fn dtype_and_quantize_options_are_refused_for_gguf() {
    let tmp = tempfile::tempdir().unwrap();
    let input = gguf_root().join("mixtral_gqa.q8_0.gguf");
    let args = ConvertArgs {
        input,
        output: tmp.path().join("x.colibri"),
        dtype: Some(DType::BF16),
        quantize: None,
        user_metadata: None,
    };
    let e = colibri_convert::convert(&args, None).err().expect("--dtype accepted").to_string();
    assert!(e.contains("keep their GGUF types"), "{e}");
    assert!(!tmp.path().join("x.colibri").exists());
}

/// The tensor `name` of `m` as f32 values (f32 tensors only).
fn f32s(m: &Model, name: &str) -> Vec<f32> {
    let t = m.tensor(name).unwrap();
    values(DType::F32, t.bytes, t.cols())
}

/// The two models' configs without their special-token ids (from generation_config.json on one
/// side, the GGUF vocabulary on the other).
fn configs(hf: &Model, gg: &Model) -> (colibri::model::Config, colibri::model::Config) {
    let (mut want, mut got) = (hf.config().clone(), gg.config().clone());
    (want.eos_token_ids, got.eos_token_ids, want.pad_token_id, got.pad_token_id) = (vec![], vec![], None, None);
    (want, got)
}

/// `got` against the fixture's transformers logits (oracle/logits_{dtype}.npy, float32 after
/// its header): max |Δlogit| / max |logit|, and whether every position's argmax is equal.
fn oracle_distance(got: &[f32], dir: &Path, dtype: &str, vocab: usize) -> (f64, bool) {
    let b = std::fs::read(dir.join(format!("oracle/logits_{dtype}.npy"))).unwrap();
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    let want: Vec<f32> = b[10 + hlen..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    assert_eq!(want.len(), got.len(), "{}: oracle shape", dir.display());
    let max_abs = want.iter().fold(0f64, |a, &v| a.max(f64::from(v).abs()));
    let same = got.chunks(vocab).zip(want.chunks(vocab)).all(|(a, b)| argmax(a) == argmax(b));
    (fixtures::max_diff(got, &want) / max_abs, same)
}

/// The teacher-forced logits of `m` against the fixture's transformers oracle: (max |Δlogit| /
/// max |logit|, every position's argmax equal), and 32 greedy tokens from its prompt.
fn against_oracle(m: &Model, dir: &Path) -> (f64, bool, Vec<u32>) {
    let meta = meta(dir);
    let input = ids(&meta["input_ids"]);
    // Block-quantised weights (MXFP4) with float activations, as tests/oracle.rs checks them.
    let blocks = m.parsed().tensors.iter().any(|t| t.dtype.is_quantized());
    let quant_act = if blocks { QuantActivations::Float } else { QuantActivations::default() };
    let got = logits_with(m, &input, quant_act);
    let (rel, same) = oracle_distance(&got, dir, "f32", m.config().vocab_size);
    let mut s = Session::new(m.config(), &SessionOptions { n_ctx: 256, quant_act, ..Default::default() }).unwrap();
    let last = ForwardOptions::default();
    forward(m, &mut s, Input::Tokens(&ids(&meta["greedy_prompt"])), &last).unwrap();
    let mut greedy = Vec::new();
    for _ in 0..32 {
        greedy.push(argmax(s.logits()));
        forward(m, &mut s, Input::Tokens(&greedy[greedy.len() - 1..]), &last).unwrap();
    }
    (rel, same, greedy)
}

/// `m` matches fixture `name`'s transformers oracle as the HF path must (tests/oracle.rs): max
/// |Δlogit| ≤ 1e-4 · max |logit|, the same argmax everywhere and the same 32 greedy tokens.
fn matches_oracle(m: &Model, name: &str) {
    let dir = models_root().join(name);
    let (rel, same, greedy) = against_oracle(m, &dir);
    eprintln!("{name} GGUF vs transformers: max |Δlogit| = {rel:.3e} × max|logit|");
    assert!(rel <= 1e-4 && same, "{name}: {rel:e} of max|logit| from transformers");
    assert_eq!(greedy, ids(&meta(&dir)["greedy_f32"]), "{name}: greedy tokens");
}

/// Fixture `name`'s llama.cpp f32 GGUF gives the checkpoint's config, its tensors bit for bit and
/// bit-identical logits, which match transformers as the HF path must.
fn is_the_checkpoint_bit_for_bit(name: &str, tmp: &Path) {
    let (hf, gg, input) = both(name, "f32", tmp);
    let (want, got) = configs(&hf, &gg);
    assert_eq!(got, want, "{name}: config");
    for r in &hf.parsed().tensors {
        let g = gg.parsed().tensors.iter().find(|g| g.name == r.name).unwrap_or_else(|| panic!("{}", r.name));
        assert_eq!((g.dtype, &g.shape), (r.dtype, &r.shape), "{name}: {}", r.name);
        let same = hf.tensor(&r.name).unwrap().bytes == gg.tensor(&r.name).unwrap().bytes;
        assert!(same, "{name}: {} bytes differ", r.name);
    }
    assert_eq!(hf.parsed().tensors.len(), gg.parsed().tensors.len(), "{name}: tensor count");
    let (lw, lg) = (logits(&hf, &input), logits(&gg, &input));
    assert!(lw.iter().zip(&lg).all(|(a, b)| a.to_bits() == b.to_bits()), "{name}: logits not bit-identical");
    matches_oracle(&gg, name);
}

/// DeepSeek-V2 (softmax, no q LoRA, two shared experts, a leading dense layer) and V3
/// (sigmoid + choice bias, top-2-sum groups, q LoRA, normalised ×2.5, its MTP block dropped),
/// GPT-OSS (MXFP4 experts copied as they are, sinks, biases, alternating windows, YaRN):
/// llama.cpp's f32 GGUFs give the checkpoint's config, its tensors bit for bit (W_UK / W_UV
/// per head included) and bit-identical logits, which match transformers.
#[test]
fn mla_and_gpt_oss_ggufs_are_the_checkpoint_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["deepseek_v2_greedy", "deepseek_v2_groups_yarn", "deepseek_v3_mtp", "gpt_oss_mxfp4"] {
        is_the_checkpoint_bit_for_bit(name, tmp.path());
    }
}

/// dots1 (sigmoid + choice bias with no gating-function key, per-head q/k norms, two shared
/// experts, q/k/v/o biases), ernie4_5-moe (interleaved RoPE without llama.cpp's q/k permutation,
/// softmax + a choice bias on the probabilities, a leading dense layer, the shared expert's width
/// from its tensors: the converter writes intermediate_size / head_count_kv = 24 for 16 here) and
/// hunyuan-moe (q/k norms after RoPE, the shared MLP, q/k/v/o biases, tied embeddings; converted
/// from the per-expert layout its llama.cpp converter reads): llama.cpp's f32 GGUFs are the
/// checkpoint bit for bit, and match transformers as the HF path does.
#[test]
fn dots1_ernie_and_hunyuan_ggufs_are_the_checkpoint_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["dots1_plain_bias", "ernie4_5_moe_hub", "hunyuan_moe_tied_bias"] {
        is_the_checkpoint_bit_for_bit(name, tmp.path());
    }
}

/// dots1 with expert groups (top-2 sums, one of two groups), a leading dense layer and a sliding
/// layer (`max_window_layers`): the GGUF is the checkpoint — groups, dense layer, every tensor bit
/// for bit — up to what llama.cpp's dots1 does not have, the sliding window: its config equals
/// the checkpoint's with the window removed.
#[test]
fn dots1_gguf_is_the_checkpoint_up_to_its_sliding_window() {
    let tmp = tempfile::tempdir().unwrap();
    let (hf, gg, _) = both("dots1_groups_swa", "f32", tmp.path());
    let (mut want, got) = configs(&hf, &gg);
    let windows = |c: &colibri::model::Config| c.layers.iter().map(|l| l.sliding_window).collect::<Vec<_>>();
    assert_eq!((windows(&want), windows(&got)), (vec![None, None, Some(6)], vec![None; 3]));
    assert!(want.moe.groups.is_some_and(|g| (g.n_group, g.topk_group) == (2, 1)) && !want.layers[0].moe);
    want.layers[2].sliding_window = None;
    assert_eq!(got, want);
    for r in &hf.parsed().tensors {
        assert!(hf.tensor(&r.name).unwrap().bytes == gg.tensor(&r.name).unwrap().bytes, "{}", r.name);
    }
}

/// Qwen3-Next: llama.cpp's converter adds 1 to the zero-centred norms and stores −exp(A_log).
/// The GGUF's config is the checkpoint's with those gains taken as they are (norm_offset 0);
/// those norms hold exactly the f32 sums 1 + w, A_log is recovered within 2 ulp, every other
/// tensor bit for bit (de-grouped in_proj_qkvz / in_proj_ba, the gated q); logits match
/// transformers as tightly as the checkpoint's, with the same greedy tokens.
#[test]
fn qwen3next_gguf_is_the_checkpoint_up_to_its_norm_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let name = "qwen3_next_hybrid";
    let (hf, gg, _) = both(name, "f32", tmp.path());
    let (mut want, got) = configs(&hf, &gg);
    assert_eq!((want.norm_offset, got.norm_offset), (1.0, 0.0));
    // No layer is dense: the dense width is not part of the model (the GGUF has none).
    assert!(want.layers.iter().all(|l| l.moe));
    (want.norm_offset, want.dense_ffn) = (0.0, 0);
    assert_eq!(got, want, "{name}: config");
    let (mut offset, mut a_log) = (0, 0);
    for r in &hf.parsed().tensors {
        let (h, g) = (f32s(&hf, &r.name), f32s(&gg, &r.name));
        let n = &r.name;
        if n.ends_with("attn_norm")
            || n.ends_with("ffn_norm")
            || n.ends_with("_norm") && !n.contains("delta")
            || n == "norm"
        {
            assert!(h.iter().zip(&g).all(|(x, y)| (1.0 + x).to_bits() == y.to_bits()), "{n}: not 1 + w");
            offset += 1;
        } else if n.ends_with("delta.a_log") {
            assert!(
                h.iter().zip(&g).all(|(x, y)| (x - y).abs() <= 2.0 * f32::EPSILON * x.abs()),
                "{n}: {h:?} vs {g:?}"
            );
            a_log += 1;
        } else {
            assert!(h.iter().zip(&g).all(|(x, y)| x.to_bits() == y.to_bits()), "{n}: values differ");
        }
    }
    assert_eq!((offset, a_log), (2 * 4 + 2 + 1, 3), "norms and A_log tensors seen");
    let (rel_hf, _, _) = against_oracle(&hf, &models_root().join(name));
    eprintln!("{name} checkpoint vs transformers: {rel_hf:.3e} × max|logit|");
    matches_oracle(&gg, name);
}

/// Phi-MoE: LayerNorms with biases, biased attention and lm_head, sparsemixer, LongRoPE factors
/// read from the GGUF's rope_factors tensors. llama.cpp keeps one attention factor for both
/// factor sets (its converter's formula, not the config's short/long mscale): the GGUF gives
/// exactly the checkpoint with both mscales set to that factor (config, tensors and logits bit
/// for bit against the converted copy), and differs from transformers by that factor alone.
#[test]
fn phimoe_gguf_is_the_checkpoint_with_llama_cpp_s_attention_factor() {
    let tmp = tempfile::tempdir().unwrap();
    let name = "phimoe_hub";
    let dir = models_root().join(name);
    let gguf_out = tmp.path().join("phimoe.gguf.colibri");
    convert_gguf(&gguf_root().join(format!("{name}.f32.gguf")), &dir, &gguf_out);
    let gg = Model::open(&gguf_out, &LoadOptions::default()).unwrap();
    // Every GGUF tensor is used (the rope factors by the config).
    let mapped = colibri_convert::gguf::map(&gguf_root().join(format!("{name}.f32.gguf"))).unwrap();
    assert!(mapped.warnings.is_empty(), "{:?}", mapped.warnings);
    let colibri::model::RopeScaling::LongRope { short_mscale, long_mscale, .. } = gg.config().rope.scaling.clone()
    else {
        panic!("{name}: no LongRoPE from the GGUF")
    };
    // sqrt(1 + ln(8192 / 4096) / ln 4096), as llama.cpp's converter wrote it (an f32).
    let formula = (1.0 + 2f64.ln() / 4096f64.ln()).sqrt();
    assert!(short_mscale == long_mscale && (short_mscale - formula).abs() < 1e-7, "{short_mscale} {long_mscale}");
    let copy = tmp.path().join(name);
    std::fs::create_dir(&copy).unwrap();
    for f in std::fs::read_dir(&dir).unwrap().flatten().filter(|f| f.path().is_file()) {
        std::fs::copy(f.path(), copy.join(f.file_name())).unwrap();
    }
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    cfg["rope_scaling"]["short_mscale"] = short_mscale.into();
    cfg["rope_scaling"]["long_mscale"] = long_mscale.into();
    std::fs::write(copy.join("config.json"), cfg.to_string()).unwrap();
    let hf_out = tmp.path().join("phimoe.hf.colibri");
    convert_as(&copy, &hf_out, None);
    let hf = Model::open(&hf_out, &LoadOptions::default()).unwrap();
    let (want, got) = configs(&hf, &gg);
    assert_eq!(got, want, "{name}: config");
    for r in &hf.parsed().tensors {
        assert!(hf.tensor(&r.name).unwrap().bytes == gg.tensor(&r.name).unwrap().bytes, "{}", r.name);
    }
    let input = ids(&meta(&dir)["input_ids"]);
    let (lw, lg) = (logits(&hf, &input), logits(&gg, &input));
    assert!(lw.iter().zip(&lg).all(|(a, b)| a.to_bits() == b.to_bits()), "{name}: logits not bit-identical");
    let (rel, same, _) = against_oracle(&gg, &dir);
    eprintln!("{name} GGUF vs transformers (short_mscale 1.2 there, {short_mscale:.4} here): {rel:.3e} × max|logit|, argmax equal: {same}");
}

/// A deepseek2 gating function colibri does not run (llama.cpp's 3, sqrt-softplus, or any
/// other number) is refused in one line naming the key.
#[test]
fn unknown_deepseek2_gating_functions_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let key = b"deepseek2.expert_gating_func\x04\0\0\0";
    let name = "deepseek_v3_mtp.f32.gguf";
    let bad = patched(name, &[&key[..], &[2, 0, 0, 0]].concat(), &[&key[..], &[3, 0, 0, 0]].concat(), tmp.path());
    let e = map_error(&bad);
    assert!(e.contains("deepseek2.expert_gating_func 3 is not supported") && !e.contains('\n'), "{e}");
}

/// bf16 GGUFs (llama.cpp's `--outtype bf16`: matrices BF16, vectors and routers F32): every
/// BF16 tensor is the HF path's `--dtype bf16` tensor byte for byte, every F32 one rounds to it;
/// the GPT-OSS experts stay MXFP4. Logits within the bf16 tolerance of transformers' on
/// bf16-rounded weights (which rounds the vectors too), the same argmax everywhere.
#[test]
fn bf16_ggufs_hold_the_checkpoint_s_bf16_rounding() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["deepseek_v2_greedy", "gpt_oss_mxfp4", "dots1_plain_bias", "ernie4_5_moe_hub", "hunyuan_moe_tied_bias"]
    {
        let dir = models_root().join(name);
        let (a, b) = (tmp.path().join(format!("{name}.hf.colibri")), tmp.path().join(format!("{name}.gg.colibri")));
        convert_as(&dir, &a, Some(DType::BF16));
        convert_gguf(&gguf_root().join(format!("{name}.bf16.gguf")), &dir, &b);
        let (hf, gg) =
            (Model::open(&a, &LoadOptions::default()).unwrap(), Model::open(&b, &LoadOptions::default()).unwrap());
        let mut kinds = Vec::new();
        for r in &hf.parsed().tensors {
            let g = gg.parsed().tensors.iter().find(|g| g.name == r.name).unwrap();
            let (hb, gb) = (hf.tensor(&r.name).unwrap().bytes, gg.tensor(&r.name).unwrap().bytes);
            kinds.push((g.dtype, r.dtype));
            match (g.dtype, r.dtype) {
                (x, y) if x == y => assert!(hb == gb, "{name}: {} bytes differ ({x})", r.name),
                (DType::F32, DType::BF16) => {
                    let rounded: Vec<u8> = gb
                        .chunks_exact(4)
                        .flat_map(|c| half::bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes())
                        .collect();
                    assert!(rounded == hb, "{name}: {} is not the f32 of its bf16", r.name);
                }
                (x, y) => panic!("{name}: {} is {x} from the GGUF, {y} from the checkpoint", r.name),
            }
        }
        assert!(kinds.contains(&(DType::BF16, DType::BF16)), "{name}: {kinds:?}");
        let meta = meta(&dir);
        let input = ids(&meta["input_ids"]);
        let got = logits_with(&gg, &input, QuantActivations::Float);
        let (rel, same) = oracle_distance(&got, &dir, "bf16", gg.config().vocab_size);
        eprintln!("{name} bf16 GGUF vs transformers (bf16 weights): {rel:.3e} × max|logit|, argmax equal: {same}");
        assert!(rel <= 2e-2 && same, "{name} bf16: {rel:e}");
    }
}

/// Fixture `name`'s f32 GGUF and the conversion of a copy of its checkpoint whose config.json
/// `edit` changed.
fn gguf_and_edited_checkpoint(name: &str, edit: &dyn Fn(&mut serde_json::Value), tmp: &Path) -> (Model, Model) {
    let dir = models_root().join(name);
    let gguf_out = tmp.join(format!("{name}.gguf.colibri"));
    convert_gguf(&gguf_root().join(format!("{name}.f32.gguf")), &dir, &gguf_out);
    let copy = tmp.join(name);
    std::fs::create_dir(&copy).unwrap();
    for f in std::fs::read_dir(&dir).unwrap().flatten().filter(|f| f.path().is_file()) {
        std::fs::copy(f.path(), copy.join(f.file_name())).unwrap();
    }
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(copy.join("config.json"), cfg.to_string()).unwrap();
    let hf_out = tmp.join(format!("{name}.hf.colibri"));
    convert_as(&copy, &hf_out, None);
    let open = |p: &Path| Model::open(p, &LoadOptions::default()).unwrap();
    (open(&hf_out), open(&gguf_out))
}

/// The two models hold the same tensors bit for bit and give bit-identical logits over `name`'s
/// input.
fn same_tensors_and_logits(hf: &Model, gg: &Model, name: &str) {
    assert_eq!(hf.parsed().tensors.len(), gg.parsed().tensors.len());
    for r in &hf.parsed().tensors {
        assert!(hf.tensor(&r.name).unwrap().bytes == gg.tensor(&r.name).unwrap().bytes, "{}", r.name);
    }
    let input = ids(&meta(&models_root().join(name))["input_ids"]);
    let (lw, lg) = (logits(hf, &input), logits(gg, &input));
    assert!(lw.iter().zip(&lg).all(|(a, b)| a.to_bits() == b.to_bits()), "{name}: logits not bit-identical");
}

/// Llama-4: llama.cpp's `llama4` fixes what its GGUF does not carry — chunks of 8192 on the RoPE
/// layers of each group of 4, NoPE every 4th layer, the NoPE temperature (8192, 0.1), the
/// weightless q/k norm below 128 experts — whatever the checkpoint said (chunks of 8, temperature
/// 4 / 0.5 in llama4_chunked_nope). Its f32 GGUF is exactly that checkpoint with llama.cpp's
/// numbers: config, tensors (the de-transposed experts) and logits bit for bit against the
/// conversion of a copy whose config.json says them.
#[test]
fn llama4_gguf_is_the_checkpoint_with_llama_cpp_s_chunks_and_temperature() {
    let tmp = tempfile::tempdir().unwrap();
    let name = "llama4_chunked_nope";
    let edit = |c: &mut serde_json::Value| {
        (c["attention_chunk_size"], c["floor_scale"], c["attn_scale"]) = (8192.into(), 8192.into(), 0.1.into());
    };
    let (hf, gg) = gguf_and_edited_checkpoint(name, &edit, tmp.path());
    let (want, got) = configs(&hf, &gg);
    assert_eq!(got, want, "{name}: config");
    same_tensors_and_logits(&hf, &gg, name);
    let (rel, same, _) = against_oracle(&gg, &models_root().join(name));
    eprintln!("{name} GGUF vs transformers (chunks of 8 and temperature 4 / 0.5 there): {rel:.3e} × max|logit|, argmax equal: {same}");
}

/// Llama-4 with llama3 RoPE scaling (Scout's equal frequency factors): llama.cpp writes its
/// per-dimension divisors as `rope_freqs` ([1, 16, 16, 16] here), read as one LongRoPE factor set;
/// with llama.cpp's layer rules (every layer RoPE and chunked within 3 layers, q/k norm on below 128
/// experts, the temperature constants) the GGUF is the checkpoint bit for bit — config but for
/// the RoPE scaling's form, tensors, logits.
#[test]
fn llama4_gguf_reads_llama_cpp_s_rope_freqs() {
    let tmp = tempfile::tempdir().unwrap();
    let name = "llama4_moe_llama3_tied";
    let edit = |c: &mut serde_json::Value| {
        (c["no_rope_layers"], c["use_qk_norm"], c["attn_temperature_tuning"]) =
            (vec![1; 3].into(), true.into(), true.into());
        (c["attention_chunk_size"], c["floor_scale"], c["attn_scale"]) = (8192.into(), 8192.into(), 0.1.into());
        c["layer_types"] = vec!["chunked_attention"; 3].into();
    };
    let (hf, gg) = gguf_and_edited_checkpoint(name, &edit, tmp.path());
    let (mut want, got) = configs(&hf, &gg);
    let colibri::model::RopeScaling::LongRope { short_factor, long_factor, .. } = &got.rope.scaling else {
        panic!("{:?}", got.rope.scaling)
    };
    assert_eq!((short_factor, long_factor), (&vec![1.0, 16.0, 16.0, 16.0], &vec![1.0, 16.0, 16.0, 16.0]));
    assert!(matches!(want.rope.scaling, colibri::model::RopeScaling::Llama3 { .. }));
    want.rope.scaling = got.rope.scaling.clone();
    assert_eq!(got, want, "{name}: config");
    same_tensors_and_logits(&hf, &gg, name);
}
