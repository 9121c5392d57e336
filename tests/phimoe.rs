//! Contract of Phi-MoE's two rules beyond the oracle comparisons of `oracle.rs`:
//! * LongRoPE chooses its factor set per forward call, from the call's highest position: a call
//!   that stays within `original_max_position_embeddings` uses the short set (its rows equal
//!   transformers' token-by-token rows there), one that reaches past it uses the long set for
//!   every row (also when it runs as several steps of `MAX_STEP_ROWS`), and cached keys keep the
//!   set they were computed with.
//!   `generate` re-encodes the whole sequence at the step that first crosses it, as
//!   transformers' `generate()` does.
//! * Sparsemixer routing under the per-call options: top-k = k runs k sparsemixer steps (top-1 is
//!   the first of transformers' two, with its weight), Gumbel picks only among the experts the
//!   jitter threshold keeps (so with the hub's jitter of 0.01, which keeps one per step, Gumbel
//!   routes equal the deterministic ones).
//! * The C ABI reports the family as COLIBRI_FAMILY_PHIMOE (9).

mod common;

use colibri::forward::{forward, ForwardOptions, Input, LogitsMode, RoutingMode, RoutingOptions};
use colibri::session::{RouteRecord, Session, SessionOptions};
use colibri::{LoadOptions, Model};
use common::{convert, ids, max_diff, meta, models_root};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    models_root().join(name)
}

fn open(dir: &Path, tmp: &Path) -> Model {
    let file = tmp.join("m.colibri");
    convert(dir, &file, "f32");
    Model::open(&file, &LoadOptions::default()).unwrap()
}

fn session(model: &Model, seed: u64) -> Session {
    let opts = SessionOptions { n_ctx: 64, routing_seed: seed, ..Default::default() };
    Session::new(model.config(), &opts).unwrap()
}

/// The float32 .npy rows of `path` (2-D, little endian, C order).
fn npy(path: &Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap();
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    b[10 + hlen..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn all() -> ForwardOptions {
    ForwardOptions { logits: LogitsMode::All, ..Default::default() }
}

#[test]
fn longrope_factors_are_chosen_per_call_and_cached_keys_keep_theirs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture("phimoe_long");
    let m = meta(&dir);
    let model = open(&dir, tmp.path());
    let original = model.config().longrope_original().unwrap();
    let vocab = model.config().vocab_size;
    let input = ids(&m["input_ids"]);
    assert!(input.len() > original, "the fixture's call must cross the original context");
    let one_call = npy(&dir.join("oracle/logits_f32.npy"));
    let token_by_token = npy(&dir.join("oracle/logits_incremental_f32.npy"));
    let scale = one_call.iter().fold(0f64, |a, &v| a.max(f64::from(v).abs()));

    // One call past the original context: the long set for all rows, the first included.
    let mut s = session(&model, 0);
    forward(&model, &mut s, Input::Tokens(&input), &all()).unwrap();
    assert!(max_diff(s.logits(), &one_call) <= 1e-4 * scale);

    // A call that ends at the original context: the short set, as transformers' rows there.
    let mut s = session(&model, 0);
    forward(&model, &mut s, Input::Tokens(&input[..original]), &all()).unwrap();
    let short_rows = &token_by_token[..original * vocab];
    assert!(max_diff(s.logits(), short_rows) <= 1e-4 * scale);
    // ... and differs from the long-set rows of the one call (the rule is visible).
    assert!(max_diff(s.logits(), &one_call[..original * vocab]) > 1e-2 * scale);

    // The rest in a second call: the long set over keys cached with the short one, as
    // transformers' token-by-token rows from there on — not the one call's rows.
    forward(&model, &mut s, Input::Tokens(&input[original..]), &all()).unwrap();
    assert!(max_diff(s.logits(), &token_by_token[original * vocab..]) <= 1e-4 * scale);
    assert!(max_diff(s.logits(), &one_call[original * vocab..]) > 1e-2 * scale);
}

#[test]
fn generate_re_encodes_the_sequence_where_it_first_crosses_the_original_context() {
    use colibri::decoder::DecodeParams;
    use colibri::generate::{generate, GenerateParams};
    use colibri::sampler::SamplerParams;
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture("phimoe_long");
    let model = open(&dir, tmp.path());
    let original = model.config().longrope_original().unwrap();
    let prompt = ids(&meta(&dir)["input_ids"])[..5].to_vec();
    let decode = DecodeParams {
        max_tokens: 10,
        sampler: SamplerParams::greedy(),
        ignore_eos: true,
        stop: Vec::new(),
        grammar: None,
        end_ids: Vec::new(),
    };
    let params = GenerateParams { decode, ..Default::default() };
    let mut g = session(&model, 0);
    let out = generate(&model, &mut g, None, Input::Tokens(&prompt), &params, |_| true).unwrap();
    // The session holds the prompt and all but the last token (not fed), past the original.
    let all = [prompt.clone(), out.tokens[..9].to_vec()].concat();
    assert!(g.position() == all.len() && all.len() > original);
    // Its last logits are those of one call over the whole sequence (every key long) ...
    let mut one = session(&model, 0);
    let last = ForwardOptions { logits: LogitsMode::Last, ..Default::default() };
    forward(&model, &mut one, Input::Tokens(&all), &last).unwrap();
    let scale = one.logits().iter().fold(0f64, |a, &v| a.max(f64::from(v).abs()));
    assert!(max_diff(g.logits(), one.logits()) <= 1e-4 * scale);
    // ... not those of token-by-token decoding, whose first keys keep the short set.
    let mut steps = session(&model, 0);
    forward(&model, &mut steps, Input::Tokens(&prompt), &last).unwrap();
    for &t in &out.tokens[..9] {
        forward(&model, &mut steps, Input::Tokens(&[t]), &last).unwrap();
    }
    assert!(max_diff(steps.logits(), one.logits()) > 1e-2 * scale);
}

/// The routing of `input` under `routing`, one record per (token, MoE layer).
fn routes(model: &Model, input: &[u32], routing: RoutingOptions, seed: u64) -> Vec<RouteRecord> {
    let mut s = session(model, seed);
    s.set_trace(true);
    forward(model, &mut s, Input::Tokens(input), &ForwardOptions { logits: LogitsMode::Last, routing }).unwrap();
    s.take_trace()
}

/// The oracle's (experts, weights) of token `t` in MoE layer `layer`.
fn oracle_route(m: &Value, layer: usize, t: usize) -> (Vec<u32>, Vec<f64>) {
    let e = ids(&m["routing_f32"][layer][t]);
    let w = m["routing_weights_f32"][layer][t].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    (e, w)
}

#[test]
fn sparsemixer_top_k_overrides_run_that_many_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture("phimoe_long");
    let m = meta(&dir);
    let model = open(&dir, tmp.path());
    let input = ids(&m["input_ids"]);
    let run = |k| routes(&model, &input, RoutingOptions { mode: RoutingMode::TopK, top_k: Some(k) }, 0);
    let (one, two, three) = (run(1), run(2), run(3));
    for (r1, (r2, r3)) in one.iter().zip(two.iter().zip(&three)) {
        let (want, weights) = oracle_route(&m, r1.layer, r1.position);
        // k = 2 is the model's own routing: transformers' experts and weights.
        assert_eq!(r2.experts, want);
        for (a, b) in r2.weights.iter().zip(&weights) {
            assert!((f64::from(*a) - b).abs() < 1e-5, "{a} vs {b}");
        }
        // Later layers see what other k did to the residual stream: only the first is comparable.
        assert_eq!(r1.experts.len(), 1);
        if r1.layer > 0 {
            continue;
        }
        // k = 1: transformers' first step, one of its two experts with its weight.
        let i = want.iter().position(|&e| e == r1.experts[0]).expect("a top-1 expert among the top-2");
        assert!((f64::from(r1.weights[0]) - weights[i]).abs() < 1e-5, "{r1:?} vs {weights:?}");
        // k = 3: the same two first steps, then a third, distinct expert with a weight in (0, 1].
        let mut first_two = r3.experts.clone();
        first_two.retain(|e| want.contains(e));
        assert_eq!(first_two.len(), 2, "{:?} vs {want:?}", r3.experts);
        assert!(r3.experts.iter().all(|e| (*e as usize) < 6) && r3.weights.iter().all(|w| *w > 0.0 && *w <= 1.0));
    }
    // The weights are real masked softmaxes here (the fixture's jitter keeps several experts).
    assert!(two.iter().any(|r| r.weights.iter().any(|w| *w < 0.99)));
}

#[test]
fn sparsemixer_gumbel_picks_only_experts_the_jitter_threshold_keeps() {
    let tmp = tempfile::tempdir().unwrap();
    // jitter 0.01 keeps one expert per step: Gumbel has nothing to choose between.
    let hub = fixture("phimoe_hub");
    let model = open(&hub, tmp.path());
    let input = ids(&meta(&hub)["input_ids"]);
    let top = routes(&model, &input, RoutingOptions::default(), 0);
    for seed in [1, 2, 3] {
        let g = routes(&model, &input, RoutingOptions { mode: RoutingMode::Gumbel, top_k: None }, seed);
        assert_eq!(g, top, "seed {seed}");
    }
    // jitter 0.3 keeps several: seeds change some choices, every chosen expert has weight > 0
    // (it was kept), and a seed replays exactly.
    let long = fixture("phimoe_long");
    let model = open(&long, tmp.path());
    let input = ids(&meta(&long)["input_ids"]);
    let top = routes(&model, &input, RoutingOptions::default(), 0);
    let gumbel = RoutingOptions { mode: RoutingMode::Gumbel, top_k: None };
    let runs: Vec<_> = (1..=4).map(|seed| routes(&model, &input, gumbel, seed)).collect();
    assert!(runs.iter().any(|g| g.iter().zip(&top).any(|(a, b)| a.experts != b.experts)));
    for g in &runs {
        for r in g {
            assert!(r.experts.len() == 2 && r.experts[0] != r.experts[1]);
            assert!(r.weights.iter().all(|w| *w > 0.0 && *w <= 1.0), "{r:?}");
        }
    }
    assert_eq!(routes(&model, &input, gumbel, 3), runs[2]);
}

#[test]
fn the_c_abi_names_the_family() {
    use colibri::ffi::*;
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("m.colibri");
    convert(&fixture("phimoe_hub"), &file, "bf16");
    let info = common::c_model_info(&file);
    assert_eq!((info.family, COLIBRI_FAMILY_PHIMOE, info.n_experts, info.top_k), (9, 9, 6, 2));
}

/// phimoe_long converted with `original_max_position_embeddings` set to `original`.
fn with_original(original: u64, tmp: &Path) -> Model {
    let src = fixture("phimoe_long");
    let dir = tmp.join(format!("src-{original}"));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let mut c: Value = serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    c["original_max_position_embeddings"] = original.into();
    c["rope_parameters"]["original_max_position_embeddings"] = original.into();
    std::fs::write(dir.join("config.json"), c.to_string()).unwrap();
    let file = tmp.join(format!("m-{original}.colibri"));
    convert(&dir, &file, "f32");
    Model::open(&file, &LoadOptions::default()).unwrap()
}

#[test]
fn a_call_longer_than_one_step_keeps_the_whole_calls_factor_set() {
    use colibri::forward::MAX_STEP_ROWS;
    let tmp = tempfile::tempdir().unwrap();
    let n = MAX_STEP_ROWS + 16;
    // Past 1030 only at its end: its first step (1024 rows) must still take the long set, as
    // a model that takes it from position 1 on does.
    let (late, always) = (with_original(1030, tmp.path()), with_original(1, tmp.path()));
    let input: Vec<u32> = (0..n as u32).map(|i| 3 + (i * 37) % 390).collect();
    let logits = |model: &Model| {
        let mut s = Session::new(model.config(), &SessionOptions { n_ctx: n, ..Default::default() }).unwrap();
        forward(model, &mut s, Input::Tokens(&input), &all()).unwrap();
        s.logits().to_vec()
    };
    let (a, b) = (logits(&late), logits(&always));
    let scale = b.iter().fold(0f64, |m, &v| m.max(f64::from(v).abs()));
    assert!(max_diff(&a, &b) <= 1e-5 * scale, "{}", max_diff(&a, &b) / scale);
    // The same call with the original context beyond it takes the short set: other logits.
    let short = logits(&with_original(n as u64, tmp.path()));
    assert!(max_diff(&short, &b) > 1e-2 * scale);
}
