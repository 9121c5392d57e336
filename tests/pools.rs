//! Contract: each model computes on a worker pool of its own. Its size changes no result (the
//! logits are bit-identical for any thread count); it works in a child forked after a forward
//! pass (the child builds its own workers instead of waiting forever on the parent's, which do
//! not exist there); and the library never touches rayon's global pool, which belongs to the
//! host. Past a few hundred cached positions too, for every attention form (GQA, MLA, sinks).

mod common;

use colibri::forward::{forward, ForwardOptions, Input, LogitsMode};
use colibri::session::{Session, SessionOptions};
use colibri::threads::ThreadOptions;
use colibri::{LoadOptions, Model};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The shipped default model: big enough (hidden 256, vocab 4096) for every parallel path.
fn model_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/default.colibri")
}

fn open(n_threads: usize) -> Model {
    let threads = ThreadOptions { n_threads, pin: false };
    Model::open(&model_path(), &LoadOptions { threads, ..LoadOptions::default() }).unwrap()
}

/// The last logits of a 700-token prompt, then of 3 single-token steps, on `path` with
/// `n_threads` workers.
fn long_logits(path: &Path, n_threads: usize) -> Vec<f32> {
    let threads = ThreadOptions { n_threads, pin: false };
    let m = Model::open(path, &LoadOptions { threads, ..LoadOptions::default() }).unwrap();
    let mut s = Session::new(m.config(), &SessionOptions { n_ctx: 1024, ..Default::default() }).unwrap();
    let last = ForwardOptions { logits: LogitsMode::Last, ..Default::default() };
    let vocab = m.config().vocab_size as u32;
    let prompt: Vec<u32> = (0..700).map(|i| (i * 337 + 11) % vocab).collect();
    forward(&m, &mut s, Input::Tokens(&prompt), &last).unwrap();
    let mut out = s.logits().to_vec();
    for t in [5u32, 77, 123] {
        forward(&m, &mut s, Input::Tokens(&[t % vocab]), &last).unwrap();
        out.extend_from_slice(s.logits());
    }
    out
}

#[test]
fn long_contexts_are_bit_identical_for_any_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    // MLA (its decode splits the cached positions over threads), GQA, GQA with sinks and windows.
    for name in ["deepseek_v2_greedy", "mixtral_gqa", "gpt_oss_bf16"] {
        let path = tmp.path().join(format!("{name}.colibri"));
        common::convert(&common::models_root().join(name), &path, "f32");
        let one = long_logits(&path, 1);
        for n in [2, 3] {
            let got = long_logits(&path, n);
            let same = one.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same && one.len() == got.len(), "{name}: {n} threads changed the logits at depth");
        }
    }
}

/// Every position's logits of a 12-token prompt, then of 3 single-token steps.
fn logits(m: &Model) -> Vec<f32> {
    let mut s = Session::new(m.config(), &SessionOptions { n_ctx: 64, ..Default::default() }).unwrap();
    let all = ForwardOptions { logits: LogitsMode::All, ..Default::default() };
    let prompt: Vec<u32> = (0..12).map(|i| (i * 337 + 11) % m.config().vocab_size as u32).collect();
    forward(m, &mut s, Input::Tokens(&prompt), &all).unwrap();
    let mut out = s.logits().to_vec();
    for t in [5u32, 77, 1023] {
        forward(m, &mut s, Input::Tokens(&[t]), &all).unwrap();
        out.extend_from_slice(s.logits());
    }
    out
}

#[test]
fn logits_are_bit_identical_for_any_thread_count() {
    let one = logits(&open(1));
    for n in [2, 3] {
        let m = open(n);
        assert_eq!(m.pool().threads(), n);
        let got = logits(&m);
        let same = one.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same && one.len() == got.len(), "{n} threads changed the logits");
    }
    assert_eq!(open(1024).pool().threads(), 1024, "the most (no thread starts before a call)");
    let too_many = ThreadOptions { n_threads: 1025, pin: false };
    let err = Model::open(&model_path(), &LoadOptions { threads: too_many, ..LoadOptions::default() }).unwrap_err();
    assert!(err.to_string().contains("1025"), "{err}");
}

/// Decode steps of several sessions at once on one model's pool (each step then finds another
/// running, and its held workers let go) give every session what it gets alone.
#[test]
fn sessions_stepping_at_once_get_what_each_gets_alone() {
    let m = open(2);
    let alone = logits(&m);
    std::thread::scope(|s| {
        let runs: Vec<_> = (0..3).map(|_| s.spawn(|| logits(&m))).collect();
        for (i, r) in runs.into_iter().enumerate() {
            let got = r.join().unwrap();
            let same = alone.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same && alone.len() == got.len(), "session {i} of 3 at once changed its logits");
        }
    });
}

/// Wait for `pid` up to `limit`; kill it past that. Its exit status, or None on a timeout.
fn wait_for(pid: libc::pid_t, limit: Duration) -> Option<i32> {
    let t0 = Instant::now();
    let mut status = 0;
    while t0.elapsed() < limit {
        // SAFETY: plain syscall on our own child.
        match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
            0 => std::thread::sleep(Duration::from_millis(20)),
            p if p == pid => return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
            _ => return None,
        }
    }
    // SAFETY: as above.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, &mut status, 0);
    }
    None
}

#[test]
fn a_child_forked_after_a_forward_pass_runs_one_too() {
    // The default options, as a pre-forking server opens its model.
    let m = Model::open(&model_path(), &LoadOptions::default()).unwrap();
    let want = logits(&m);
    // SAFETY: the child only runs the library's code on data it owns, then _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = std::panic::catch_unwind(|| logits(&m) == want).unwrap_or(false);
        // SAFETY: leave the forked test process at once, running no exit handlers.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    assert_eq!(logits(&m), want, "the parent after the fork");
    assert_eq!(wait_for(pid, Duration::from_secs(60)), Some(0), "the child hung (killed after 60 s) or failed");
}

#[test]
fn the_global_pool_is_left_to_the_host() {
    let m = Model::open(&model_path(), &LoadOptions::default()).unwrap();
    logits(&m);
    m.verify().unwrap();
    // Building rayon's global pool fails once anything has used it.
    let built = rayon::ThreadPoolBuilder::new().num_threads(1).build_global();
    assert!(built.is_ok(), "the library built rayon's global pool: {built:?}");
}

/// The thread options through the C ABI: model params (ABI 1's shorter struct still read, with
/// the default count), colibri_init's params and the MoE layer's params.
#[test]
fn the_c_abi_takes_thread_counts() {
    use colibri::ffi::*;
    use std::ptr::{null, null_mut};
    let path = std::ffi::CString::new(model_path().to_str().unwrap()).unwrap();
    unsafe {
        let mut mp = colibri_model_params::default();
        assert_eq!(std::mem::size_of::<colibri_model_params>(), 28);
        for (size, n_threads, pin, want) in [
            (12, 1025, 0, COLIBRI_STATUS_OK), // ABI 1's first size, before n_threads: not read
            (16, 1025, 0, COLIBRI_STATUS_BAD_STRUCT_SIZE), // never released
            (24, 1025, 0, COLIBRI_STATUS_INVALID_ARGUMENT),
            (24, 3, 1, COLIBRI_STATUS_OK), // before use_hugepages: the default
            (28, 1025, 0, COLIBRI_STATUS_INVALID_ARGUMENT),
            (28, 3, 1, COLIBRI_STATUS_OK),
            (20, 3, 0, COLIBRI_STATUS_BAD_STRUCT_SIZE),
        ] {
            (mp.struct_size, mp.n_threads, mp.pin_threads) = (size, n_threads, pin);
            let mut m = null_mut();
            assert_eq!(colibri_model_open(path.as_ptr(), &mp, &mut m), want, "size {size}, {n_threads} threads");
            colibri_model_free(m);
        }
        let mut p = colibri_params::default();
        assert_eq!(std::mem::size_of::<colibri_params>(), 64);
        for (size, want) in
            [(48, COLIBRI_STATUS_OK), (56, COLIBRI_STATUS_INVALID_ARGUMENT), (64, COLIBRI_STATUS_INVALID_ARGUMENT)]
        {
            (p.struct_size, p.n_threads) = (size, 2000);
            let mut ctx = null_mut();
            assert_eq!(colibri_init(path.as_ptr(), &p, &mut ctx), want, "colibri_params of {size} bytes");
            colibri_free(ctx);
        }

        // The MoE layer: 3 experts of 200 rows, the same output for any thread count (the
        // calling thread and 0, 1 or 2 workers), in every storage.
        let (hidden, rows) = (64usize, 200usize);
        let w: Vec<f32> = (0..3 * rows * hidden).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 500.0).collect();
        let sizes = [rows as i32; 3];
        let (x, gates) = (vec![0.25f32; hidden], [0.5f32, -1.0, 2.0]);
        for storage in [COLIBRI_MOE_F32, COLIBRI_MOE_BF16, COLIBRI_MOE_Q8] {
            let mut outs = Vec::new();
            for n_threads in [1, 2, 3] {
                let mut q = colibri_moe_params::default();
                colibri_moe_params_init(&mut q);
                (q.n_threads, q.storage) = (n_threads, storage);
                let mut layer = null_mut();
                let st = colibri_moe_init_params(&mut layer, w.as_ptr(), sizes.as_ptr(), 3, hidden as i32, 2, &q);
                assert_eq!(st, COLIBRI_STATUS_OK);
                let mut out = vec![0f32; rows];
                assert_eq!(colibri_moe_infer(layer, x.as_ptr(), out.as_mut_ptr(), gates.as_ptr()), COLIBRI_STATUS_OK);
                outs.push(out);
                colibri_moe_free(layer);
            }
            assert_eq!(outs[0], outs[1], "storage {storage}: 1 and 2 threads");
            assert_eq!(outs[0], outs[2], "storage {storage}: 1 and 3 threads");
        }
        let mut q = colibri_moe_params::default();
        let mut layer = null_mut();
        let init = |layer: *mut *mut colibri_moe, q: *const colibri_moe_params| {
            colibri_moe_init_params(layer, w.as_ptr(), sizes.as_ptr(), 3, hidden as i32, 2, q)
        };
        assert_eq!(init(&mut layer, null()), COLIBRI_STATUS_OK, "NULL params: the defaults");
        colibri_moe_free(layer);
        assert_eq!(init(null_mut(), &q), COLIBRI_STATUS_NULL_ARGUMENT);
        q.n_threads = 1025;
        assert_eq!(init(&mut layer, &q), COLIBRI_STATUS_INVALID_ARGUMENT);
        (q.n_threads, q.struct_size) = (0, 8);
        assert_eq!(init(&mut layer, &q), COLIBRI_STATUS_BAD_STRUCT_SIZE);
        (q.struct_size, q.storage) = (12, 7);
        assert_eq!(init(&mut layer, &q), COLIBRI_STATUS_INVALID_ARGUMENT);
        colibri_moe_params_init(null_mut());
    }
}
