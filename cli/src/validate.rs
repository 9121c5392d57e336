//! `colibri validate`: open (structure, config, tensors), verify every byte (checksums, padding,
//! NaN/Inf), then prove the file can serve (tokenizer within the vocabulary, chat template renders,
//! a one-token canary forward pass gives finite logits).

use colibri::LoadOptions;
use std::path::Path;

pub fn run(file: &Path, no_mmap: bool) -> Result<(), colibri::Error> {
    let opts = LoadOptions { mmap: !no_mmap, ..LoadOptions::default() };
    let t0 = std::time::Instant::now();
    let model = crate::model_path::open(file, &opts)?;
    model.verify()?;
    colibri::usable::prove(&model)?;
    let p = model.parsed();
    println!(
        "ok: {} tensors, {} bytes: structure, config, checksums, values, tokenizer, template and a canary \
         forward pass verified in {:.2} s",
        p.tensors.len(),
        p.header.file_size,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
