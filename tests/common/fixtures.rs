//! Shared by the converter and engine tests: the fixture checkpoints, their tensors read with
//! the independent `safetensors` crate, the HF → colibri name mapping restated independently of
//! the converter (so a wrong mapping in the converter fails the tests), the fixtures' oracle
//! metadata, conversion through the converter library, argmax, f32 twins of converted files. A submodule of `common` for the
//! library's tests; the converter's and the CLI's tests include this file by path.
#![allow(dead_code)] // each test binary uses a different subset

use colibri::format::{DType, FileWriter, PlannedTensor, TensorKind, TensorRecord};
use colibri::{LoadOptions, Model};
use colibri_convert::{ConvertArgs, ConvertReport};
use half::{bf16, f16};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The repository's tests/fixtures/models, found from the package whose test includes this file
/// (the root package, or a member crate in a subdirectory).
pub fn models_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = manifest.ancestors().map(|d| d.join("tests/fixtures/models")).find(|p| p.is_dir());
    found.unwrap_or_else(|| manifest.join("tests/fixtures/models"))
}

/// The fixture checkpoints of float weights (f32/f16/bf16), whose tensors convert byte for
/// byte; the fp8 one (`is_fp8`) is dequantised instead and has its own tests.
pub fn fixtures() -> Vec<PathBuf> {
    let root = models_root();
    let mut v: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("tests/fixtures/models exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("config.json").is_file() && !is_fp8(p))
        .collect();
    v.sort();
    assert!(v.len() >= 4, "expected fixtures of every family, found {v:?}");
    v
}

/// Whether a fixture checkpoint stores fp8 weights (a quantization_config in its config.json).
pub fn is_fp8(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("config.json")).is_ok_and(|t| t.contains("\"quantization_config\""))
}

/// A source tensor, its elements as f32 plus their raw bytes and dtype.
pub struct Src {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

pub fn load_sources(dir: &Path) -> HashMap<String, Src> {
    let mut out = HashMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "safetensors") {
            let data = std::fs::read(&p).unwrap();
            let st = SafeTensors::deserialize(&data).unwrap();
            for (name, view) in st.tensors() {
                out.insert(
                    name,
                    Src { dtype: view.dtype(), shape: view.shape().to_vec(), bytes: view.data().to_vec() },
                );
            }
        }
    }
    // The config too (as bytes): Qwen3-Next's grouped projections are split by its head counts.
    let config = std::fs::read(dir.join("config.json")).unwrap();
    out.insert(CONFIG.into(), Src { dtype: Dtype::U8, shape: vec![config.len()], bytes: config });
    out
}

/// The key of the fixture's config.json in `load_sources`' map.
pub const CONFIG: &str = "config.json";

/// Rows `rows` (start, count) of the 2-D source tensor `s`, concatenated.
fn rows_of(s: &Src, runs: impl IntoIterator<Item = (usize, usize)>) -> Vec<u8> {
    let row = s.shape[1] * elem_size(s.dtype);
    runs.into_iter().flat_map(|(start, n)| s.bytes[start * row..(start + n) * row].to_vec()).collect()
}

/// Qwen3-Next's tensors that are not copied whole: in_proj_qkvz holds, per key head g,
/// [q_g, k_g, v_g, z_g] (dk, dk, r·dv, r·dv rows; r = value heads per key head) and colibri all
/// q, then all k, v, z; in_proj_ba per key head [b_g, a_g] (r rows each); a gated q_proj per head
/// [query, gate] (head_dim rows each); conv1d [C, 1, K] is [C, K].
fn qwen3_next_bytes(src: &HashMap<String, Src>, base: &str, sfx: &str) -> Option<(Dtype, Vec<u8>)> {
    let c: Value = serde_json::from_slice(&src[CONFIG].bytes).unwrap();
    let num = |k: &str| c[k].as_u64().unwrap() as usize;
    let get = |leaf: &str| &src[&format!("{base}.{leaf}")];
    let grouped = |s: &Src, widths: &[usize], pick: usize, groups: usize| {
        let w: usize = widths.iter().sum();
        let at: usize = widths[..pick].iter().sum();
        rows_of(s, (0..groups).map(|g| (g * w + at, widths[pick])))
    };
    let out = match sfx {
        "delta.in_qkvz" | "delta.in_ba" => {
            let (ng, dk, dv) = (num("linear_num_key_heads"), num("linear_key_head_dim"), num("linear_value_head_dim"));
            let r = num("linear_num_value_heads") / ng;
            if sfx == "delta.in_ba" {
                let s = get("linear_attn.in_proj_ba.weight");
                (s.dtype, (0..2).flat_map(|i| grouped(s, &[r, r], i, ng)).collect())
            } else {
                let s = get("linear_attn.in_proj_qkvz.weight");
                (s.dtype, (0..4).flat_map(|i| grouped(s, &[dk, dk, r * dv, r * dv], i, ng)).collect())
            }
        }
        "attn.q" | "attn.gate" => {
            let s = get("self_attn.q_proj.weight");
            let hd = num("head_dim");
            (s.dtype, grouped(s, &[hd, hd], usize::from(sfx == "attn.gate"), num("num_attention_heads")))
        }
        "delta.conv" => (get("linear_attn.conv1d.weight").dtype, get("linear_attn.conv1d.weight").bytes.clone()),
        "delta.dt_bias" => (get("linear_attn.dt_bias").dtype, get("linear_attn.dt_bias").bytes.clone()),
        "delta.a_log" => (get("linear_attn.A_log").dtype, get("linear_attn.A_log").bytes.clone()),
        "delta.norm" => (get("linear_attn.norm.weight").dtype, get("linear_attn.norm.weight").bytes.clone()),
        "delta.out" => (get("linear_attn.out_proj.weight").dtype, get("linear_attn.out_proj.weight").bytes.clone()),
        _ => return None,
    };
    Some(out)
}

pub fn elem_size(d: Dtype) -> usize {
    match d {
        Dtype::F32 => 4,
        Dtype::F16 | Dtype::BF16 => 2,
        Dtype::U8 => 1,
        other => panic!("fixture dtype {other:?}"),
    }
}

pub fn to_f32(d: Dtype, b: &[u8]) -> f32 {
    match d {
        Dtype::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        Dtype::F16 => f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
        Dtype::BF16 => bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
        other => panic!("fixture dtype {other:?}"),
    }
}

/// The bytes of the source that should become expert `e` (or the whole tensor) of `name`.
pub fn expected_bytes(src: &HashMap<String, Src>, name: &str, expert: Option<usize>, rows: usize) -> (Dtype, Vec<u8>) {
    let simple: Option<String> = match name {
        "tok_embeddings" => Some("model.embed_tokens.weight".into()),
        "norm" => Some("model.norm.weight".into()),
        "norm_bias" => Some("model.norm.bias".into()),
        "lm_head" => Some("lm_head.weight".into()),
        "lm_head_bias" => Some("lm_head.bias".into()),
        _ => None,
    };
    if let Some(n) = simple {
        let s = &src[&n];
        return (s.dtype, s.bytes.clone());
    }
    let rest = name.strip_prefix("layers.").unwrap();
    let (l, sfx) = rest.split_once('.').unwrap();
    let base = format!("model.layers.{l}");
    if src.contains_key(&format!("{base}.mlp.router.bias")) {
        if let Some(found) = gpt_oss_expected(src, &base, sfx, expert, rows) {
            return found;
        }
    }
    if src[CONFIG].bytes.windows(12).any(|w| w == b"\"qwen3_next\"") {
        if let Some(found) = qwen3_next_bytes(src, &base, sfx) {
            return found;
        }
    }
    // The first of `leaves` the checkpoint has (families spell some tensors differently).
    let first = |leaves: &[String]| -> String {
        leaves.iter().find(|l| src.contains_key(&format!("{base}.{l}"))).unwrap_or(&leaves[0]).clone()
    };
    let leaf = match sfx {
        "attn_norm" => "input_layernorm.weight".to_string(),
        "ffn_norm" => "post_attention_layernorm.weight".to_string(),
        "attn_norm_bias" => "input_layernorm.bias".to_string(),
        "ffn_norm_bias" => "post_attention_layernorm.bias".to_string(),
        "attn.k_b" | "attn.v_b" => return mla_kv_b(src, &base, sfx == "attn.v_b", rows),
        s if s.starts_with("attn.") => {
            let p = &s[5..];
            match p {
                "q_bias" | "k_bias" | "v_bias" | "o_bias" => format!("self_attn.{}_proj.bias", &p[..1]),
                // Hunyuan-MoE: query_layernorm / key_layernorm.
                "q_norm" | "k_norm" => first(&[
                    format!("self_attn.{p}.weight"),
                    format!("self_attn.{}_layernorm.weight", if p == "q_norm" { "query" } else { "key" }),
                ]),
                "q_a_norm" | "kv_a_norm" => format!("self_attn.{}_layernorm.weight", &p[..p.len() - 5]),
                "kv_a" => "self_attn.kv_a_proj_with_mqa.weight".to_string(),
                _ => format!("self_attn.{p}_proj.weight"),
            }
        }
        // Llama-4's dense layers: feed_forward.*.
        "mlp.gate" | "mlp.up" | "mlp.down" => {
            first(&["mlp", "feed_forward"].map(|m| format!("{m}.{}_proj.weight", &sfx[4..])))
        }
        "moe.shared.gate" | "moe.shared.up" | "moe.shared.down" => {
            // Qwen2-MoE's shared_expert, GLM-4.5's shared_experts, Hunyuan's shared_mlp.
            let proj = &sfx[11..];
            let mut leaves = ["shared_expert", "shared_experts", "shared_mlp"]
                .map(|m| format!("mlp.{m}.{proj}_proj.weight"))
                .to_vec();
            leaves.push(format!("feed_forward.shared_expert.{proj}_proj.weight"));
            first(&leaves)
        }
        // ERNIE-4.5: moe_statics ([1, E], the same bytes).
        "moe.router_bias" => first(
            &["mlp.gate", "mlp.moe_statics", "mlp.gate.moe_statics"].map(|m| format!("{m}.e_score_correction_bias")),
        ),
        "moe.shared_expert_gate" => "mlp.shared_expert_gate.weight".to_string(),
        "moe.router" => {
            let s = [
                "mlp.gate",
                "mlp.router",
                "block_sparse_moe.gate",
                "block_sparse_moe.router",
                "block_sparse_moe.router.layer",
                "mlp.gate.wg",
                "feed_forward.router",
            ]
            .iter()
            .find_map(|leaf| src.get(&format!("{base}.{leaf}.weight")))
            .expect("router source");
            return (s.dtype, s.bytes.clone());
        }
        s if s.starts_with("moe.experts.") => {
            let proj = &s[12..];
            let e = expert.unwrap();
            let (mixtral_leaf, hf_leaf) = match proj {
                "gate" => ("w1", "gate_proj"),
                "up" => ("w3", "up_proj"),
                _ => ("w2", "down_proj"),
            };
            for cand in [
                format!("{base}.block_sparse_moe.experts.{e}.{mixtral_leaf}.weight"),
                format!("{base}.mlp.experts.{e}.{hf_leaf}.weight"),
            ] {
                if let Some(s) = src.get(&cand) {
                    return (s.dtype, s.bytes.clone());
                }
            }
            if let Some(found) = llama4_expert(src, &base, proj, e, rows) {
                return found;
            }
            // Fused stacks: transformers 5 (under mlp or Granite's block_sparse_moe) or Granite's hub names.
            let leaves: [&str; 3] = if proj == "down" {
                ["mlp.experts.down_proj", "block_sparse_moe.experts.down_proj", "block_sparse_moe.output_linear.weight"]
            } else {
                [
                    "mlp.experts.gate_up_proj",
                    "block_sparse_moe.experts.gate_up_proj",
                    "block_sparse_moe.input_linear.weight",
                ]
            };
            let s = leaves
                .iter()
                .find_map(|leaf| src.get(&format!("{base}.{leaf}")))
                .unwrap_or_else(|| panic!("no source for {name} expert {e}"));
            let row_bytes = s.shape[2] * elem_size(s.dtype);
            let per_expert_rows = s.shape[1];
            let first_row = e * per_expert_rows + if proj == "up" { rows } else { 0 };
            let start = first_row * row_bytes;
            return (s.dtype, s.bytes[start..start + rows * row_bytes].to_vec());
        }
        other => panic!("no mapping for {other}"),
    };
    let s = &src[&format!("{base}.{leaf}")];
    (s.dtype, s.bytes.clone())
}

/// Llama-4's expert `e` of projection `proj` (colibri [rows, cols]) gathered from the hub's
/// transposed stacks: `feed_forward.experts.gate_up_proj` [E, H, 2F] (gate = columns :F, up = F:),
/// `down_proj` [E, F, H].
fn llama4_expert(
    src: &HashMap<String, Src>,
    base: &str,
    proj: &str,
    e: usize,
    rows: usize,
) -> Option<(Dtype, Vec<u8>)> {
    let leaf = if proj == "down" { "down_proj" } else { "gate_up_proj" };
    let s = src.get(&format!("{base}.feed_forward.experts.{leaf}"))?;
    let (inner, width) = (s.shape[1], s.shape[2]); // [E, inner, width]: colibri's (r, c) is (c, r + skip)
    let skip = if proj == "up" { rows } else { 0 };
    let es = elem_size(s.dtype);
    let mut out = Vec::with_capacity(rows * inner * es);
    for r in 0..rows {
        for c in 0..inner {
            let at = ((e * inner + c) * width + r + skip) * es;
            out.extend_from_slice(&s.bytes[at..at + es]);
        }
    }
    Some((s.dtype, out))
}

/// GPT-OSS's tensors that no other family has: o bias, sinks, router bias, and the experts —
/// gate/up interleaved along the fused 2F outputs (gate even, up odd), as floats transposed
/// ([E, H, 2F], [E, F, H]) or as MXFP4 blocks and scales (rows = outputs), which colibri keeps
/// as ggml's blocks (scale byte, then byte j = element j | element j+16 << 4).
fn gpt_oss_expected(
    src: &HashMap<String, Src>,
    base: &str,
    sfx: &str,
    expert: Option<usize>,
    rows: usize,
) -> Option<(Dtype, Vec<u8>)> {
    let whole = |leaf: &str| src.get(&format!("{base}.{leaf}")).map(|s| (s.dtype, s.bytes.clone()));
    let (stem, half) = match sfx {
        "attn.o_bias" => return whole("self_attn.o_proj.bias"),
        "attn.sinks" => return whole("self_attn.sinks"),
        "moe.router" => return whole("mlp.router.weight"),
        "moe.router_logit_bias" => return whole("mlp.router.bias"),
        "moe.experts.down_bias" => return whole("mlp.experts.down_proj_bias"),
        "moe.experts.gate" | "moe.experts.gate_bias" => ("gate_up_proj", 0),
        "moe.experts.up" | "moe.experts.up_bias" => ("gate_up_proj", 1),
        "moe.experts.down" => ("down_proj", 0),
        _ => return None,
    };
    let step = if stem == "down_proj" { 1 } else { 2 };
    if sfx.ends_with("_bias") {
        // [E, 2F] → [E, F]: every other column.
        let s = &src[&format!("{base}.mlp.experts.{stem}_bias")];
        let es = elem_size(s.dtype);
        let out = (0..s.shape[0] * s.shape[1] / 2)
            .flat_map(|i| {
                let j = (i / (s.shape[1] / 2)) * s.shape[1] + 2 * (i % (s.shape[1] / 2)) + half;
                s.bytes[j * es..(j + 1) * es].to_vec()
            })
            .collect();
        return Some((s.dtype, out));
    }
    let e = expert.unwrap();
    if let Some(b) = src.get(&format!("{base}.mlp.experts.{stem}_blocks")) {
        let s = &src[&format!("{base}.mlp.experts.{stem}_scales")];
        let (fused, groups) = (b.shape[1], b.shape[2]);
        let mut out = Vec::new();
        for r in 0..rows {
            let row = e * fused + step * r + half;
            for g in 0..groups {
                let blk = &b.bytes[(row * groups + g) * 16..][..16];
                let nib = |k: usize| (blk[k / 2] >> (4 * (k % 2))) & 15;
                out.push(s.bytes[row * groups + g]);
                out.extend((0..16).map(|j| nib(j) | (nib(j + 16) << 4)));
            }
        }
        return Some((Dtype::U8, out));
    }
    // Floats stored [E, cols, fused]: element (r, c) at (e·cols + c)·fused + step·r + half.
    let t = &src[&format!("{base}.mlp.experts.{stem}")];
    let (cols, fused, es) = (t.shape[1], t.shape[2], elem_size(t.dtype));
    let mut out = Vec::new();
    for r in 0..rows {
        for c in 0..cols {
            let i = (e * cols + c) * fused + step * r + half;
            out.extend_from_slice(&t.bytes[i * es..(i + 1) * es]);
        }
    }
    Some((t.dtype, out))
}

/// DeepSeek MLA: W_UK per head (kv_b_proj's K rows of each head, transposed) or W_UV per head
/// (its V rows), from kv_b_proj [heads·(nope + v), rank]; `rows` is heads·rank (K) or heads·v
/// (V). Shapes give the head count: q [heads·(nope + rope)], kv_a [rank + rope], kv_b
/// [heads·(nope + v)], o [·, heads·v], so heads·rope = q − (kv_b − o).
fn mla_kv_b(src: &HashMap<String, Src>, base: &str, values: bool, rows: usize) -> (Dtype, Vec<u8>) {
    let shape = |leaf: &str| src.get(&format!("{base}.self_attn.{leaf}.weight")).map(|s| s.shape.clone());
    let kv_b = &src[&format!("{base}.self_attn.kv_b_proj.weight")];
    let o_cols = src[&format!("{base}.self_attn.o_proj.weight")].shape[1];
    let q_rows = shape("q_proj").or_else(|| shape("q_b_proj")).expect("an MLA query projection")[0];
    let (total, rank, es) = (kv_b.shape[0], kv_b.shape[1], elem_size(kv_b.dtype));
    let rope = shape("kv_a_proj_with_mqa").expect("kv_a_proj_with_mqa")[0] - rank;
    let heads = (q_rows + o_cols - total) / rope;
    assert_eq!(rows, if values { o_cols } else { heads * rank }, "{base}: MLA rows");
    let (per, v) = (total / heads, o_cols / heads);
    let nope = per - v;
    let mut out = Vec::new();
    for h in 0..heads {
        let row = |r: usize| &kv_b.bytes[(h * per + r) * rank * es..(h * per + r + 1) * rank * es];
        if values {
            (nope..per).for_each(|r| out.extend_from_slice(row(r)));
        } else {
            for c in 0..rank {
                (0..nope).for_each(|r| out.extend_from_slice(&row(r)[c * es..(c + 1) * es]));
            }
        }
    }
    (kv_b.dtype, out)
}

/// The source elements of `bytes` (of `dtype`) widened to f32.
pub fn to_f32_vec(dtype: Dtype, bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(elem_size(dtype)).map(|b| to_f32(dtype, b)).collect()
}

/// Every fixture directory with an oracle, sorted by name.
pub fn fixture_dirs() -> Vec<PathBuf> {
    let root = models_root();
    let mut v: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("oracle/meta.json").is_file())
        .collect();
    v.sort();
    assert!(v.len() >= 4);
    v
}

/// Minimal reader of a 2-D little-endian float32 .npy file (independent of the CLI's writer).
pub fn read_npy_f32(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..6], b"\x93NUMPY");
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
    assert!(header.contains("'<f4'") && header.contains("'fortran_order': False"), "{header}");
    let shape_txt = &header[header.find('(').unwrap() + 1..header.find(')').unwrap()];
    let shape: Vec<usize> =
        shape_txt.split(',').filter(|s| !s.trim().is_empty()).map(|s| s.trim().parse().unwrap()).collect();
    let data: Vec<f32> = b[10 + hlen..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    assert_eq!(data.len(), shape.iter().product::<usize>());
    (shape, data)
}

/// The fixture's oracle/meta.json.
pub fn meta(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("oracle/meta.json")).unwrap()).unwrap()
}

/// A JSON array of ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// `colibri convert DIR -o OUT --dtype DTYPE`, through the converter library.
pub fn convert(dir: &Path, out: &Path, dtype: &str) {
    let dtype = DType::from_name(dtype).unwrap_or_else(|| panic!("unknown dtype {dtype}"));
    convert_as(dir, out, Some(dtype));
}

/// Convert `dir` to `out` with the converter library, every tensor stored as `dtype` (None keeps
/// each tensor's source dtype); panics with the converter's message if it fails.
pub fn convert_as(dir: &Path, out: &Path, dtype: Option<DType>) -> ConvertReport {
    let args =
        ConvertArgs { input: dir.to_path_buf(), output: out.to_path_buf(), dtype, quantize: None, user_metadata: None };
    colibri_convert::convert(&args, None).unwrap_or_else(|e| panic!("convert {} failed: {e}", dir.display()))
}

/// Index of the largest value (ties to the lowest index).
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// max |a - b| over two equally long slices.
pub fn max_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter().zip(b).fold(0f64, |m, (&x, &y)| m.max((f64::from(x) - f64::from(y)).abs()))
}

/// `model` rewritten at `path` with the block-quantised tensors `widen` picks stored as f32
/// holding their dequantised values (everything else copied), opened.
pub fn f32_twin(model: &Model, path: &Path, widen: &dyn Fn(&TensorRecord) -> bool) -> Model {
    let p = model.parsed();
    let meta: Vec<_> =
        p.metadata.iter().map(|e| (e.key.clone(), e.kind, model.meta(&e.key).unwrap().to_vec())).collect();
    let wide = |t: &TensorRecord| t.dtype.is_quantized() && widen(t);
    let plan: Vec<PlannedTensor> = p
        .tensors
        .iter()
        .map(|t| PlannedTensor {
            name: t.name.clone(),
            dtype: if wide(t) { DType::F32 } else { t.dtype },
            shape: t.shape.clone(),
            kind: t.kind,
        })
        .collect();
    let h = &p.header;
    let mut w = FileWriter::create(path, h.num_layers, h.num_experts, h.top_k, &meta, plan).unwrap();
    for t in &p.tensors {
        let view = model.tensor(&t.name).unwrap();
        let bytes = if wide(t) {
            DType::F32.encode(&view.to_f32_vec(), view.cols())
        } else if t.kind == TensorKind::Experts {
            // Each expert's bytes without the per-expert padding (the writer re-pads them).
            (0..view.n_experts()).flat_map(|e| view.expert(e).unwrap().bytes.to_vec()).collect()
        } else {
            view.bytes.to_vec()
        };
        w.tensor(&t.name, &bytes).unwrap();
    }
    w.finish().unwrap();
    Model::open(path, &LoadOptions::default()).unwrap()
}
