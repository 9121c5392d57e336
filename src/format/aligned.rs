//! A reusable byte buffer whose contents start on a 4 KiB boundary: what direct I/O
//! (`O_DIRECT`) needs of the memory it reads into or writes from. The converter's writer
//! (`chunked`) and its GGUF reader use it.

/// Alignment of the contents (covers every logical block size in use).
pub const ALIGN: usize = 4096;

/// Whether model files are written (`FileWriter`: `convert`, `quantize`, `dequantize`) and
/// GGUF tensors read with direct I/O where the filesystem allows it: yes unless
/// `COLIBRI_DIRECT_IO` is `off`, `0`, `false` or `no` (any case).
pub fn direct_io_wanted() -> bool {
    std::env::var("COLIBRI_DIRECT_IO")
        .map(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "off" | "0" | "false" | "no"))
        .unwrap_or(true)
}

/// `len` bytes starting on an `ALIGN` boundary of an owned allocation.
#[derive(Default)]
pub struct AlignedBuf {
    mem: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// A buffer of `len` zero bytes.
    pub fn with_len(len: usize) -> AlignedBuf {
        let mut b = AlignedBuf::default();
        b.set_len(len);
        b
    }

    /// Make the contents `len` bytes long; they keep their values only while `len` fits the
    /// current allocation (a larger one starts over, zeroed).
    pub fn set_len(&mut self, len: usize) {
        if self.mem.is_empty() || self.start + len > self.mem.len() {
            self.mem = vec![0u8; len + ALIGN];
            self.start = self.mem.as_ptr().align_offset(ALIGN);
        }
        self.len = len;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bytes(&self) -> &[u8] {
        &self.mem[self.start..self.start + self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.mem[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contents_start_on_a_page_and_keep_their_bytes_while_they_fit() {
        let mut b = AlignedBuf::with_len(100);
        assert_eq!(b.bytes().as_ptr() as usize % ALIGN, 0);
        b.bytes_mut()[99] = 7;
        b.set_len(50);
        b.set_len(100);
        assert_eq!(b.bytes()[99], 7, "shrinking and regrowing inside the allocation keeps the bytes");
        b.set_len(1 << 20);
        assert_eq!(b.len(), 1 << 20);
        assert_eq!(b.bytes().as_ptr() as usize % ALIGN, 0);
        assert!(b.bytes().iter().all(|&x| x == 0));
    }
}
