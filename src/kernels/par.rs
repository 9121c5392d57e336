//! How products are split into tasks: the blocking of the GEMMs, per-thread buffers, disjoint
//! output writes, the task loop and the matrix-vector strategy's row split. A leaf of the product
//! strategies (`gemm`, `gemm_bf16`); it knows no kernel.

use super::table::TransposeFn;
use rayon::prelude::*;
use std::cell::RefCell;
use std::thread::LocalKey;

/// Columns (k) per block: a weight block [MC, KC] of f32 stays in L2, a panel slice in L1.
pub const KC: usize = 256;
/// Weight rows per task (a multiple of MR).
pub const MC: usize = 96;
/// Weight rows per task of the matrix-vector strategy (a multiple of 4).
const GEMV_CHUNK: usize = 64;
/// Below this many multiply-adds a call runs on the calling thread.
const PAR_MIN_WORK: usize = 1 << 15;

thread_local! {
    /// Per-thread output block of the matrix-vector strategy.
    static GEMV_OUT: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Run `f` with this thread's buffer in `key`, or with a fresh one when the buffer is in use
/// further up this thread's stack: a worker waiting inside a parallel loop may run another task
/// that multiplies too (nested parallelism), and that must not fail.
pub(super) fn with_buffer<T: Default + 'static, R>(
    key: &'static LocalKey<RefCell<T>>,
    f: impl FnOnce(&mut T) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut b) => f(&mut b),
        Err(_) => f(&mut T::default()),
    })
}

/// Raw pointer wrapper so parallel tasks can write disjoint elements of one output buffer.
#[derive(Clone, Copy)]
pub(super) struct OutPtr(pub(super) *mut f32);
// SAFETY: used only to write disjoint indices from different tasks.
unsafe impl Send for OutPtr {}
// SAFETY: as for Send: tasks write disjoint indices only.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// Elements i..i + vs.len() = vs. SAFETY: that range in bounds and written by no other task.
    #[inline]
    pub(super) unsafe fn write_run(&self, i: usize, vs: &[f32]) {
        // SAFETY: the caller guarantees the range is in bounds and written by no other task.
        unsafe { std::ptr::copy_nonoverlapping(vs.as_ptr(), self.0.add(i), vs.len()) };
    }

    /// `write_run` of a run whose length is known at compile time (copied inline).
    #[inline]
    pub(super) unsafe fn write_array<const L: usize>(&self, i: usize, vs: &[f32; L]) {
        // SAFETY: as for `write_run`.
        unsafe { self.0.add(i).cast::<[f32; L]>().write_unaligned(*vs) };
    }
}

/// Tokens per block of a GEMM's write-back: 32 bytes of each row of the task's results.
const WRITE_BACK_TOKENS: usize = 8;

/// y[tok·rows + r] = c[(r − task.start)·ldc + tok] for r in task (at most MC rows), tok < n: a
/// GEMM task's results (outputs × tokens, rows ldc apart) into y's token-major rows [n, rows],
/// WRITE_BACK_TOKENS
/// tokens at a time: `transpose` turns the block's columns of c (mr lines, in L1 while they
/// are read) into one contiguous run of mr outputs per token, written to y at once. Element by
/// element, the column reads were 4 % of a bf16 prefill pass (olmoe-4l pp512, Zen 4).
pub(super) fn write_back(
    transpose: TransposeFn,
    c: &[f32],
    ldc: usize,
    n: usize,
    y: OutPtr,
    rows: usize,
    task: std::ops::Range<usize>,
) {
    let (r0, mr) = (task.start, task.len());
    assert!(mr <= MC && task.end <= rows);
    let mut block = [0f32; WRITE_BACK_TOKENS * MC];
    for t0 in (0..n).step_by(WRITE_BACK_TOKENS) {
        let k = WRITE_BACK_TOKENS.min(n - t0);
        transpose(&c[t0..], ldc, mr, k, &mut block[..k * mr]);
        for (j, run) in block[..k * mr].chunks_exact(mr).enumerate() {
            // SAFETY: rows r0..r0 + mr of token t0 + j belong to this task only; y holds
            // n·rows elements.
            unsafe { y.write_run((t0 + j) * rows + r0, run) };
        }
    }
}

/// Whether `tasks` tasks of `work` multiply-adds in all run on the calling thread, one after
/// the other (see `for_tasks`).
fn sequential(tasks: usize, work: usize) -> bool {
    tasks == 1 || work < PAR_MIN_WORK || crate::threads::current() == 1
}

/// Run `body` over `tasks` indices, in parallel on the pool running the caller when the call is
/// big enough (on the calling thread outside any pool).
pub(super) fn for_tasks(tasks: usize, work: usize, body: impl Fn(usize) + Sync + Send) {
    if sequential(tasks, work) {
        (0..tasks).for_each(body);
    } else {
        (0..tasks).into_par_iter().for_each(body);
    }
}

/// Matrix-vector strategy: `kernel(rows, out)` fills out [n, rows.len()] for a chunk of rows.
/// On one thread the chunks would run in turn: one call over every row then writes y ([n, rows],
/// the same layout) directly (a kernel's rows do not depend on the range they come in: chunks
/// start at multiples of GEMV_CHUNK, so every row group and remainder is the same either way).
pub(super) fn gemv_by(
    rows: usize,
    cols: usize,
    n: usize,
    y: &mut [f32],
    kernel: impl Fn(std::ops::Range<usize>, &mut [f32]) + Sync,
) {
    let tasks = rows.div_ceil(GEMV_CHUNK);
    if sequential(tasks, rows * cols * n) {
        kernel(0..rows, &mut y[..n * rows]);
        return;
    }
    let out = OutPtr(y.as_mut_ptr());
    for_tasks(tasks, rows * cols * n, |task| {
        let r0 = task * GEMV_CHUNK;
        let r1 = (r0 + GEMV_CHUNK).min(rows);
        let len = r1 - r0;
        with_buffer(&GEMV_OUT, |buf| {
            buf.resize(len * n, 0.0);
            kernel(r0..r1, &mut buf[..len * n]);
            for (tok, run) in buf.chunks_exact(len).enumerate() {
                // SAFETY: rows r0..r1 of token tok belong to this task only; y holds n·rows
                // elements.
                unsafe { out.write_run(tok * rows + r0, run) };
            }
        });
    });
}

/// Elements per task of `gated`: a prefill's dense MLP (hundreds of rows × ~10,000 columns)
/// is millions of exponentials, worth the other threads; a decode step's are not.
pub(super) const GATED_CHUNK: usize = 1 << 16;

/// f(g chunk, u chunk) over chunks of g and u, on the calling pool when there are several (an
/// elementwise f gives the same result for any split).
pub(super) fn gated(g: &mut [f32], u: &[f32], f: impl Fn(&mut [f32], &[f32]) + Sync) {
    let run = |(gc, uc): (&mut [f32], &[f32])| f(gc, uc);
    if g.len() > GATED_CHUNK && crate::threads::current() > 1 {
        g.par_chunks_mut(GATED_CHUNK).zip(u.par_chunks(GATED_CHUNK)).for_each(run);
    } else {
        run((g, u));
    }
}

/// Touch this thread's buffers so that their destructors are registered now (see
/// `kernels::prepare_thread`).
pub(super) fn prepare_thread() {
    GEMV_OUT.with(|_| ());
}
