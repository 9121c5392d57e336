//! Contract: `convert --dtype bf16r32` stores the matrices the products read whole (the
//! quantisable classes) whose rows and columns are multiples of 32 in the AMX tiles' order
//! (`format::tiles`), every other tensor as `--dtype bf16` would, and the file computes what
//! the bf16 file computes: the same logits bit for bit with f32 activations (both meet the same
//! float kernels) and within 1e-5 · max|logit| in the default mode (the same bits where the path
//! reads both orders with one kernel — AMX, AVX2 — and another summation order where bf16 has
//! kernels of its own, AVX-512 BF16). (A tile-ordered tensor that must stay row-major is refused:
//! `malformed_files`, q10.)

mod common;

use colibri::format::DType;
use colibri::forward::{forward, ForwardOptions, Input, LogitsMode};
use colibri::kernels::QuantActivations;
use colibri::session::{Session, SessionOptions};
use colibri::{LoadOptions, Model};
use common::{convert, fixture_dirs, ids};

/// Teacher-forced logits of every position of the fixture's prompt.
fn logits(model: &Model, input: &[u32], quant_act: QuantActivations) -> Vec<f32> {
    let opts = SessionOptions { n_ctx: 256, quant_act, ..Default::default() };
    let mut s = Session::new(model.config(), &opts).unwrap();
    let fo = ForwardOptions { logits: LogitsMode::All, ..Default::default() };
    forward(model, &mut s, Input::Tokens(input), &fo).unwrap();
    s.logits().to_vec()
}

#[test]
fn bf16r32_files_tile_the_whole_matrices_and_compute_what_bf16_files_compute() {
    let tmp = tempfile::tempdir().unwrap();
    let mut tiled_total = 0;
    for dir in fixture_dirs() {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let (bf, tf) =
            (tmp.path().join(format!("{name}-bf16.colibri")), tmp.path().join(format!("{name}-r32.colibri")));
        convert(&dir, &bf, "bf16");
        convert(&dir, &tf, "bf16r32");
        let (b, t) =
            (Model::open(&bf, &LoadOptions::default()).unwrap(), Model::open(&tf, &LoadOptions::default()).unwrap());
        let (bt, tt) = (&b.parsed().tensors, &t.parsed().tensors);
        assert_eq!(bt.len(), tt.len(), "{name}");
        for (x, y) in bt.iter().zip(tt) {
            assert_eq!((&x.name, &x.shape), (&y.name, &y.shape), "{name}");
            if y.dtype == DType::Bf16R32 {
                let (rows, cols) = (y.shape[y.shape.len() - 2], y.shape[y.shape.len() - 1]);
                assert!(rows % 32 == 0 && cols % 32 == 0, "{name} {}: {rows} x {cols} tiled", y.name);
                assert_eq!(x.dtype, DType::BF16, "{name} {}", y.name);
                assert!(
                    !y.name.contains("norm") && !y.name.contains("embed") && !y.name.contains("router"),
                    "{}",
                    y.name
                );
                tiled_total += 1;
            } else {
                assert_eq!(x.dtype, y.dtype, "{name} {}: stored as in the bf16 file", y.name);
            }
        }
        let input = ids(&common::meta(&dir)["input_ids"]);
        let (lb, lt) = (logits(&b, &input, QuantActivations::Float), logits(&t, &input, QuantActivations::Float));
        assert!(lb.iter().zip(&lt).all(|(p, q)| p.to_bits() == q.to_bits()), "{name}: f32 activations");
        let (lb, lt) = (logits(&b, &input, QuantActivations::Reduced), logits(&t, &input, QuantActivations::Reduced));
        let max = lb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let diff = lb.iter().zip(&lt).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
        assert!(diff <= 1e-5 * max, "{name}: default mode max|Δ| {diff} of max|logit| {max}");
    }
    // Attention projections of the 64-wide fixtures, and llama4_moe_layers_bf16's experts.
    assert!(tiled_total >= 40, "only {tiled_total} tensors tiled over the fixtures");
}
