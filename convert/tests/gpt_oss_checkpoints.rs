//! Contract: a GPT-OSS checkpoint whose MXFP4 scales do not fit their blocks, or a byte tensor
//! that is not MXFP4 blocks or scales, is refused at conversion with one line naming the tensor.

#[path = "../../tests/common/fixtures.rs"]
mod fixtures;

use colibri_convert::{convert, ConvertArgs};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use std::path::Path;

/// The MXFP4 fixture copied into `dir` with its tensors passed through `edit` (name, dtype,
/// shape, bytes) first.
fn edited_copy(dir: &Path, edit: impl Fn(&str, Dtype, Vec<usize>, Vec<u8>) -> (Dtype, Vec<usize>, Vec<u8>)) {
    let src = fixtures::models_root().join("gpt_oss_mxfp4");
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() && p.file_name().unwrap() != "model.safetensors" {
            std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
        }
    }
    let data = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&data).unwrap();
    let edited: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(name, v)| {
            let (d, shape, bytes) = edit(&name, v.dtype(), v.shape().to_vec(), v.data().to_vec());
            (name, d, shape, bytes)
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> =
        edited.iter().map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

fn convert_error(dir: &Path) -> String {
    let args = ConvertArgs {
        input: dir.to_path_buf(),
        output: dir.join("out.colibri"),
        dtype: None,
        quantize: None,
        user_metadata: None,
    };
    match convert(&args, None) {
        Ok(_) => panic!("converted a malformed checkpoint"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn mxfp4_scales_of_the_wrong_shape_are_refused_naming_the_tensor() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = "model.layers.1.mlp.experts.down_proj_scales";
    edited_copy(tmp.path(), |name, d, shape, bytes| {
        if name == bad {
            // One group short per row: [E, H, G] → [E, H, G − 1].
            let (e, h, g) = (shape[0], shape[1], shape[2]);
            let kept = bytes.chunks(g).flat_map(|row| row[..g - 1].to_vec()).collect();
            (d, vec![e, h, g - 1], kept)
        } else {
            (d, shape, bytes)
        }
    });
    let msg = convert_error(tmp.path());
    assert!(msg.contains(bad) && !msg.contains('\n'), "{msg}");
}

#[test]
fn a_byte_tensor_that_is_not_mxfp4_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = "model.layers.0.self_attn.sinks";
    edited_copy(tmp.path(), |name, d, shape, bytes| {
        if name == bad {
            (Dtype::U8, shape.clone(), vec![0u8; shape.iter().product()])
        } else {
            (d, shape, bytes)
        }
    });
    let msg = convert_error(tmp.path());
    assert!(msg.contains(bad) && msg.contains("U8") && !msg.contains('\n'), "{msg}");
}
