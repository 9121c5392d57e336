//! The layer primitive (`colibri_moe_init_params` / `colibri_moe_infer`): 4 experts of 768 ×
//! 768, top-2, on 1 and 2 threads (`colibri_moe_params.n_threads`, called from the bench's own
//! thread as a C caller would), per storage — and the ceiling it is measured against,
//! `read_limit`: a read of as many bytes as the two chosen experts' weights take in that storage,
//! from the cache, by a loop of aligned 32-byte loads into eight accumulators, split into one
//! range per thread like the primitive (the calling thread reads the first: `Pool::run_parts`).
//! The ratio of the two is the primitive's share of the cache-read limit. `dispatch` is the pool's
//! own cost: one empty fork-join over two threads, back to back and after the workers slept.
//!
//!     cargo bench --bench moe_layer
//!
//! Items/s of `infer` and `read_limit` are weight bytes read per second.

use colibri::ffi::{colibri_moe, colibri_moe_free, colibri_moe_infer, colibri_moe_init_params};
use colibri::ffi::{colibri_moe_params, COLIBRI_MOE_BF16, COLIBRI_MOE_F32, COLIBRI_MOE_Q8};
use colibri::threads::{Pool, ThreadOptions};
use divan::counter::BytesCount;
use divan::{black_box, Bencher};
use rayon::prelude::*;
use std::time::Duration;

const EXPERTS: usize = 4;
const DIM: usize = 768;
const TOP_K: usize = 2;

/// The runs: (threads, storage).
const RUNS: [(usize, &str); 6] = [(1, "f32"), (2, "f32"), (1, "bf16"), (2, "bf16"), (1, "q8"), (2, "q8")];

fn main() {
    eprintln!("kernel path: {}", colibri::kernels::active_path().name());
    divan::main();
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1 << 24) as f32 - 0.5
        })
        .collect()
}

fn storage_of(name: &str) -> i32 {
    match name {
        "f32" => COLIBRI_MOE_F32,
        "bf16" => COLIBRI_MOE_BF16,
        _ => COLIBRI_MOE_Q8,
    }
}

/// Bytes of the two chosen experts' weights in a storage (q8: 34 bytes per 32 weights).
fn chosen_bytes(storage: &str) -> usize {
    let weights = TOP_K * DIM * DIM;
    match storage {
        "f32" => weights * 4,
        "bf16" => weights * 2,
        _ => weights / 32 * 34,
    }
}

/// The workers beside the calling thread for `threads` threads (none for one).
fn workers(threads: usize) -> Option<Pool> {
    (threads > 1).then(|| Pool::new(ThreadOptions { n_threads: threads - 1, pin: false }).expect("pool"))
}

#[divan::bench(args = RUNS, sample_count = 500)]
fn infer(b: Bencher, (threads, storage): (usize, &str)) {
    let w = values(EXPERTS * DIM * DIM, 1);
    let sizes = [DIM as i32; EXPERTS];
    let p = colibri_moe_params { storage: storage_of(storage), n_threads: threads as u32, ..Default::default() };
    let mut moe: *mut colibri_moe = std::ptr::null_mut();
    // SAFETY: buffers sized as the call requires.
    let st = unsafe {
        colibri_moe_init_params(&mut moe, w.as_ptr(), sizes.as_ptr(), EXPERTS as i32, DIM as i32, TOP_K as i32, &p)
    };
    assert_eq!(st, 0, "init");
    let x = values(DIM, 2);
    // Experts 1 and 2 chosen.
    let gates = [0.1f32, 2.0, 1.5, -1.0];
    let mut out = vec![0f32; DIM];
    b.counter(BytesCount::new(chosen_bytes(storage))).bench_local(|| {
        // SAFETY: a live layer; buffers sized as the call requires.
        let st = unsafe { colibri_moe_infer(moe, black_box(x.as_ptr()), out.as_mut_ptr(), gates.as_ptr()) };
        assert_eq!(st, 0);
        black_box(&out);
    });
    // SAFETY: from init, freed once.
    unsafe { colibri_moe_free(moe) };
}

/// 64 bytes on a 64-byte boundary.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u64; 8]);

/// The cache-read ceiling: as many bytes as the chosen experts' weights take in that storage,
/// in ranges of whole 256-byte steps, one per thread, XOR-reduced.
#[divan::bench(args = RUNS, sample_count = 500)]
fn read_limit(b: Bencher, (threads, storage): (usize, &str)) {
    let bytes = chosen_bytes(storage);
    let lines: Vec<Line> = (0..bytes / 64).map(|i| Line([(i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15); 8])).collect();
    let per = lines.len().div_ceil(threads).next_multiple_of(4);
    let pool = workers(threads);
    let mut sums = vec![0u64; threads];
    b.counter(BytesCount::new(lines.len() * 64)).bench_local(|| {
        let parts = lines.chunks(per).zip(sums.iter_mut());
        match &pool {
            Some(pool) => pool.run_parts(parts, |(l, s)| *s = read_all(l)).expect("pool"),
            None => parts.for_each(|(l, s)| *s = read_all(l)),
        }
        black_box(&sums);
    });
}

/// XOR of every word (eight independent 256-bit accumulators where the CPU has AVX2).
fn read_all(lines: &[Line]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { read_avx2(lines) };
    }
    lines.iter().flat_map(|l| l.0).fold(0, |a, v| a ^ v)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn read_avx2(lines: &[Line]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_si256(); 8];
    let steps = lines.chunks_exact(4);
    let tail = steps.remainder().iter().flat_map(|l| l.0).fold(0, |a, v| a ^ v);
    for step in steps {
        let p = step.as_ptr().cast::<__m256i>();
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: 4 lines are 8 aligned 32-byte vectors.
            *a = _mm256_xor_si256(*a, unsafe { _mm256_load_si256(p.add(j)) });
        }
    }
    let v = acc.iter().fold(_mm256_setzero_si256(), |s, &a| _mm256_xor_si256(s, a));
    let mut w = [0u64; 4];
    // SAFETY: `w` holds 32 bytes.
    unsafe { _mm256_storeu_si256(w.as_mut_ptr().cast(), v) };
    w.iter().fold(tail, |a, &x| a ^ x)
}

/// What one empty fork-join over two threads costs: `install` is the pool's `install` with a
/// parallel loop of two tasks on two workers (how the primitive dispatched before), `caller`
/// the calling thread running one part while one worker runs the other (`Pool::run_parts`, how
/// it dispatches now). `busy`: calls back to back (the workers still looking for work);
/// `idle`: 1 ms without work before each call (the workers asleep).
#[divan::bench(args = [("install", "busy"), ("caller", "busy"), ("install", "idle"), ("caller", "idle")], sample_count = 500, sample_size = 1)]
fn dispatch(b: Bencher, (how, when): (&str, &str)) {
    let pool = workers(if how == "install" { 3 } else { 2 }).expect("two threads");
    let call = || match how {
        "install" => pool
            .install(|| {
                (0..2).into_par_iter().for_each(|i| {
                    black_box(i);
                })
            })
            .expect("pool"),
        _ => pool
            .run_parts(0..2, |i: usize| {
                black_box(i);
            })
            .expect("pool"),
    };
    let pause = if when == "idle" { Duration::from_millis(1) } else { Duration::ZERO };
    b.with_inputs(|| std::thread::sleep(pause)).bench_local_values(|()| call());
}
