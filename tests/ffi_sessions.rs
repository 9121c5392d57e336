//! Contract of a session in the C ABI: one call at a time. A call on a session while another
//! runs — from inside that call's own callback, or from another thread — returns
//! COLIBRI_STATUS_BUSY and changes nothing; the running call goes on unharmed. A route callback
//! returning COLIBRI_ROUTE_ABORT fails its call with COLIBRI_STATUS_ABORTED and undoes it: the
//! session (cached tokens, routing RNG) is as before and no logits are written, so a retry gives
//! exactly what a single clean call gives. `colibri_session_copy` gives a session that continues
//! bit-identically; a NULL session, sessions of different models and a context too small are
//! refused with a status and a message, changing nothing.

mod common;

use colibri::ffi::*;
use std::ffi::{c_char, c_void};
use std::ptr::null_mut;
use std::sync::mpsc;

const VOCAB: usize = 4096;
const PROMPT: [i32; 6] = [17, 300, 5, 2048, 99, 1000];

fn open_model() -> *mut colibri_model {
    common::open_default_model_c()
}

fn new_session(m: *mut colibri_model, gumbel: bool) -> *mut colibri_session {
    let mut p = colibri_session_params::default();
    if gumbel {
        p.routing_mode = COLIBRI_ROUTING_GUMBEL;
        p.routing_seed = 7;
    }
    let mut s = null_mut();
    assert_eq!(unsafe { colibri_session_new(m, &p, &mut s) }, COLIBRI_STATUS_OK);
    s
}

fn position(s: *mut colibri_session) -> usize {
    let (mut pos, mut n_ctx) = (0, 0);
    assert_eq!(unsafe { colibri_session_position(s, &mut pos, &mut n_ctx) }, COLIBRI_STATUS_OK);
    pos
}

fn infer(s: *mut colibri_session, ids: &[i32], out: &mut [f32]) -> colibri_status {
    unsafe { colibri_infer(s, ids.as_ptr(), ids.len(), out.as_mut_ptr(), out.len()) }
}

/// Greedy generation of 8 tokens after PROMPT with `cb` as the token callback.
fn generate(s: *mut colibri_session, cb: colibri_token_callback, ud: *mut c_void) -> (colibri_status, Vec<i32>) {
    let mut p = colibri_generate_params::default();
    (p.temperature, p.max_tokens, p.ignore_eos) = (0.0, 8, 1);
    let mut out = vec![-1i32; 8];
    let st = unsafe { colibri_generate(s, PROMPT.as_ptr(), PROMPT.len(), &p, cb, ud, out.as_mut_ptr(), 8, null_mut()) };
    (st, out)
}

/// What the re-entrant callback saw: the session it runs on and each call's status.
struct Reentry {
    model: *mut colibri_model,
    session: *mut colibri_session,
    statuses: Vec<(&'static str, colibri_status)>,
}

/// On the first token, call every session entry point on the session being generated on.
unsafe extern "C" fn reenter(ud: *mut c_void, _token: i32, _text: *const c_char, _len: usize) -> i32 {
    let r = unsafe { &mut *(ud as *mut Reentry) };
    if !r.statuses.is_empty() {
        return 0;
    }
    let s = r.session;
    let mut logits = vec![0f32; VOCAB];
    let (mut pos, mut n_ctx) = (0, 0);
    let one = [5i32];
    let (ids, counts, sessions) = ([one.as_ptr()], [1usize], [s]);
    let (nested, _) = generate(s, None, null_mut());
    let calls = unsafe {
        [
            ("infer", infer(s, &one, &mut logits)),
            ("reset", colibri_session_reset(s)),
            ("truncate", colibri_session_truncate(s, 0)),
            ("position", colibri_session_position(s, &mut pos, &mut n_ctx)),
            ("set_routing", colibri_session_set_routing(s, COLIBRI_ROUTING_TOPK, 0, 0)),
            ("set_route_callback", colibri_session_set_route_callback(s, None, null_mut())),
            ("copy", colibri_session_copy(s, s)),
            ("generate", nested),
            (
                "infer_batch",
                colibri_infer_batch(
                    r.model,
                    sessions.as_ptr(),
                    ids.as_ptr(),
                    counts.as_ptr(),
                    1,
                    logits.as_mut_ptr(),
                    VOCAB,
                ),
            ),
        ]
    };
    r.statuses.extend(calls);
    // Not freed while in use: the generation goes on with a live session.
    unsafe { colibri_session_free(s) };
    0
}

#[test]
fn a_call_from_inside_its_own_callback_is_busy_and_harmless() {
    let m = open_model();
    let (clean, s) = (new_session(m, false), new_session(m, false));
    let (st, want) = generate(clean, None, null_mut());
    assert_eq!(st, COLIBRI_STATUS_OK);
    let mut r = Reentry { model: m, session: s, statuses: Vec::new() };
    let (st, got) = generate(s, Some(reenter), &mut r as *mut Reentry as *mut c_void);
    assert_eq!(st, COLIBRI_STATUS_OK);
    assert_eq!(r.statuses.len(), 9);
    for (call, st) in &r.statuses {
        assert_eq!(*st, COLIBRI_STATUS_BUSY, "{call} from inside the session's own callback");
    }
    assert_eq!(got, want, "the generation was disturbed");
    assert_eq!(position(s), position(clean));
    unsafe {
        colibri_session_free(s);
        colibri_session_free(clean);
        colibri_model_free(m);
    }
}

/// A session pointer handed to another thread (the test's own synchronisation orders its use).
struct Shared(*mut colibri_session);
// SAFETY: the library's flag makes concurrent calls on one session safe; that is under test.
unsafe impl Send for Shared {}

/// Channels of the two-thread test: "inside the callback" out, "go on" in.
struct Handshake {
    inside: mpsc::Sender<()>,
    resume: mpsc::Receiver<()>,
    done: bool,
}

unsafe extern "C" fn hold(ud: *mut c_void, _token: i32, _text: *const c_char, _len: usize) -> i32 {
    let h = unsafe { &mut *(ud as *mut Handshake) };
    if !h.done {
        h.done = true;
        h.inside.send(()).unwrap();
        h.resume.recv().unwrap();
    }
    0
}

#[test]
fn a_second_thread_gets_busy_while_a_call_runs() {
    let m = open_model();
    let (clean, s) = (new_session(m, false), new_session(m, false));
    let (_, want) = generate(clean, None, null_mut());
    let (inside_tx, inside_rx) = mpsc::channel();
    let (resume_tx, resume_rx) = mpsc::channel();
    let shared = Shared(s);
    let worker = std::thread::spawn(move || {
        let shared = shared;
        let mut h = Handshake { inside: inside_tx, resume: resume_rx, done: false };
        generate(shared.0, Some(hold), &mut h as *mut Handshake as *mut c_void)
    });
    // The worker's generation is paused inside its callback: the session is in use.
    inside_rx.recv().unwrap();
    let mut logits = vec![0f32; VOCAB];
    assert_eq!(infer(s, &[5], &mut logits), COLIBRI_STATUS_BUSY);
    assert_eq!(unsafe { colibri_session_reset(s) }, COLIBRI_STATUS_BUSY);
    let (mut pos, mut n_ctx) = (0, 0);
    assert_eq!(unsafe { colibri_session_position(s, &mut pos, &mut n_ctx) }, COLIBRI_STATUS_BUSY);
    assert_eq!(generate(s, None, null_mut()).0, COLIBRI_STATUS_BUSY);
    resume_tx.send(()).unwrap();
    let (st, got) = worker.join().unwrap();
    assert_eq!((st, got), (COLIBRI_STATUS_OK, want), "the running generation was disturbed");
    // Free again once the call has returned.
    assert_eq!(infer(s, &[5], &mut logits), COLIBRI_STATUS_OK);
    unsafe {
        colibri_session_free(s);
        colibri_session_free(clean);
        colibri_model_free(m);
    }
}

unsafe extern "C" fn abort_routes(
    ud: *mut c_void,
    _layer: i32,
    _position: i32,
    _experts: *const i32,
    _weights: *const f32,
    _k: usize,
) -> i32 {
    unsafe { *(ud as *mut usize) += 1 };
    COLIBRI_ROUTE_ABORT
}

#[test]
fn a_route_callback_abort_undoes_the_call() {
    let m = open_model();
    // Gumbel routing draws from the session's RNG: an undone call must give its draws back.
    let (clean, s) = (new_session(m, true), new_session(m, true));
    let (mut want1, mut want2) = (vec![0f32; VOCAB], vec![0f32; VOCAB]);
    assert_eq!(infer(clean, &PROMPT, &mut want1), COLIBRI_STATUS_OK);
    assert_eq!(infer(clean, &[42], &mut want2), COLIBRI_STATUS_OK);

    let mut calls = 0usize;
    let ud = &mut calls as *mut usize as *mut c_void;
    assert_eq!(unsafe { colibri_session_set_route_callback(s, Some(abort_routes), ud) }, COLIBRI_STATUS_OK);
    let mut out = vec![123f32; VOCAB];
    assert_eq!(infer(s, &PROMPT, &mut out), COLIBRI_STATUS_ABORTED);
    assert_eq!(calls, 1, "the first record aborts");
    assert!(out.iter().all(|&v| v == 123.0), "logits were written by an aborted call");
    assert_eq!(position(s), 0);
    assert_eq!(generate(s, None, null_mut()).0, COLIBRI_STATUS_ABORTED);
    assert_eq!(position(s), 0);
    // A batch: the aborting session's step is undone for every session of the batch.
    let other = new_session(m, true);
    let (ids, counts, sessions) = ([PROMPT.as_ptr(), PROMPT.as_ptr()], [PROMPT.len(); 2], [other, s]);
    let mut both = vec![123f32; 2 * VOCAB];
    let st = unsafe {
        colibri_infer_batch(m, sessions.as_ptr(), ids.as_ptr(), counts.as_ptr(), 2, both.as_mut_ptr(), 2 * VOCAB)
    };
    assert_eq!(st, COLIBRI_STATUS_ABORTED);
    assert!(both.iter().all(|&v| v == 123.0));
    assert_eq!((position(other), position(s)), (0, 0));

    // The retry, without the callback, gives what one clean call gives.
    assert_eq!(unsafe { colibri_session_set_route_callback(s, None, null_mut()) }, COLIBRI_STATUS_OK);
    assert_eq!(infer(s, &PROMPT, &mut out), COLIBRI_STATUS_OK);
    assert_eq!(out, want1);
    assert_eq!(infer(s, &[42], &mut out), COLIBRI_STATUS_OK);
    assert_eq!(out, want2, "the routing RNG was not restored");
    unsafe {
        colibri_session_free(other);
        colibri_session_free(s);
        colibri_session_free(clean);
        colibri_model_free(m);
    }
}

fn last_error() -> String {
    unsafe { std::ffi::CStr::from_ptr(colibri_last_error_message()) }.to_string_lossy().into_owned()
}

#[test]
fn a_session_copy_continues_identically_and_refuses_safely() {
    let m = open_model();
    let (a, b) = (new_session(m, true), new_session(m, false));
    let mut out = vec![0f32; VOCAB];
    assert_eq!(infer(a, &PROMPT, &mut out), COLIBRI_STATUS_OK);
    assert_eq!(infer(b, &[9, 8], &mut out), COLIBRI_STATUS_OK);
    assert_eq!(unsafe { colibri_session_copy(b, a) }, COLIBRI_STATUS_OK);
    assert_eq!(unsafe { colibri_session_copy(a, a) }, COLIBRI_STATUS_OK, "a copy to itself does nothing");
    assert_eq!(position(b), PROMPT.len());
    // Gumbel routing on `a`: the routing RNG travels too, so b (top-k) is set to route as a does.
    assert_eq!(unsafe { colibri_session_set_routing(b, COLIBRI_ROUTING_GUMBEL, 7, 0) }, COLIBRI_STATUS_OK);
    assert_eq!(unsafe { colibri_session_copy(b, a) }, COLIBRI_STATUS_OK);
    let (mut la, mut lb) = (vec![0f32; VOCAB], vec![0f32; VOCAB]);
    for t in [42, 7, 1000] {
        assert_eq!(infer(b, &[t], &mut lb), COLIBRI_STATUS_OK);
        assert_eq!(infer(a, &[t], &mut la), COLIBRI_STATUS_OK);
        assert_eq!(la, lb, "token {t}: the copy continues differently");
    }

    assert_eq!(unsafe { colibri_session_copy(null_mut(), a) }, COLIBRI_STATUS_NULL_ARGUMENT);
    assert_eq!(unsafe { colibri_session_copy(b, std::ptr::null()) }, COLIBRI_STATUS_NULL_ARGUMENT);
    let p = colibri_session_params { n_ctx: 4, ..Default::default() };
    let mut small = null_mut();
    assert_eq!(unsafe { colibri_session_new(m, &p, &mut small) }, COLIBRI_STATUS_OK);
    assert_eq!(unsafe { colibri_session_copy(small, a) }, COLIBRI_STATUS_CONTEXT_FULL);
    assert!(last_error().contains("context"), "{}", last_error());
    assert_eq!(position(small), 0);

    // A session of another model.
    let tmp = tempfile::tempdir().unwrap();
    let dir = common::fixture_dirs().into_iter().find(|d| d.ends_with("qwen3_next_hybrid")).unwrap();
    let file = tmp.path().join("q.colibri");
    common::convert(&dir, &file, "f32");
    let path = std::ffi::CString::new(file.to_str().unwrap()).unwrap();
    let mut q = null_mut();
    assert_eq!(unsafe { colibri_model_open(path.as_ptr(), std::ptr::null(), &mut q) }, COLIBRI_STATUS_OK);
    let foreign = new_session(q, false);
    assert_eq!(unsafe { colibri_session_copy(foreign, a) }, COLIBRI_STATUS_INVALID_ARGUMENT);
    assert!(last_error().contains("different models"), "{}", last_error());
    assert_eq!(position(foreign), 0);
    unsafe {
        for s in [a, b, small, foreign] {
            colibri_session_free(s);
        }
        colibri_model_free(m);
        colibri_model_free(q);
    }
}
