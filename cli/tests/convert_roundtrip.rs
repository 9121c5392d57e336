//! Contract: for every fixture checkpoint, `colibri convert` then `Model::open` gives back every
//! source tensor — bit-exact when the dtype is kept, correctly rounded (round-to-nearest-even)
//! when converting f32 → f16/bf16. The source is read with the independent `safetensors` crate
//! and the HF→colibri name mapping is restated here, so a wrong mapping in the converter fails.

use colibri::format::{DType, TensorKind};
use colibri::{LoadOptions, Model};
use half::{bf16, f16};
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("tests/fixtures/models exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("config.json").is_file())
        .collect();
    v.sort();
    assert!(v.len() >= 4, "expected fixtures of every family, found {v:?}");
    v
}

/// A source tensor, its elements as f32 plus their raw bytes and dtype.
struct Src {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

fn load_sources(dir: &Path) -> HashMap<String, Src> {
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
    out
}

fn elem_size(d: Dtype) -> usize {
    match d {
        Dtype::F32 => 4,
        Dtype::F16 | Dtype::BF16 => 2,
        other => panic!("fixture dtype {other:?}"),
    }
}

fn to_f32(d: Dtype, b: &[u8]) -> f32 {
    match d {
        Dtype::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        Dtype::F16 => f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
        Dtype::BF16 => bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
        other => panic!("fixture dtype {other:?}"),
    }
}

/// Round-to-nearest-even f32 → bf16, written out independently of `half`.
fn bf16_rne(x: f32) -> u16 {
    let bits = x.to_bits();
    assert!(x.is_finite());
    let lsb = (bits >> 16) & 1;
    ((bits + 0x7fff + lsb) >> 16) as u16
}

/// The bytes of the source that should become expert `e` (or the whole tensor) of `name`.
fn expected_bytes(src: &HashMap<String, Src>, name: &str, expert: Option<usize>, rows: usize) -> (Dtype, Vec<u8>) {
    let simple: Option<String> = match name {
        "tok_embeddings" => Some("model.embed_tokens.weight".into()),
        "norm" => Some("model.norm.weight".into()),
        "lm_head" => Some("lm_head.weight".into()),
        _ => None,
    };
    if let Some(n) = simple {
        let s = &src[&n];
        return (s.dtype, s.bytes.clone());
    }
    let rest = name.strip_prefix("layers.").unwrap();
    let (l, sfx) = rest.split_once('.').unwrap();
    let base = format!("model.layers.{l}");
    let leaf = match sfx {
        "attn_norm" => "input_layernorm.weight".to_string(),
        "ffn_norm" => "post_attention_layernorm.weight".to_string(),
        s if s.starts_with("attn.") => {
            let p = &s[5..];
            match p {
                "q_bias" | "k_bias" | "v_bias" => format!("self_attn.{}_proj.bias", &p[..1]),
                "q_norm" | "k_norm" => format!("self_attn.{p}.weight"),
                _ => format!("self_attn.{p}_proj.weight"),
            }
        }
        "mlp.gate" | "mlp.up" | "mlp.down" => format!("mlp.{}_proj.weight", &sfx[4..]),
        "moe.shared.gate" | "moe.shared.up" | "moe.shared.down" => {
            format!("mlp.shared_expert.{}_proj.weight", &sfx[11..])
        }
        "moe.shared_expert_gate" => "mlp.shared_expert_gate.weight".to_string(),
        "moe.router" => {
            let a = format!("{base}.mlp.gate.weight");
            let b = format!("{base}.block_sparse_moe.gate.weight");
            let s = src.get(&a).or_else(|| src.get(&b)).expect("router source");
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
            // Fused transformers-5 layout.
            let fused = if proj == "down" {
                format!("{base}.mlp.experts.down_proj")
            } else {
                format!("{base}.mlp.experts.gate_up_proj")
            };
            let s = src.get(&fused).unwrap_or_else(|| panic!("no source for {name} expert {e}"));
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

fn check_tensor(name: &str, src_dtype: Dtype, src: &[u8], out_dtype: DType, out: &[u8]) {
    let same = matches!(
        (src_dtype, out_dtype),
        (Dtype::F32, DType::F32) | (Dtype::F16, DType::F16) | (Dtype::BF16, DType::BF16)
    );
    if same {
        assert!(src == out, "{name}: bytes differ although the dtype was kept");
        return;
    }
    let n = src.len() / elem_size(src_dtype);
    assert_eq!(Some(out.len() as u64), out_dtype.bytes_for(n as u64), "{name}: element count");
    for i in 0..n {
        let x = to_f32(src_dtype, &src[i * elem_size(src_dtype)..]);
        match out_dtype {
            DType::F32 => {
                let y = f32::from_le_bytes(out[i * 4..i * 4 + 4].try_into().unwrap());
                assert_eq!(x.to_bits(), y.to_bits(), "{name}[{i}]: widening must be exact");
            }
            DType::BF16 => {
                let y = u16::from_le_bytes([out[i * 2], out[i * 2 + 1]]);
                assert_eq!(y, bf16_rne(x), "{name}[{i}]: {x} not rounded to nearest-even bf16");
            }
            DType::F16 => {
                let y = f16::from_bits(u16::from_le_bytes([out[i * 2], out[i * 2 + 1]]));
                // Correct rounding: no f16 neighbour of y is closer to x.
                let err = (y.to_f32() - x).abs();
                let b = y.to_bits();
                let near = if b & 0x7fff == 0 { [0x0001, 0x8001] } else { [b.wrapping_add(1), b.wrapping_sub(1)] };
                for n in near.map(|n| f16::from_bits(n).to_f32()).into_iter().filter(|n| n.is_finite()) {
                    assert!(err <= (n - x).abs(), "{name}[{i}]: {x} badly rounded to {y} (neighbour {n} is closer)");
                }
            }
            DType::Q8 | DType::Q4 => panic!("{name}: converted without --quantize but stored as {out_dtype}"),
        }
    }
}

fn convert(dir: &Path, out: &Path, dtype: Option<&str>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_colibri"));
    cmd.arg("convert").arg(dir).arg("-o").arg(out);
    if let Some(d) = dtype {
        cmd.args(["--dtype", d]);
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "convert {} failed: {}", dir.display(), String::from_utf8_lossy(&o.stderr));
}

#[test]
fn every_tensor_reads_back_equal_to_its_source() {
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = 0usize;
    for dir in fixtures() {
        let src = load_sources(&dir);
        for dtype in [None, Some("f32"), Some("f16"), Some("bf16")] {
            let out = tmp.path().join("m.colibri");
            convert(&dir, &out, dtype);
            for mmap in [true, false] {
                let model = Model::open(&out, &LoadOptions { mmap, ..Default::default() }).unwrap();
                model.verify().unwrap();
                for rec in &model.parsed().tensors {
                    let view = model.tensor(&rec.name).unwrap();
                    if let Some(want) = dtype {
                        assert_eq!(rec.dtype.name(), want, "{}: dtype", rec.name);
                    }
                    if rec.kind == TensorKind::Experts {
                        for e in 0..view.n_experts() {
                            let ev = view.expert(e).unwrap();
                            let (sd, sb) = expected_bytes(&src, &rec.name, Some(e), ev.rows());
                            check_tensor(&format!("{}[{e}]", rec.name), sd, &sb, rec.dtype, ev.bytes);
                        }
                    } else {
                        let (sd, sb) = expected_bytes(&src, &rec.name, None, view.rows());
                        if dtype.is_none() {
                            assert_eq!(
                                format!("{sd:?}").to_lowercase(),
                                rec.dtype.name(),
                                "{}: the source dtype must be kept by default",
                                rec.name
                            );
                        }
                        check_tensor(&rec.name, sd, &sb, rec.dtype, view.bytes);
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 500, "only {checked} tensors checked");
}
