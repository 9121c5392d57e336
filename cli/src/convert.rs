//! `colibri convert`'s terminal side: the conversion itself is the colibri-convert library; this
//! draws its progress (an indicatif bar on stderr, created when the payload size is known).

use colibri_convert::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::cell::OnceCell;

/// The progress bar of one conversion.
#[derive(Default)]
pub struct Bar(OnceCell<ProgressBar>);

impl Progress for Bar {
    fn start(&self, total: u64) {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
        ) {
            bar.set_style(style);
        }
        // A second `start` (the library calls it once) keeps the first bar.
        let _ = self.0.set(bar);
    }

    fn advance(&self, bytes: u64) {
        if let Some(bar) = self.0.get() {
            bar.inc(bytes);
        }
    }

    fn finish(&self) {
        if let Some(bar) = self.0.get() {
            bar.finish_and_clear();
        }
    }
}
