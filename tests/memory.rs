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
