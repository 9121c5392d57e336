//! Fuzz target: arbitrary bytes as a GGUF file. `gguf::parse` in memory; when it accepts the
//! bytes, they are written to a scratch file and mapped as a model (`gguf::map`: split-file
//! check, vocabulary, architecture mapping, tensor resolution and planning), whose errors are
//! fine. Any panic, abort or huge allocation is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::io::Cursor;

fuzz_target!(|data: &[u8]| {
    if colibri_convert::gguf::parse(Cursor::new(data), data.len() as u64).is_err() {
        return;
    }
    let path = std::env::temp_dir().join(format!("colibri-fuzz-{}.gguf", std::process::id()));
    if std::fs::write(&path, data).is_ok() {
        let _ = colibri_convert::gguf::map(&path);
        let _ = std::fs::remove_file(&path);
    }
});
