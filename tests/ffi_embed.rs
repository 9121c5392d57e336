//! Contract of `colibri_embed` through the exported C functions: the vector is transformers'
//! final-normed hidden states pooled (oracle/hidden_f32.npy of the fixture, each pooling, with
//! and without normalisation); the size query (NULL/0) and short buffers report the length and
//! compute nothing; every bad argument is a status with a last-error message; concurrent calls on
//! one model agree.

mod common;

use colibri::ffi::*;
use std::ffi::{CStr, CString};
use std::ptr::{null, null_mut};

const FIXTURE: &str = "qwen2_moe_shared";

struct Model {
    ptr: *mut colibri_model,
    _dir: tempfile::TempDir,
}

// SAFETY: a colibri_model may be used by several threads at once (colibri.h; colibri_embed says so).
unsafe impl Sync for Model {}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: from colibri_model_open, freed once.
        unsafe { colibri_model_free(self.ptr) }
    }
}

fn open() -> Model {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.colibri");
    common::convert(&common::models_root().join(FIXTURE), &out, "f32");
    let path = CString::new(out.to_str().unwrap()).unwrap();
    let mut ptr = null_mut();
    // SAFETY: valid C string and out-pointer.
    assert_eq!(unsafe { colibri_model_open(path.as_ptr(), null(), &mut ptr) }, COLIBRI_STATUS_OK);
    Model { ptr, _dir: dir }
}

fn last_error() -> String {
    // SAFETY: a NUL-terminated string owned by the library (this thread's last error).
    unsafe { CStr::from_ptr(colibri_last_error_message()) }.to_string_lossy().into_owned()
}

fn input() -> Vec<i32> {
    let meta = common::meta(&common::models_root().join(FIXTURE));
    common::ids(&meta["input_ids"]).into_iter().map(|i| i as i32).collect()
}

fn params(pooling: colibri_pooling, normalize: i32) -> colibri_embed_params {
    let mut p = colibri_embed_params { struct_size: 0, pooling: 0, normalize: 0, quant_act: 0 };
    // SAFETY: writable struct.
    unsafe { colibri_embed_params_init(&mut p) };
    assert_eq!((p.pooling, p.normalize), (COLIBRI_POOLING_MEAN, 1), "the defaults");
    colibri_embed_params { pooling, normalize, quant_act: COLIBRI_QUANT_ACT_FLOAT, ..p }
}

/// colibri_embed into a fresh vector of `len` floats: (status, n_out, vector).
fn embed(m: &Model, tokens: &[i32], p: Option<&colibri_embed_params>, len: usize) -> (colibri_status, usize, Vec<f32>) {
    let mut out = vec![-7.0f32; len];
    let mut n = 0usize;
    let pp = p.map_or(null(), |p| p as *const _);
    // SAFETY: live model, readable tokens, writable out and n.
    let st = unsafe { colibri_embed(m.ptr, tokens.as_ptr(), tokens.len(), pp, out.as_mut_ptr(), len, &mut n) };
    (st, n, out)
}

/// The oracle's pooling of transformers' hidden states.
fn oracle(pooling: colibri_pooling, normalize: bool) -> Vec<f64> {
    let (shape, h) = common::read_npy_f32(&common::models_root().join(FIXTURE).join("oracle/hidden_f32.npy"));
    let (t, d) = (shape[0], shape[1]);
    let row = |i: usize| h[i * d..(i + 1) * d].iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
    let v = match pooling {
        COLIBRI_POOLING_MEAN => {
            (0..d).map(|j| (0..t).map(|i| f64::from(h[i * d + j])).sum::<f64>() / t as f64).collect()
        }
        COLIBRI_POOLING_LAST => row(t - 1),
        _ => row(0),
    };
    let norm = if normalize { v.iter().map(|x| x * x).sum::<f64>().sqrt() } else { 1.0 };
    v.iter().map(|x| x / norm).collect()
}

#[test]
fn the_vector_is_transformers_hidden_states_pooled() {
    let m = open();
    let tokens = input();
    let (st, n, v) = embed(&m, &tokens, None, 64);
    assert_eq!((st, n), (COLIBRI_STATUS_OK, 64), "{}", last_error());
    let mean = oracle(COLIBRI_POOLING_MEAN, true);
    let d = v.iter().zip(&mean).fold(0f64, |a, (&x, y)| a.max((f64::from(x) - y).abs()));
    // The default (NULL params) computes with the process's activation mode: f32 weights are the same.
    assert!(d <= 1e-4 * mean.iter().fold(0f64, |a, x| a.max(x.abs())), "default params: {d}");
    for pooling in [COLIBRI_POOLING_MEAN, COLIBRI_POOLING_LAST, COLIBRI_POOLING_CLS] {
        for normalize in [1, 0] {
            let (st, _, v) = embed(&m, &tokens, Some(&params(pooling, normalize)), 64);
            assert_eq!(st, COLIBRI_STATUS_OK);
            let want = oracle(pooling, normalize != 0);
            let scale = want.iter().fold(0f64, |a, x| a.max(x.abs()));
            let d = v.iter().zip(&want).fold(0f64, |a, (&x, y)| a.max((f64::from(x) - y).abs()));
            eprintln!("pooling {pooling} normalize {normalize}: max|Δ| = {:.3e} × max|v|", d / scale);
            assert!(d <= 1e-4 * scale, "pooling {pooling} normalize {normalize}: {d}");
        }
    }
}

#[test]
fn size_queries_and_short_buffers_report_the_length_and_compute_nothing() {
    let m = open();
    let mut n = 0usize;
    // SAFETY: NULL/0 output is the documented size query; the tokens are not read.
    let st = unsafe { colibri_embed(m.ptr, null(), 0, null(), null_mut(), 0, &mut n) };
    assert_eq!((st, n), (COLIBRI_STATUS_BUFFER_TOO_SMALL, 64));
    let (st, n, out) = embed(&m, &input(), None, 63);
    assert_eq!((st, n), (COLIBRI_STATUS_BUFFER_TOO_SMALL, 64));
    assert!(out.iter().all(|&x| x == -7.0), "a short buffer is left as it was");
    assert!(last_error().contains("64 floats"), "{}", last_error());
}

#[test]
fn bad_arguments_are_statuses_with_messages() {
    let m = open();
    let tokens = input();
    let mut out = vec![0f32; 64];
    let mut n = 0usize;
    let o = out.as_mut_ptr();
    // SAFETY (every call below): pointers are NULL or valid for the lengths given.
    unsafe {
        let st = colibri_embed(null(), tokens.as_ptr(), tokens.len(), null(), o, 64, &mut n);
        assert_eq!(st, COLIBRI_STATUS_NULL_ARGUMENT);
        assert!(last_error().contains("'model'"), "{}", last_error());
        let st = colibri_embed(m.ptr, tokens.as_ptr(), tokens.len(), null(), o, 64, null_mut());
        assert_eq!(st, COLIBRI_STATUS_NULL_ARGUMENT);
        let st = colibri_embed(m.ptr, tokens.as_ptr(), tokens.len(), null(), null_mut(), 64, &mut n);
        assert_eq!(st, COLIBRI_STATUS_NULL_ARGUMENT);
        assert_eq!(colibri_embed(m.ptr, null(), 3, null(), o, 64, &mut n), COLIBRI_STATUS_NULL_ARGUMENT);
        assert_eq!(colibri_embed(m.ptr, tokens.as_ptr(), 0, null(), o, 64, &mut n), COLIBRI_STATUS_INVALID_ARGUMENT);
        assert!(last_error().contains("n_tokens is 0"));
        let neg = [1, -2, 3];
        assert_eq!(colibri_embed(m.ptr, neg.as_ptr(), 3, null(), o, 64, &mut n), COLIBRI_STATUS_INVALID_ARGUMENT);
        let big = [1, 1 << 20];
        assert_eq!(colibri_embed(m.ptr, big.as_ptr(), 2, null(), o, 64, &mut n), COLIBRI_STATUS_INVALID_ARGUMENT);
        assert!(last_error().contains("vocabulary"), "{}", last_error());
        let bad = colibri_embed_params { pooling: 3, ..params(0, 1) };
        assert_eq!(colibri_embed(m.ptr, tokens.as_ptr(), 3, &bad, o, 64, &mut n), COLIBRI_STATUS_INVALID_ARGUMENT);
        assert!(last_error().contains("pooling 3"), "{}", last_error());
        let bad = colibri_embed_params { quant_act: 9, ..params(0, 1) };
        assert_eq!(colibri_embed(m.ptr, tokens.as_ptr(), 3, &bad, o, 64, &mut n), COLIBRI_STATUS_INVALID_ARGUMENT);
        let bad = colibri_embed_params { struct_size: 12, ..params(0, 1) };
        assert_eq!(colibri_embed(m.ptr, tokens.as_ptr(), 3, &bad, o, 64, &mut n), COLIBRI_STATUS_BAD_STRUCT_SIZE);
    }
}

#[test]
fn concurrent_calls_on_one_model_agree() {
    let m = open();
    let tokens = input();
    let (_, _, alone) = embed(&m, &tokens, None, 64);
    let shared = &m;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|i| s.spawn(move || embed(shared, &input()[i..], None, 64))).collect();
        for (i, h) in handles.into_iter().enumerate() {
            let (st, _, v) = h.join().unwrap();
            assert_eq!(st, COLIBRI_STATUS_OK);
            if i == 0 {
                assert_eq!(v, alone, "the same tokens from another thread, at the same time");
            }
        }
    });
}
