//! Contract of the dots.llm1, ERNIE-4.5-MoE and Hunyuan-MoE families beyond the oracle
//! comparisons of `oracle.rs` (which run their fixtures like every other family's): the C ABI
//! names them (COLIBRI_FAMILY_DOTS1 = 11, COLIBRI_FAMILY_ERNIE4_5_MOE = 12,
//! COLIBRI_FAMILY_HUNYUAN_V1_MOE = 13) with the fixtures' expert counts, and the stored config
//! keeps what the converter derived from the HF config; Llama-4 (COLIBRI_FAMILY_LLAMA4 = 14) likewise.

mod common;

use colibri::model::{Family, QkNorm, Scoring};
use colibri::{LoadOptions, Model};
use common::{convert, models_root};

/// (family number, n_experts, top_k) through `colibri_model_get_info` for fixture `name`.
fn c_info(name: &str) -> (i32, u32, u32) {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("m.colibri");
    convert(&models_root().join(name), &file, "bf16");
    let info = common::c_model_info(&file);
    (info.family, info.n_experts, info.top_k)
}

#[test]
fn the_c_abi_names_both_families() {
    use colibri::ffi::{COLIBRI_FAMILY_DOTS1, COLIBRI_FAMILY_ERNIE4_5_MOE};
    assert_eq!((COLIBRI_FAMILY_DOTS1, COLIBRI_FAMILY_ERNIE4_5_MOE), (11, 12));
    assert_eq!(c_info("dots1_groups_swa"), (COLIBRI_FAMILY_DOTS1, 8, 2));
    assert_eq!(c_info("ernie4_5_moe_tied_interval"), (COLIBRI_FAMILY_ERNIE4_5_MOE, 6, 3));
    assert_eq!(c_info("hunyuan_moe_alpha"), (colibri::ffi::COLIBRI_FAMILY_HUNYUAN_V1_MOE, 8, 2));
    assert_eq!(colibri::ffi::COLIBRI_FAMILY_HUNYUAN_V1_MOE, 13);
}

#[test]
fn converted_configs_carry_each_familys_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let open = |name: &str| {
        let file = tmp.path().join(format!("{name}.colibri"));
        convert(&models_root().join(name), &file, "f32");
        Model::open(&file, &LoadOptions::default()).unwrap().config().clone()
    };
    let d = open("dots1_groups_swa");
    assert_eq!(
        (d.family, d.qk_norm, d.moe.scoring, d.moe.choice_bias),
        (Family::Dots1, QkNorm::PerHead, Scoring::Sigmoid, true)
    );
    let windows: Vec<_> = d.layers.iter().map(|l| (l.moe, l.sliding_window)).collect();
    assert_eq!(windows, [(false, None), (true, None), (true, Some(6))]);
    let e = open("ernie4_5_moe_tied_interval");
    assert_eq!(
        (e.family, e.moe.scoring, e.moe.choice_bias, e.rope.interleaved),
        (Family::Ernie45Moe, Scoring::Softmax, true, true)
    );
    assert_eq!(e.layers.iter().map(|l| l.moe).collect::<Vec<_>>(), [false, true, false, false]);
    assert!(e.tie_embeddings && e.moe.shared_expert_ffn == 0);
    let h = open("hunyuan_moe_tied_bias");
    assert_eq!((h.family, h.qk_norm, h.qk_norm_after_rope), (Family::HunyuanV1Moe, QkNorm::PerHead, true));
    assert!(h.attention_bias && h.attention_out_bias && h.moe.shared_expert_ffn == 24);
}

/// Llama-4 (COLIBRI_FAMILY_LLAMA4 = 14): the converted configs carry its NoPE layers with their
/// query temperature, the chunks of its RoPE layers, the weightless q/k norm after RoPE, the
/// sigmoid-of-top-k routing onto the experts' inputs with an ungated shared expert, the dense
/// layers of `intermediate_size_mlp`, RoPE on interleaved pairs.
#[test]
fn llama4_is_named_and_its_configs_carry_its_rules() {
    assert_eq!(colibri::ffi::COLIBRI_FAMILY_LLAMA4, 14);
    assert_eq!(c_info("llama4_chunked_nope"), (colibri::ffi::COLIBRI_FAMILY_LLAMA4, 8, 1));
    let tmp = tempfile::tempdir().unwrap();
    let open = |name: &str| {
        let file = tmp.path().join(format!("{name}.colibri"));
        convert(&models_root().join(name), &file, "f32");
        Model::open(&file, &LoadOptions::default()).unwrap().config().clone()
    };
    let c = open("llama4_chunked_nope");
    let layers: Vec<_> = c.layers.iter().map(|l| (l.moe, l.no_rope, l.attention_chunk)).collect();
    assert_eq!(layers, [(false, false, Some(8)), (true, false, Some(8)), (false, false, Some(8)), (true, true, None)]);
    assert_eq!((c.family, c.qk_norm, c.qk_norm_after_rope), (Family::Llama4, QkNorm::Weightless, true));
    assert_eq!((c.moe.scoring, c.moe.weights_on_input), (Scoring::SigmoidOfTopK, true));
    assert_eq!((c.moe.shared_expert_ffn, c.dense_ffn, c.rope.interleaved), (16, 48, true));
    assert!(c.attn_temperature.is_some_and(|t| (t.floor_scale, t.attn_scale) == (4.0, 0.5)));
    let b = open("llama4_moe_layers_bf16");
    assert_eq!(
        b.layers.iter().map(|l| (l.moe, l.no_rope, l.attention_chunk)).collect::<Vec<_>>(),
        [(true, false, Some(5)), (false, true, None), (true, false, Some(5)), (false, true, None)]
    );
}
