//! Contract: memory an input asks for is allocated as it is used and fallibly. A session with
//! a 16M-token context costs nothing until tokens arrive; its KV cache grows with them (never
//! past n_ctx) and gives the same logits as a small context; memory that cannot be had is
//! `Error::OutOfMemory` (COLIBRI_STATUS_OUT_OF_MEMORY), never an abort, and changes nothing.

mod common;

use colibri::forward::{forward, ForwardOptions, Input, LogitsMode};
use colibri::session::{Session, SessionOptions};
use colibri::{Error, LoadOptions, Model};
use common::{convert, fixture_dirs, ids};

fn model(tmp: &std::path::Path) -> (Model, Vec<u32>) {
    let dir = fixture_dirs().into_iter().find(|d| d.ends_with("qwen2_moe_shared")).expect("fixture");
    let file = tmp.join("m.colibri");
    convert(&dir, &file, "f32");
    let input = ids(&common::meta(&dir)["input_ids"]);
    (Model::open(&file, &LoadOptions::default()).unwrap(), input)
}

#[test]
fn a_huge_context_costs_only_what_is_used() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, input) = model(tmp.path());
    let big = 1 << 24;
    let mut s = Session::new(m.config(), &SessionOptions { n_ctx: big, ..Default::default() }).unwrap();
    assert_eq!((s.n_ctx(), s.kv_reserved()), (big, 0), "nothing is allocated up front");
    let mut small = Session::new(m.config(), &SessionOptions { n_ctx: 64, ..Default::default() }).unwrap();
    let all = ForwardOptions { logits: LogitsMode::All, ..Default::default() };
    for chunk in input.chunks(3) {
        forward(&m, &mut s, Input::Tokens(chunk), &all).unwrap();
        forward(&m, &mut small, Input::Tokens(chunk), &all).unwrap();
        assert_eq!(s.logits(), small.logits(), "the same logits whatever the context");
        let used = s.position();
        assert!(s.kv_reserved() >= used && s.kv_reserved() <= 2 * used.max(1), "{} for {used}", s.kv_reserved());
    }
    // A reservation up front, within the context.
    s.reserve(1000).unwrap();
    assert_eq!(s.kv_reserved(), 1000);
    small.reserve(1000).unwrap();
    assert_eq!(small.kv_reserved(), 64, "never past n_ctx");
}

#[test]
fn kv_bytes_per_token_is_what_a_position_costs() {
    use colibri::session::{kv_bytes_per_token, KvDtype};
    let tmp = tempfile::tempdir().unwrap();
    let (m, _) = model(tmp.path());
    let c = m.config();
    let row = c.n_kv_heads * c.head_dim;
    for (dtype, element) in [(KvDtype::F32, 4), (KvDtype::F16, 2), (KvDtype::BF16, 2)] {
        let want = 2 * c.n_layers * row * element;
        assert_eq!(kv_bytes_per_token(c, dtype), want, "{dtype:?}");
        let s = Session::new(c, &SessionOptions { kv_dtype: dtype, ..Default::default() }).unwrap();
        assert_eq!(s.kv_bytes_per_token(), want, "{dtype:?}");
    }
}

#[test]
fn an_mla_cache_holds_one_latent_and_rope_key_per_token_and_layer() {
    use colibri::session::{kv_bytes_per_token, KvDtype};
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture_dirs().into_iter().find(|d| d.ends_with("deepseek_v3_mtp")).expect("fixture");
    let hf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let n = |k: &str| hf[k].as_u64().unwrap() as usize;
    let per_layer = n("kv_lora_rank") + n("qk_rope_head_dim");
    let file = tmp.path().join("m.colibri");
    convert(&dir, &file, "f32");
    let m = Model::open(&file, &LoadOptions::default()).unwrap();
    let c = m.config();
    for (dtype, element) in [(KvDtype::F32, 4), (KvDtype::F16, 2), (KvDtype::BF16, 2)] {
        let want = n("num_hidden_layers") * per_layer * element;
        assert_eq!(kv_bytes_per_token(c, dtype), want, "{dtype:?}");
        assert_eq!(c.kv_bytes_per_token(element), want, "{dtype:?} (inspect's figure)");
        let s = Session::new(c, &SessionOptions { kv_dtype: dtype, ..Default::default() }).unwrap();
        assert_eq!(s.kv_bytes_per_token(), want, "{dtype:?}");
    }
    // Far less than per-head K and V would take: 2 · heads · (nope + rope) values per layer.
    assert!(per_layer * 4 < 2 * n("num_attention_heads") * (n("qk_nope_head_dim") + n("qk_rope_head_dim")));
}

#[test]
fn memory_that_cannot_be_had_is_an_error_that_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, input) = model(tmp.path());
    // A config whose K/V rows are 2^60 values: one position needs more than the address space.
    let mut huge = m.config().clone();
    huge.n_kv_heads = 1;
    huge.head_dim = 1 << 60;
    let mut s = Session::new(&huge, &SessionOptions { n_ctx: 1, ..Default::default() }).unwrap();
    match s.reserve(1) {
        Err(Error::OutOfMemory { bytes, .. }) => assert!(bytes > 1 << 60, "{bytes}"),
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    assert_eq!((s.position(), s.kv_reserved()), (0, 0));
    // The real model still runs in a session made for it.
    let mut ok = Session::new(m.config(), &SessionOptions { n_ctx: 8, ..Default::default() }).unwrap();
    forward(&m, &mut ok, Input::Tokens(&input[..4]), &ForwardOptions::default()).unwrap();
    assert_eq!(ok.position(), 4);
}

/// A call longer than MAX_STEP_ROWS runs as consecutive steps of at most that many rows (what a
/// step allocates stays bounded): one call of MAX + 37 tokens gives exactly what feeding the
/// same tokens in MAX-row pieces gives, for every logits mode, and a batch that long gives each
/// sequence what it gets alone.
#[test]
fn a_huge_prompt_in_one_call_runs_in_bounded_steps() {
    use colibri::forward::{forward_batch, Sequence, MAX_STEP_ROWS};
    let m = Model::open(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/default.colibri"),
        &LoadOptions::default(),
    )
    .unwrap();
    let vocab = m.config().vocab_size as u32;
    let n = MAX_STEP_ROWS + 37;
    let toks: Vec<u32> = (0..n as u32).map(|i| (i * 7919 + 13) % vocab).collect();
    let opts = SessionOptions { n_ctx: 2 * n, ..SessionOptions::default() };
    let all = ForwardOptions { logits: LogitsMode::All, ..ForwardOptions::default() };
    let mut pieces = Session::new(m.config(), &opts).unwrap();
    let mut want = Vec::new();
    for piece in toks.chunks(MAX_STEP_ROWS) {
        forward(&m, &mut pieces, Input::Tokens(piece), &all).unwrap();
        want.extend_from_slice(pieces.logits());
    }
    let mut one = Session::new(m.config(), &opts).unwrap();
    forward(&m, &mut one, Input::Tokens(&toks), &all).unwrap();
    assert_eq!(one.position(), n);
    assert!(one.logits() == want.as_slice(), "All: one call = MAX-row pieces");
    let (mut last, mut last_pieces) =
        (Session::new(m.config(), &opts).unwrap(), Session::new(m.config(), &opts).unwrap());
    forward(&m, &mut last, Input::Tokens(&toks), &ForwardOptions::default()).unwrap();
    let none = ForwardOptions { logits: LogitsMode::None, ..ForwardOptions::default() };
    forward(&m, &mut last_pieces, Input::Tokens(&toks[..MAX_STEP_ROWS]), &none).unwrap();
    forward(&m, &mut last_pieces, Input::Tokens(&toks[MAX_STEP_ROWS..]), &ForwardOptions::default()).unwrap();
    assert!(last.logits() == last_pieces.logits(), "Last: the last row of the pieces");
    assert_eq!(last.logits().len(), vocab as usize);
    // Two sequences, MAX + 37 + 50 rows in one batch: each gets what it gets alone.
    let short = &toks[..50];
    let mut alone = Session::new(m.config(), &opts).unwrap();
    forward(&m, &mut alone, Input::Tokens(short), &ForwardOptions::default()).unwrap();
    let (mut a, mut b) = (Session::new(m.config(), &opts).unwrap(), Session::new(m.config(), &opts).unwrap());
    let last_only = ForwardOptions::default();
    forward_batch(
        &m,
        &mut [
            Sequence { session: &mut a, input: Input::Tokens(&toks), opts: last_only },
            Sequence { session: &mut b, input: Input::Tokens(short), opts: last_only },
        ],
    )
    .unwrap();
    assert!(a.logits() == last.logits() && b.logits() == alone.logits());
    // Too long for the context: refused before anything changes.
    let mut small = Session::new(m.config(), &SessionOptions { n_ctx: n - 1, ..SessionOptions::default() }).unwrap();
    let e = forward(&m, &mut small, Input::Tokens(&toks), &ForwardOptions::default()).unwrap_err();
    assert!(matches!(e, Error::ContextFull { .. }), "{e}");
    assert_eq!(small.position(), 0);
}
