//! Contract of `forward_batch`: a step over several sessions gives each exactly what separate
//! `forward` calls give (logits within a tolerance, greedy tokens, positions, routing traces and
//! Gumbel routes identical), on every fixture family; mixed prefill/decode batches and
//! per-sequence options (logits mode, routing mode, seed, top-k) work; a rejected batch leaves
//! every session unchanged.

mod common;

use colibri::forward::{
    forward, forward_batch, ForwardOptions, Input, LogitsMode, RoutingMode, RoutingOptions, Sequence,
};
use colibri::session::{Session, SessionOptions};
use colibri::{Error, LoadOptions, Model};
use common::{argmax, convert, fixture_dirs, ids, max_diff};
use std::path::Path;

/// Largest |batched − separate| logit allowed, relative to max|logit| of the step. Measured on
/// every fixture (f32 and bf16 files) with the kernels of this commit: 0 — each matmul output
/// is one dot product in a fixed order whatever the number of rows, and the experts accumulate
/// in expert order per token, so batched and separate calls are bit-identical today. The
/// tolerance leaves room for kernels whose rounding depends on the row count.
const TOL: f64 = 1e-5;

fn open(dir: &Path, dtype: &str, tmp: &Path) -> Model {
    let name = dir.file_name().unwrap().to_string_lossy();
    let file = tmp.join(format!("{name}-{dtype}.colibri"));
    convert(dir, &file, dtype);
    Model::open(&file, &LoadOptions::default()).unwrap()
}

fn session(model: &Model, n_ctx: usize, seed: u64) -> Session {
    Session::new(model.config(), &SessionOptions { n_ctx, routing_seed: seed, ..Default::default() }).unwrap()
}

/// Three prompts of different lengths (3, 5 and 9 ids) cut from the fixture's input ids.
fn prompts(dir: &Path) -> Vec<Vec<u32>> {
    let input = ids(&common::meta(dir)["input_ids"]);
    vec![input[..3].to_vec(), input[3..8].to_vec(), input[5..14].to_vec()]
}

fn last() -> ForwardOptions {
    ForwardOptions { logits: LogitsMode::Last, ..Default::default() }
}

/// One batch entry per session: its token input and its options.
fn sequences<'a>(sessions: &'a mut [Session], inputs: &'a [Vec<u32>], opts: &[ForwardOptions]) -> Vec<Sequence<'a>> {
    sessions
        .iter_mut()
        .zip(inputs)
        .zip(opts)
        .map(|((s, input), o)| Sequence { session: s, input: Input::Tokens(input), opts: *o })
        .collect()
}

/// Run `inputs` with `opts` through `solo` (one `forward` call per session) and through
/// `batched` (one `forward_batch`); check positions, routing traces and logits agree. Returns
/// the largest logit difference relative to max|logit|.
fn step(
    model: &Model,
    solo: &mut [Session],
    batched: &mut [Session],
    inputs: &[Vec<u32>],
    opts: &[ForwardOptions],
) -> f64 {
    for ((s, input), o) in solo.iter_mut().zip(inputs).zip(opts) {
        forward(model, s, Input::Tokens(input), o).unwrap();
    }
    let mut batch = sequences(batched, inputs, opts);
    forward_batch(model, &mut batch).unwrap();
    let mut worst = 0f64;
    for (i, (a, b)) in solo.iter_mut().zip(batched.iter_mut()).enumerate() {
        assert_eq!(a.position(), b.position(), "sequence {i}: position");
        assert_eq!(a.logits().len(), b.logits().len(), "sequence {i}: logits length");
        let scale = a.logits().iter().fold(1e-30f64, |m, &v| m.max(f64::from(v).abs()));
        let rel = max_diff(a.logits(), b.logits()) / scale;
        assert!(rel <= TOL, "sequence {i}: batched logits differ by {rel:.3e} × max|logit|");
        worst = worst.max(rel);
        let (ta, tb) = (a.take_trace(), b.take_trace());
        assert_eq!(ta.len(), tb.len(), "sequence {i}: trace length");
        for (ra, rb) in ta.iter().zip(&tb) {
            assert_eq!(
                (ra.position, ra.layer, &ra.experts),
                (rb.position, rb.layer, &rb.experts),
                "sequence {i}: routes"
            );
            assert!(max_diff(&ra.weights, &rb.weights) <= 1e-6, "sequence {i}: route weights");
        }
    }
    worst
}

/// Prefill three prompts separately, then decode 8 greedy steps together; the greedy tokens of
/// both ways must be identical.
fn decode_together(model: &Model, dir: &Path) -> f64 {
    let prompts = prompts(dir);
    let mut solo: Vec<Session> = (0..3).map(|_| session(model, 64, 0)).collect();
    let mut batched: Vec<Session> = (0..3).map(|_| session(model, 64, 0)).collect();
    for ((a, b), p) in solo.iter_mut().zip(batched.iter_mut()).zip(&prompts) {
        forward(model, a, Input::Tokens(p), &last()).unwrap();
        forward(model, b, Input::Tokens(p), &last()).unwrap();
    }
    let mut worst = 0f64;
    for _ in 0..8 {
        let next: Vec<Vec<u32>> = solo.iter().map(|s| vec![argmax(s.logits())]).collect();
        let next_b: Vec<Vec<u32>> = batched.iter().map(|s| vec![argmax(s.logits())]).collect();
        assert_eq!(next, next_b, "greedy tokens");
        worst = worst.max(step(model, &mut solo, &mut batched, &next, &[last(); 3]));
    }
    worst
}

#[test]
fn batched_decode_matches_separate_calls_on_every_family() {
    let tmp = tempfile::tempdir().unwrap();
    let mut worst = 0f64;
    for dir in fixture_dirs() {
        for dtype in ["f32", "bf16"] {
            let model = open(&dir, dtype, tmp.path());
            let w = decode_together(&model, &dir);
            eprintln!(
                "{:<22} {dtype:<5} max|Δlogit| batched vs separate = {w:.3e} × max|logit|",
                dir.file_name().unwrap().to_string_lossy()
            );
            worst = worst.max(w);
        }
    }
    eprintln!("worst: {worst:.3e}");
}

#[test]
fn a_mixed_batch_prefills_and_decodes_together() {
    let tmp = tempfile::tempdir().unwrap();
    for dir in fixture_dirs() {
        let model = open(&dir, "f32", tmp.path());
        let p = prompts(&dir);
        // Sequences 1 and 2 hold a prompt; sequence 0 is fresh and prefills 5 tokens with every
        // position's logits while the others decode one token each (one without logits).
        let mut solo: Vec<Session> = (0..3).map(|_| session(&model, 64, 0)).collect();
        let mut batched: Vec<Session> = (0..3).map(|_| session(&model, 64, 0)).collect();
        for i in 1..3 {
            forward(&model, &mut solo[i], Input::Tokens(&p[i]), &last()).unwrap();
            forward(&model, &mut batched[i], Input::Tokens(&p[i]), &last()).unwrap();
        }
        let inputs = vec![p[2][..5].to_vec(), vec![argmax(solo[1].logits())], vec![argmax(solo[2].logits())]];
        let opts = [
            ForwardOptions { logits: LogitsMode::All, ..Default::default() },
            last(),
            ForwardOptions { logits: LogitsMode::None, ..Default::default() },
        ];
        step(&model, &mut solo, &mut batched, &inputs, &opts);
        assert_eq!(batched[0].logits().len(), 5 * model.config().vocab_size, "All: every position's logits");
        assert!(batched[2].logits().is_empty());
        // And a step where the prefilling sequence comes last.
        let vocab = model.config().vocab_size;
        let inputs = vec![vec![argmax(&solo[0].logits()[4 * vocab..])], vec![1], p[0].clone()];
        let opts = [last(), last(), ForwardOptions { logits: LogitsMode::All, ..Default::default() }];
        step(&model, &mut solo, &mut batched, &inputs, &opts);
    }
}

#[test]
fn gumbel_routes_seeds_and_top_k_stay_per_session() {
    let tmp = tempfile::tempdir().unwrap();
    for dir in fixture_dirs() {
        let model = open(&dir, "f32", tmp.path());
        // Every expert a token can choose (all, or those of its best groups).
        let most = model.config().moe.choosable();
        let routing = [
            RoutingOptions { mode: RoutingMode::Gumbel, top_k: None },
            RoutingOptions { mode: RoutingMode::Gumbel, top_k: Some(1) },
            RoutingOptions { mode: RoutingMode::TopK, top_k: Some(most) },
        ];
        let seeds = [11, 22, 33];
        let mut solo: Vec<Session> = seeds.iter().map(|&s| session(&model, 64, s)).collect();
        let mut batched: Vec<Session> = seeds.iter().map(|&s| session(&model, 64, s)).collect();
        for s in solo.iter_mut().chain(batched.iter_mut()) {
            s.set_trace(true);
        }
        let opts = routing.map(|r| ForwardOptions { logits: LogitsMode::Last, routing: r });
        // The prefill in one batch too, then 8 decode steps.
        step(&model, &mut solo, &mut batched, &prompts(&dir), &opts);
        for _ in 0..8 {
            let next: Vec<Vec<u32>> = solo.iter().map(|s| vec![argmax(s.logits())]).collect();
            step(&model, &mut solo, &mut batched, &next, &opts);
        }
    }
}

/// What a failed call must not change: position, logits, the trace, and (checked by running on
/// afterwards) the KV cache and the routing RNG.
fn snapshot(s: &mut Session) -> (usize, Vec<f32>, usize) {
    let trace = s.take_trace();
    let n = trace.len();
    (s.position(), s.logits().to_vec(), n)
}

#[test]
fn a_rejected_batch_leaves_every_session_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs = fixture_dirs();
    let dir = dirs.iter().find(|d| d.ends_with("qwen2_moe_shared")).unwrap();
    let model = open(dir, "f32", tmp.path());
    let c = model.config();
    // A session made for a model whose KV cache has another shape.
    let other = dirs
        .iter()
        .map(|d| open(d, "f32", tmp.path()))
        .find(|m| {
            let o = m.config();
            (o.n_layers, o.n_kv_heads * o.head_dim) != (c.n_layers, c.n_kv_heads * c.head_dim)
        })
        .expect("a fixture with another KV shape");
    let p = prompts(dir);
    let gumbel =
        ForwardOptions { logits: LogitsMode::Last, routing: RoutingOptions { mode: RoutingMode::Gumbel, top_k: None } };
    // Sequence 2's context holds exactly its prompt and one more token.
    let ctx = [64, 64, p[2].len() + 1];
    let mut solo: Vec<Session> = (0..3).map(|i| session(&model, ctx[i], 7 + i as u64)).collect();
    let mut batched: Vec<Session> = (0..3).map(|i| session(&model, ctx[i], 7 + i as u64)).collect();
    for s in solo.iter_mut().chain(batched.iter_mut()) {
        s.set_trace(true);
    }
    step(&model, &mut solo, &mut batched, &p, &[gumbel; 3]);

    let vocab = c.vocab_size as u32;
    let ok = |i: usize| vec![argmax(solo[i].logits())];
    type Case<'a> = (&'a str, Vec<Vec<u32>>, [ForwardOptions; 3], &'a str); // what, inputs, options, error
    let cases: Vec<Case<'_>> = vec![
        ("context full in sequence 2", vec![ok(0), ok(1), vec![1, 2]], [gumbel; 3], "context full"),
        ("bad id in sequence 1", vec![ok(0), vec![1, vocab], ok(2)], [gumbel; 3], "outside the vocabulary"),
        ("empty input in sequence 0", vec![vec![], ok(1), ok(2)], [gumbel; 3], "empty input"),
        (
            "top-k 0 in sequence 1",
            vec![ok(0), ok(1), ok(2)],
            [gumbel, ForwardOptions { routing: RoutingOptions { top_k: Some(0), ..gumbel.routing }, ..gumbel }, gumbel],
            "top-k override",
        ),
    ];
    for (what, inputs, opts, needle) in &cases {
        let before: Vec<_> = batched.iter_mut().map(snapshot).collect();
        let mut batch = sequences(&mut batched, inputs, opts);
        let err = forward_batch(&model, &mut batch).expect_err(what);
        // A full context is its own error class; every other rejection is an invalid argument.
        let class_ok = match &err {
            Error::ContextFull { sequence, .. } => *needle == "context full" && *sequence == Some(2),
            Error::InvalidArgument { .. } => *needle != "context full",
            _ => false,
        };
        let msg = err.to_string();
        assert!(class_ok && msg.contains(needle) && msg.contains("of the batch"), "{what}: {err}");
        let after: Vec<_> = batched.iter_mut().map(snapshot).collect();
        assert_eq!(before, after, "{what}: a session changed");
    }
    // A session of another model, and an empty batch.
    let mut foreign = session(&other, 64, 0);
    let before: Vec<_> = batched.iter_mut().map(snapshot).collect();
    let (t0, t1) = (ok(0), ok(1));
    let (a, rest) = batched.split_first_mut().unwrap();
    let mut batch = vec![
        Sequence { session: a, input: Input::Tokens(&t0), opts: gumbel },
        Sequence { session: &mut foreign, input: Input::Tokens(&t1), opts: gumbel },
        Sequence { session: &mut rest[0], input: Input::Tokens(&t1), opts: gumbel },
    ];
    let err = forward_batch(&model, &mut batch).expect_err("foreign session");
    assert!(err.to_string().contains("another model") && err.to_string().contains("sequence 1"), "{err}");
    assert!(forward_batch(&model, &mut []).is_err(), "empty batch");
    let after: Vec<_> = batched.iter_mut().map(snapshot).collect();
    assert_eq!(before, after, "a session changed after the foreign-session batch");
    assert_eq!(foreign.position(), 0);

    // The caches and RNGs were untouched: going on gives what the never-failed sessions give.
    let next: Vec<Vec<u32>> = (0..3).map(ok).collect();
    step(&model, &mut solo, &mut batched, &next, &[gumbel; 3]);
    for _ in 0..3 {
        let next: Vec<Vec<u32>> = solo[..2].iter().map(|s| vec![argmax(s.logits())]).collect();
        step(&model, &mut solo[..2], &mut batched[..2], &next, &[gumbel; 2]);
    }
}
