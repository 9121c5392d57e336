//! Writeback pacing for a large sequential write: every `WINDOW` bytes the window just written
//! is handed to the kernel's writeback at once (`sync_file_range(WRITE)`, which does not wait)
//! and the writer waits for the window before it. Writing to disk then overlaps producing the
//! data (reading a source file, converting), dirty pages stay bounded at ~2 windows, and the
//! final fsync has almost nothing left to do — a converter otherwise reads the whole model and
//! only then writes it all at fsync. A hint only: errors are ignored here (the final fsync
//! reports them), and on other systems it does nothing.

use std::fs::File;

/// Bytes handed to writeback at a time.
const WINDOW: u64 = 64 << 20;

/// Where the last window started and ended, in file offsets.
#[derive(Debug, Default)]
pub(super) struct Pacer {
    started: u64,
    previous: Option<(u64, u64)>,
}

impl Pacer {
    /// True when `pos` (bytes in the file so far) completes a window: flush the writer's buffer,
    /// then call `kick`.
    pub fn due(&self, pos: u64) -> bool {
        pos >= self.started + WINDOW
    }

    /// Start writeback of [started, pos) and wait for the window before it.
    pub fn kick(&mut self, file: &File, pos: u64) {
        let window = (self.started, pos - self.started);
        start_writeback(file, window, self.previous);
        self.previous = Some(window);
        self.started = pos;
    }
}

#[cfg(target_os = "linux")]
fn start_writeback(file: &File, (off, len): (u64, u64), previous: Option<(u64, u64)>) {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let as_off = |v: u64| libc::off64_t::try_from(v).unwrap_or(libc::off64_t::MAX);
    // SAFETY: plain syscalls on an open descriptor; they read no user memory.
    unsafe {
        libc::sync_file_range(fd, as_off(off), as_off(len), libc::SYNC_FILE_RANGE_WRITE);
        if let Some((p_off, p_len)) = previous {
            let wait =
                libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
            libc::sync_file_range(fd, as_off(p_off), as_off(p_len), wait);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_: &File, _: (u64, u64), _: Option<(u64, u64)>) {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// Windows advance at every WINDOW bytes and the paced file reads back as written.
    #[test]
    fn windows_advance_and_the_data_is_intact() {
        let path = std::env::temp_dir().join(format!("colibri-pace-{}.bin", std::process::id()));
        let mut file = File::create(&path).expect("temp file");
        let (mut pacer, mut pos, mut kicks) = (Pacer::default(), 0u64, Vec::new());
        let chunk: Vec<u8> = (0..(3 << 20)).map(|i: u32| (i % 251) as u8).collect();
        while pos < 2 * WINDOW + (5 << 20) {
            file.write_all(&chunk).expect("write");
            pos += chunk.len() as u64;
            if pacer.due(pos) {
                pacer.kick(&file, pos);
                kicks.push(pos);
            }
        }
        file.sync_all().expect("fsync");
        assert_eq!(kicks.len(), 2, "one kick per completed window: {kicks:?}");
        assert!(kicks[0] >= WINDOW && kicks[1] >= kicks[0] + WINDOW);
        assert!(!pacer.due(pos), "the last, partial window is left to the final fsync");
        let mut back = Vec::new();
        File::open(&path).expect("reopen").read_to_end(&mut back).expect("read");
        std::fs::remove_file(&path).expect("remove");
        assert_eq!(back.len() as u64, pos);
        assert!(back.chunks(chunk.len()).all(|c| c == chunk.as_slice()));
    }
}
