//! Contract of the recurrent (Gated DeltaNet) state of a Qwen3-Next session, against the
//! transformers oracle of the `qwen3_next_*` fixtures: feeding a prompt in pieces (chunked and
//! recurrent forms continuing each other's state) gives the oracle's logits; `truncate` restores
//! exactly 0, the current length and the start of the last call, and refuses anything else with
//! `Error::Unsupported`, changing nothing; `rollback` undoes one call from the session's own copy,
//! any number of calls from `checkpoint_with_state`, and past that refuses to continue rather
//! than continuing wrongly; the state's bytes are accounted.

mod common;

use colibri::forward::{forward, ForwardOptions, Input, LogitsMode};
use colibri::session::{kv_bytes_per_token, session_state_bytes, KvDtype, Session, SessionOptions};
use colibri::{Error, LoadOptions, Model};
use common::{convert, fixture_dirs, ids};
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

struct Fixture {
    model: Model,
    input: Vec<u32>,
    /// [T, vocab] oracle logits (f32 file)
    want: Vec<f32>,
    max_abs: f64,
}

fn fixture(name: &str, tmp: &Path) -> Fixture {
    let dir = fixture_dirs().into_iter().find(|d| d.ends_with(name)).expect("fixture");
    let file = tmp.join(format!("{name}.colibri"));
    convert(&dir, &file, "f32");
    let model = Model::open(&file, &LoadOptions::default()).unwrap();
    let input = ids(&common::meta(&dir)["input_ids"]);
    let b = std::fs::read(dir.join("oracle/logits_f32.npy")).unwrap();
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    let want: Vec<f32> = b[10 + hlen..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let max_abs = want.iter().fold(0f64, |m, &v| m.max(f64::from(v).abs()));
    Fixture { model, input, want, max_abs }
}

fn session(f: &Fixture) -> Session {
    Session::new(f.model.config(), &SessionOptions { n_ctx: 128, ..Default::default() }).unwrap()
}

fn all() -> ForwardOptions {
    ForwardOptions { logits: LogitsMode::All, ..Default::default() }
}

impl Fixture {
    /// Feed input[range] in one call and check its logits against the oracle's rows.
    fn feed_and_check(&self, s: &mut Session, from: usize, to: usize, what: &str) {
        assert_eq!(s.position(), from, "{what}: position before the call");
        forward(&self.model, s, Input::Tokens(&self.input[from..to]), &all()).unwrap();
        let vocab = self.model.config().vocab_size;
        let want = &self.want[from * vocab..to * vocab];
        let d = s.logits().iter().zip(want).fold(0f64, |m, (&a, &b)| m.max((f64::from(a) - f64::from(b)).abs()));
        assert!(d <= 1e-4 * self.max_abs, "{what}: logits of {from}..{to} differ from the oracle by {d}");
    }
}

#[test]
fn a_prompt_fed_in_pieces_matches_the_oracle() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["qwen3_next_hybrid", "qwen3_next_dense_tied"] {
        let f = fixture(name, tmp.path());
        let t = f.input.len();
        // Chunked (several tokens), recurrent (one), chunked across the 64 boundary, the rest.
        let mut s = session(&f);
        let cuts = [0, 30, 31, 66, 67, t];
        for w in cuts.windows(2) {
            f.feed_and_check(&mut s, w[0], w[1], name);
        }
    }
}

#[test]
fn truncate_restores_exactly_what_it_can_and_refuses_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let f = fixture("qwen3_next_hybrid", tmp.path());
    let mut s = session(&f);
    f.feed_and_check(&mut s, 0, 70, "prefill");
    f.feed_and_check(&mut s, 70, 75, "second call");
    // Anything but 0, the current length and the last call's start is refused and changes nothing.
    for n in [1, 50, 69, 71, 74] {
        match s.truncate(n) {
            Err(Error::Unsupported { .. }) => {}
            other => panic!("truncate({n}) of a recurrent session: {other:?}"),
        }
        assert_eq!(s.position(), 75);
    }
    assert!(matches!(s.truncate(76), Err(Error::InvalidArgument { .. })));
    s.truncate(75).unwrap();
    f.feed_and_check(&mut s, 75, 78, "after truncate to the current length");
    // Back to the start of the last call (75), then a different continuation.
    s.truncate(75).unwrap();
    f.feed_and_check(&mut s, 75, 80, "after truncate to the last call's start");
    s.truncate(75).unwrap();
    s.truncate(75).unwrap();
    f.feed_and_check(&mut s, 75, 80, "after truncating to it twice");
    // To 0: the state is zeroed.
    s.truncate(0).unwrap();
    f.feed_and_check(&mut s, 0, 80, "after truncate to 0");
    s.reset();
    f.feed_and_check(&mut s, 0, 40, "after reset");
}

#[test]
fn rollback_restores_the_state_or_refuses_to_continue() {
    let tmp = tempfile::tempdir().unwrap();
    let f = fixture("qwen3_next_dense_tied", tmp.path());
    let mut s = session(&f);
    f.feed_and_check(&mut s, 0, 40, "prefill");
    // One call since the checkpoint (the C ABI's route-callback abort): the session's own copy.
    let c = s.checkpoint();
    forward(&f.model, &mut s, Input::Tokens(&[5, 6, 7]), &all()).unwrap();
    s.rollback(c);
    f.feed_and_check(&mut s, 40, 45, "after undoing one call");
    // No call since: nothing to undo.
    let c = s.checkpoint();
    s.rollback(c);
    f.feed_and_check(&mut s, 45, 50, "after an empty rollback");
    // Several calls (generate): the checkpoint carries the state.
    let c = s.checkpoint_with_state();
    for id in [9, 10, 11] {
        forward(&f.model, &mut s, Input::Tokens(&[id]), &all()).unwrap();
    }
    s.rollback(c);
    f.feed_and_check(&mut s, 50, 55, "after undoing three calls");
    // Several calls without a copy: the state is lost, and the session says so.
    let c = s.checkpoint();
    for id in [9, 10] {
        forward(&f.model, &mut s, Input::Tokens(&[id]), &all()).unwrap();
    }
    s.rollback(c);
    let r = forward(&f.model, &mut s, Input::Tokens(&f.input[55..56]), &all());
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "continuing from a lost state: {r:?}");
    assert!(matches!(s.truncate(55), Err(Error::Unsupported { .. })));
    s.truncate(0).unwrap();
    f.feed_and_check(&mut s, 0, 70, "after a reset of the lost state");
}

#[test]
fn a_rejected_call_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let f = fixture("qwen3_next_hybrid", tmp.path());
    let mut s = session(&f);
    f.feed_and_check(&mut s, 0, 20, "prefill");
    f.feed_and_check(&mut s, 20, 30, "second call");
    let vocab = f.model.config().vocab_size as u32;
    assert!(forward(&f.model, &mut s, Input::Tokens(&[1, vocab]), &all()).is_err());
    assert!(forward(&f.model, &mut s, Input::Tokens(&[1; 200]), &all()).is_err());
    // The last call's start is still where truncate goes back to.
    s.truncate(20).unwrap();
    f.feed_and_check(&mut s, 20, 80, "after rejected calls");
}

/// A session made for the same widths but with the layer kinds in another order (a DeltaNet
/// state where the model has attention, a KV cache where it has DeltaNet) is refused as another
/// model's, before anything runs.
#[test]
fn a_session_of_another_layer_order_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let f = fixture("qwen3_next_hybrid", tmp.path());
    let mut other = f.model.config().clone();
    other.layers.rotate_left(1);
    assert_ne!(other.layers, f.model.config().layers, "the fixture mixes layer kinds");
    let mut s = Session::new(&other, &SessionOptions { n_ctx: 128, ..Default::default() }).unwrap();
    let err = forward(&f.model, &mut s, Input::Tokens(&f.input[..4]), &all()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }) && err.to_string().contains("another model"), "{err}");
    assert_eq!(s.position(), 0);
}

#[test]
fn state_and_kv_bytes_are_accounted() {
    let tmp = tempfile::tempdir().unwrap();
    let f = fixture("qwen3_next_hybrid", tmp.path());
    let c = f.model.config();
    // 3 DeltaNet layers: conv (4-1)·(2·2·16 + 4·8) and delta 4·16·8 floats each; 1 attention layer.
    let per_layer = 3 * (2 * 2 * 16 + 4 * 8) + 4 * 16 * 8;
    assert_eq!(c.recurrent_state_bytes(), 3 * per_layer * 4);
    assert_eq!(session_state_bytes(c), 2 * 3 * per_layer * 4);
    let s = session(&f);
    assert_eq!(s.state_bytes(), session_state_bytes(c));
    assert_eq!(kv_bytes_per_token(c, KvDtype::F32), 2 * 2 * 16 * 4);
    assert_eq!(s.kv_bytes_per_token(), kv_bytes_per_token(c, KvDtype::F32));
}

/// A route callback that aborts the call when `*userdata` is non-zero.
unsafe extern "C" fn abort_if(
    userdata: *mut std::ffi::c_void,
    _layer: i32,
    _position: i32,
    _experts: *const i32,
    _weights: *const f32,
    _k: usize,
) -> i32 {
    if (*(userdata as *const AtomicI32)).load(Ordering::SeqCst) != 0 {
        colibri::ffi::COLIBRI_ROUTE_ABORT
    } else {
        0
    }
}

/// Through the C ABI: the family and the recurrent layers in colibri_model_get_info; truncate's
/// UNSUPPORTED; a call aborted by its route callback undone, recurrent state included.
#[test]
fn the_c_abi_names_the_family_refuses_truncation_and_undoes_an_aborted_call() {
    use colibri::ffi::*;
    use std::ptr::{null, null_mut};
    let tmp = tempfile::tempdir().unwrap();
    let f = fixture("qwen3_next_hybrid", tmp.path());
    let path = std::ffi::CString::new(tmp.path().join("qwen3_next_hybrid.colibri").to_str().unwrap()).unwrap();
    let vocab = f.model.config().vocab_size;
    let input: Vec<i32> = f.input.iter().map(|&t| t as i32).collect();
    unsafe {
        let mut m = null_mut();
        assert_eq!(colibri_model_open(path.as_ptr(), null(), &mut m), COLIBRI_STATUS_OK);
        let mut info = std::mem::zeroed::<colibri_model_info>();
        colibri_model_info_init(&mut info);
        assert_eq!(colibri_model_get_info(m, &mut info), COLIBRI_STATUS_OK);
        assert_eq!(info.family, COLIBRI_FAMILY_QWEN3_NEXT);
        assert_eq!((info.n_recurrent_layers, info.n_attention_layers, info.n_layers), (3, 1, 4));
        assert_eq!(info.session_state_bytes, session_state_bytes(f.model.config()) as u64);
        assert!(info.session_state_bytes > 0);
        let mut s = null_mut();
        assert_eq!(colibri_session_new(m, null(), &mut s), COLIBRI_STATUS_OK);
        let abort = AtomicI32::new(0);
        let cb: colibri_route_callback = Some(abort_if);
        assert_eq!(colibri_session_set_route_callback(s, cb, &abort as *const AtomicI32 as *mut _), COLIBRI_STATUS_OK);
        let mut logits = vec![0f32; vocab];
        assert_eq!(colibri_infer(s, input.as_ptr(), 40, logits.as_mut_ptr(), vocab), COLIBRI_STATUS_OK);
        abort.store(1, Ordering::SeqCst);
        assert_eq!(colibri_infer(s, input[40..].as_ptr(), 20, logits.as_mut_ptr(), vocab), COLIBRI_STATUS_ABORTED);
        abort.store(0, Ordering::SeqCst);
        assert_eq!(colibri_session_truncate(s, 20), COLIBRI_STATUS_UNSUPPORTED);
        let (mut pos, mut n_ctx) = (0usize, 0usize);
        assert_eq!(colibri_session_position(s, &mut pos, &mut n_ctx), COLIBRI_STATUS_OK);
        assert_eq!(pos, 40);
        // The aborted call left nothing behind: the next rows are the oracle's.
        assert_eq!(colibri_infer(s, input[40..].as_ptr(), 40, logits.as_mut_ptr(), vocab), COLIBRI_STATUS_OK);
        let want = &f.want[79 * vocab..80 * vocab];
        let d = logits.iter().zip(want).fold(0f64, |m, (&a, &b)| m.max((f64::from(a) - f64::from(b)).abs()));
        assert!(d <= 1e-4 * f.max_abs, "logits after an aborted call differ by {d}");
        colibri_session_free(s);
        colibri_model_free(m);
    }
}

/// The hub's transformers-4 config.json of Qwen3-Next (no `layer_types`: the
/// `full_attention_interval` rule; `rope_theta` and `partial_rotary_factor` at the top level;
/// `norm_topk_prob` left to its default, true) gives the same model as transformers 5's.
#[test]
fn the_hub_config_style_gives_the_same_model() {
    let tmp = tempfile::tempdir().unwrap();
    let f = fixture("qwen3_next_hybrid", tmp.path());
    let src = fixture_dirs().into_iter().find(|d| d.ends_with("qwen3_next_hybrid")).unwrap();
    let legacy = tmp.path().join("legacy");
    std::fs::create_dir(&legacy).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, legacy.join(p.file_name().unwrap())).unwrap();
        }
    }
    let mut c: serde_json::Value = serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    let o = c.as_object_mut().unwrap();
    assert_eq!(o.remove("layer_types").unwrap().as_array().unwrap().len(), 4);
    assert_eq!(o.remove("norm_topk_prob"), Some(serde_json::Value::Bool(true)));
    let rope = o.remove("rope_parameters").unwrap();
    o.insert("rope_theta".into(), rope["rope_theta"].clone());
    o.insert("full_attention_interval".into(), 4.into());
    std::fs::write(legacy.join("config.json"), serde_json::to_vec(&c).unwrap()).unwrap();
    let file = tmp.path().join("legacy.colibri");
    convert(&legacy, &file, "f32");
    let model = Model::open(&file, &LoadOptions::default()).unwrap();
    assert_eq!(model.config(), f.model.config());
}

/// A call longer than one step (`MAX_STEP_ROWS`) runs as several steps carrying the state: the
/// same logits as feeding it in two calls, and truncation back to its start still works.
#[test]
fn a_call_of_several_steps_carries_the_state() {
    use colibri::forward::MAX_STEP_ROWS;
    let tmp = tempfile::tempdir().unwrap();
    let f = fixture("qwen3_next_hybrid", tmp.path());
    let n = MAX_STEP_ROWS + 76;
    let long: Vec<u32> = (0..n).map(|i| f.input[i % f.input.len()]).collect();
    let opts = SessionOptions { n_ctx: 2 * n, ..Default::default() };
    let last = ForwardOptions { logits: LogitsMode::Last, ..Default::default() };
    let mut one = Session::new(f.model.config(), &opts).unwrap();
    forward(&f.model, &mut one, Input::Tokens(&f.input[..10]), &last).unwrap();
    forward(&f.model, &mut one, Input::Tokens(&long), &last).unwrap();
    let mut two = Session::new(f.model.config(), &opts).unwrap();
    forward(&f.model, &mut two, Input::Tokens(&f.input[..10]), &last).unwrap();
    forward(&f.model, &mut two, Input::Tokens(&long[..MAX_STEP_ROWS]), &last).unwrap();
    forward(&f.model, &mut two, Input::Tokens(&long[MAX_STEP_ROWS..]), &last).unwrap();
    assert_eq!(one.logits(), two.logits());
    one.truncate(10).unwrap();
    forward(&f.model, &mut one, Input::Tokens(&f.input[10..80]), &all()).unwrap();
    let vocab = f.model.config().vocab_size;
    let want = &f.want[10 * vocab..80 * vocab];
    let d = one.logits().iter().zip(want).fold(0f64, |m, (&a, &b)| m.max((f64::from(a) - f64::from(b)).abs()));
    assert!(d <= 1e-4 * f.max_abs, "after truncating a long call: {d}");
}

/// Decode calls (one token: the recurrent form, whose first write reads the call-start buffer
/// and writes the other one) undone by `rollback` and by `truncate` to the call's start, twice
/// in a row each: the session continues as the oracle does.
#[test]
fn undone_decode_calls_continue_like_the_oracle() {
    let tmp = tempfile::tempdir().unwrap();
    let f = fixture("qwen3_next_hybrid", tmp.path());
    let mut s = session(&f);
    f.feed_and_check(&mut s, 0, 40, "prefill");
    for round in 0..2 {
        let c = s.checkpoint();
        forward(&f.model, &mut s, Input::Tokens(&[3 + round]), &all()).unwrap();
        s.rollback(c);
        assert_eq!(s.position(), 40);
    }
    f.feed_and_check(&mut s, 40, 41, "a decode call after two undone ones");
    for round in 0..2 {
        forward(&f.model, &mut s, Input::Tokens(&[7 + round]), &all()).unwrap();
        s.truncate(41).unwrap();
    }
    for p in 41..45 {
        f.feed_and_check(&mut s, p, p + 1, "decode after truncating decode calls");
    }
}
