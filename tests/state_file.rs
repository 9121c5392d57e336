//! Contract of session state files (`Session::save_state` / `load_state`): a session restored
//! from a file continues bit-identically to the session that wrote it (KV rows, recurrent
//! DeltaNet state, routing RNG, last logits), for every KV element type and across them; the
//! token ids stored with it come back; a damaged, truncated or foreign file, or one that does
//! not fit the session's context, is refused and changes nothing; a failed save leaves the
//! previous file as it was.

mod common;

use colibri::forward::{forward, ForwardOptions, Input, LogitsMode, RoutingMode, RoutingOptions};
use colibri::session::{KvDtype, Session, SessionOptions};
use colibri::{Error, LoadOptions, Model};
use std::path::{Path, PathBuf};

fn default_model() -> Model {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/default.colibri");
    Model::open(&path, &LoadOptions::default()).unwrap()
}

fn session(m: &Model, kv: KvDtype, n_ctx: usize) -> Session {
    let opts = SessionOptions { n_ctx, kv_dtype: kv, routing_seed: 7, ..Default::default() };
    Session::new(m.config(), &opts).unwrap()
}

/// Gumbel routing, so the routing RNG's state matters for the continuation.
fn gumbel() -> ForwardOptions {
    let routing = RoutingOptions { mode: RoutingMode::Gumbel, ..Default::default() };
    ForwardOptions { logits: LogitsMode::All, routing }
}

fn prompt(m: &Model, n: u32) -> Vec<u32> {
    (0..n).map(|i| (i * 331 + 17) % m.config().vocab_size as u32).collect()
}

/// Logits of three more calls (2 tokens, then 1, then 3).
fn continuation(m: &Model, s: &mut Session) -> Vec<u32> {
    let mut out = Vec::new();
    for piece in [&[9u32, 250][..], &[3], &[399, 12, 77]] {
        forward(m, s, Input::Tokens(piece), &gumbel()).unwrap();
        out.extend(s.logits().iter().map(|x| x.to_bits()));
    }
    out
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("colibri-state-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn round_trip(m: &Model, from: KvDtype, to: KvDtype, dir: &Path) {
    let mut a = session(m, from, 64);
    let p = prompt(m, 21);
    forward(m, &mut a, Input::Tokens(&p), &gumbel()).unwrap();
    let file = dir.join(format!("{from:?}-{to:?}.state"));
    a.save_state(m, &p, &file).unwrap();
    let mut b = session(m, to, 64);
    let tokens = b.load_state(m, &file).unwrap();
    assert_eq!(tokens, p, "token ids stored with the state");
    assert_eq!(b.position(), 21);
    assert_eq!(a.logits(), b.logits(), "the last logits are restored");
    if from == to {
        assert_eq!(continuation(m, &mut a), continuation(m, &mut b), "{from:?}: restored ≠ original");
    } else {
        // Rounded from `from` to `to` on the way in: continue next to a session that computed in `to`.
        let mut c = session(m, to, 64);
        forward(m, &mut c, Input::Tokens(&p), &gumbel()).unwrap();
        c.set_routing_seed(7);
        b.set_routing_seed(7);
        let (x, y) = (continuation(m, &mut b), continuation(m, &mut c));
        let diff = x.iter().zip(&y).map(|(a, b)| (f32::from_bits(*a) - f32::from_bits(*b)).abs()).fold(0f32, f32::max);
        assert!(diff < 0.5, "{from:?} → {to:?}: max |Δlogit| {diff}");
    }
}

#[test]
fn a_restored_session_continues_bit_identically() {
    let m = default_model();
    let dir = tmp("roundtrip");
    for kv in [KvDtype::F32, KvDtype::F16, KvDtype::BF16] {
        round_trip(&m, kv, kv, &dir);
    }
    round_trip(&m, KvDtype::F32, KvDtype::BF16, &dir);
    round_trip(&m, KvDtype::BF16, KvDtype::F32, &dir);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_bad_file_is_refused_and_changes_nothing() {
    let m = default_model();
    let dir = tmp("bad");
    let mut a = session(&m, KvDtype::F32, 64);
    forward(&m, &mut a, Input::Tokens(&prompt(&m, 9)), &gumbel()).unwrap();
    let good = dir.join("good.state");
    a.save_state(&m, &[], &good).unwrap();
    let bytes = std::fs::read(&good).unwrap();

    // The victim holds 5 other tokens; every refusal must leave it exactly so.
    let mut victim = session(&m, KvDtype::F32, 64);
    forward(&m, &mut victim, Input::Tokens(&prompt(&m, 5)), &gumbel()).unwrap();
    let before = victim.logits().to_vec();
    let bad = dir.join("bad.state");
    let mut cases: Vec<(String, Vec<u8>)> = vec![("empty".into(), Vec::new())];
    for cut in [8, 111, 112, bytes.len() / 2, bytes.len() - 1] {
        cases.push((format!("truncated at {cut}"), bytes[..cut].to_vec()));
    }
    for at in [0, 9, 17, 30, 64, 113, bytes.len() / 2, bytes.len() - 3] {
        let mut b = bytes.clone();
        b[at] ^= 0x10;
        cases.push((format!("bit flip at {at}"), b));
    }
    let mut longer = bytes.clone();
    longer.extend_from_slice(&[0; 8]);
    cases.push(("8 bytes appended".into(), longer));
    for (what, b) in cases {
        std::fs::write(&bad, &b).unwrap();
        let err = victim.load_state(&m, &bad).expect_err(&what);
        assert!(err.to_string().contains("bad.state") || matches!(err, Error::Io { .. }), "{what}: {err}");
        assert_eq!(victim.position(), 5, "{what}: position changed");
        assert_eq!(victim.logits(), &before[..], "{what}: logits changed");
    }
    assert!(victim.load_state(&m, &dir.join("missing.state")).is_err());

    // A context smaller than the saved tokens: ContextFull, nothing changed.
    let mut small = session(&m, KvDtype::F32, 8);
    assert!(matches!(small.load_state(&m, &good), Err(Error::ContextFull { .. })));
    assert_eq!(small.position(), 0);

    // Ids that do not cover the cached tokens are refused before anything is written.
    let err = a.save_state(&m, &[1, 2, 3], &good).unwrap_err();
    assert!(err.to_string().contains("3 token ids"), "{err}");
    assert_eq!(std::fs::read(&good).unwrap(), bytes, "a failed save rewrote the previous file");
    let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).collect();
    assert!(leftovers.iter().all(|e| !e.file_name().to_string_lossy().contains(".tmp")), "temporary file left");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_state_belongs_to_its_model_file() {
    let dir = tmp("foreign");
    let qwen = common::fixture_dirs().into_iter().find(|d| d.ends_with("qwen3_next_hybrid")).unwrap();
    let other = dir.join("qwen3_next.colibri");
    common::convert(&qwen, &other, "f32");
    let q = Model::open(&other, &LoadOptions::default()).unwrap();
    let m = default_model();
    let mut a = session(&m, KvDtype::F32, 64);
    forward(&m, &mut a, Input::Tokens(&prompt(&m, 4)), &gumbel()).unwrap();
    let file = dir.join("default.state");
    a.save_state(&m, &[], &file).unwrap();
    let mut b = session(&q, KvDtype::F32, 64);
    let err = b.load_state(&q, &file).unwrap_err();
    assert!(err.to_string().contains("another model"), "{err}");
    assert_eq!(b.position(), 0);

    // A hybrid model: the DeltaNet state travels too, and the restored point is one truncate
    // can go back to.
    let mut r = session(&q, KvDtype::F32, 64);
    forward(&q, &mut r, Input::Tokens(&prompt(&q, 11)), &gumbel()).unwrap();
    let file = dir.join("hybrid.state");
    r.save_state(&q, &[], &file).unwrap();
    let mut s = session(&q, KvDtype::F32, 64);
    s.load_state(&q, &file).unwrap();
    assert_eq!(continuation(&q, &mut r), continuation(&q, &mut s), "hybrid: restored ≠ original");
    let mut t = session(&q, KvDtype::F32, 64);
    t.load_state(&q, &file).unwrap();
    forward(&q, &mut t, Input::Tokens(&[5, 6]), &gumbel()).unwrap();
    forward(&q, &mut t, Input::Tokens(&[7]), &gumbel()).unwrap();
    assert!(matches!(t.truncate(11), Err(Error::Unsupported { .. })), "two calls later 11 cannot be restored");
    let mut u = session(&q, KvDtype::F32, 64);
    u.load_state(&q, &file).unwrap();
    u.truncate(11).unwrap();
    std::fs::remove_dir_all(dir).ok();
}
