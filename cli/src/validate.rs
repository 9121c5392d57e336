//! `colibri validate`: open (structure, config, tensors), verify every byte (checksums, padding,
//! NaN/Inf), then check the tokenizer against the model: it loads and fits (every id it can
//! produce inside the model's vocabulary, the bos / eos ids known to it: `Tokenizer::from_model`)
//! and the chat template, if any, compiles and renders a short conversation.

use colibri::tokenizer::{ChatMessage, ChatTemplate, Tokenizer};
use colibri::{Error, LoadOptions, Model};
use std::path::Path;

pub fn run(file: &Path, no_mmap: bool) -> Result<(), Error> {
    let opts = LoadOptions { mmap: !no_mmap, ..LoadOptions::default() };
    let t0 = std::time::Instant::now();
    let model = Model::open(file, &opts)?;
    model.verify()?;
    let tokenizer = check_tokenizer(&model)?;
    let p = model.parsed();
    println!(
        "ok: {} tensors, {} bytes: structure, config, checksums, values and {tokenizer} verified in {:.2} s",
        p.tensors.len(),
        p.header.file_size,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What the tokenizer check covered, for the summary line.
fn check_tokenizer(model: &Model) -> Result<&'static str, Error> {
    if model.tokenizer_json().is_none() {
        return Ok("(no tokenizer stored)");
    }
    let tok = Tokenizer::from_model(model)?;
    let Some(source) = model.chat_template() else { return Ok("tokenizer") };
    let bad = |e: Error| Error::Metadata { key: "chat_template".into(), reason: e.to_string() };
    let template = ChatTemplate::new(source).map_err(bad)?;
    let piece = |id: Option<u32>| id.and_then(|i| tok.token_piece(i)).unwrap_or_default();
    let conversation =
        [ChatMessage::new("user", "Hello"), ChatMessage::new("assistant", "Hi"), ChatMessage::new("user", "Bye")];
    template.render(&conversation, true, &piece(tok.bos_id()), &piece(tok.eos_ids().first().copied())).map_err(bad)?;
    Ok("tokenizer and chat template")
}
