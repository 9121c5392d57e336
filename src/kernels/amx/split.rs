//! How the AMX GEMM splits a product (`gemm`): the weight rows per task (`task_rows`) and the
//! columns per chunk (`chunk_width`, at most `KC`), sized for the caches of the AMX Xeon the
//! figures below come from (48 KiB L1d, 2 MiB L2 per core). Neither changes a result: each
//! output is one chain over the column steps in order whatever the split.

use super::sink::BLOCK;
use super::TK;

/// Weight rows per task, for rows of `cols` columns (a chunk's, `KC`) against n activation rows:
/// each panel pair meets the task's 2 × 2 blocks in turn, so the panels are read from further
/// away once per task and the task's weights from L2 once per panel pair. Whole blocks, 32 to
/// 128 rows, whose weights stay within 704 KiB when the panels' trips matter — many panel pairs
/// (n ≥ 256), or panels of more than `PANELS_NEAR` bytes (`panel_bytes`: wide rows, in chunks,
/// whose panels each task reads from L3) — and 256 KiB otherwise. Mixtral's down projection
/// (4096 × 14336 in chunks of 3584) went from 32- to 96-row tasks with that: one thread, ms,
/// three rounds alternating, n = 96 / 128 / 160: 20.8–21.6 / 25.5–26.4 / 31.0–32.0 →
/// 18.6–19.1 / 21.9–23.1 / 26.7–28.0 (the figures below, from an earlier build, had 32 rows
/// fastest there); 2048 × 5632 in chunks of 2816 (0.7 / 1.4 / 2.2 MiB of panels at n = 64 / 128
/// / 200), 32- against 96-row tasks: 2.41–2.48 → 2.62–2.74, 4.31–4.48 → 4.44–4.52, 7.53–7.89 →
/// 6.52–6.78 ms — bigger tasks pay once the panels are past L2, hence the threshold. One thread
/// on the AMX Xeon (`RAYON_NUM_THREADS=1 examples/bf16gemm`, fastest of 4–8, two rounds, ms for
/// 32 / 64 / 128 rows; rows × cols, n):
/// 14336 × 4096, 128: 21.7–22.5 / 23.9–24.2 / 24.5–24.7; 4096 × 14336, 128: 29.2–30.0 /
/// 33.8–34.7 / 33.1–33.6; 4096 × 14336, 512: 102–107 / 125–126 / 120–121; 14336 × 4096, 512:
/// 93–100 / 82–88 / 81–86; 4096 × 4096, 512: 27.6–28.0 / 25.2–26.2 / 26.1–26.2; 2048 × 5632,
/// 512: 18.1–18.2 / 16.6–16.7 / 17.1–17.2; 2048 × 2048, 512: 5.8–5.9 / 5.4 / 4.9–5.1; 1024 ×
/// 2048, 64: 0.52 / 0.48–0.49 / 0.49–0.50; 1408 × 2048, 34: 0.55–0.56 / 0.54–0.58 / 0.57–0.58.
/// Which rows a task holds changes no result (each output is one chain over the columns). Wider
/// rows go in chunks of `KC` columns, sized as rows of KC.
pub(super) fn task_rows(cols: usize, n: usize, panel_bytes: usize) -> usize {
    let far = n >= 256 || panel_bytes > PANELS_NEAR;
    let budget = if far { 704 << 10 } else { 256 << 10 };
    (budget / (2 * cols.max(1)) / BLOCK * BLOCK).clamp(BLOCK, 4 * BLOCK)
}

/// The most bytes of activation panels that stay in L2 (2 MiB here) across a product's tasks
/// beside a task's weights (`task_rows`).
pub(super) const PANELS_NEAR: usize = 1536 << 10;

/// The most columns per chunk (`chunk_width` splits a row evenly): a task's blocks meet every
/// panel pair over one chunk, then the next, so that rows wider than this (Mixtral's
/// 14336-column down projection: 896 KiB per 32 rows, as much per panel pair) do not push the
/// task's weights and the pair out of L2 together. Each block's partial sums wait between chunks
/// in f32 (tile stores and loads are exact), so every output is still one chain over the column
/// steps in order.
pub(super) const KC: usize = 4096;
const _: () = assert!(KC.is_multiple_of(TK));

/// Columns per chunk for rows of `cols` columns: as few chunks as `KC` allows, of equal width
/// (in whole 32-column steps) rather than KC and a remainder — the tasks are sized for the
/// chunk's width (`task_rows`), so a 5632-column row in two chunks of 2816 gets 128-row tasks
/// where 4096 + 1536 got 64. One thread, `examples/bf16gemm 2048 5632 8 512` (Qwen2-MoE's shared
/// down projection), ms, two rounds: 4096 15.2–15.7, 2816 14.4–14.5, 2048 15.7–15.9, 6144 15.8–15.9,
/// 8192 15.6–16.1.
pub(super) fn chunk_width(cols: usize) -> usize {
    let chunks = cols.div_ceil(KC).max(1);
    cols.div_ceil(chunks).next_multiple_of(TK)
}
