//! One-thread decode read rate of the int8 matrix-vector kernels against a plain streaming read
//! of the same bytes: how close a one-activation-row product of a matrix larger than the caches
//! comes to what one core can read (docs/performance.md, "Where the one-thread q8 decode CPU
//! goes").
//!
//! ```text
//! cargo build --release --example q8bw
//! target/release/examples/q8bw [DTYPE=q8r8] [ROWS=65536] [COLS=2048] [PASSES=12]
//! ```
//!
//! Each pass times (in thread CPU time, what a loaded machine distorts least) one
//! `Kernels::matmul` with one int8 activation row on the calling thread (no pool), then one sum
//! of the same bytes with eight u64 lanes; printed are the median rates in GB/s (1e9 bytes of
//! the stored matrix per second) and the median of the per-pass ratios. `Q8BW_FILE=path` reads
//! the matrix through a file mapping instead of heap memory.

use colibri::format::DType;
use colibri::kernels::{self, Kernels, Mat, QuantActivations};

/// n small pseudo-random values (xorshift), as the kernel benchmarks make them.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.04
        })
        .collect()
}

/// Sum of `xs` with eight independent u64 accumulators (the bench probe's read loop).
fn sum_lanes(xs: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    for c in xs.chunks_exact(8) {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(x);
        }
    }
    acc.iter().fold(0u64, |a, &x| a.wrapping_add(x))
}

/// This thread's CPU time in seconds (what a loaded machine distorts least).
fn cpu_secs() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// GB/s of thread CPU time of one run of `f` over `bytes` bytes, after one untimed run.
fn rate(bytes: usize, mut f: impl FnMut()) -> f64 {
    f();
    let t0 = cpu_secs();
    f();
    bytes as f64 / (cpu_secs() - t0).max(1e-9) / 1e9
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let dtype = DType::from_name(a.get(1).map_or("q8r8", String::as_str)).expect("a dtype name");
    let arg = |i: usize, d: usize| a.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (rows, cols, passes) = (arg(2, 65536), arg(3, 2048), arg(4, 12));
    let enc = dtype.encode(&values(rows * cols, 0x2545_F491_4F6C_DD1D), cols);
    // 64-byte aligned, as a model file's tensors are (an over-allocation, then the offset).
    let mut all = vec![0u64; enc.len().div_ceil(8) + 8];
    let skip = all.as_ptr().align_offset(64);
    let words = &mut all[skip..skip + enc.len().div_ceil(8)];
    for (w, c) in words.iter_mut().zip(enc.chunks(8)) {
        let mut b = [0u8; 8];
        b[..c.len()].copy_from_slice(c);
        *w = u64::from_le_bytes(b);
    }
    drop(enc);
    // SAFETY: u64 words are plain bytes.
    let mut bytes = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 8) };
    // Q8BW_FILE=path: the same bytes written to a file and read through a shared mapping (page
    // cache, 4 KiB pages), as a model file is.
    let map = std::env::var("Q8BW_FILE").ok().map(|path| {
        std::fs::write(&path, bytes).expect("write the matrix file");
        let f = std::fs::File::open(&path).expect("open");
        // SAFETY: a read-only shared mapping of a file nobody changes while it is mapped.
        unsafe { memmap2::Mmap::map(&f).expect("mmap") }
    });
    if let Some(m) = &map {
        bytes = &m[..];
        eprintln!("reading through a file mapping");
    }
    let len = dtype.bytes_for((rows * cols) as u64).expect("size") as usize;
    let w = Mat::new(dtype, rows, cols, &bytes[..len]).expect("binds");
    let x = values(cols, 7);
    let mut y = vec![0f32; rows];
    let k = Kernels::new(QuantActivations::Reduced);
    eprintln!("path {}, {dtype} {rows} x {cols}: {:.1} MB", kernels::active_path().name(), len as f64 / 1e6);
    // SAFETY: the (mapped or heap) bytes are 8-aligned (page or u64 words) and len(bytes) / 8 words long.
    let as_words = unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<u64>(), bytes.len() / 8) };
    let mut sink = 0u64;
    // Kernel and read passes alternate; each pair gives a ratio (the load moves both alike).
    let (mut kr, mut rr, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..passes {
        let a = rate(len, || k.matmul(w, std::hint::black_box(&x), 1, &mut y));
        let b = rate(len, || sink = sink.wrapping_add(sum_lanes(std::hint::black_box(as_words))));
        kr.push(a);
        rr.push(b);
        ratio.push(a / b);
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "{dtype} {rows}x{cols}: kernel {:.2} GB/s, read {:.2} GB/s (medians of CPU-time rates), kernel/read median {:.3}",
        med(&mut kr),
        med(&mut rr),
        med(&mut ratio)
    );
    std::hint::black_box((sink, &y));
}
