//! Truncation and bit-flip sweeps over a valid file. Every prefix of the file (each byte of the
//! header, metadata, table and string table, and several hundred cuts inside the data, including
//! both sides of every tensor and expert boundary) must be rejected with mmap and with a plain
//! read — never a panic, never SIGBUS. A second sweep also rewrites file_size to the cut length
//! (a "fixed-up" truncated copy), so the deeper section and data checks are what must catch it.
//! The bit-flip sweep flips bits of the header + table region; every outcome must be Ok or Err
//! without a panic, and flips outside the (unchecksummed) metadata values must all be detected.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::Instant;

/// Cut points: every offset of [0, data_offset), then offsets around every tensor and expert
/// boundary, then an even spread over the data, then the last byte.
fn cut_offsets(layout: &Layout, len: usize) -> Vec<usize> {
    let data = layout.header.data_offset as usize;
    let mut v: Vec<usize> = (0..data).collect();
    let mut marks = Vec::new();
    for t in &layout.tensors {
        marks.push(t.data_offset as usize);
        marks.push(t.end() as usize);
        if t.expert_stride > 0 {
            let n = t.shape[0] as usize;
            for e in 1..n {
                let start = t.data_offset as usize + e * t.expert_stride as usize;
                marks.push(start);
                marks.push(start - t.expert_stride as usize + t.unit_bytes() as usize);
            }
        }
    }
    for m in marks {
        for d in [-65i64, -64, -63, -8, -1, 0, 1, 2, 63, 64, 65] {
            let o = m as i64 + d;
            if o >= data as i64 && (o as usize) < len {
                v.push(o as usize);
            }
        }
    }
    let spread = 400;
    v.extend((0..spread).map(|i| data + (len - data) * i / spread));
    v.push(len - 1);
    v.sort_unstable();
    v.dedup();
    v
}

/// Open `path` in `mmap` mode, turning a panic into a test failure that names the case.
fn open_no_panic(path: &Path, mmap: bool, case: &str) -> colibri::Result<colibri::Model> {
    catch_unwind(AssertUnwindSafe(|| open(path, mmap))).unwrap_or_else(|_| panic!("open panicked: {case}"))
}

/// Run the cut sweep; `fixup` rewrites file_size to the cut length. Returns error-code counts.
/// The cuts are visited in increasing order and the scratch file only ever grows (each step
/// appends the bytes up to the next cut), so no step truncates a file: on ext4, closing a file
/// that was truncated to zero forces a flush, which made a rewrite-per-cut sweep I/O-bound.
fn sweep(bytes: &[u8], layout: &Layout, fixup: bool) -> (usize, BTreeMap<&'static str, usize>) {
    let offsets = cut_offsets(layout, bytes.len());
    let s = Scratch::new();
    let path = s.write("cut.colibri", &[]);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let mut codes = BTreeMap::new();
    let mut written = 0usize;
    for &cut in &offsets {
        file.write_all_at(&bytes[written..cut], written as u64).unwrap();
        written = cut;
        if fixup && cut >= H_FILE_SIZE + 8 {
            file.write_all_at(&(cut as u64).to_le_bytes(), H_FILE_SIZE as u64).unwrap();
        }
        for (mode, mmap) in MODES {
            let case = format!("cut at {cut} of {}, {mode}, fixup {fixup}", bytes.len());
            match open_no_panic(&path, mmap, &case) {
                Ok(_) => panic!("truncated file accepted: {case}"),
                Err(e) => *codes.entry(e.code()).or_insert(0) += 1,
            }
        }
        if fixup && cut >= H_FILE_SIZE + 8 {
            // Restore the real field before the next bytes are appended.
            file.write_all_at(&bytes[H_FILE_SIZE..H_FILE_SIZE + 8], H_FILE_SIZE as u64).unwrap();
        }
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), *offsets.last().unwrap() as u64);
    (offsets.len(), codes)
}

#[test]
fn every_truncated_prefix_is_rejected() {
    let t0 = Instant::now();
    let (n, codes) = sweep(base(), base_layout(), false);
    let data = base_layout().header.data_offset;
    eprintln!(
        "truncation sweep: {n} cuts ({data} in [0, data_offset), {} inside the data) × 2 modes, all rejected \
         in {:.2} s: {codes:?}",
        n - data as usize,
        t0.elapsed().as_secs_f64()
    );
    assert!(n > data as usize + 300);
    // Below the header size the file is too small; beyond it the header's file_size disagrees.
    assert_eq!(codes.get("file_too_small"), Some(&(2 * 256)));
    assert_eq!(codes.values().sum::<usize>(), 2 * n);
}

#[test]
fn every_truncated_prefix_of_a_quantised_file_is_rejected() {
    // The q8/q4 file: its records carry group sizes and block byte lengths, its stacks q4 experts.
    let t0 = Instant::now();
    for fixup in [false, true] {
        let (n, codes) = sweep(quant_base(), quant_layout(), fixup);
        eprintln!(
            "quantised truncation sweep (fixup {fixup}): {n} cuts × 2 modes, all rejected in {:.2} s: {codes:?}",
            t0.elapsed().as_secs_f64()
        );
        assert_eq!(codes.values().sum::<usize>(), 2 * n);
        if fixup {
            assert!(codes.get("truncated_data").copied().unwrap_or(0) > 0, "{codes:?}");
        }
    }
}

#[test]
fn every_truncated_prefix_with_a_fixed_up_file_size_is_rejected() {
    let t0 = Instant::now();
    let (n, codes) = sweep(base(), base_layout(), true);
    eprintln!(
        "truncation sweep with file_size = cut: {n} cuts × 2 modes, all rejected in {:.2} s: {codes:?}",
        t0.elapsed().as_secs_f64()
    );
    // The deeper checks did the work: sections and tensors past the end of the file.
    assert!(codes.get("out_of_bounds").copied().unwrap_or(0) > 0, "{codes:?}");
    assert!(codes.get("truncated_data").copied().unwrap_or(0) > 0, "{codes:?}");
    assert_eq!(codes.get("truncated").copied().unwrap_or(0), 0, "file_size was fixed up: {codes:?}");
}

/// Region of the file holding `offset` (for the bit-flip report).
fn region(l: &Layout, offset: usize) -> &'static str {
    let h = &l.header;
    let o = offset as u64;
    if o < 256 {
        "header"
    } else if o < h.metadata_offset + 8 + 32 * l.meta_keys.len() as u64 {
        "metadata directory"
    } else if o < h.metadata_offset + h.metadata_size {
        "metadata keys/values"
    } else if o < h.table_offset {
        "metadata padding"
    } else if o < h.strings_offset {
        if (o - h.table_offset) % 96 >= R_CHECKSUM as u64 && (o - h.table_offset) % 96 < R_CHECKSUM as u64 + 8 {
            "table checksums"
        } else {
            "table"
        }
    } else if o < h.strings_offset + h.strings_size {
        "strings"
    } else {
        "padding before data"
    }
}

#[derive(Default, Debug)]
struct FlipCounts {
    flips: usize,
    rejected_at_open: usize,
    rejected_by_verify: usize,
    accepted: usize,
}

/// Flip `bits_of(offset)` at every offset of [0, data_offset), opening in `mmap` mode after each.
fn flip_sweep(
    bytes: &[u8],
    layout: &Layout,
    mmap: bool,
    bits_of: impl Fn(usize) -> Vec<u8>,
) -> (BTreeMap<&'static str, FlipCounts>, Vec<(usize, String)>) {
    let s = Scratch::new();
    let path = s.write("flip.colibri", bytes);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let mut by_region: BTreeMap<&'static str, FlipCounts> = BTreeMap::new();
    let mut accepted = Vec::new();
    for off in 0..layout.header.data_offset as usize {
        for bit in bits_of(off) {
            let case = format!("bit {bit} of byte {off} ({}), mmap {mmap}", region(layout, off));
            file.write_at(&[bytes[off] ^ (1 << bit)], off as u64).unwrap();
            let c = by_region.entry(region(layout, off)).or_default();
            c.flips += 1;
            match open_no_panic(&path, mmap, &case) {
                Err(_) => c.rejected_at_open += 1,
                Ok(model) => match catch_unwind(AssertUnwindSafe(|| model.verify())) {
                    Err(_) => panic!("verify panicked: {case}"),
                    Ok(Err(_)) => c.rejected_by_verify += 1,
                    Ok(Ok(())) => {
                        c.accepted += 1;
                        accepted.push((off, case));
                    }
                },
            }
            file.write_at(&bytes[off..off + 1], off as u64).unwrap();
        }
    }
    (by_region, accepted)
}

fn report_flips(label: &str, by_region: &BTreeMap<&'static str, FlipCounts>, accepted: &[(usize, String)], secs: f64) {
    let total: usize = by_region.values().map(|c| c.flips).sum();
    let open: usize = by_region.values().map(|c| c.rejected_at_open).sum();
    let verify: usize = by_region.values().map(|c| c.rejected_by_verify).sum();
    eprintln!(
        "bit-flip sweep ({label}): {total} flips in {secs:.2} s: {open} rejected at open, {verify} by verify, \
         {} accepted",
        accepted.len()
    );
    let directory: Vec<&str> =
        accepted.iter().filter(|(_, c)| c.contains("(metadata directory)")).map(|(_, c)| c.as_str()).collect();
    if !directory.is_empty() {
        eprintln!("  accepted metadata-directory flips (first 8): {:?}", &directory[..directory.len().min(8)]);
    }
    for (r, c) in by_region {
        eprintln!(
            "  {r:22} flips {:6}  open {:6}  verify {:5}  accepted {:5}",
            c.flips, c.rejected_at_open, c.rejected_by_verify, c.accepted
        );
    }
}

/// What must be detected: everything. The prefix checksum (header flag bit 0) covers every byte
/// before the data section, so each flip — in the header, the metadata (a digit of the config, a
/// letter of the chat template), the table and its checksum fields, the names or the padding — is
/// refused when the file is opened, whether or not a structural check would have seen it.
fn assert_detected(by_region: &BTreeMap<&'static str, FlipCounts>, accepted: &[(usize, String)]) {
    assert!(accepted.is_empty(), "{} flips accepted, e.g. {:?}", accepted.len(), &accepted[..accepted.len().min(4)]);
    for (r, c) in by_region {
        assert_eq!(c.rejected_at_open, c.flips, "region {r}: {c:?}");
    }
}

#[test]
fn bit_flips_in_header_and_table_never_panic_mmap() {
    // All 8 bits of every byte before the data.
    let t0 = Instant::now();
    let (by_region, accepted) = flip_sweep(base(), base_layout(), true, |_| (0..8).collect());
    report_flips("mmap, 8 bits per byte", &by_region, &accepted, t0.elapsed().as_secs_f64());
    assert_detected(&by_region, &accepted);
}

#[test]
fn bit_flips_in_header_and_table_never_panic_read() {
    // All 8 bits of every byte before the data, reading the file instead of mapping it.
    let t0 = Instant::now();
    let (by_region, accepted) = flip_sweep(base(), base_layout(), false, |_| (0..8).collect());
    report_flips("read, 8 bits per byte", &by_region, &accepted, t0.elapsed().as_secs_f64());
    assert_detected(&by_region, &accepted);
}

#[test]
fn bit_flips_in_a_quantised_file_never_panic() {
    // All 8 bits of every byte of the q8/q4 file's header, metadata, table (dtype ids 16/17,
    // group sizes) and names; one bit per byte of the zero padding before the data.
    let t0 = Instant::now();
    let l = quant_layout();
    let names_end = (l.header.strings_offset + l.header.strings_size) as usize;
    let bits = |off: usize| if off < names_end { (0..8).collect() } else { vec![0] };
    let (by_region, accepted) = flip_sweep(quant_base(), l, true, bits);
    report_flips(
        "quantised, mmap, 8 bits per byte up to the data padding",
        &by_region,
        &accepted,
        t0.elapsed().as_secs_f64(),
    );
    assert_detected(&by_region, &accepted);
}
