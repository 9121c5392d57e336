//! Contract of embeddings (`colibri::embed`, the forward pass's `LogitsMode::Hidden`): on every
//! fixture family the final-normed hidden states of the oracle prompt match transformers'
//! `hidden_states[-1]` (oracle/hidden_f32.npy, tools/make_embedding_fixtures.py) within 1e-4 of
//! max|h| for f32 files, and the mean / last / cls vectors pooled and L2-normalised from them match
//! the same pooling of the oracle's states within 1e-4; sequences embedded together get what each
//! gets alone (also next to a sequence that wants logits); a call longer than one step gets what
//! feeding it in pieces gives; bad inputs are errors.

mod common;

use colibri::embed::{self, EmbedOptions, Pooling};
use colibri::forward::{forward, forward_batch, ForwardOptions, Input, LogitsMode, Sequence, MAX_STEP_ROWS};
use colibri::kernels::QuantActivations;
use colibri::session::{Session, SessionOptions};
use colibri::{Error, LoadOptions, Model};
use common::{convert, fixture_dirs, ids, max_diff, read_npy_f32};
use std::path::{Path, PathBuf};

/// Largest |colibri − transformers| allowed, relative to the largest |value| compared.
const TOL: f64 = 1e-4;

fn open(dir: &Path, tmp: &Path) -> Model {
    let file = tmp.join(format!("{}.colibri", dir.file_name().unwrap().to_string_lossy()));
    convert(dir, &file, "f32");
    Model::open(&file, &LoadOptions::default()).unwrap()
}

fn fixture(name: &str) -> PathBuf {
    fixture_dirs().into_iter().find(|d| d.ends_with(name)).unwrap()
}

fn max_abs(v: &[f32]) -> f64 {
    v.iter().fold(1e-30f64, |m, &x| m.max(f64::from(x).abs()))
}

/// The oracle's pooling of states [n, h], restated with numpy's semantics (mean over axis 0,
/// row 0, row n−1; then x / ‖x‖₂).
fn oracle_pool(states: &[f32], h: usize, pooling: Pooling) -> Vec<f64> {
    let rows: Vec<&[f32]> = states.chunks_exact(h).collect();
    let v: Vec<f64> = match pooling {
        Pooling::Mean => {
            (0..h).map(|j| rows.iter().map(|r| f64::from(r[j])).sum::<f64>() / rows.len() as f64).collect()
        }
        Pooling::Last => rows[rows.len() - 1].iter().map(|&x| f64::from(x)).collect(),
        Pooling::Cls => rows[0].iter().map(|&x| f64::from(x)).collect(),
    };
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    v.iter().map(|x| x / norm).collect()
}

#[test]
fn hidden_states_and_pooled_vectors_match_transformers_on_every_family() {
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for dir in fixture_dirs() {
        let oracle = dir.join("oracle/hidden_f32.npy");
        if !oracle.is_file() {
            continue; // the fp8 fixture (tools/make_embedding_fixtures.py skips it)
        }
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let model = open(&dir, tmp.path());
        let h = model.config().hidden_size;
        let input = ids(&common::meta(&dir)["input_ids"]);
        let (shape, want) = read_npy_f32(&oracle);
        assert_eq!(shape, vec![input.len(), h], "{name}: oracle shape");
        // f32 activations: a checkpoint's own MXFP4 experts would otherwise meet int8 ones.
        let got = embed::hidden_states(&model, &[&input], QuantActivations::Float).unwrap().remove(0);
        let rel = max_diff(&got, &want) / max_abs(&want);
        eprintln!("{name:<24} hidden states: max|Δ| = {rel:.3e} × max|h|");
        assert!(rel <= TOL, "{name}: hidden states differ by {rel:.3e} of max|h|");
        for pooling in [Pooling::Mean, Pooling::Last, Pooling::Cls] {
            let opts = EmbedOptions { pooling, normalize: true, quant_act: QuantActivations::Float };
            let v = embed::embed(&model, &[&input], &opts).unwrap().remove(0);
            let w = oracle_pool(&want, h, pooling);
            let d = v.iter().zip(&w).fold(0f64, |m, (&a, &b)| m.max((f64::from(a) - b).abs()));
            let scale = w.iter().fold(0f64, |m, x| m.max(x.abs()));
            eprintln!("{name:<24} {:<4} pooled: max|Δ| = {:.3e} × max|v|", pooling.name(), d / scale);
            assert!(d <= TOL * scale, "{name} {}: pooled vector differs by {d:.3e}", pooling.name());
            let norm = v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "{name}: norm {norm}");
        }
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} fixtures have hidden-state oracles");
}

/// Sequences embedded together (and next to one that wants logits) get exactly what each gets
/// alone; the sequence that wants logits gets its logits.
#[test]
fn a_batch_gives_each_sequence_what_it_gets_alone() {
    let tmp = tempfile::tempdir().unwrap();
    // Attention, and a hybrid with DeltaNet layers (recurrent state per session).
    for name in ["olmoe", "qwen3_next_hybrid"] {
        let dir = fixture(name);
        let model = open(&dir, tmp.path());
        let input = ids(&common::meta(&dir)["input_ids"]);
        let inputs: Vec<&[u32]> = vec![&input[..3], &input[2..9], &input[..]];
        let opts = EmbedOptions { quant_act: QuantActivations::Float, ..EmbedOptions::default() };
        let together = embed::embed(&model, &inputs, &opts).unwrap();
        for (i, one) in inputs.iter().enumerate() {
            let alone = embed::embed(&model, &[one], &opts).unwrap().remove(0);
            let rel = max_diff(&together[i], &alone) / max_abs(&alone);
            assert!(rel <= 1e-5, "{name}: input {i} embedded in a batch differs by {rel:.3e}");
        }
        // A Hidden sequence and a Last one in one step.
        let sopts = SessionOptions { n_ctx: 128, quant_act: QuantActivations::Float, ..Default::default() };
        let mk = || Session::new(model.config(), &sopts).unwrap();
        let (mut a, mut b, mut solo) = (mk(), mk(), mk());
        let last = ForwardOptions { logits: LogitsMode::Last, ..Default::default() };
        let hidden = ForwardOptions { logits: LogitsMode::Hidden, ..Default::default() };
        forward(&model, &mut solo, Input::Tokens(&input[..5]), &last).unwrap();
        let mut batch = vec![
            Sequence { session: &mut a, input: Input::Tokens(&input), opts: hidden },
            Sequence { session: &mut b, input: Input::Tokens(&input[..5]), opts: last },
        ];
        forward_batch(&model, &mut batch).unwrap();
        drop(batch);
        let states = embed::hidden_states(&model, &[&input], QuantActivations::Float).unwrap().remove(0);
        assert_eq!(a.hidden_states().len(), input.len() * model.config().hidden_size);
        assert!(max_diff(a.hidden_states(), &states) / max_abs(&states) <= 1e-5, "{name}: hidden next to logits");
        assert!(a.logits().is_empty(), "{name}: a Hidden sequence gets no logits");
        assert!(max_diff(b.logits(), solo.logits()) / max_abs(solo.logits()) <= 1e-5, "{name}: logits next to hidden");
        assert_eq!(a.position(), input.len(), "{name}: the Hidden call is cached like any other");
    }
}

/// A sequence longer than one step (`MAX_STEP_ROWS`) runs in pieces; its hidden states are those
/// of feeding it in two calls.
#[test]
fn a_call_longer_than_one_step_gathers_every_row() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture("olmoe");
    let model = open(&dir, tmp.path());
    let h = model.config().hidden_size;
    let base = ids(&common::meta(&dir)["input_ids"]);
    let n = MAX_STEP_ROWS + 77;
    let long: Vec<u32> = base.iter().copied().cycle().take(n).collect();
    let all = embed::hidden_states(&model, &[&long], QuantActivations::Float).unwrap().remove(0);
    assert_eq!(all.len(), n * h);
    let hidden = ForwardOptions { logits: LogitsMode::Hidden, ..Default::default() };
    let sopts = SessionOptions { n_ctx: n, quant_act: QuantActivations::Float, ..Default::default() };
    let mut s = Session::new(model.config(), &sopts).unwrap();
    forward(&model, &mut s, Input::Tokens(&long[..MAX_STEP_ROWS]), &hidden).unwrap();
    let head = s.hidden_states().to_vec();
    forward(&model, &mut s, Input::Tokens(&long[MAX_STEP_ROWS..]), &hidden).unwrap();
    let pieces: Vec<f32> = head.into_iter().chain(s.hidden_states().iter().copied()).collect();
    let rel = max_diff(&all, &pieces) / max_abs(&pieces);
    assert!(rel <= 1e-5, "one long call vs two calls: {rel:.3e}");
}

#[test]
fn bad_inputs_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let model = open(&fixture("olmoe"), tmp.path());
    let vocab = model.config().vocab_size as u32;
    let opts = EmbedOptions::default();
    let invalid = |r: Result<Vec<Vec<f32>>, Error>| matches!(r, Err(Error::InvalidArgument { .. }));
    assert!(invalid(embed::embed(&model, &[], &opts)), "no input");
    assert!(invalid(embed::embed(&model, &[&[1, 2], &[]], &opts)), "an empty input");
    assert!(invalid(embed::embed(&model, &[&[1, vocab]], &opts)), "an id outside the vocabulary");
}
