//! The malformed-file suite: one crafted file per class of docs/reliability.md (items 1–22) that
//! applies to float dtypes, each opened with mmap and with a plain read, asserting the error class
//! (`Error::code`) and that the message names the offending field or tensor. Classes that need
//! the full data scan (NaN/Inf outside norms, checksums, padding inside the data) go through
//! `Model::verify`. Each file is the valid tiny model of `common` with a few bytes patched (or,
//! where the class is about content the writer controls, a file written with an altered plan).

mod common;

use colibri::format::{DType, MetaKind, PlannedTensor, TensorKind, MAX_METADATA_SIZE, MAX_STRINGS_SIZE};
use colibri::model::tensor_specs;
use common::*;
use std::path::Path;
use std::time::Duration;

/// The valid base file with `f` applied.
fn patched(f: impl FnOnce(&mut Vec<u8>, &Layout)) -> Vec<u8> {
    let mut b = base().to_vec();
    f(&mut b, base_layout());
    b
}

/// Patch a u32 field of the record of tensor `name`.
fn rec32(name: &str, field: usize, v: u32) -> Vec<u8> {
    patched(|b, l| put_u32(b, l.rec(name) + field, v))
}

/// Patch a u64 field of the record of tensor `name`.
fn rec64(name: &str, field: usize, v: u64) -> Vec<u8> {
    patched(|b, l| put_u64(b, l.rec(name) + field, v))
}

/// A file written from a spec derived from the tiny config.
fn spec_file(f: impl FnOnce(&mut FileSpec)) -> Vec<u8> {
    let mut spec = FileSpec::new(&tiny_config(), DType::F32);
    f(&mut spec);
    build(&spec)
}

/// A file whose "config" entry holds the tiny config with `f` applied to its JSON.
fn config_json_file(f: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let mut v = serde_json::to_value(tiny_config()).unwrap();
    f(&mut v);
    spec_file(|s| {
        s.set_meta("config", &serde_json::to_vec(&v).unwrap());
    })
}

/// Set element `index` (f32) of tensor `name` to `value`.
fn set_f32(b: &mut [u8], l: &Layout, name: &str, index: usize, value: f32) {
    let at = l.data(name) + 4 * index;
    b[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

/// Open `bytes` in both modes: the error must be one of `codes` and mention every needle.
fn expect_open_err_any(case: &str, bytes: &[u8], codes: &[&str], needles: &[&str]) {
    let s = Scratch::new();
    let path = s.write("case.colibri", bytes);
    for (mode, mmap) in MODES {
        let e = open(&path, mmap).err().unwrap_or_else(|| panic!("[{case}] ({mode}) opened successfully"));
        let msg = e.to_string();
        assert!(codes.contains(&e.code()), "[{case}] ({mode}) error class {} not in {codes:?}: {msg}", e.code());
        for n in needles {
            assert!(msg.contains(n), "[{case}] ({mode}) message {msg:?} does not mention {n:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The base file itself is valid (every case below is a deviation from it).

#[test]
fn base_file_is_valid() {
    let s = Scratch::new();
    let path = s.write("ok.colibri", base());
    for (mode, mmap) in MODES {
        let m = open(&path, mmap).unwrap_or_else(|e| panic!("({mode}) base file rejected: {e}"));
        m.verify().unwrap_or_else(|e| panic!("({mode}) base file fails verify: {e}"));
        assert_eq!(m.config(), &tiny_config());
        assert_eq!(m.parsed().tensors.len(), tensor_specs(&tiny_config()).len());
        assert_eq!(m.tokenizer_json(), Some(TOKENIZER_JSON));
        assert_eq!(m.chat_template(), Some(CHAT_TEMPLATE));
        assert_eq!(m.mapping().is_mapped(), mmap);
    }
    // The padding the padding cases rely on exists.
    let l = base_layout();
    assert!(l.padding_after("layers.0.ffn_norm").is_some());
    assert!(l.header.data_offset > l.header.strings_offset + l.header.strings_size);
    assert!(l.record("layers.0.moe.experts.gate").expert_stride > l.record("layers.0.moe.experts.gate").unit_bytes());
}

#[test]
fn base_file_in_f16_and_bf16_is_valid() {
    for dtype in [DType::F16, DType::BF16] {
        let bytes = build(&FileSpec::new(&tiny_config(), dtype));
        let s = Scratch::new();
        let path = s.write("ok.colibri", &bytes);
        for (mode, mmap) in MODES {
            let m = open(&path, mmap).unwrap_or_else(|e| panic!("({dtype}, {mode}) rejected: {e}"));
            m.verify().unwrap_or_else(|e| panic!("({dtype}, {mode}) fails verify: {e}"));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Empty file, or shorter than the fixed header.

#[test]
fn c01_empty_file() {
    expect_open_err("empty file", &[], "file_too_small", &["0 bytes", "256"]);
}

#[test]
fn c01_hundred_byte_file() {
    expect_open_err("100-byte file", &base()[..100], "file_too_small", &["100 bytes", "256"]);
}

#[test]
fn c01_one_byte_short_of_the_header() {
    expect_open_err("255-byte file", &base()[..255], "file_too_small", &["255 bytes"]);
}

#[test]
fn c01_header_alone() {
    let size = base_layout().header.file_size.to_string();
    expect_open_err("header only", &base()[..HDR], "truncated", &["truncated", &size, "256"]);
}

// ---------------------------------------------------------------------------------------------
// 2. Wrong magic.

#[test]
fn c02_wrong_magic() {
    let b = patched(|b, _| b[H_MAGIC..H_MAGIC + 4].copy_from_slice(b"GGUF"));
    expect_open_err("magic GGUF", &b, "bad_magic", &["GGUF", "COLI"]);
}

#[test]
fn c02_lower_case_magic() {
    let b = patched(|b, _| b[H_MAGIC..H_MAGIC + 4].copy_from_slice(b"coli"));
    expect_open_err("magic coli", &b, "bad_magic", &["coli", "COLI"]);
}

#[test]
fn c02_text_file() {
    let text = "This is not a model file at all. ".repeat(20);
    expect_open_err("text file", text.as_bytes(), "bad_magic", &["magic"]);
}

// ---------------------------------------------------------------------------------------------
// 3. Version 0, a future version.

#[test]
fn c03_version_0() {
    let b = patched(|b, _| put_u32(b, H_VERSION, 0));
    expect_open_err("version 0", &b, "unsupported_version", &["version 0"]);
}

#[test]
fn c03_version_2() {
    let b = patched(|b, _| put_u32(b, H_VERSION, 2));
    expect_open_err("version 2", &b, "unsupported_version", &["version 2", "version 1"]);
}

#[test]
fn c03_version_max() {
    let b = patched(|b, _| put_u32(b, H_VERSION, u32::MAX));
    expect_open_err("version u32::MAX", &b, "unsupported_version", &["4294967295"]);
}

// ---------------------------------------------------------------------------------------------
// 4. Header / metadata sizes larger than the file or than a sane cap; the other fixed-header
//    fields (header_size, record_size, flags, reserved bytes, section offsets, file_size).

#[test]
fn c04_header_size_128() {
    let b = patched(|b, _| put_u32(b, H_HEADER_SIZE, 128));
    expect_open_err("header_size 128", &b, "bad_header", &["header_size", "128"]);
}

#[test]
fn c04_header_size_512() {
    let b = patched(|b, _| put_u32(b, H_HEADER_SIZE, 512));
    expect_open_err("header_size 512", &b, "bad_header", &["header_size", "512"]);
}

#[test]
fn c04_record_size_wrong() {
    let b = patched(|b, _| put_u32(b, H_RECORD_SIZE, 64));
    expect_open_err("record_size 64", &b, "bad_header", &["record_size", "64"]);
}

#[test]
fn c04_flags_set() {
    let b = patched(|b, _| put_u32(b, H_FLAGS, 1 << 7));
    expect_open_err("flags", &b, "bad_header", &["flags", "128"]);
}

#[test]
fn c04_reserved_header_byte() {
    let b = patched(|b, _| b[0xF0] = 1);
    expect_open_err("reserved header byte", &b, "non_zero_padding", &["reserved header byte", "240"]);
}

#[test]
fn c04_metadata_size_past_the_file() {
    let len = base().len() as u64;
    let b = patched(|b, _| put_u64(b, H_METADATA_SIZE, len));
    expect_open_err("metadata_size = file size", &b, "out_of_bounds", &["metadata section", &len.to_string()]);
}

#[test]
fn c04_metadata_size_over_cap() {
    let b = patched(|b, _| put_u64(b, H_METADATA_SIZE, MAX_METADATA_SIZE + 1));
    expect_open_err("metadata_size > cap", &b, "too_large", &["metadata section", "268435457"]);
}

#[test]
fn c04_metadata_size_u64_max() {
    let b = patched(|b, _| put_u64(b, H_METADATA_SIZE, u64::MAX));
    expect_open_err("metadata_size u64::MAX", &b, "too_large", &["metadata section"]);
}

#[test]
fn c04_metadata_offset_not_256() {
    let b = patched(|b, _| put_u64(b, H_METADATA_OFFSET, 0));
    expect_open_err("metadata_offset 0", &b, "layout", &["metadata section", "256"]);
}

#[test]
fn c04_strings_size_past_the_file() {
    let len = base().len() as u64;
    let b = patched(|b, _| put_u64(b, H_STRINGS_SIZE, len));
    expect_open_err("strings_size = file size", &b, "out_of_bounds", &["string table"]);
}

#[test]
fn c04_strings_size_over_cap() {
    let b = patched(|b, _| put_u64(b, H_STRINGS_SIZE, MAX_STRINGS_SIZE + 1));
    expect_open_err("strings_size > cap", &b, "too_large", &["string table", "67108865"]);
}

#[test]
fn c04_table_offset_wrong() {
    let b = patched(|b, l| put_u64(b, H_TABLE_OFFSET, l.header.table_offset + 8));
    expect_open_err("table_offset + 8", &b, "layout", &["tensor table"]);
}

#[test]
fn c04_strings_offset_wrong() {
    let b = patched(|b, l| put_u64(b, H_STRINGS_OFFSET, l.header.strings_offset - 96));
    expect_open_err("strings_offset - 96", &b, "layout", &["string table"]);
}

#[test]
fn c04_data_offset_wrong() {
    let b = patched(|b, l| put_u64(b, H_DATA_OFFSET, l.header.data_offset + 4096));
    expect_open_err("data_offset + 4096", &b, "layout", &["data section"]);
}

#[test]
fn c04_file_size_field_larger_than_the_file() {
    let b = patched(|b, l| put_u64(b, H_FILE_SIZE, l.header.file_size + 1));
    let want = (base().len() + 1).to_string();
    expect_open_err("file_size + 1", &b, "truncated", &["truncated", &want]);
}

#[test]
fn c04_file_size_field_smaller_than_the_file() {
    let b = patched(|b, l| put_u64(b, H_FILE_SIZE, l.header.file_size - 1));
    expect_open_err("file_size - 1", &b, "trailing_bytes", &["trailing bytes"]);
}

// ---------------------------------------------------------------------------------------------
// 5. Tensor count / metadata entry count that overflows or whose table runs past the file.

#[test]
fn c05_tensor_count_0() {
    // Both counts consistent (tensor_count 0, table_size 0), so only the count is wrong.
    let b = patched(|b, _| {
        put_u32(b, H_TENSOR_COUNT, 0);
        put_u64(b, H_TABLE_SIZE, 0);
    });
    let s = Scratch::new();
    let path = s.write("case.colibri", &b);
    for (mode, mmap) in MODES {
        let e = open(&path, mmap).expect_err("tensor_count 0 accepted");
        let msg = e.to_string();
        assert!(matches!(e.code(), "bad_header" | "too_large"), "({mode}) code {} ({msg})", e.code());
        assert!(msg.contains("tensor") && msg.contains("count"), "({mode}) message {msg:?} does not name the field");
        // A count of 0 is below the range; the message must not claim it is above a limit.
        assert!(!msg.contains("above the limit"), "({mode}) misleading message for tensor_count 0: {msg:?}");
    }
}

#[test]
fn c05_tensor_count_over_cap() {
    let n = 1_000_001u32;
    let b = patched(|b, _| {
        put_u32(b, H_TENSOR_COUNT, n);
        put_u64(b, H_TABLE_SIZE, u64::from(n) * 96);
    });
    expect_open_err("tensor_count 1_000_001", &b, "too_large", &["tensor count", "1000001"]);
}

#[test]
fn c05_tensor_count_u32_max() {
    let b = patched(|b, _| put_u32(b, H_TENSOR_COUNT, u32::MAX));
    expect_open_err("tensor_count u32::MAX", &b, "too_large", &["tensor count", "4294967295"]);
}

#[test]
fn c05_tensor_table_past_the_file() {
    // tensor_count at the cap and table_size consistent with it: the table runs past the file.
    let b = patched(|b, _| {
        put_u32(b, H_TENSOR_COUNT, 1_000_000);
        put_u64(b, H_TABLE_SIZE, 96_000_000);
    });
    expect_open_err("table past EOF", &b, "out_of_bounds", &["tensor table", "96000000"]);
}

#[test]
fn c05_tensor_count_disagrees_with_table_size() {
    let b = patched(|b, l| put_u32(b, H_TENSOR_COUNT, l.header.tensor_count + 1));
    expect_open_err("tensor_count + 1", &b, "layout", &["tensor table size"]);
}

#[test]
fn c05_table_size_disagrees_with_tensor_count() {
    let b = patched(|b, l| put_u64(b, H_TABLE_SIZE, l.header.table_size + 96));
    expect_open_err("table_size + 96", &b, "layout", &["tensor table size"]);
}

#[test]
fn c05_metadata_entry_count_over_cap() {
    let b = patched(|b, l| put_u32(b, l.meta + M_COUNT, 65));
    expect_open_err("65 metadata entries", &b, "too_large", &["metadata entry count", "65", "64"]);
}

#[test]
fn c05_metadata_entry_count_u32_max() {
    let b = patched(|b, l| put_u32(b, l.meta + M_COUNT, u32::MAX));
    expect_open_err("u32::MAX metadata entries", &b, "too_large", &["metadata entry count"]);
}

#[test]
fn c05_metadata_directory_past_the_section() {
    let l = base_layout();
    assert!(l.meta_len < 8 + 64 * 32, "precondition: 64 entries do not fit the section");
    let b = patched(|b, l| put_u32(b, l.meta + M_COUNT, 64));
    expect_open_err("64 metadata entries", &b, "metadata", &["<directory>", "64 entries"]);
}

#[test]
fn c05_metadata_entry_count_one_too_many() {
    // The fifth "entry" is read from the key/value bytes: some field of it must be rejected.
    let b = patched(|b, l| put_u32(b, l.meta + M_COUNT, l.meta_keys.len() as u32 + 1));
    let s = Scratch::new();
    let path = s.write("case.colibri", &b);
    for (mode, mmap) in MODES {
        let e = open(&path, mmap).expect_err("extra metadata entry accepted");
        assert!(matches!(e.code(), "metadata" | "out_of_bounds"), "({mode}) {} {e}", e.code());
    }
}

#[test]
fn c05_metadata_reserved_field() {
    let l = base_layout();
    let b = patched(|b, l| put_u32(b, l.meta + M_RESERVED, 1));
    // The offset reported must be the file offset of the field (256 + 4), not the section offset.
    let at = (l.meta + M_RESERVED).to_string();
    expect_open_err("metadata reserved", &b, "non_zero_padding", &["metadata reserved field", &at]);
}

// ---------------------------------------------------------------------------------------------
// 6. String lengths (names, JSON blobs) past the file or past a cap.

#[test]
fn c06_name_offset_past_the_string_table() {
    let l = base_layout();
    let i = l.index("layers.0.attn.q").to_string();
    let b = rec32("layers.0.attn.q", R_NAME_OFFSET, l.header.strings_size as u32);
    expect_open_err("name offset = strings_size", &b, "bad_tensor_name", &["past the string table", &i]);
}

#[test]
fn c06_name_runs_past_the_string_table() {
    let l = base_layout();
    let b = patched(|b, l| {
        let r = l.rec("lm_head");
        put_u32(b, r + R_NAME_OFFSET, l.header.strings_size as u32 - 3);
        put_u32(b, r + R_NAME_LEN, 7);
    });
    let i = format!("#{}", l.index("lm_head"));
    expect_open_err("name straddles end", &b, "bad_tensor_name", &["past the string table", &i]);
}

#[test]
fn c06_name_offset_u32_max() {
    let b = rec32("tok_embeddings", R_NAME_OFFSET, u32::MAX);
    expect_open_err("name offset u32::MAX", &b, "bad_tensor_name", &["past the string table"]);
}

#[test]
fn c06_name_len_over_cap() {
    // 257 bytes from offset 0 lie inside the string table: only the cap is violated.
    let l = base_layout();
    assert!(l.header.strings_size > 257);
    let b = patched(|b, l| {
        let r = l.rec("layers.0.attn.k");
        put_u32(b, r + R_NAME_OFFSET, 0);
        put_u32(b, r + R_NAME_LEN, 257);
    });
    expect_open_err("name 257 bytes", &b, "bad_tensor_name", &["longer than 256"]);
}

#[test]
fn c06_name_len_u32_max() {
    let b = rec32("layers.0.attn.k", R_NAME_LEN, u32::MAX);
    expect_open_err("name_len u32::MAX", &b, "bad_tensor_name", &["longer than 256"]);
}

#[test]
fn c06_string_table_swallows_padding() {
    // strings_size grown by 16 bytes: data_offset = align4096(strings end) is unchanged, so the
    // string table now ends in 16 NUL bytes of what was padding. The format says the string
    // table holds the names ("UTF-8, no NUL"); a table longer than its names must be rejected.
    let l = base_layout();
    let end = l.header.strings_offset + l.header.strings_size + 16;
    assert!(end <= l.header.data_offset, "precondition: the grown table still ends before the data");
    let b = patched(|b, l| put_u64(b, H_STRINGS_SIZE, l.header.strings_size + 16));
    let s = Scratch::new();
    let path = s.write("case.colibri", &b);
    for (mode, mmap) in MODES {
        let e = open(&path, mmap).err().unwrap_or_else(|| panic!("({mode}) string table with 16 NUL bytes accepted"));
        assert!(e.to_string().contains("string table"), "({mode}) {}: {e}", e.code());
    }
}

#[test]
fn c06_metadata_value_past_the_section() {
    // The limit exceeded is the metadata section's (968 bytes), not the file's: the message must
    // say so (today it says "runs past the end of the file (968 bytes)").
    let l = base_layout();
    let b = patched(|b, l| put_u64(b, l.entry_of("tokenizer") + E_VALUE_LEN, l.meta_len as u64));
    let len = l.meta_len.to_string();
    expect_open_err_any(
        "tokenizer value too long",
        &b,
        &["out_of_bounds", "metadata"],
        &["'tokenizer'", &len, "section"],
    );
}

#[test]
fn c06_metadata_value_offset_overflows() {
    let b = patched(|b, l| put_u64(b, l.entry_of("config") + E_VALUE_OFFSET, u64::MAX - 2));
    expect_open_err_any("config value offset overflow", &b, &["out_of_bounds", "metadata"], &["'config'", "section"]);
}

#[test]
fn c06_metadata_key_past_the_section() {
    let b = patched(|b, l| put_u64(b, l.entry(1) + E_KEY_OFFSET, l.meta_len as u64 - 2));
    expect_open_err("key past section", &b, "metadata", &["<entry 1>", "key runs past"]);
}

#[test]
fn c06_metadata_key_too_long() {
    let b = patched(|b, l| put_u32(b, l.entry(2) + E_KEY_LEN, 65));
    expect_open_err("key 65 bytes", &b, "metadata", &["<entry 2>", "key length 65"]);
}

#[test]
fn c06_metadata_key_empty() {
    let b = patched(|b, l| put_u32(b, l.entry(0) + E_KEY_LEN, 0));
    expect_open_err("empty key", &b, "metadata", &["<entry 0>", "key length 0"]);
}

#[test]
fn c06_metadata_unknown_value_kind() {
    let b = patched(|b, l| put_u32(b, l.entry_of("provenance") + E_KIND, 9));
    expect_open_err("kind 9", &b, "metadata", &["provenance", "unknown value kind 9"]);
}

// ---------------------------------------------------------------------------------------------
// 7. Tensor names that are empty, not UTF-8, too long (above), or contain NUL.

#[test]
fn c07_name_empty() {
    let l = base_layout();
    let i = format!("#{}", l.index("layers.1.attn.o"));
    let b = rec32("layers.1.attn.o", R_NAME_LEN, 0);
    expect_open_err("empty name", &b, "bad_tensor_name", &["empty name", &i]);
}

#[test]
fn c07_name_not_utf8() {
    let l = base_layout();
    let i = format!("#{}", l.index("layers.0.attn.q"));
    let b = patched(|b, l| {
        let at = l.name_at(b, "layers.0.attn.q") + 3;
        b[at] = 0xFF;
    });
    expect_open_err("name not UTF-8", &b, "bad_tensor_name", &["not UTF-8", &i]);
}

#[test]
fn c07_name_contains_nul() {
    let l = base_layout();
    let i = format!("#{}", l.index("norm"));
    let b = patched(|b, l| {
        let at = l.name_at(b, "norm") + 2;
        b[at] = 0;
    });
    expect_open_err("name with NUL", &b, "bad_tensor_name", &["contains NUL", &i]);
}

#[test]
fn c07_metadata_key_not_utf8() {
    let b = patched(|b, l| {
        let at = l.meta + get_u64(b, l.entry_of("provenance") + E_KEY_OFFSET) as usize;
        b[at] = 0xC3; // a lead byte followed by ASCII: invalid UTF-8
    });
    expect_open_err("key not UTF-8", &b, "metadata", &["<entry 3>", "not UTF-8"]);
}

#[test]
fn c07_metadata_key_contains_nul() {
    let b = patched(|b, l| {
        let at = l.meta + get_u64(b, l.entry_of("chat_template") + E_KEY_OFFSET) as usize + 4;
        b[at] = 0;
    });
    expect_open_err("key with NUL", &b, "metadata", &["<entry 2>", "NUL"]);
}

// ---------------------------------------------------------------------------------------------
// 8. Duplicate tensor names (and duplicate metadata keys).

#[test]
fn c08_duplicate_name_by_renaming() {
    // "layers.0.attn.v" → "layers.0.attn.k" (same length, string table unchanged in size).
    let b = patched(|b, l| {
        let at = l.name_at(b, "layers.0.attn.v") + "layers.0.attn.".len();
        b[at] = b'k';
    });
    expect_open_err("duplicate by rename", &b, "duplicate_tensor", &["layers.0.attn.k"]);
}

#[test]
fn c08_duplicate_name_by_shared_string() {
    // Two records pointing at the same name bytes.
    let b = patched(|b, l| {
        let src = l.rec("tok_embeddings");
        let dst = l.rec("lm_head");
        let (off, len) = (get_u32(b, src + R_NAME_OFFSET), get_u32(b, src + R_NAME_LEN));
        put_u32(b, dst + R_NAME_OFFSET, off);
        put_u32(b, dst + R_NAME_LEN, len);
    });
    expect_open_err("duplicate by shared name", &b, "duplicate_tensor", &["tok_embeddings"]);
}

#[test]
fn c08_duplicate_metadata_key() {
    let b = spec_file(|s| {
        let dup = s.meta[0].clone();
        s.meta.push(dup);
    });
    expect_open_err("duplicate config key", &b, "metadata", &["config", "duplicate key"]);
}

// ---------------------------------------------------------------------------------------------
// 9. Unknown dtype id (float ids 3..=15 reserved; 16 q8 and 17 q4 known, 18.. reserved).

#[test]
fn c09_dtype_3() {
    let b = rec32("layers.0.attn.q", R_DTYPE, 3);
    expect_open_err("dtype 3", &b, "unknown_dtype", &["layers.0.attn.q", "dtype id 3"]);
}

#[test]
fn c09_dtype_20_the_first_unknown_block_type() {
    let b = rec32("layers.1.moe.experts.down", R_DTYPE, 20);
    expect_open_err("dtype 20", &b, "unknown_dtype", &["layers.1.moe.experts.down", "dtype id 20"]);
}

#[test]
fn c09_dtype_25_an_earlier_q6_kr8_layout_asks_for_conversion_again() {
    let b = rec32("layers.1.moe.experts.down", R_DTYPE, 25);
    expect_open_err(
        "dtype 25",
        &b,
        "unsupported",
        &["layers.1.moe.experts.down", "q6_kr8 in an earlier build's unit layout", "colibri convert"],
    );
}

#[test]
fn c09_dtype_100() {
    let b = rec32("layers.0.attn.o", R_DTYPE, 100);
    expect_open_err("dtype 100", &b, "unknown_dtype", &["layers.0.attn.o", "dtype id 100"]);
}

#[test]
fn c09_dtype_u32_max() {
    let b = rec32("norm", R_DTYPE, u32::MAX);
    expect_open_err("dtype u32::MAX", &b, "unknown_dtype", &["'norm'", "4294967295"]);
}

// ---------------------------------------------------------------------------------------------
// 10. ndim 0 or above the maximum; a dimension of 0; absurd dimensions; overflowing counts;
//     the other per-record fields (kind, group size, reserved).

#[test]
fn c10_ndim_0() {
    let b = rec32("layers.0.attn.q", R_NDIM, 0);
    expect_open_err("ndim 0", &b, "bad_shape", &["layers.0.attn.q", "ndim 0"]);
}

#[test]
fn c10_ndim_5() {
    let b = rec32("layers.0.attn.q", R_NDIM, 5);
    expect_open_err("ndim 5", &b, "bad_shape", &["layers.0.attn.q", "ndim 5"]);
}

#[test]
fn c10_ndim_u32_max() {
    let b = rec32("tok_embeddings", R_NDIM, u32::MAX);
    expect_open_err("ndim u32::MAX", &b, "bad_shape", &["tok_embeddings", "ndim 4294967295"]);
}

#[test]
fn c10_unused_dimension_not_zero() {
    // q is [16, 16]; declaring ndim 1 leaves dims[1] = 16 in an unused slot.
    let b = rec32("layers.0.attn.q", R_NDIM, 1);
    expect_open_err("unused dim", &b, "bad_shape", &["layers.0.attn.q", "unused dimension holds 16"]);
}

#[test]
fn c10_dimension_0() {
    let b = rec64("layers.0.attn.k", R_DIMS + 8, 0);
    expect_open_err("dim 0", &b, "bad_shape", &["layers.0.attn.k", "dimension is 0"]);
}

#[test]
fn c10_dimension_absurd() {
    let b = rec64("tok_embeddings", R_DIMS, 1 << 41);
    expect_open_err("dim 2^41", &b, "bad_shape", &["tok_embeddings", "2199023255552", "absurd"]);
}

#[test]
fn c10_dimension_u64_max() {
    let b = rec64("layers.0.moe.experts.up", R_DIMS + 16, u64::MAX);
    expect_open_err("dim u64::MAX", &b, "bad_shape", &["layers.0.moe.experts.up", "absurd"]);
}

#[test]
fn c10_element_count_overflows() {
    let b = patched(|b, l| {
        let r = l.rec("layers.0.attn.o");
        put_u64(b, r + R_DIMS, 1 << 40);
        put_u64(b, r + R_DIMS + 8, 1 << 40);
    });
    expect_open_err("2^40 × 2^40", &b, "bad_shape", &["layers.0.attn.o", "overflows"]);
}

#[test]
fn c10_unknown_tensor_kind() {
    let b = rec32("layers.0.attn.q", R_KIND, 7);
    expect_open_err("kind 7", &b, "bad_shape", &["layers.0.attn.q", "unknown tensor kind 7"]);
}

#[test]
fn c10_expert_stack_with_two_dims() {
    let b = rec32("layers.0.attn.q", R_KIND, kind_id(TensorKind::Experts));
    expect_open_err("2-D stack", &b, "bad_shape", &["layers.0.attn.q", "3 dimensions"]);
}

#[test]
fn c10_router_with_three_dims() {
    let b = rec32("layers.0.moe.experts.gate", R_KIND, kind_id(TensorKind::Router));
    expect_open_err("3-D router", &b, "bad_shape", &["layers.0.moe.experts.gate", "2 dimensions"]);
}

#[test]
fn c10_group_size_on_a_float_tensor() {
    let b = rec32("layers.0.attn.v", R_GROUP_SIZE, 32);
    expect_open_err("group size 32", &b, "bad_shape", &["layers.0.attn.v", "group size 32"]);
}

#[test]
fn c10_record_reserved_field() {
    let l = base_layout();
    let b = rec64("layers.0.attn.q", R_RESERVED, 1);
    // The offset reported must be the file offset of the field, not its offset in the record.
    let at = (l.rec("layers.0.attn.q") + R_RESERVED).to_string();
    expect_open_err("record reserved", &b, "non_zero_padding", &["layers.0.attn.q", &at]);
}

// ---------------------------------------------------------------------------------------------
// 11. shape × dtype ≠ the recorded byte length (and a wrong expert stride).

#[test]
fn c11_byte_length_too_long() {
    let b = rec64("layers.0.attn.q", R_BYTE_LENGTH, 1028);
    expect_open_err("byte_length 1028", &b, "byte_length", &["layers.0.attn.q", "1028", "1024"]);
}

#[test]
fn c11_byte_length_zero() {
    let b = rec64("norm", R_BYTE_LENGTH, 0);
    expect_open_err("byte_length 0", &b, "byte_length", &["'norm'", "records 0 bytes", "64"]);
}

#[test]
fn c11_byte_length_of_a_stack() {
    let b = rec64("layers.1.moe.experts.down", R_BYTE_LENGTH, 4 * 4096);
    expect_open_err("stack byte_length", &b, "byte_length", &["layers.1.moe.experts.down", "16384", "12800"]);
}

#[test]
fn c11_dtype_changed_so_length_disagrees() {
    // F32 → F16 keeps the shape: 1024 bytes recorded, 512 needed.
    let b = rec32("layers.0.attn.q", R_DTYPE, DType::F16.id());
    expect_open_err("f16 with f32 length", &b, "byte_length", &["layers.0.attn.q", "1024", "512"]);
}

#[test]
fn c11_expert_stride_aligned_but_wrong() {
    let b = rec64("layers.0.moe.experts.gate", R_EXPERT_STRIDE, 8192);
    expect_open_err("stride 8192", &b, "layout", &["expert stride of 'layers.0.moe.experts.gate'", "8192", "4096"]);
}

#[test]
fn c11_expert_stride_misaligned() {
    let b = rec64("layers.0.moe.experts.gate", R_EXPERT_STRIDE, 4096 + 64);
    // The message must say it is the expert stride (today: "data offset 4160 is not a multiple").
    expect_open_err_any("stride 4160", &b, &["misaligned", "layout"], &["layers.0.moe.experts.gate", "4160", "stride"]);
}

#[test]
fn c11_expert_stride_on_a_plain_tensor() {
    let b = rec64("layers.0.attn.q", R_EXPERT_STRIDE, 4096);
    expect_open_err("plain stride", &b, "layout", &["expert stride of 'layers.0.attn.q'"]);
}

// ---------------------------------------------------------------------------------------------
// 13. Misaligned data offsets.

#[test]
fn c13_plain_tensor_misaligned() {
    let l = base_layout();
    let off = l.data("layers.0.attn.q") as u64 + 4;
    let b = rec64("layers.0.attn.q", R_DATA_OFFSET, off);
    expect_open_err("q + 4", &b, "misaligned", &["layers.0.attn.q", &off.to_string(), "multiple of 64"]);
}

#[test]
fn c13_router_misaligned() {
    let l = base_layout();
    let off = l.data("layers.1.moe.router") as u64 + 32;
    let b = rec64("layers.1.moe.router", R_DATA_OFFSET, off);
    expect_open_err("router + 32", &b, "misaligned", &["layers.1.moe.router", "multiple of 64"]);
}

#[test]
fn c13_expert_stack_misaligned() {
    let l = base_layout();
    let off = l.data("layers.1.moe.experts.up") as u64 + 64;
    let b = rec64("layers.1.moe.experts.up", R_DATA_OFFSET, off);
    expect_open_err("stack + 64", &b, "misaligned", &["layers.1.moe.experts.up", "multiple of 4096"]);
}

// ---------------------------------------------------------------------------------------------
// 14. Offset + length overflowing, or past the end of the file (truncated data).

#[test]
fn c14_offset_plus_length_overflows() {
    // lm_head [2147483647, 2147483649] f32 = 4·(2^62 − 1) = 2^64 − 4 bytes: the shape and the
    // byte length are consistent, but data_offset + byte_length overflows u64.
    let b = patched(|b, l| {
        let r = l.rec("lm_head");
        put_u64(b, r + R_DIMS, 2_147_483_647);
        put_u64(b, r + R_DIMS + 8, 2_147_483_649);
        put_u64(b, r + R_BYTE_LENGTH, u64::MAX - 3);
    });
    expect_open_err("offset + length overflow", &b, "truncated_data", &["lm_head"]);
}

#[test]
fn c14_data_offset_near_u64_max() {
    // The tiling rule pins every offset, so a wild offset is a layout error before any overflow.
    let b = rec64("layers.0.moe.router", R_DATA_OFFSET, !4095u64);
    expect_open_err("router at 2^64 - 4096", &b, "layout", &["layers.0.moe.router"]);
}

#[test]
fn c14_tensor_longer_than_the_file() {
    // lm_head [2^40, 2^21] f32 = 2^63 bytes: consistent shape and length, far past EOF.
    let b = patched(|b, l| {
        let r = l.rec("lm_head");
        put_u64(b, r + R_DIMS, 1 << 40);
        put_u64(b, r + R_DIMS + 8, 1 << 21);
        put_u64(b, r + R_BYTE_LENGTH, 1 << 63);
    });
    expect_open_err("2^63-byte tensor", &b, "truncated_data", &["lm_head", "past the end of the file"]);
}

#[test]
fn c14_last_tensor_cut_with_a_consistent_header() {
    // A truncated copy whose file_size field was "fixed up": the last tensor runs past EOF.
    let l = base_layout();
    let new_len = base().len() - 100;
    let mut b = base()[..new_len].to_vec();
    put_u64(&mut b, H_FILE_SIZE, new_len as u64);
    let end = l.record("lm_head").end().to_string();
    expect_open_err("cut lm_head", &b, "truncated_data", &["lm_head", &end, &new_len.to_string()]);
}

#[test]
fn c14_file_cut_inside_the_data() {
    let l = base_layout();
    let cut = l.data("layers.0.moe.experts.up") + 100;
    let want = [l.header.file_size.to_string(), cut.to_string()];
    expect_open_err("cut in data", &base()[..cut], "truncated", &["truncated", &want[0], &want[1]]);
}

// ---------------------------------------------------------------------------------------------
// 15. Overlapping or out-of-order tensors; gaps; non-zero padding; trailing bytes.

#[test]
fn c15_overlapping_tensors() {
    let l = base_layout();
    let b = rec64("layers.0.attn.k", R_DATA_OFFSET, l.data("layers.0.attn.q") as u64 + 512);
    expect_open_err("k overlaps q", &b, "layout", &["layers.0.attn.k", "overlaps"]);
}

#[test]
fn c15_out_of_order_tensors() {
    // k and v have the same size; swap their data offsets.
    let l = base_layout();
    let (k, v) = (l.data("layers.1.attn.k") as u64, l.data("layers.1.attn.v") as u64);
    let b = patched(|b, l| {
        put_u64(b, l.rec("layers.1.attn.k") + R_DATA_OFFSET, v);
        put_u64(b, l.rec("layers.1.attn.v") + R_DATA_OFFSET, k);
    });
    expect_open_err("k/v swapped", &b, "layout", &["layers.1.attn.k", &v.to_string(), &k.to_string()]);
}

#[test]
fn c15_gap_between_plain_tensors() {
    let l = base_layout();
    let off = l.data("layers.0.attn.o") as u64 + 64;
    let b = rec64("layers.0.attn.o", R_DATA_OFFSET, off);
    expect_open_err("gap before o", &b, "layout", &["layers.0.attn.o", "gap"]);
}

#[test]
fn c15_gap_before_an_expert_stack() {
    let l = base_layout();
    let off = l.data("layers.0.moe.experts.down") as u64 + 4096;
    let b = rec64("layers.0.moe.experts.down", R_DATA_OFFSET, off);
    expect_open_err("gap before down", &b, "layout", &["layers.0.moe.experts.down", "gap"]);
}

#[test]
fn c15_non_zero_padding_between_tensors() {
    let l = base_layout();
    let at = l.padding_after("layers.0.ffn_norm").unwrap() + 17;
    let b = patched(|b, _| b[at] = 0x80);
    expect_verify_err(
        "padding after ffn_norm",
        &b,
        "non_zero_padding",
        &["padding after tensor 'layers.0.ffn_norm'", &at.to_string()],
    );
}

#[test]
fn c15_non_zero_padding_between_experts() {
    // The gap after expert 1 of the stack; the checksum is fixed so that the padding check fires.
    let l = base_layout();
    let name = "layers.0.moe.experts.gate";
    let t = l.record(name);
    let at = t.data_offset as usize + t.expert_stride as usize + t.unit_bytes() as usize + 5;
    let b = patched(|b, l| {
        b[at] = 1;
        fix_checksum(b, l, l.index(name));
    });
    let want = format!("padding between experts of '{name}'");
    expect_verify_err("padding between experts", &b, "non_zero_padding", &[&want, &at.to_string()]);
}

#[test]
fn c15_non_zero_padding_between_experts_breaks_the_checksum() {
    // Without fixing the checksum, the same byte is reported as a checksum mismatch.
    let l = base_layout();
    let t = l.record("layers.1.moe.experts.down");
    let at = t.data_offset as usize + t.unit_bytes() as usize;
    let b = patched(|b, _| b[at] = 1);
    expect_verify_err("padding between experts, raw", &b, "checksum", &["layers.1.moe.experts.down"]);
}

#[test]
fn c15_non_zero_padding_before_the_data_section() {
    let l = base_layout();
    let at = (l.header.strings_offset + l.header.strings_size) as usize + 1;
    let b = patched(|b, _| b[at] = b'x');
    expect_open_err("padding before data", &b, "non_zero_padding", &["padding before the data section"]);
}

#[test]
fn c15_trailing_bytes() {
    let mut b = base().to_vec();
    b.extend_from_slice(&[0u8; 64]);
    let want = [base().len().to_string(), b.len().to_string()];
    expect_open_err("64 trailing bytes", &b, "trailing_bytes", &["trailing bytes", &want[0], &want[1]]);
}

#[test]
fn c15_trailing_bytes_with_a_consistent_header() {
    // file_size updated too: the tensors end before the file does.
    let mut b = base().to_vec();
    b.extend_from_slice(&[0u8; 4096]);
    let n = b.len() as u64;
    put_u64(&mut b, H_FILE_SIZE, n);
    let want = [base().len().to_string(), n.to_string()];
    expect_open_err("trailing after data", &b, "trailing_bytes", &["trailing bytes", &want[0], &want[1]]);
}

/// The tiny config's plan with the tensors reordered by `f` (FileWriter lays them out in order).
fn reordered(f: impl FnOnce(&mut Vec<PlannedTensor>)) -> Vec<u8> {
    spec_file(|s| f(&mut s.plan))
}

#[test]
fn c15_routers_not_contiguous() {
    let b = reordered(|p| {
        let r1 = p.remove(1);
        p.insert(2, r1); // router0, embeddings, router1, ...
    });
    expect_open_err("routers split", &b, "layout", &["router tensors", "contiguous"]);
}

#[test]
fn c15_routers_not_first() {
    // The format puts the routers first (from routing_offset); here the embedding precedes them.
    let b = reordered(|p| {
        let emb = p.remove(2);
        p.insert(0, emb);
    });
    expect_open_err("routers after the embedding", &b, "layout", &["router"]);
}

#[test]
fn c15_routers_not_in_layer_order() {
    // routing_offset points at layer 1's router; layer 0's follows it.
    let b = reordered(|p| p.swap(0, 1));
    expect_open_err("routers reversed", &b, "layout", &["layers.1.moe.router"]);
}

// ---------------------------------------------------------------------------------------------
// 16. Required tensor missing; unexpected tensor; shape inconsistent with the config.

#[test]
fn c16_missing_tensor_by_renaming() {
    let b = patched(|b, l| {
        let at = l.name_at(b, "layers.1.attn.q") + "layers.1.attn.".len();
        b[at] = b'x';
    });
    // Missing is reported before unexpected: the message names the required tensor.
    expect_open_err("q renamed", &b, "missing_tensor", &["layers.1.attn.q"]);
}

#[test]
fn c16_missing_tensor_not_written() {
    let b = spec_file(|s| s.plan.retain(|t| t.name != "lm_head"));
    expect_open_err("no lm_head", &b, "missing_tensor", &["lm_head"]);
}

#[test]
fn c16_unexpected_tensor() {
    let b = spec_file(|s| {
        let at = s.plan.len() - 1;
        s.plan.insert(
            at,
            PlannedTensor { name: "extra.bias".into(), dtype: DType::F32, shape: vec![16], kind: TensorKind::Plain },
        );
    });
    expect_open_err("extra tensor", &b, "unexpected_tensor", &["extra.bias"]);
}

#[test]
fn c16_lm_head_present_but_config_ties_embeddings() {
    let b = config_json_file(|v| v["tie_embeddings"] = true.into());
    expect_open_err("tied config, lm_head stored", &b, "unexpected_tensor", &["lm_head"]);
}

#[test]
fn c16_embedding_vocab_disagrees_with_config() {
    let b = spec_file(|s| s.tensor("tok_embeddings").shape = vec![48, 16]);
    expect_open_err("vocab 48", &b, "tensor_mismatch", &["tok_embeddings", "[48, 16]", "[32, 16]"]);
}

#[test]
fn c16_hidden_size_disagrees_with_config() {
    let b = spec_file(|s| s.tensor("layers.0.attn_norm").shape = vec![24]);
    expect_open_err("attn_norm 24", &b, "tensor_mismatch", &["layers.0.attn_norm", "[24]", "[16]"]);
}

#[test]
fn c16_heads_disagree_with_config() {
    let b = spec_file(|s| s.tensor("layers.1.attn.k").shape = vec![16, 16]);
    expect_open_err("k for 2 kv heads", &b, "tensor_mismatch", &["layers.1.attn.k", "[16, 16]", "[8, 16]"]);
}

#[test]
fn c16_expert_ffn_disagrees_with_config() {
    let b = spec_file(|s| s.tensor("layers.1.moe.experts.up").shape = vec![4, 12, 16]);
    expect_open_err("expert_ffn 12", &b, "tensor_mismatch", &["layers.1.moe.experts.up", "[4, 12, 16]"]);
}

#[test]
fn c16_stack_stored_as_plain_tensor() {
    let b = spec_file(|s| s.tensor("layers.0.moe.experts.gate").kind = TensorKind::Plain);
    expect_open_err("stack as plain", &b, "tensor_mismatch", &["layers.0.moe.experts.gate", "Plain"]);
}

// ---------------------------------------------------------------------------------------------
// 17. MoE config nonsense: 0 experts, top_k 0 or > n_experts, router shape ≠ [n_experts, hidden].

#[test]
fn c17_zero_experts() {
    let b = config_json_file(|v| v["moe"]["n_experts"] = 0.into());
    expect_open_err("n_experts 0", &b, "bad_config", &["moe.n_experts = 0"]);
}

#[test]
fn c17_top_k_0() {
    let b = config_json_file(|v| v["moe"]["top_k"] = 0.into());
    expect_open_err("top_k 0", &b, "bad_config", &["moe.top_k = 0"]);
}

#[test]
fn c17_top_k_above_n_experts() {
    let b = config_json_file(|v| v["moe"]["top_k"] = 5.into());
    expect_open_err("top_k 5 of 4", &b, "bad_config", &["moe.top_k = 5", "1..=4"]);
}

#[test]
fn c17_router_shape_wrong() {
    let b = spec_file(|s| s.tensor("layers.0.moe.router").shape = vec![4, 32]);
    expect_open_err("router [4, 32]", &b, "tensor_mismatch", &["layers.0.moe.router", "[4, 32]", "[4, 16]"]);
}

#[test]
fn c17_router_expert_count_disagrees_with_stacks() {
    // The router claims 8 experts (byte length kept consistent), stacks and header say 4.
    let b = patched(|b, l| {
        let r = l.rec("layers.1.moe.router");
        put_u64(b, r + R_DIMS, 8);
        put_u64(b, r + R_DIMS + 8, 8);
    });
    expect_open_err("router [8, 8]", &b, "header_mismatch", &["num_experts", "4", "8"]);
}

#[test]
fn c17_config_expert_count_disagrees_with_file() {
    let b = config_json_file(|v| v["moe"]["n_experts"] = 8.into());
    expect_open_err("config 8 experts", &b, "header_mismatch", &["num_experts", "4", "8"]);
}

// ---------------------------------------------------------------------------------------------
// 18. NaN / Inf in norm weights (at open) or anywhere (full scan in verify).

#[test]
fn c18_nan_in_a_norm_is_caught_at_open() {
    let b = patched(|b, l| set_f32(b, l, "layers.0.attn_norm", 3, f32::NAN));
    expect_open_err("NaN attn_norm", &b, "non_finite", &["layers.0.attn_norm", "element 3"]);
}

#[test]
fn c18_inf_in_the_final_norm_is_caught_at_open() {
    let b = patched(|b, l| set_f32(b, l, "norm", 15, f32::INFINITY));
    expect_open_err("Inf norm", &b, "non_finite", &["'norm'", "element 15"]);
}

#[test]
fn c18_negative_inf_in_ffn_norm_is_caught_at_open() {
    let b = patched(|b, l| set_f32(b, l, "layers.1.ffn_norm", 0, f32::NEG_INFINITY));
    expect_open_err("-Inf ffn_norm", &b, "non_finite", &["layers.1.ffn_norm", "element 0"]);
}

#[test]
fn c18_nan_in_f16_and_bf16_norms_is_caught_at_open() {
    for (dtype, nan) in [(DType::F16, 0x7E00u16), (DType::BF16, 0x7FC0u16)] {
        let mut b = build(&FileSpec::new(&tiny_config(), dtype));
        let l = Layout::of(&b);
        let at = l.data("layers.1.attn_norm") + 2 * 7;
        b[at..at + 2].copy_from_slice(&nan.to_le_bytes());
        expect_open_err(&format!("{dtype} NaN norm"), &b, "non_finite", &["layers.1.attn_norm", "element 7"]);
    }
}

#[test]
fn c18_inf_in_a_weight_is_caught_by_verify() {
    let b = patched(|b, l| {
        set_f32(b, l, "layers.0.attn.q", 5, f32::INFINITY);
        fix_checksum(b, l, l.index("layers.0.attn.q"));
    });
    expect_verify_err("Inf in q", &b, "non_finite", &["layers.0.attn.q", "element 5"]);
}

#[test]
fn c18_nan_in_an_expert_is_caught_by_verify() {
    // Expert 2, element 7 of the stack: element index 2·(8·16) + 7 = 263 (gaps not counted).
    let l = base_layout();
    let name = "layers.1.moe.experts.up";
    let t = l.record(name);
    let at = t.data_offset as usize + 2 * t.expert_stride as usize + 4 * 7;
    let b = patched(|b, l| {
        b[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        fix_checksum(b, l, l.index(name));
    });
    expect_verify_err("NaN in expert 2", &b, "non_finite", &[name, "element 263"]);
}

#[test]
fn c18_nan_in_a_router_is_caught_by_verify() {
    let b = patched(|b, l| {
        set_f32(b, l, "layers.1.moe.router", 63, f32::NAN);
        fix_checksum(b, l, l.index("layers.1.moe.router"));
    });
    expect_verify_err("NaN in router", &b, "non_finite", &["layers.1.moe.router", "element 63"]);
}

// ---------------------------------------------------------------------------------------------
// 19. Config JSON / tokenizer JSON / chat template malformed.

#[test]
fn c19_config_json_malformed() {
    let b = spec_file(|s| {
        s.set_meta("config", br#"{"family": "mixtral", "vocab_size": "#);
    });
    expect_open_err("config cut", &b, "metadata", &["'config'", "invalid JSON"]);
}

#[test]
fn c19_config_json_not_a_config() {
    let b = spec_file(|s| {
        s.set_meta("config", br#"{"family": "mixtral"}"#);
    });
    expect_open_err("config incomplete", &b, "metadata", &["'config'", "not a valid model config"]);
}

#[test]
fn c19_config_json_wrong_types() {
    let b = config_json_file(|v| v["hidden_size"] = "sixteen".into());
    expect_open_err("hidden_size string", &b, "metadata", &["'config'", "not a valid model config"]);
}

#[test]
fn c19_config_json_negative_number() {
    let b = config_json_file(|v| v["n_layers"] = (-2).into());
    expect_open_err("n_layers -2", &b, "metadata", &["'config'", "not a valid model config"]);
}

#[test]
fn c19_config_json_absurd_vocab() {
    let b = config_json_file(|v| v["vocab_size"] = (1u64 << 40).into());
    expect_open_err("vocab 2^40", &b, "bad_config", &["vocab_size"]);
}

#[test]
fn c19_config_key_missing() {
    let b = spec_file(|s| s.meta.retain(|e| e.0 != "config"));
    expect_open_err("no config", &b, "metadata", &["'config'", "missing"]);
}

#[test]
fn c19_config_stored_as_raw_bytes() {
    // Raw-bytes entries are not checked at decode time; the config parser still rejects them.
    let b = spec_file(|s| {
        s.meta[0] = ("config".into(), MetaKind::Bytes, vec![0xFF, 0xFE, 0x00, 0x7B]);
    });
    expect_open_err("config bytes", &b, "metadata", &["'config'"]);
}

#[test]
fn c19_tokenizer_json_malformed() {
    let b = spec_file(|s| {
        s.set_meta("tokenizer", &TOKENIZER_JSON.as_bytes()[..TOKENIZER_JSON.len() / 2]);
    });
    expect_open_err("tokenizer cut", &b, "metadata", &["'tokenizer'", "invalid JSON"]);
}

#[test]
fn c19_tokenizer_json_not_utf8() {
    let b = spec_file(|s| {
        s.set_meta("tokenizer", b"{\"model\": \"\xFF\xFE\"}");
    });
    // JSON entries are "UTF-8 JSON text"; a validator that skips string contents must not let
    // invalid UTF-8 through (Model::tokenizer_json would then silently return None).
    expect_open_err("tokenizer bytes", &b, "metadata", &["'tokenizer'", "UTF-8"]);
}

#[test]
fn c19_tokenizer_stored_as_raw_bytes() {
    // A known JSON key stored with the raw-bytes kind skips the JSON check at decode time.
    let b = spec_file(|s| {
        let e = s.meta.iter_mut().find(|e| e.0 == "tokenizer").unwrap();
        *e = ("tokenizer".into(), MetaKind::Bytes, b"\xFFnot json".to_vec());
    });
    expect_open_err("tokenizer as bytes", &b, "metadata", &["'tokenizer'"]);
}

#[test]
fn c19_chat_template_not_utf8() {
    let b = spec_file(|s| {
        s.set_meta("chat_template", b"{{ messages \xC0\x80 }}");
    });
    expect_open_err("template bytes", &b, "metadata", &["'chat_template'", "not UTF-8"]);
}

#[test]
fn c19_provenance_json_malformed() {
    let b = spec_file(|s| {
        s.set_meta("provenance", b"{source: tests}");
    });
    expect_open_err("provenance", &b, "metadata", &["'provenance'", "invalid JSON"]);
}

// ---------------------------------------------------------------------------------------------
// 20. Checksum mismatch (verify).

#[test]
fn c20_checksum_mismatch_in_data() {
    // Flip the lowest mantissa bit of one element: still finite, checksum differs.
    let b = patched(|b, l| b[l.data("layers.0.attn.q") + 40] ^= 1);
    expect_verify_err("q bit flip", &b, "checksum", &["layers.0.attn.q", "checksum mismatch"]);
}

#[test]
fn c20_checksum_field_corrupted() {
    // A flipped bit in a record's checksum field: the prefix checksum refuses the file at open;
    // with the prefix resealed (or in a file written before it existed), the full scan names the
    // tensor.
    let flip = |b: &mut Vec<u8>, l: &Layout| {
        let r = l.rec("layers.0.moe.router") + R_CHECKSUM;
        b[r + 7] ^= 0x40;
    };
    let b = patched(flip);
    expect_open_err("router checksum field", &b, "checksum", &["header, metadata and tensor table"]);
    let b = patched(|b, l| {
        flip(b, l);
        reseal(b);
    });
    expect_verify_err("router checksum field, resealed", &b, "checksum", &["layers.0.moe.router"]);
}

#[test]
fn c20_prefix_checksum() {
    // A change the structure checks cannot see — one letter of the chat template — is refused
    // by the prefix checksum; a file without the flag (as written before it existed) still opens.
    let text_at = |b: &[u8], l: &Layout| {
        let entry = l.entry_of("chat_template");
        let section = get_u64(b, 0x28) as usize;
        section + get_u64(b, entry + 16) as usize + 2
    };
    let b = patched(|b, l| {
        let at = text_at(b, l);
        b[at] ^= 0x01;
    });
    expect_open_err("metadata byte", &b, "checksum", &["header, metadata and tensor table"]);
    let old = patched(|b, _| {
        put_u32(b, 0x64, 0);
        put_u64(b, colibri::format::PREFIX_CHECKSUM_OFFSET, 0);
    });
    let s = Scratch::new();
    let path = s.write("old.colibri", &old);
    for (mode, mmap) in MODES {
        let m = open(&path, mmap).unwrap_or_else(|e| panic!("({mode}) a file without the flag: {e}"));
        m.verify().unwrap();
    }
    let stray = patched(|b, _| put_u32(b, 0x64, 0));
    expect_open_err("checksum without its flag", &stray, "bad_header", &["prefix_checksum"]);
    let unknown = patched(|b, _| put_u32(b, 0x64, 3));
    expect_open_err("unknown flag", &unknown, "bad_header", &["flags"]);
}

#[test]
fn c20_checksum_mismatch_in_an_expert() {
    let l = base_layout();
    let t = l.record("layers.1.moe.experts.gate");
    let at = t.data_offset as usize + 3 * t.expert_stride as usize + 4 * 100;
    let b = patched(|b, _| b[at] ^= 2);
    expect_verify_err("expert 3 bit flip", &b, "checksum", &["layers.1.moe.experts.gate"]);
}

// ---------------------------------------------------------------------------------------------
// 21. The path is a directory, a FIFO, a device, unreadable, or missing.

#[test]
fn c21_directory() {
    let s = Scratch::new();
    expect_path_err("directory", s.dir.path(), "not_a_file", &["directory"]);
}

#[test]
fn c21_symlink_to_a_directory() {
    let s = Scratch::new();
    let sub = s.dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let link = s.dir.path().join("link.colibri");
    std::os::unix::fs::symlink(&sub, &link).unwrap();
    expect_path_err("symlink to dir", &link, "not_a_file", &["directory"]);
}

#[test]
fn c21_symlink_to_a_valid_file_opens() {
    let s = Scratch::new();
    let target = s.write("real.colibri", base());
    let link = s.dir.path().join("link.colibri");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    for (mode, mmap) in MODES {
        open(&link, mmap).unwrap_or_else(|e| panic!("({mode}) symlink to a valid file rejected: {e}"));
    }
}

#[test]
fn c21_fifo_does_not_block() {
    let s = Scratch::new();
    let fifo = s.dir.path().join("model.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo: {}", std::io::Error::last_os_error());
    // No writer ever opens the FIFO: a blocking open would hang, so run it on a thread with a deadline.
    let (tx, rx) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || {
        // (mmap, Err((code, message))) per mode; a model that opened is Ok(()).
        type Outcome = (bool, Result<(), (String, String)>);
        let out: Vec<Outcome> = MODES
            .iter()
            .map(|&(_, mmap)| (mmap, open(&path, mmap).map(|_| ()).map_err(|e| (e.code().to_string(), e.to_string()))))
            .collect();
        let _ = tx.send(out);
    });
    let results = rx.recv_timeout(Duration::from_secs(20)).expect("opening a FIFO blocked");
    for (mmap, r) in results {
        let (code, msg) = r.expect_err("a FIFO opened as a model");
        assert_eq!(code, "not_a_file", "(mmap {mmap}) {msg}");
        assert!(msg.contains("FIFO"), "(mmap {mmap}) {msg}");
    }
}

#[test]
fn c21_character_device() {
    expect_path_err("/dev/null", Path::new("/dev/null"), "not_a_file", &["device"]);
}

#[test]
fn c21_missing_file() {
    let s = Scratch::new();
    let path = s.dir.path().join("does-not-exist.colibri");
    let msg = expect_path_err("missing", &path, "io", &["No such file"]);
    // The message must not echo the path (it may reach a server response).
    assert!(!msg.contains(s.dir.path().to_str().unwrap()), "message echoes the path: {msg}");
}

#[test]
fn c21_unreadable_file() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new();
    let path = s.write("locked.colibri", base());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
    // Root (or CAP_DAC_OVERRIDE) reads mode-000 files anyway: decide from what the OS does for us.
    let readable_anyway = std::fs::File::open(&path).is_ok();
    for (mode, mmap) in MODES {
        match open(&path, mmap) {
            Ok(_) => {
                assert!(readable_anyway, "({mode}) opened a file the OS refuses to open");
                eprintln!("c21_unreadable_file ({mode}): running with DAC override (root): mode 000 file opened");
            }
            Err(e) => {
                assert!(!readable_anyway, "({mode}) readable file rejected: {e}");
                check_err(&format!("unreadable, {mode}"), &e, "io", &["Permission denied"]);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fixed-header fields cross-checked against the config and the tensor table.

#[test]
fn hdr_num_layers_disagrees_with_config() {
    let b = patched(|b, _| put_u32(b, H_NUM_LAYERS, 3));
    expect_open_err("num_layers 3", &b, "header_mismatch", &["num_layers = 3", "(2)"]);
}

#[test]
fn hdr_num_experts_disagrees_with_tensors() {
    let b = patched(|b, _| put_u32(b, H_NUM_EXPERTS, 8));
    expect_open_err("num_experts 8", &b, "header_mismatch", &["num_experts = 8", "(4)"]);
}

#[test]
fn hdr_top_k_disagrees_with_config() {
    let b = patched(|b, _| put_u32(b, H_TOP_K, 3));
    expect_open_err("top_k 3", &b, "header_mismatch", &["top_k = 3", "(2)"]);
}

#[test]
fn hdr_top_k_zero() {
    let b = patched(|b, _| put_u32(b, H_TOP_K, 0));
    expect_open_err("top_k 0", &b, "header_mismatch", &["top_k = 0"]);
}

#[test]
fn hdr_routing_offset_disagrees_with_table() {
    let l = base_layout();
    let b = patched(|b, l| put_u64(b, H_ROUTING_OFFSET, l.header.routing_offset + 256));
    let want = format!("({})", l.header.routing_offset);
    expect_open_err("routing_offset + 256", &b, "header_mismatch", &["routing_offset", &want]);
}

#[test]
fn hdr_num_moe_layers_disagrees_with_table() {
    let b = patched(|b, _| put_u32(b, H_NUM_MOE_LAYERS, 1));
    expect_open_err("num_moe_layers 1", &b, "header_mismatch", &["num_moe_layers = 1", "(2)"]);
}

#[test]
fn hdr_router_demoted_to_plain() {
    // A router stored as a plain tensor: the header's router count no longer matches the table.
    let b = rec32("layers.1.moe.router", R_KIND, kind_id(TensorKind::Plain));
    expect_open_err("router as plain", &b, "header_mismatch", &["num_moe_layers = 2", "(1)"]);
}

// ---------------------------------------------------------------------------------------------
// 22. Block-quantised tensors (q8 = dtype 16, q4 = dtype 17, group 32): records, layout, scales,
//     and which tensors may be quantised. The base is `quant_base()`: expert stacks q4, the
//     other quantisable matrices q8, everything else f32.

/// The valid quantised base file with `f` applied.
fn qpatched(f: impl FnOnce(&mut Vec<u8>, &Layout)) -> Vec<u8> {
    let mut b = quant_base().to_vec();
    f(&mut b, quant_layout());
    b
}

/// A quantised-spec file with tensor `name` stored as `dtype`.
fn quant_file_with(name: &str, dtype: DType) -> Vec<u8> {
    let mut spec = quant_spec();
    spec.tensor(name).dtype = dtype;
    build(&spec)
}

/// Absolute offset of the f16 scale of block `block` of expert `expert` (0 for plain tensors).
fn scale_at(l: &Layout, name: &str, expert: usize, block: usize) -> usize {
    let t = l.record(name);
    let quants = t.unit_elements() as usize / if t.dtype == DType::Q8 { 1 } else { 2 };
    t.data_offset as usize + expert * t.expert_stride as usize + quants + 2 * block
}

#[test]
fn q00_quantised_base_file_is_valid_and_reads_back() {
    let s = Scratch::new();
    let path = s.write("q.colibri", quant_base());
    for (mode, mmap) in MODES {
        let m = open(&path, mmap).unwrap_or_else(|e| panic!("({mode}) quantised base rejected: {e}"));
        m.verify().unwrap_or_else(|e| panic!("({mode}) quantised base fails verify: {e}"));
        let q = m.tensor("layers.0.attn.q").unwrap();
        assert_eq!((q.dtype, m.parsed().tensor("layers.0.attn.q").unwrap().group_size), (DType::Q8, 32));
        assert_eq!(m.parsed().tensor("norm").unwrap().group_size, 0);
        let stack = m.tensor("layers.0.moe.experts.down").unwrap();
        assert_eq!(stack.dtype, DType::Q4);
        let all = stack.to_f32_vec();
        assert_eq!(all.len(), 4 * 32 * 32);
        assert_eq!(stack.expert(2).unwrap().to_f32_vec(), all[2 * 1024..3 * 1024]);
        assert_eq!(stack.expert(2).unwrap().row_f32(31).unwrap(), all[2 * 1024 + 31 * 32..3 * 1024]);
        assert!(stack.expert(2).unwrap().row_f32(32).is_none());
        assert!(all.iter().all(|v| v.is_finite() && v.abs() <= 0.13));
    }
}

#[test]
fn q01_unknown_block_dtype_ids() {
    let b = qpatched(|b, l| put_u32(b, l.rec("layers.0.attn.q") + R_DTYPE, 20));
    expect_open_err("q8 → id 20", &b, "unknown_dtype", &["layers.0.attn.q", "dtype id 20"]);
    let b = qpatched(|b, l| put_u32(b, l.rec("layers.0.moe.experts.up") + R_DTYPE, 31));
    expect_open_err("q4 → id 31", &b, "unknown_dtype", &["layers.0.moe.experts.up", "dtype id 31"]);
}

#[test]
fn q02_group_size_mismatch() {
    let b = qpatched(|b, l| put_u32(b, l.rec("layers.0.attn.q") + R_GROUP_SIZE, 0));
    expect_open_err("q8 group 0", &b, "bad_shape", &["layers.0.attn.q", "group size 0 given for q8", "groups of 32"]);
    let b = qpatched(|b, l| put_u32(b, l.rec("layers.0.moe.experts.gate") + R_GROUP_SIZE, 64));
    expect_open_err("q4 group 64", &b, "bad_shape", &["layers.0.moe.experts.gate", "group size 64 given for q4"]);
    let b = qpatched(|b, l| put_u32(b, l.rec("layers.1.ffn_norm") + R_GROUP_SIZE, 32));
    expect_open_err("f32 group 32", &b, "bad_shape", &["layers.1.ffn_norm", "group size 32 given for float dtype f32"]);
}

#[test]
fn q03_row_length_not_a_multiple_of_32() {
    // Same element count (so the same byte length), rows of 16: only the row rule catches it.
    let b = qpatched(|b, l| {
        put_u64(b, l.rec("layers.0.attn.o") + R_DIMS, 64);
        put_u64(b, l.rec("layers.0.attn.o") + R_DIMS + 8, 16);
    });
    expect_open_err("q8 [64, 16]", &b, "bad_shape", &["layers.0.attn.o", "row length 16", "q8 group size 32"]);
    // A float file's [4, 16, 8] stack relabelled q4 (group 32).
    let b = patched(|b, l| {
        put_u32(b, l.rec("layers.1.moe.experts.down") + R_DTYPE, DType::Q4.id());
        put_u32(b, l.rec("layers.1.moe.experts.down") + R_GROUP_SIZE, 32);
    });
    expect_open_err("q4 stack rows of 8", &b, "bad_shape", &["layers.1.moe.experts.down", "row length 8"]);
    // The same relabelled iq4_nlr8 (id 28, group 32).
    let b = patched(|b, l| {
        put_u32(b, l.rec("layers.1.moe.experts.down") + R_DTYPE, 28);
        put_u32(b, l.rec("layers.1.moe.experts.down") + R_GROUP_SIZE, 32);
    });
    expect_open_err("iq4_nlr8 stack rows of 8", &b, "bad_shape", &["layers.1.moe.experts.down", "row length 8"]);
}

#[test]
fn q03_iq4_r8_need_whole_blocks_in_whole_groups_of_8() {
    // A q4 stack [4, 32, 32] relabelled iq4_xsr8 (id 27, group 256): rows of 32.
    let b = qpatched(|b, l| {
        put_u32(b, l.rec("layers.0.moe.experts.down") + R_DTYPE, 27);
        put_u32(b, l.rec("layers.0.moe.experts.down") + R_GROUP_SIZE, 256);
    });
    expect_open_err("iq4_xsr8 rows of 32", &b, "bad_shape", &["layers.0.moe.experts.down", "row length 32"]);
    // With iq4_xs's group size it is still not one.
    let b = qpatched(|b, l| put_u32(b, l.rec("layers.0.moe.experts.down") + R_DTYPE, 27));
    expect_open_err(
        "iq4_xsr8 group 32",
        &b,
        "bad_shape",
        &["layers.0.moe.experts.down", "group size 32 given for iq4_xsr8"],
    );
    // The q4 stack relabelled iq4_nlr8 (id 28: q4's 18 bytes per 32) as [4, 4, 256]: the same
    // bytes and whole blocks, but 4 rows per expert, not whole 8-row groups.
    let b = qpatched(|b, l| {
        let r = l.rec("layers.0.moe.experts.down");
        put_u32(b, r + R_DTYPE, 28);
        put_u64(b, r + R_DIMS + 8, 4);
        put_u64(b, r + R_DIMS + 16, 256);
    });
    expect_open_err(
        "iq4_nlr8 rows of 4",
        &b,
        "bad_shape",
        &["layers.0.moe.experts.down", "4 rows are not a multiple of the iq4_nlr8 row group 8"],
    );
}

#[test]
fn q04_a_block_tensor_must_be_a_matrix_or_a_stack() {
    let b = qpatched(|b, l| {
        put_u32(b, l.rec("norm") + R_DTYPE, DType::Q8.id());
        put_u32(b, l.rec("norm") + R_GROUP_SIZE, 32);
    });
    expect_open_err("1-D q8 norm", &b, "bad_shape", &["'norm'", "2-D matrix or a 3-D expert stack", "1-D"]);
}

#[test]
fn q05_byte_length_must_match_the_block_layout() {
    // layers.0.attn.q is q8 [32, 32]: 1024 quants + 32 scales × 2 = 1088 bytes.
    let b = qpatched(|b, l| put_u64(b, l.rec("layers.0.attn.q") + R_BYTE_LENGTH, 1024));
    expect_open_err("q8 without scales", &b, "byte_length", &["layers.0.attn.q", "records 1024", "need 1088"]);
    // q8 → q4 with the q8 length: q4 needs 512 + 64.
    let b = qpatched(|b, l| put_u32(b, l.rec("layers.0.attn.q") + R_DTYPE, DType::Q4.id()));
    expect_open_err("q4 with q8 length", &b, "byte_length", &["layers.0.attn.q", "records 1088", "need 576"]);
    // A q4 stack relabelled q8: each expert needs 1088 bytes, not 576 (stride stays 4096).
    let b = qpatched(|b, l| put_u32(b, l.rec("layers.0.moe.experts.gate") + R_DTYPE, DType::Q8.id()));
    let (found, want) = ((3 * 4096 + 576).to_string(), (3 * 4096 + 1088).to_string());
    expect_open_err("q8 with q4 stack length", &b, "byte_length", &["layers.0.moe.experts.gate", &found, &want]);
}

#[test]
fn q06_nan_and_inf_scales_are_caught_by_verify() {
    let cases: [(&str, usize, usize, u16, &str); 3] = [
        ("layers.0.attn.q", 0, 3, 0x7E00, "block 3"),          // NaN, q8
        ("layers.0.moe.experts.up", 2, 5, 0x7C00, "block 69"), // +Inf, q4 expert 2: 2·32 + 5
        ("lm_head", 0, 0, 0xFC00, "block 0"),                  // −Inf, q8
    ];
    for (name, expert, block, bits, needle) in cases {
        let b = qpatched(|b, l| {
            let at = scale_at(l, name, expert, block);
            b[at..at + 2].copy_from_slice(&bits.to_le_bytes());
            fix_checksum(b, l, l.index(name));
        });
        expect_verify_err(&format!("scale {bits:#x} in {name}"), &b, "non_finite", &[name, needle, "scale"]);
    }
}

#[test]
fn q08_interleaved_rows_must_be_whole_groups_of_8() {
    // attn.q is [32, 32] q8: as q8r8 with the same elements re-shaped to [4, 256] (same bytes),
    // its 4 rows are not a row group.
    let b = qpatched(|b, l| {
        let r = l.rec("layers.0.attn.q");
        put_u32(b, r + R_DTYPE, DType::Q8R8.id());
        put_u64(b, r + R_DIMS, 4);
        put_u64(b, r + R_DIMS + 8, 256);
    });
    expect_open_err("q8r8 [4, 256]", &b, "bad_shape", &["layers.0.attn.q", "4 rows", "q8r8", "8"]);
}

#[test]
fn q09_a_row_major_matrix_relabelled_interleaved_reads_its_bytes_in_the_interleaved_order() {
    // Same bytes, other layout: valid on disk (the checksum covers bytes, not meaning), and the
    // values read are those bytes taken in the interleaved order: the dtype decides the layout.
    use colibri::format::blocks::Layout;
    let name = "layers.0.attn.k";
    let b = qpatched(|b, l| {
        put_u32(b, l.rec(name) + R_DTYPE, DType::Q8R8.id());
        reseal(b);
    });
    let s = Scratch::new();
    let path = s.write("b.colibri", &b);
    for (mode, mmap) in MODES {
        let m = open(&path, mmap).unwrap();
        m.verify().unwrap_or_else(|e| panic!("({mode}) verify: {e}"));
        let t = m.tensor(name).unwrap();
        assert_eq!(t.dtype, DType::Q8R8);
        let (rows, cols) = (t.rows(), t.cols());
        let layout = Layout::interleaved(rows, cols).expect("whole groups");
        let (qs, d) = t.bytes.split_at(rows * cols);
        let got = t.to_f32_vec();
        for blk in 0..rows * cols / 32 {
            let at = layout.scale_pos(blk) * 2;
            let scale = half::f16::from_le_bytes([d[at], d[at + 1]]).to_f32();
            for i in 0..32 {
                let want = scale * f32::from(qs[layout.byte_pos(blk, i, 32)] as i8);
                assert_eq!(got[blk * 32 + i], want, "({mode}) block {blk} element {i}");
            }
        }
    }
}

#[test]
fn q07_every_quant_value_is_valid_even_minus_128() {
    // The quantiser never writes −128, but it is a valid i8 quant: accepted and read as −128·d.
    let name = "layers.0.attn.k";
    let b = qpatched(|b, l| {
        b[l.data(name) + 5] = 0x80;
        fix_checksum(b, l, l.index(name));
    });
    let s = Scratch::new();
    let path = s.write("q.colibri", &b);
    for (mode, mmap) in MODES {
        let m = open(&path, mmap).unwrap_or_else(|e| panic!("({mode}) rejected: {e}"));
        m.verify().unwrap_or_else(|e| panic!("({mode}) verify: {e}"));
        let d = half::f16::from_bits(u16::from_le_bytes(
            b[scale_at(quant_layout(), name, 0, 0)..][..2].try_into().unwrap(),
        ));
        assert_eq!(m.tensor(name).unwrap().row_f32(0).unwrap()[5], -128.0 * d.to_f32());
    }
}

#[test]
fn q08_routers_embeddings_and_the_shared_expert_gate_are_never_quantised() {
    let cases = [
        ("layers.0.moe.router", DType::Q8, "a router"),
        ("tok_embeddings", DType::Q4, "the embedding table"),
        ("layers.0.moe.shared_expert_gate", DType::Q8, "the shared expert gate"),
    ];
    for (name, dtype, what) in cases {
        let b = quant_file_with(name, dtype);
        let stored = format!("stored as {dtype}");
        expect_open_err(&format!("{dtype} {name}"), &b, "tensor_mismatch", &[name, &stored, what]);
    }
}

#[test]
fn q10_bf16r32_goes_only_to_whole_matrices_the_products_read() {
    // Every quantisable matrix of the quantised spec (32 × 32 groups throughout) tile-ordered,
    // the rest bf16: a valid file.
    let config = quant_config();
    let mut spec = quant_spec();
    let mut tiled = 0;
    for (t, s) in spec.plan.iter_mut().zip(tensor_specs(&config)) {
        let whole = matches!(s.shape[..], [.., r, c] if r % 32 == 0 && c % 32 == 0);
        t.dtype = if s.quant.is_some() && whole { DType::Bf16R32 } else { DType::BF16 };
        tiled += usize::from(t.dtype == DType::Bf16R32);
    }
    assert!(tiled >= 8, "{tiled} tiled tensors");
    let good = build(&spec);
    let s = Scratch::new();
    let path = s.write("tiled.colibri", &good);
    for (mode, mmap) in MODES {
        let m = open(&path, mmap).unwrap_or_else(|e| panic!("({mode}) a bf16r32 file rejected: {e}"));
        m.verify().unwrap_or_else(|e| panic!("({mode}) a bf16r32 file fails verify: {e}"));
    }
    // The same bytes with the embedding (rows looked up one by one) or a 1-D norm labelled
    // bf16r32: refused, naming the tensor.
    let l = Layout::of(&good);
    let mut b = good.clone();
    put_u32(&mut b, l.rec("tok_embeddings") + R_DTYPE, DType::Bf16R32.id());
    expect_open_err("bf16r32 embedding", &b, "tensor_mismatch", &["tok_embeddings", "bf16r32", "must stay"]);
    let mut b = good.clone();
    put_u32(&mut b, l.rec("norm") + R_DTYPE, DType::Bf16R32.id());
    expect_open_err("1-D bf16r32 norm", &b, "bad_shape", &["'norm'", "2-D matrix or a 3-D expert stack", "1-D"]);
}
