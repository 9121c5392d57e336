//! Int8 activation rows regrouped in panels of `PANEL` rows, for kernels that meet many weight
//! rows with one activation row's 4 bytes at a time (the AVX-512 VNNI prefill kernels of the
//! interleaved block types): a panel's 8 rows sit side by side per 4-byte chunk, so a kernel
//! reaches any of them, any chunk, at a constant offset from one pointer, and the q4 / q8
//! integer offsets are stored ready to start a block's sum. Built once per product from the
//! row-major `QuantizedActs` (which stay what every other kernel reads) and shared by its tasks.

use crate::format::blocks::{CHUNK, QK};

/// Activation rows per panel.
pub const PANEL: usize = 8;
/// Bytes of one panel's block: 8 chunks of 4 bytes for each of the 8 rows.
pub const PANEL_BLOCK: usize = QK * PANEL;

/// n activation rows in ⌈n / 8⌉ panels of `nb` blocks each; rows past n are zero (quants,
/// scales, offsets), so a kernel may run over a whole panel.
#[derive(Default)]
pub struct ActPanels {
    /// Blocks per row.
    pub nb: usize,
    /// [panel, block, chunk c < 8, row t < 8, 4 bytes]: bytes 4c..4c + 4 of the row's block.
    pub q: Vec<i8>,
    /// [panel, block, row]: the block scale dx.
    pub d: Vec<f32>,
    /// [panel, block, row]: −8 · Σ qx, the W4A8 offset (Σ (qw − 8)·qx = Σ qw·qx − 8·Σ qx).
    pub off_q4: Vec<i32>,
    /// [panel, block, row]: −128 · Σ qx, the offset of W8A8 with weights moved to unsigned
    /// bytes (Σ (qw + 128)·qx = Σ qw·qx + 128·Σ qx).
    pub off_q8: Vec<i32>,
}

impl ActPanels {
    /// The panels of n rows of `cols` int8 activations: quants qs [n, cols], scales d and block
    /// sums [n, cols / 32].
    pub fn new(qs: &[i8], d: &[f32], sums: &[i32], n: usize, cols: usize) -> ActPanels {
        let nb = cols / QK;
        let panels = n.div_ceil(PANEL);
        let mut p = ActPanels {
            nb,
            q: vec![0; panels * nb * PANEL_BLOCK],
            d: vec![0.0; panels * nb * PANEL],
            off_q4: vec![0; panels * nb * PANEL],
            off_q8: vec![0; panels * nb * PANEL],
        };
        for t in 0..n {
            let (panel, slot) = (t / PANEL, t % PANEL);
            for b in 0..nb {
                let at = panel * nb + b;
                let src = &qs[t * cols + b * QK..t * cols + (b + 1) * QK];
                let dst = &mut p.q[at * PANEL_BLOCK..(at + 1) * PANEL_BLOCK];
                for (c, chunk) in src.chunks_exact(CHUNK).enumerate() {
                    let o = (c * PANEL + slot) * CHUNK;
                    dst[o..o + CHUNK].copy_from_slice(chunk);
                }
                let s = sums[t * nb + b];
                p.d[at * PANEL + slot] = d[t * nb + b];
                p.off_q4[at * PANEL + slot] = -8 * s;
                p.off_q8[at * PANEL + slot] = -128 * s;
            }
        }
        p
    }
}
