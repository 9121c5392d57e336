//! `colibri validate`: open (structure, config, tensors) then verify every byte (checksums,
//! padding, NaN/Inf).

use colibri::{LoadOptions, Model};
use std::path::Path;

pub fn run(file: &Path, no_mmap: bool) -> Result<(), colibri::Error> {
    let opts = LoadOptions { mmap: !no_mmap, ..LoadOptions::default() };
    let t0 = std::time::Instant::now();
    let model = Model::open(file, &opts)?;
    model.verify()?;
    let p = model.parsed();
    println!(
        "ok: {} tensors, {} bytes: structure, config, checksums and values verified in {:.2} s",
        p.tensors.len(),
        p.header.file_size,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
