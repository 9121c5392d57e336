//! The model's pages brought into memory before any timed run: one read per 4 KiB page through
//! the mapping, in file order, so that the faults read the file as the runs would (in 2 MiB
//! folios where the mapping asks for transparent huge pages) and no repetition waits on the
//! disk. llama-bench's default load does the same (`MAP_POPULATE`). Without it, the first runs
//! after a `convert` (which writes with direct I/O) or on an evicted file read the disk while
//! timed: olmoe-4l bf16 pp512 on the AMX Xeon, four repetitions after the warm-up, 503 / 751 /
//! 1081 / 1410 t/s against 1449–1553 once resident.

use std::time::Instant;

/// Page stride of the reads (the smallest page: every page is touched whatever its size).
const PAGE: usize = 4096;

/// Touch every page of `bytes`; the seconds it took.
pub fn read_in(bytes: &[u8]) -> f64 {
    let t0 = Instant::now();
    let mut sum = 0u8;
    for page in bytes.chunks(PAGE) {
        // The value goes through black_box, so the load that produces it cannot be dropped.
        sum = sum.wrapping_add(std::hint::black_box(page[0]));
    }
    std::hint::black_box(sum);
    t0.elapsed().as_secs_f64()
}
