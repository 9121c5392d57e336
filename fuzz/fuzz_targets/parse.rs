//! Fuzz target: arbitrary bytes as a complete .colibri file. `format::parse` in memory; when it
//! accepts the bytes, the in-memory data check, config, tensor check and weight binding, then
//! `Model::open` of the same bytes from a scratch file (mmap and read), `verify`, and every
//! element of every tensor view. Any panic is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    colibri_fuzz::exercise(data);
});
