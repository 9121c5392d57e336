//! `colibri tokenize`: a text's token ids under a model's tokenizer, as the server's /tokenize
//! gives them (stdout: ids separated by spaces, or one `id<TAB>piece` line each with --pieces).

use crate::model_path;
use colibri::tokenizer::Tokenizer;
use colibri::{Error, LoadOptions};
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Clone, Debug)]
pub struct TokenizeArgs {
    /// Text to tokenise (or -f FILE).
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    pub text: Option<String>,
    /// Read the text from a file.
    #[arg(short = 'f', long)]
    pub file: Option<PathBuf>,
    /// Model file (default: $COLIBRI_MODEL, then the shipped models/default.colibri).
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// Add the tokens the tokenizer puts around a sequence (a BOS token), as `run` does.
    #[arg(long)]
    pub special: bool,
    /// Print each id with its text piece, one per line.
    #[arg(long)]
    pub pieces: bool,
}

pub fn run(a: &TokenizeArgs) -> Result<(), Error> {
    let text = match (&a.text, &a.file) {
        (Some(t), _) => t.clone(),
        (None, Some(f)) => std::fs::read_to_string(f).map_err(|e| Error::io("read the text file", e))?,
        (None, None) => String::new(),
    };
    let model = model_path::open(&model_path::resolve(a.model.as_deref())?, &LoadOptions::default())?;
    let tokenizer = Tokenizer::from_model(&model)?;
    let ids = tokenizer.encode(&text, a.special)?;
    let mut out = std::io::stdout().lock();
    let written = if a.pieces {
        ids.iter().try_for_each(|&id| writeln!(out, "{id}\t{}", tokenizer.token_text(id).escape_debug()))
    } else {
        let line: Vec<String> = ids.iter().map(u32::to_string).collect();
        writeln!(out, "{}", line.join(" "))
    };
    written.map_err(|e| Error::io("write to stdout", e))
}
