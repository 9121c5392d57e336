//! Contract: a Llama4ForConditionalGeneration checkpoint — the hub's layout for Llama-4 Scout /
//! Maverick: the config nested under `text_config`, the text model's tensors under
//! `language_model.`, a vision tower beside them — converts to the same file as the text model
//! (Llama4ForCausalLM) alone, the vision tower left out and named in a warning.

#[path = "../../tests/common/fixtures.rs"]
mod fixtures;

use colibri::{LoadOptions, Model};
use fixtures::{convert_as, models_root};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use std::path::Path;

/// `src` (a Llama4ForCausalLM fixture) rewritten into `dst` in the ConditionalGeneration layout.
fn as_conditional_generation(src: &Path, dst: &Path) {
    std::fs::create_dir(dst).unwrap();
    for f in ["tokenizer.json", "tokenizer_config.json", "generation_config.json"] {
        std::fs::copy(src.join(f), dst.join(f)).unwrap();
    }
    let text: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    let config = serde_json::json!({
        "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "text_config": text,
        "vision_config": {"hidden_size": 8, "num_hidden_layers": 1}, "image_token_index": 3
    });
    std::fs::write(dst.join("config.json"), config.to_string()).unwrap();
    let data = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&data).unwrap();
    let vision = [0u8; 32];
    let mut views: Vec<(String, TensorView<'_>)> =
        st.tensors().into_iter().map(|(name, v)| (format!("language_model.{name}"), v)).collect();
    for name in ["vision_model.patch_embedding.linear.weight", "multi_modal_projector.linear_1.weight"] {
        views.push((name.to_string(), TensorView::new(Dtype::F32, vec![2, 4], &vision).unwrap()));
    }
    safetensors::serialize_to_file(views, None, &dst.join("model.safetensors")).unwrap();
}

#[test]
fn a_conditional_generation_checkpoint_converts_to_its_text_model() {
    let tmp = tempfile::tempdir().unwrap();
    let src = models_root().join("llama4_chunked_nope");
    let hub = tmp.path().join("hub");
    as_conditional_generation(&src, &hub);
    let (a, b) = (tmp.path().join("text.colibri"), tmp.path().join("hub.colibri"));
    let text_report = convert_as(&src, &a, None);
    let hub_report = convert_as(&hub, &b, None);
    assert!(text_report.warnings.is_empty(), "{:?}", text_report.warnings);
    assert_eq!(hub_report.warnings.len(), 1, "{:?}", hub_report.warnings);
    assert!(hub_report.warnings[0].contains("2 tensors of the vision tower"), "{:?}", hub_report.warnings);
    let (a, b) = (Model::open(&a, &LoadOptions::default()).unwrap(), Model::open(&b, &LoadOptions::default()).unwrap());
    assert_eq!(a.config(), b.config());
    assert_eq!(a.parsed().tensors.len(), b.parsed().tensors.len());
    for r in &a.parsed().tensors {
        assert!(a.tensor(&r.name).unwrap().bytes == b.tensor(&r.name).unwrap().bytes, "{}", r.name);
    }
}
