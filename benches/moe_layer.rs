//! The layer primitive (`colibri_moe_init_with` / `colibri_moe_infer`): 4 experts of 768 × 768,
//! top-2, on 1 and 2 threads, per storage — and the ceiling it is measured against: one read of
//! the same bytes (the two chosen experts' weights) from the cache by a plain vector loop split
//! the same way (`read_limit`). The ratio of the two is the primitive's share of the cache-read
//! limit.
//!
//!     cargo bench --bench moe_layer
//!
//! Items/s of `infer` and `read_limit` are weight bytes read per second.

use colibri::ffi::{colibri_moe, colibri_moe_free, colibri_moe_infer, colibri_moe_init_with};
use colibri::ffi::{COLIBRI_MOE_BF16, COLIBRI_MOE_F32, COLIBRI_MOE_Q8};
use divan::counter::BytesCount;
use divan::{black_box, Bencher};
use rayon::prelude::*;

const EXPERTS: usize = 4;
const DIM: usize = 768;
const TOP_K: usize = 2;

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

/// Bytes per weight of a storage.
fn bytes_per_weight(storage: i32) -> f64 {
    match storage {
        COLIBRI_MOE_F32 => 4.0,
        COLIBRI_MOE_BF16 => 2.0,
        _ => 34.0 / 32.0,
    }
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool")
}

#[divan::bench(args = [(1, "f32"), (2, "f32"), (1, "bf16"), (2, "bf16"), (1, "q8"), (2, "q8")], sample_count = 200)]
fn infer(b: Bencher, (threads, storage): (usize, &str)) {
    let storage = match storage {
        "f32" => COLIBRI_MOE_F32,
        "bf16" => COLIBRI_MOE_BF16,
        _ => COLIBRI_MOE_Q8,
    };
    let w = values(EXPERTS * DIM * DIM, 1);
    let sizes = [DIM as i32; EXPERTS];
    let mut moe: *mut colibri_moe = std::ptr::null_mut();
    // SAFETY: buffers sized as the call requires.
    let st = unsafe {
        colibri_moe_init_with(&mut moe, w.as_ptr(), sizes.as_ptr(), EXPERTS as i32, DIM as i32, TOP_K as i32, storage)
    };
    assert_eq!(st, 0, "init");
    let x = values(DIM, 2);
    // Experts 1 and 2 chosen.
    let gates = [0.1f32, 2.0, 1.5, -1.0];
    let mut out = vec![0f32; DIM];
    let p = pool(threads);
    let bytes = (TOP_K * DIM * DIM) as f64 * bytes_per_weight(storage);
    // Addresses cross into the pool as integers (raw pointers are not Send).
    let (m, xp, op, gp) = (moe as usize, x.as_ptr() as usize, out.as_mut_ptr() as usize, gates.as_ptr() as usize);
    b.counter(BytesCount::new(bytes as usize)).bench_local(|| {
        p.install(|| {
            // SAFETY: a live layer; buffers sized as the call requires, alive for the bench.
            let st = unsafe {
                colibri_moe_infer(
                    m as *const colibri_moe,
                    black_box(xp as *const f32),
                    op as *mut f32,
                    gp as *const f32,
                )
            };
            assert_eq!(st, 0);
        });
        black_box(&out);
    });
    // SAFETY: from init, freed once.
    unsafe { colibri_moe_free(moe) };
}

/// The cache-read ceiling: XOR-reduce as many bytes as the chosen experts' weights take in that
/// storage, with 256-bit loads, split into one range per thread like the primitive.
#[divan::bench(args = [(1, "f32"), (2, "f32"), (1, "bf16"), (2, "bf16"), (1, "q8"), (2, "q8")], sample_count = 200)]
fn read_limit(b: Bencher, (threads, storage): (usize, &str)) {
    let per_weight = match storage {
        "f32" => 4.0,
        "bf16" => 2.0,
        _ => 34.0 / 32.0,
    };
    let len = ((TOP_K * DIM * DIM) as f64 * per_weight / 8.0) as usize;
    let data: Vec<u64> = (0..len as u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
    let p = pool(threads);
    let per = len.div_ceil(threads).next_multiple_of(16);
    b.counter(BytesCount::new(len * 8)).bench_local(|| {
        let r: u64 = p.install(|| data.par_chunks(per).map(xor_all).reduce(|| 0, |a, b| a ^ b));
        black_box(r);
    });
}

/// XOR of all words (AVX2 loads where the CPU has them).
fn xor_all(w: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { xor_avx2(w) };
    }
    w.iter().fold(0, |a, &v| a ^ v)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn xor_avx2(w: &[u64]) -> u64 {
    // Four independent accumulators of four words: 16 words (two cache lines) per step.
    let mut acc = [[0u64; 4]; 4];
    let mut chunks = w.chunks_exact(16);
    for c in &mut chunks {
        for (j, a) in acc.iter_mut().enumerate() {
            for (l, v) in a.iter_mut().enumerate() {
                *v ^= c[j * 4 + l];
            }
        }
    }
    let tail = chunks.remainder().iter().fold(0, |a, &v| a ^ v);
    acc.iter().flatten().fold(tail, |a, &v| a ^ v)
}
