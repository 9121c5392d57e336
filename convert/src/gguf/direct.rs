//! Direct (`O_DIRECT`) reads of a model file's spans, one span ahead: after each span, the next
//! one of the same length (clamped to where the caller says the data ends) is read on a
//! background thread into a second buffer, so the device works while the converter re-lays
//! out and hands on the current span. The conversion loops read each tensor front to back in
//! steps, so the guess is right for all but a tensor's first span (a span inside the guessed
//! one counts as right).
//!
//! Direct reads take whole 4 KiB blocks into a page-aligned buffer: a span at byte `at` of `len`
//! bytes is read as [⌊at⌋, ⌈at + len⌉) and is the buffer's bytes [at − ⌊at⌋, ..+ len).

use colibri::format::{AlignedBuf, IO_ALIGN};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The aligned start of the span at `at`.
fn block_start(at: u64) -> u64 {
    at / IO_ALIGN as u64 * IO_ALIGN as u64
}

/// Read the blocks around `len` bytes at `at` of `file` into `buf` (the span is then at
/// `at − block_start(at)`); an early end of the file is an error.
pub fn read_blocks(file: &File, at: u64, len: usize, buf: &mut AlignedBuf) -> io::Result<()> {
    let start = block_start(at);
    let need = (at - start) as usize + len;
    buf.set_len(need.next_multiple_of(IO_ALIGN));
    let mut got = 0;
    while got < need {
        match file.read_at(&mut buf.bytes_mut()[got..], start + got as u64) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the file ends early")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A read running ahead: which file and bytes, and the thread returning the buffer.
struct Ahead {
    part: usize,
    at: u64,
    len: usize,
    thread: JoinHandle<(AlignedBuf, io::Result<()>)>,
}

/// The direct descriptors of a model's parts and the read running ahead, if any.
pub struct DirectReader {
    files: Vec<Option<Arc<File>>>,
    ahead: Mutex<Option<Ahead>>,
}

impl DirectReader {
    pub fn new(files: Vec<Option<Arc<File>>>) -> DirectReader {
        DirectReader { files, ahead: Mutex::new(None) }
    }

    /// True when part `part` was opened for direct reads.
    pub fn has(&self, part: usize) -> bool {
        self.files.get(part).is_some_and(|f| f.is_some())
    }

    /// `len` bytes at `at` of part `part` in `buf`: the offset of the span in `buf.bytes()`.
    /// Then the next span (`len` bytes at `at + len`, cut at `end`) starts reading ahead.
    pub fn read(&self, part: usize, at: u64, len: usize, end: u64, buf: &mut AlignedBuf) -> io::Result<usize> {
        let file = self.files.get(part).and_then(|f| f.clone()).ok_or_else(|| io::Error::other("no direct file"))?;
        let ahead = self.ahead.lock().map_err(|_| io::Error::other("read-ahead lock poisoned"))?.take();
        let mut spare = AlignedBuf::default();
        let mut found = None;
        if let Some(a) = ahead {
            let (mut done, r) = a.thread.join().map_err(|_| io::Error::other("read-ahead thread panicked"))?;
            if r.is_ok() && a.part == part && a.at <= at && at + len as u64 <= a.at + a.len as u64 {
                // The span lies inside the one read ahead, whose blocks start at block_start(a.at).
                std::mem::swap(buf, &mut done);
                found = Some((at - block_start(a.at)) as usize);
            }
            spare = done;
        }
        let offset = match found {
            Some(offset) => offset,
            None => {
                read_blocks(&file, at, len, buf)?;
                (at - block_start(at)) as usize
            }
        };
        self.start_ahead(part, file, at + len as u64, len, end, spare);
        Ok(offset)
    }

    /// Start reading `len` bytes at `at` (cut at `end`) into `buf` on a background thread; a
    /// thread that cannot be started just means no read-ahead.
    fn start_ahead(&self, part: usize, file: Arc<File>, at: u64, len: usize, end: u64, mut buf: AlignedBuf) {
        let len = (end.saturating_sub(at)).min(len as u64) as usize;
        if len == 0 {
            return;
        }
        let spawned = std::thread::Builder::new().name("colibri-read".into()).spawn(move || {
            let r = read_blocks(&file, at, len, &mut buf);
            (buf, r)
        });
        if let (Ok(thread), Ok(mut slot)) = (spawned, self.ahead.lock()) {
            *slot = Some(Ahead { part, at, len, thread });
        }
    }
}

impl Drop for DirectReader {
    /// A read still running ahead is waited for (its descriptor and buffer are its own).
    fn drop(&mut self) {
        if let Some(a) = self.ahead.get_mut().ok().and_then(|a| a.take()) {
            let _ = a.thread.join();
        }
    }
}
