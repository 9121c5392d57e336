//! Process CPU time of bf16 prefill products (docs/performance.md, "bf16 prefill against
//! PyTorch: the machine's ceiling and the tile"): a rows × cols bf16 matrix times n activation
//! rows, for each n given, fastest of `reps`.
//!
//! ```text
//! cargo build --release --example bf16gemm
//! RAYON_NUM_THREADS=1 target/release/examples/bf16gemm ROWS COLS REPS N...
//! ```
//!
//! Each product reads one of several copies of the matrix (256 MiB in all, more than the L3),
//! so its weights come from memory as an expert's do in a prefill pass; `COPIES=1` reads one
//! copy every time (weights as warm as the caches keep them). Printed per n: the
//! fastest product in ms and its multiply-adds per second (G = 1e9).

use colibri::format::DType;
use colibri::kernels::{Kernels, Mat};

/// n small values in ±0.02 spread by a multiplicative hash of the index (the product's speed
/// does not depend on them).
fn values(n: usize) -> Vec<f32> {
    (0..n).map(|i| (i.wrapping_mul(2_654_435_761) % 1001) as f32 * 4e-5 - 0.02).collect()
}

/// CPU seconds of the whole process (the pool's threads included).
fn cpu_secs() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// `bytes` copied into an anonymous mapping advised for transparent huge pages (as the engine
/// advises a model file's mapping, `mmap::Mapping`), leaked: the weights sit in 2 MiB pages as a
/// loaded model's do, not in the allocator's 4 KiB ones. `HUGE=0` keeps the allocator's pages.
fn huge_copy(bytes: &[u8]) -> &'static [u8] {
    if std::env::var("HUGE").is_ok_and(|v| v == "0") {
        return Vec::leak(bytes.to_vec());
    }
    let len = bytes.len().next_multiple_of(2 << 20);
    // SAFETY: a fresh private anonymous mapping of len bytes, checked, written only here, never
    // unmapped (leaked for the process's life).
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len + (2 << 20),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert!(p != libc::MAP_FAILED, "mmap");
        let p = (p as usize).next_multiple_of(2 << 20) as *mut u8;
        libc::madvise(p.cast(), len, libc::MADV_HUGEPAGE);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
        std::slice::from_raw_parts(p, bytes.len())
    }
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("a number")).collect();
    let [rows, cols, reps, ..] = args[..] else {
        panic!("usage: bf16gemm ROWS COLS REPS N...");
    };
    let copies =
        std::env::var("COPIES").ok().and_then(|v| v.parse().ok()).unwrap_or((256 << 20) / (rows * cols * 2) + 1);
    // DTYPE=bf16r32 stores the matrix in the AMX tiles' order (`format::tiles`).
    let dtype = std::env::var("DTYPE").ok().and_then(|d| DType::from_name(&d)).unwrap_or(DType::BF16);
    let stored: Vec<&[u8]> = (0..copies).map(|_| huge_copy(&dtype.encode(&values(rows * cols), cols))).collect();
    let k = Kernels::default();
    for &n in &args[3..] {
        let x = values(n * cols);
        let mut y = vec![0f32; n * rows];
        let mut best = f64::MAX;
        for r in 0..reps {
            let w = Mat::new(dtype, rows, cols, stored[r % copies]).expect("a bf16 matrix");
            let t0 = cpu_secs();
            k.matmul(w, &x, n, &mut y);
            best = best.min(cpu_secs() - t0);
        }
        print!("n={n} {:.3} ms {:.0} G  ", best * 1e3, (rows * cols * n) as f64 / best / 1e9);
    }
    println!();
}
