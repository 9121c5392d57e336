//! Fuzz target: like `parse`, but the header's file_size is set to the input length and, when
//! the structure parses, every tensor checksum is recomputed first. Integrity fields are what
//! stop most mutations; fixing them lets mutations of shapes, configs, padding and tensor data
//! reach `verify`, the config checks and the weight binding.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let fixed = colibri_fuzz::fixup(data);
    colibri_fuzz::exercise(&fixed);
});
