//! Kernel micro-benchmarks on the active CPU path (`COLIBRI_CPU` picks another):
//! matrix-vector products at decode shapes (bytes/s = weight bytes streamed) and blocked GEMMs at
//! prefill shapes (items/s = multiply-adds; GFLOP/s = 2 × that).
//!
//!     cargo bench --bench kernels                    # all
//!     COLIBRI_CPU=generic cargo bench --bench kernels -- gemv
//!
//! Matrices are bigger than the last-level cache, so matrix-vector figures measure memory reads.

use colibri::format::DType;
use colibri::kernels::{self, Kernels, Mat, QuantActivations};
use divan::counter::{BytesCount, ItemsCount};
use divan::{black_box, Bencher};

fn main() {
    eprintln!("kernel path: {}", kernels::active_path().name());
    divan::main();
}

/// One cache line of a stored matrix.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A stored matrix in one dtype, filled with small pseudo-random values.
struct Weights {
    rows: usize,
    cols: usize,
    /// The stored bytes in 64-byte lines: every dtype's elements aligned, and the matrix
    /// starting on a cache line as a model file's tensors do.
    lines: Vec<Line>,
    len: usize,
    dtype: DType,
}

fn values(n: usize) -> Vec<f32> {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.04
        })
        .collect()
}

impl Weights {
    fn new(dtype: &'static str, rows: usize, cols: usize) -> Weights {
        let dtype = DType::from_name(dtype).expect("a dtype name");
        Weights::of_bytes(dtype, rows, cols, &dtype.encode(&values(rows * cols), cols))
    }

    /// `rows` rows that repeat an encoded `base`-row matrix (whole 8-row groups: `rows` and
    /// `base` multiples of 8), without quantising them all.
    fn tiled(dtype: &'static str, rows: usize, cols: usize, base: usize) -> Weights {
        let w = Weights::new(dtype, base, cols);
        let bytes: Vec<u8> = w.bytes().iter().copied().cycle().take(w.len / base * rows).collect();
        Weights::of_bytes(w.dtype, rows, cols, &bytes)
    }

    fn of_bytes(dtype: DType, rows: usize, cols: usize, bytes: &[u8]) -> Weights {
        let mut lines = vec![Line([0; 64]); bytes.len().div_ceil(64)];
        for (l, c) in lines.iter_mut().zip(bytes.chunks(64)) {
            l.0[..c.len()].copy_from_slice(c);
        }
        Weights { rows, cols, lines, len: bytes.len(), dtype }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: lines are plain bytes; `len` is at most their byte length.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<u8>(), self.len) }
    }

    fn mat(&self) -> Mat<'_> {
        Mat::new(self.dtype, self.rows, self.cols, self.bytes()).expect("bench matrix binds")
    }
}

/// The format's own dtypes, then GGUF's block types with int8-activation kernels (q4_k and
/// q6_k: what Q4_K_M files are made of).
const DTYPES: [&str; 17] = [
    "f32", "bf16", "f16", "q8", "q4", "q8r8", "q4r8", "q4_k", "q6_k", "q4_kr8", "q6_kr8", "q5_k", "q4_0", "q5_0",
    "q8_0", "iq4_nl", "iq4_xs",
];

/// One Mixtral expert projection (14336 × 4096) times one activation row: decode.
#[divan::bench(args = DTYPES, sample_count = 20)]
fn gemv_14336x4096(b: Bencher, dtype: &'static str) {
    let w = Weights::new(dtype, 14336, 4096);
    let x = values(4096);
    let mut y = vec![0f32; 14336];
    b.counter(BytesCount::new(w.len)).bench_local(|| {
        Kernels::default().matmul(w.mat(), black_box(&x), 1, &mut y);
        black_box(&y);
    });
}

/// The same weights against 4 activation rows (batched decode of 4 sequences).
#[divan::bench(args = ["bf16", "q8", "q4", "q8r8", "q4r8"], sample_count = 20)]
fn gemv_14336x4096_n4(b: Bencher, dtype: &'static str) {
    let w = Weights::new(dtype, 14336, 4096);
    let x = values(4 * 4096);
    let mut y = vec![0f32; 4 * 14336];
    b.counter(BytesCount::new(w.len)).bench_local(|| {
        Kernels::default().matmul(w.mat(), black_box(&x), 4, &mut y);
        black_box(&y);
    });
}

/// A Qwen-MoE expert gate projection (1408 × 2048) over 512 tokens: prefill GEMM.
#[divan::bench(args = ["f32", "bf16", "q8", "q4", "q8r8", "q4r8"], sample_count = 10)]
fn gemm_512x2048x1408(b: Bencher, dtype: &'static str) {
    let w = Weights::new(dtype, 1408, 2048);
    let x = values(512 * 2048);
    let mut y = vec![0f32; 512 * 1408];
    b.counter(ItemsCount::new(512 * 2048 * 1408usize)).bench_local(|| {
        Kernels::default().matmul(w.mat(), black_box(&x), 512, &mut y);
        black_box(&y);
    });
}

/// An expert's share of a 512-token prompt with 64 experts top-8 (64 tokens); GGUF's types
/// widen for the FMA GEMM with float activations (`COLIBRI_QUANT_ACT=float`).
#[divan::bench(args = ["bf16", "q4", "q4r8", "q4_k", "q4_kr8", "q6_k", "q6_kr8", "q5_k", "iq4_xs", "iq4_xsr8"], sample_count = 20)]
fn gemm_64x2048x1024(b: Bencher, dtype: &'static str) {
    let w = Weights::new(dtype, 1024, 2048);
    let x = values(64 * 2048);
    let mut y = vec![0f32; 64 * 1024];
    b.counter(ItemsCount::new(64 * 2048 * 1024usize)).bench_local(|| {
        Kernels::default().matmul(w.mat(), black_box(&x), 64, &mut y);
        black_box(&y);
    });
}

/// The pool's fork-join cost: one parallel loop of `tasks` empty tasks (what a small
/// matrix-vector call pays on top of its work). A decode step makes ~30 such calls per layer.
#[divan::bench(args = [2, 16], sample_count = 50)]
fn fork_join(b: Bencher, tasks: usize) {
    use rayon::prelude::*;
    b.bench_local(|| {
        (0..tasks).into_par_iter().for_each(|i| {
            black_box(i);
        })
    });
}

/// A small decode projection (2048 × 2048 bf16, 8 MiB): where fork-join cost would show.
#[divan::bench(sample_count = 50)]
fn gemv_2048x2048_bf16(b: Bencher) {
    let w = Weights::new("bf16", 2048, 2048);
    let x = values(2048);
    let mut y = vec![0f32; 2048];
    b.counter(BytesCount::new(w.len)).bench_local(|| {
        Kernels::default().matmul(w.mat(), black_box(&x), 1, &mut y);
        black_box(&y);
    });
}

/// An OLMoE expert projection (1024 × 2048) against one activation row: short rows, many
/// row groups — where prefetching across row groups shows.
#[divan::bench(args = ["bf16", "q8", "q4", "q8r8", "q4r8", "q4_k", "q4_kr8", "q6_k", "q6_kr8"], sample_count = 50)]
fn gemv_1024x2048(b: Bencher, dtype: &'static str) {
    // 64 distinct matrices so that, as in a decode step, the weights come from memory.
    let ws: Vec<Weights> = (0..64).map(|_| Weights::new(dtype, 1024, 2048)).collect();
    let x = values(2048);
    let mut y = vec![0f32; 1024];
    let mut i = 0;
    b.counter(BytesCount::new(ws[0].len)).bench_local(|| {
        i = (i + 1) % ws.len();
        Kernels::default().matmul(ws[i].mat(), black_box(&x), 1, &mut y);
        black_box(&y);
    });
}

/// The interleaved K-quants of a Q4_K_M file at its decode shapes, n activation rows (batched
/// decode, an expert's few prefill tokens): 64 copies of an OLMoE expert projection (1024 ×
/// 2048) in turn, so that the weights come from memory.
#[divan::bench(args = [(1, "q4_kr8"), (2, "q4_kr8"), (4, "q4_kr8"), (8, "q4_kr8"), (16, "q4_kr8"), (1, "q6_kr8"), (2, "q6_kr8"), (4, "q6_kr8"), (8, "q6_kr8"), (16, "q6_kr8"), (1, "iq4_xs"), (1, "iq4_xsr8"), (16, "iq4_xs"), (16, "iq4_xsr8"), (1, "iq4_nl"), (1, "iq4_nlr8")], sample_count = 50)]
fn gemv_kr8_expert(b: Bencher, (n, dtype): (usize, &'static str)) {
    let w = Weights::new(dtype, 1024, 2048);
    let ws: Vec<Weights> = (0..64).map(|_| Weights::of_bytes(w.dtype, w.rows, w.cols, w.bytes())).collect();
    let x = values(n * 2048);
    let mut y = vec![0f32; n * 1024];
    let mut i = 0;
    b.counter(BytesCount::new(w.len)).bench_local(|| {
        i = (i + 1) % ws.len();
        Kernels::default().matmul(ws[i].mat(), black_box(&x), n, &mut y);
        black_box(&y);
    });
}

/// The same shape with float activations (`COLIBRI_QUANT_ACT=float`, and the products that take
/// them whatever the mode): row-major 32-element blocks in colibri's and GGUF's byte orders,
/// and the K-quants row-major and interleaved.
#[divan::bench(args = ["q8", "q8_0", "q4", "q4_0", "q4_k", "q4_kr8", "q6_kr8"], sample_count = 50)]
fn gemv_float_1024x2048(b: Bencher, dtype: &'static str) {
    let ws: Vec<Weights> = (0..64).map(|_| Weights::new(dtype, 1024, 2048)).collect();
    let x = values(2048);
    let mut y = vec![0f32; 1024];
    let k = Kernels::default().with_act(QuantActivations::Float);
    let mut i = 0;
    b.counter(BytesCount::new(ws[0].len)).bench_local(|| {
        i = (i + 1) % ws.len();
        k.matmul(ws[i].mat(), black_box(&x), 1, &mut y);
        black_box(&y);
    });
}

#[divan::bench(args = ["q6_kr8"], sample_count = 20)]
fn gemv_kr8_lm_head(b: Bencher, dtype: &'static str) {
    let w = Weights::tiled(dtype, 50304, 2048, 1024);
    let x = values(2048);
    let mut y = vec![0f32; 50304];
    b.counter(BytesCount::new(w.len)).bench_local(|| {
        Kernels::default().matmul(w.mat(), black_box(&x), 1, &mut y);
        black_box(&y);
    });
}

/// One DeepSeek-V2-Lite layer's absorbed MLA products at decode (`forward::mla`): per head (16),
/// W_UK,hᵀ (512 × 128) times its query and W_UV,h (128 × 512) times its attention latent, with
/// float activations whatever the session's mode. GGUF files store both as q8_0.
#[divan::bench(args = ["q8_0", "q8", "q5_0", "q4_0", "q4", "bf16", "f16"], sample_count = 50)]
fn mla_heads_float(b: Bencher, dtype: &'static str) {
    let k_b: Vec<Weights> = (0..16).map(|_| Weights::new(dtype, 512, 128)).collect();
    let v_b: Vec<Weights> = (0..16).map(|_| Weights::new(dtype, 128, 512)).collect();
    let (q, lat) = (values(128), values(512));
    let mut y = vec![0f32; 512];
    let k = Kernels::default().with_act(QuantActivations::Float);
    b.counter(BytesCount::new(16 * (k_b[0].len + v_b[0].len))).bench_local(|| {
        for (kb, vb) in k_b.iter().zip(&v_b) {
            k.matmul(kb.mat(), black_box(&q), 1, &mut y);
            k.matmul(vb.mat(), black_box(&lat), 1, &mut y[..128]);
        }
        black_box(&y);
    });
}

/// bf16 decode products of 4 MiB matrices with rows of 2–16 KiB (512 … 8192 columns): short
/// rows are read one at a time, long ones eight in lockstep (`x86::bf16`); 64 distinct
/// matrices so the weights come from memory.
#[divan::bench(args = [512, 1024, 2048, 4096, 8192], sample_count = 50)]
fn gemv_bf16_row_width(b: Bencher, cols: usize) {
    let rows = (2 << 20) / cols;
    let ws: Vec<Weights> = (0..64).map(|_| Weights::new("bf16", rows, cols)).collect();
    let x = values(cols);
    let mut y = vec![0f32; rows];
    let mut i = 0;
    b.counter(BytesCount::new(ws[0].len)).bench_local(|| {
        i = (i + 1) % ws.len();
        Kernels::default().matmul(ws[i].mat(), black_box(&x), 1, &mut y);
        black_box(&y);
    });
}

/// Strategy crossover: a 16384 × 2048 matrix (bigger than the 32 MiB L3 at bf16, like a decode
/// step's weights) times n activation rows; `matmul` picks GEMV below `GEMM_MIN_ROWS`, GEMM from it.
fn matmul_n(b: Bencher, dtype: &'static str, n: usize) {
    let w = Weights::new(dtype, 16384, 2048);
    let x = values(n * 2048);
    let mut y = vec![0f32; n * 16384];
    b.counter(ItemsCount::new(n * 2048 * 16384usize)).bench_local(|| {
        Kernels::default().matmul(w.mat(), black_box(&x), n, &mut y);
        black_box(&y);
    });
}

#[divan::bench(args = [4, 8, 12, 16, 24, 32, 48, 64], sample_count = 10)]
fn matmul_16384x2048_bf16(b: Bencher, n: usize) {
    matmul_n(b, "bf16", n);
}

#[divan::bench(args = [4, 8, 16, 32, 48, 64], sample_count = 10)]
fn matmul_16384x2048_q4(b: Bencher, n: usize) {
    matmul_n(b, "q4", n);
}

#[divan::bench(args = [4, 8, 16, 32, 48, 64], sample_count = 10)]
fn matmul_16384x2048_q8(b: Bencher, n: usize) {
    matmul_n(b, "q8", n);
}

#[divan::bench(args = [4, 8, 16, 32, 48, 64], sample_count = 10)]
fn matmul_16384x2048_q4r8(b: Bencher, n: usize) {
    matmul_n(b, "q4r8", n);
}

#[divan::bench(args = [4, 8, 16, 32, 48, 64], sample_count = 10)]
fn matmul_16384x2048_q8r8(b: Bencher, n: usize) {
    matmul_n(b, "q8r8", n);
}

#[divan::bench(args = [16, 32, 64], sample_count = 10)]
fn matmul_16384x2048_q4_k(b: Bencher, n: usize) {
    matmul_n(b, "q4_k", n);
}

/// The interleaved K-quants on a 256 × 2048 matrix that stays in L2, one activation row: the
/// kernels' instruction throughput without the memory reads (the expert and lm_head figures
/// above are bound by those).
#[divan::bench(args = ["q4_kr8", "q6_kr8"], sample_count = 200)]
fn gemv_kr8_hot(b: Bencher, dtype: &'static str) {
    let w = Weights::new(dtype, 256, 2048);
    let x = values(2048);
    let mut y = vec![0f32; 256];
    b.counter(BytesCount::new(w.len)).bench_local(|| {
        Kernels::default().matmul(w.mat(), black_box(&x), 1, &mut y);
        black_box(&y);
    });
}

/// One DeepSeek-V2-Lite expert gate projection (1408 × 2048) against the ragged token counts an
/// expert sees in prefill (items/s = multiply-adds; run at one thread: `RAYON_NUM_THREADS=1`).
#[divan::bench(args = [(2, "q4_kr8"), (4, "q4_kr8"), (8, "q4_kr8"), (24, "q4_kr8"), (40, "q4_kr8"), (64, "q4_kr8"),
    (100, "q4_kr8"), (4, "q6_kr8"), (8, "q6_kr8"), (40, "q6_kr8"), (100, "q6_kr8"), (4, "q8r8"), (8, "q8r8"),
    (16, "q8r8"), (24, "q8r8"), (32, "q8r8"), (40, "q8r8"), (64, "q8r8"), (100, "q8r8"), (16, "q4r8"), (24, "q4r8"),
    (32, "q4r8"), (40, "q4r8"), (64, "q4r8"), (100, "q4r8"),
    (512, "q8r8"), (512, "q4r8"), (8, "iq4_xs"), (40, "iq4_xs"), (100, "iq4_xs"), (8, "iq4_xsr8"), (40, "iq4_xsr8"),
    (100, "iq4_xsr8"), (40, "iq4_nl"), (40, "iq4_nlr8")], sample_count = 30)]
fn gemm_expert_ragged(b: Bencher, (n, dtype): (usize, &'static str)) {
    let w = Weights::new(dtype, 1408, 2048);
    let x = values(n * 2048);
    let mut y = vec![0f32; n * 1408];
    b.counter(ItemsCount::new(n * 2048 * 1408usize)).bench_local(|| {
        Kernels::default().matmul(w.mat(), black_box(&x), n, &mut y);
        black_box(&y);
    });
}

/// One expert's down projection of DeepSeek-V2-Lite (2048 × 1408): llama-quantize's Q4_K_M
/// stores it as Q5_0 (1408 is not a multiple of 256); q8r8 for comparison. Items: multiply-adds.
#[divan::bench(args = [(1, "q5_0"), (2, "q5_0"), (4, "q5_0"), (8, "q5_0"), (16, "q5_0"), (24, "q5_0"), (40, "q5_0"),
    (64, "q5_0"), (100, "q5_0"), (16, "q8r8"), (40, "q8r8"), (100, "q8r8")], sample_count = 30)]
fn gemm_expert_down(b: Bencher, (n, dtype): (usize, &'static str)) {
    let w = Weights::new(dtype, 2048, 1408);
    let x = values(n * 1408);
    let mut y = vec![0f32; n * 2048];
    b.counter(ItemsCount::new(n * 2048 * 1408usize)).bench_local(|| {
        Kernels::default().matmul(w.mat(), black_box(&x), n, &mut y);
        black_box(&y);
    });
}
