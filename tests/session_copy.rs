//! Contract of copying a session in memory (`Session::copy_from`, `copy_prefix_from`) on the
//! oracle fixtures of the cache kinds — MLA latent + rope key (DeepSeek-V2/V3), sliding-window
//! layers with sinks (GPT-OSS), DeltaNet conv + recurrent state (Qwen3-Next) — and the shipped
//! default model: a copy taken after a prefill continues bit-identically to a fresh session fed
//! the same tokens; the source is unaffected by what the copy does afterwards (and the copy by
//! the source); a prefix copy equals the source truncated there, at the points truncate allows;
//! a too small destination, a session of another model and an unrestorable cut are refused and
//! change nothing.

mod common;

use colibri::forward::{forward, ForwardOptions, Input, LogitsMode};
use colibri::session::{KvDtype, Session, SessionOptions};
use colibri::{Error, LoadOptions, Model};
use common::{convert, fixture_dirs, ids, meta};
use std::path::{Path, PathBuf};

/// A model and its oracle input ids.
struct Case {
    name: String,
    model: Model,
    input: Vec<u32>,
}

fn fixture(name: &str, tmp: &Path) -> Case {
    let dir = fixture_dirs().into_iter().find(|d| d.ends_with(name)).expect("fixture");
    let file = tmp.join(format!("{name}.colibri"));
    convert(&dir, &file, "f32");
    let model = Model::open(&file, &LoadOptions::default()).unwrap();
    Case { name: name.into(), model, input: ids(&meta(&dir)["input_ids"]) }
}

fn default_case() -> Case {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/default.colibri");
    let model = Model::open(&path, &LoadOptions::default()).unwrap();
    let vocab = model.config().vocab_size as u32;
    Case { name: "default".into(), input: (0..40).map(|i| (i * 331 + 17) % vocab).collect(), model }
}

fn session(m: &Model, n_ctx: usize, kv: KvDtype) -> Session {
    let opts = SessionOptions { n_ctx, kv_dtype: kv, routing_seed: 3, ..Default::default() };
    Session::new(m.config(), &opts).unwrap()
}

fn all() -> ForwardOptions {
    ForwardOptions { logits: LogitsMode::All, ..Default::default() }
}

/// Feed `tokens` one call each and return every call's logits as bits.
fn decode(m: &Model, s: &mut Session, tokens: &[u32]) -> Vec<u32> {
    let mut out = Vec::new();
    for t in tokens {
        forward(m, s, Input::Tokens(&[*t]), &all()).unwrap();
        out.extend(s.logits().iter().map(|x| x.to_bits()));
    }
    out
}

fn bits(s: &Session) -> Vec<u32> {
    s.logits().iter().map(|x| x.to_bits()).collect()
}

impl Case {
    /// A fresh session fed `prefix` in one call, then `tail` one token per call: its logits.
    fn fresh(&self, prefix: &[u32], tail: &[u32], kv: KvDtype) -> Vec<u32> {
        let mut s = session(&self.model, 128, kv);
        forward(&self.model, &mut s, Input::Tokens(prefix), &all()).unwrap();
        decode(&self.model, &mut s, tail)
    }

    /// Fork after a prefill and continue both differently: each equals its fresh twin bit for
    /// bit, whichever runs first.
    fn fork_continues_exactly(&self, kv: KvDtype) {
        let (m, what) = (&self.model, format!("{} {kv:?}", self.name));
        let split = self.input.len() / 2;
        let (prompt, tail) = self.input.split_at(split);
        let other: Vec<u32> = tail.iter().rev().copied().collect();
        let mut a = session(m, 128, kv);
        forward(m, &mut a, Input::Tokens(prompt), &all()).unwrap();
        // A destination that already held other tokens (and a larger capacity).
        let mut b = session(m, 160, kv);
        forward(m, &mut b, Input::Tokens(&other[..3]), &all()).unwrap();
        b.copy_from(&a).unwrap();
        assert_eq!((b.position(), b.n_ctx()), (split, 160), "{what}: position copied, capacity kept");
        let mut fresh = session(m, 128, kv);
        fresh.copy_from(&a).unwrap();
        assert_eq!(fresh.kv_reserved(), split, "{what}: only the used positions are allocated");
        assert_eq!(bits(&b), bits(&a), "{what}: the last logits are copied");
        assert_eq!(decode(m, &mut b, tail), self.fresh(prompt, tail, kv), "{what}: the copy ≠ a fresh session");
        assert_eq!(decode(m, &mut a, &other), self.fresh(prompt, &other, kv), "{what}: the source changed");
        // And the other way round: a copy of the (now longer) source, then the source goes on.
        let mut c = session(m, 128, kv);
        c.copy_from(&a).unwrap();
        let first = decode(m, &mut a, &tail[..2]);
        let mut d = session(m, 128, kv);
        forward(m, &mut d, Input::Tokens(prompt), &all()).unwrap();
        decode(m, &mut d, &other);
        assert_eq!(first, decode(m, &mut d, &tail[..2]), "{what}: the source after a second copy");
        assert_eq!(decode(m, &mut c, &tail[..2]), first, "{what}: the copy was changed by its source");
    }

    /// Too small, foreign and unrestorable copies are refused and change nothing.
    fn refusals(&self, foreign: &Model) {
        let m = &self.model;
        let mut a = session(m, 64, KvDtype::F32);
        forward(m, &mut a, Input::Tokens(&self.input[..10]), &all()).unwrap();
        let mut small = session(m, 6, KvDtype::F32);
        forward(m, &mut small, Input::Tokens(&self.input[..2]), &all()).unwrap();
        let before = bits(&small);
        let err = small.copy_from(&a).unwrap_err();
        assert!(matches!(err, Error::ContextFull { new: 10, n_ctx: 6, .. }), "{}: {err}", self.name);
        assert_eq!((small.position(), bits(&small)), (2, before.clone()), "{}: a refused copy changed it", self.name);
        let mut other = session(foreign, 64, KvDtype::F32);
        let err = other.copy_from(&a).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{}: {err}", self.name);
        assert_eq!(other.position(), 0);
        assert!(matches!(small.copy_prefix_from(&a, 11), Err(Error::InvalidArgument { .. })), "past the source");
        assert_eq!(small.position(), 2);
    }
}

#[test]
fn a_copy_continues_bit_identically_and_independently() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cases = vec![default_case()];
    for name in ["deepseek_v2_greedy", "deepseek_v3_halves", "gpt_oss_bf16", "qwen3_next_hybrid"] {
        cases.push(fixture(name, tmp.path()));
    }
    let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    assert!(cases.iter().any(|c| c.model.config().delta_net.is_some()), "a DeltaNet model among {names:?}");
    for c in &cases {
        c.fork_continues_exactly(KvDtype::F32);
    }
    cases[0].fork_continues_exactly(KvDtype::BF16);
    cases[1].fork_continues_exactly(KvDtype::F16);
    for (i, c) in cases.iter().enumerate() {
        c.refusals(&cases[(i + 1) % cases.len()].model);
    }
}

/// A prefix copy is the source truncated there: any length for attention-only caches.
#[test]
fn a_prefix_copy_is_the_source_truncated() {
    let tmp = tempfile::tempdir().unwrap();
    for c in [default_case(), fixture("gpt_oss_bf16", tmp.path()), fixture("deepseek_v2_greedy", tmp.path())] {
        let m = &c.model;
        let mut a = session(m, 64, KvDtype::F32);
        forward(m, &mut a, Input::Tokens(&c.input[..16]), &all()).unwrap();
        for n in [0, 1, 7, 15] {
            let mut b = session(m, 20, KvDtype::F32);
            b.copy_prefix_from(&a, n).unwrap();
            assert!(b.logits().is_empty(), "{}: logits of a cut copy", c.name);
            let mut t = session(m, 64, KvDtype::F32);
            t.copy_from(&a).unwrap();
            t.truncate(n).unwrap();
            let tail = &c.input[16..19];
            assert_eq!(decode(m, &mut b, tail), decode(m, &mut t, tail), "{} cut at {n}", c.name);
        }
        assert_eq!(a.position(), 16);
    }
}

/// DeltaNet: the copy carries the state of the last call's start, so truncate goes back to the
/// same points on both; a prefix copy is allowed exactly where truncate is.
#[test]
fn a_recurrent_copy_truncates_like_its_source() {
    let tmp = tempfile::tempdir().unwrap();
    let c = fixture("qwen3_next_hybrid", tmp.path());
    let m = &c.model;
    let mut a = session(m, 128, KvDtype::F32);
    forward(m, &mut a, Input::Tokens(&c.input[..20]), &all()).unwrap();
    forward(m, &mut a, Input::Tokens(&c.input[20..30]), &all()).unwrap();
    let tail = &c.input[30..33];
    let want_at_20 = c.fresh(&c.input[..20], tail, KvDtype::F32);

    let mut b = session(m, 128, KvDtype::F32);
    b.copy_from(&a).unwrap();
    assert!(matches!(b.truncate(25), Err(Error::Unsupported { .. })));
    b.truncate(20).unwrap();
    assert_eq!(decode(m, &mut b, tail), want_at_20, "the copy's truncation to the last call's start");

    for (n, ok) in [(0, true), (20, true), (25, false), (30, true)] {
        let mut p = session(m, 128, KvDtype::F32);
        let got = p.copy_prefix_from(&a, n);
        assert_eq!(got.is_ok(), ok, "prefix {n}: {got:?}");
        if !ok {
            assert!(matches!(got, Err(Error::Unsupported { .. })));
            assert_eq!(p.position(), 0, "a refused prefix copy changed the destination");
            continue;
        }
        let mut t = session(m, 128, KvDtype::F32);
        t.copy_from(&a).unwrap();
        t.truncate(n).unwrap();
        assert_eq!(decode(m, &mut p, tail), decode(m, &mut t, tail), "prefix {n}");
    }
    // The source is as it was: it still goes back to 20 and continues as the fresh session.
    a.truncate(20).unwrap();
    assert_eq!(decode(m, &mut a, tail), want_at_20, "the source after being copied");
}

/// A checkpoint taken on a session before something is copied into it does nothing on rollback
/// (with or without a state copy, on the DeltaNet and the attention-only model): the copy
/// replaced everything it would restore, so the session continues as the copy would.
#[test]
fn a_checkpoint_from_before_a_copy_does_not_roll_it_back() {
    let tmp = tempfile::tempdir().unwrap();
    for c in [fixture("qwen3_next_hybrid", tmp.path()), default_case()] {
        let m = &c.model;
        let mut src = session(m, 128, KvDtype::F32);
        forward(m, &mut src, Input::Tokens(&c.input[..12]), &all()).unwrap();
        let tail = &c.input[12..15];
        let want = c.fresh(&c.input[..12], tail, KvDtype::F32);
        for with_state in [false, true] {
            let mut dst = session(m, 128, KvDtype::F32);
            forward(m, &mut dst, Input::Tokens(&c.input[20..28]), &all()).unwrap();
            let cp = if with_state { dst.checkpoint_with_state() } else { dst.checkpoint() };
            dst.copy_from(&src).unwrap();
            dst.rollback(cp);
            assert_eq!(dst.position(), 12, "{} (state {with_state}): the rollback moved the copy", c.name);
            assert_eq!(decode(m, &mut dst, tail), want, "{} (state {with_state})", c.name);
        }
    }
}
