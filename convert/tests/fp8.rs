//! Contract: DeepSeek's fp8 checkpoints (float8_e4m3fn + f32 `weight_scale_inv` tiles) convert
//! to exactly codes × scales in f32 (as transformers and DeepSeek's weight_dequant compute them),
//! through every way a weight reaches the file (a plain matrix, one expert of a stack, MLA's
//! W_UV rows and its transposed W_UK). The codes are decoded with torch's own table
//! (oracle/e4m3_values.json) and the name mapping is restated here.

#[path = "../../tests/common/fixtures.rs"]
mod fixtures;

use colibri::format::DType;
use colibri::{LoadOptions, Model};
use fixtures::*;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

struct Fp8 {
    codes: Vec<u8>,
    shape: Vec<usize>,
    scales: Vec<f32>,
    scale_cols: usize,
    block: [usize; 2],
}

impl Fp8 {
    /// Element (r, c) dequantised with the torch table.
    fn at(&self, table: &[Option<f32>], r: usize, c: usize) -> f32 {
        let code = self.codes[r * self.shape[1] + c];
        table[code as usize].unwrap() * self.scales[(r / self.block[0]) * self.scale_cols + c / self.block[1]]
    }
}

fn read(dir: &std::path::Path, name: &str, block: [usize; 2]) -> Fp8 {
    let data = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&data).unwrap();
    let w = st.tensor(name).unwrap();
    assert_eq!(w.dtype(), Dtype::F8_E4M3, "{name}");
    let s = st.tensor(&format!("{name}_scale_inv")).unwrap();
    assert_eq!(s.dtype(), Dtype::F32);
    let scales = s.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    Fp8 { codes: w.data().to_vec(), shape: w.shape().to_vec(), scales, scale_cols: s.shape()[1], block }
}

fn values(model: &Model, name: &str, expert: Option<usize>) -> Vec<f32> {
    let v = model.tensor(name).unwrap();
    let v = expert.map_or(v, |e| v.expert(e).unwrap());
    assert_eq!(v.dtype, DType::F32);
    v.bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

#[test]
fn fp8_weights_convert_to_codes_times_scales_exactly() {
    let dir = fixtures_root_fp8();
    let hf: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let bs = &hf["quantization_config"]["weight_block_size"];
    let block = [bs[0].as_u64().unwrap() as usize, bs[1].as_u64().unwrap() as usize];
    let table: Vec<Option<f32>> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("oracle/e4m3_values.json")).unwrap()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.colibri");
    convert(&dir, &out, "f32");
    let model = Model::open(&out, &LoadOptions::default()).unwrap();
    let (nope, v) = (hf["qk_nope_head_dim"].as_u64().unwrap() as usize, hf["v_head_dim"].as_u64().unwrap() as usize);
    let mut checked = 0;
    // Whole matrices, and one expert of a stack.
    for (src, dst, expert) in [
        ("model.layers.0.self_attn.q_a_proj.weight", "layers.0.attn.q_a", None),
        ("model.layers.1.self_attn.kv_a_proj_with_mqa.weight", "layers.1.attn.kv_a", None),
        ("model.layers.2.self_attn.o_proj.weight", "layers.2.attn.o", None),
        ("model.layers.0.mlp.down_proj.weight", "layers.0.mlp.down", None),
        ("model.layers.1.mlp.shared_experts.up_proj.weight", "layers.1.moe.shared.up", None),
        ("model.layers.2.mlp.experts.5.gate_proj.weight", "layers.2.moe.experts.gate", Some(5)),
    ] {
        let w = read(&dir, src, block);
        let want: Vec<f32> = (0..w.shape[0])
            .flat_map(|r| (0..w.shape[1]).map(move |c| (r, c)))
            .map(|(r, c)| w.at(&table, r, c))
            .collect();
        let got = values(&model, dst, expert);
        assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{dst}: not codes × scales");
        checked += want.len();
    }
    // MLA: head h's W_UV rows and W_UK (its K rows transposed) from kv_b_proj.
    let kv_b = read(&dir, "model.layers.1.self_attn.kv_b_proj.weight", block);
    let rank = kv_b.shape[1];
    let heads = kv_b.shape[0] / (nope + v);
    let (k_b, v_b) = (values(&model, "layers.1.attn.k_b", None), values(&model, "layers.1.attn.v_b", None));
    for h in 0..heads {
        for r in 0..rank {
            for i in 0..nope {
                assert_eq!(k_b[(h * rank + r) * nope + i], kv_b.at(&table, h * (nope + v) + i, r), "k_b head {h}");
            }
        }
        for i in 0..v {
            for r in 0..rank {
                assert_eq!(v_b[(h * v + i) * rank + r], kv_b.at(&table, h * (nope + v) + nope + i, r), "v_b head {h}");
            }
        }
    }
    checked += k_b.len() + v_b.len();
    assert!(checked > 5000, "{checked}");
}

#[test]
fn fp8_weights_are_stored_bf16_without_dtype() {
    let dir = fixtures_root_fp8();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.colibri");
    let report = convert_as(&dir, &out, None);
    let model = Model::open(&out, &LoadOptions::default()).unwrap();
    assert_eq!(model.tensor("layers.1.attn.kv_a").unwrap().dtype, DType::BF16);
    assert_eq!(model.tensor("layers.1.moe.router").unwrap().dtype, DType::F32, "routers as transformers keeps them");
    assert!(
        report.warnings.iter().all(|w| !w.contains("scale_inv")),
        "the scales are used, not unused tensors: {:?}",
        report.warnings
    );
    assert!(report.warnings.iter().any(|w| w.contains("multi-token prediction")), "{:?}", report.warnings);
}

fn fixtures_root_fp8() -> std::path::PathBuf {
    let dir = models_root().join("deepseek_v3_fp8");
    assert!(is_fp8(&dir), "{} is the fp8 fixture", dir.display());
    dir
}
