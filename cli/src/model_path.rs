//! Which model file a command uses: `-m PATH`, else `$COLIBRI_MODEL`, else the shipped default
//! model `models/default.colibri`, looked up next to the executable's ancestors (so
//! `target/release/colibri` finds `<repo>/models/default.colibri` from any working directory),
//! then at the repository path this binary was built from.

use colibri::{Error, LoadOptions, Model};
use std::path::{Path, PathBuf};

/// Relative path of the shipped default model inside the repository.
pub const DEFAULT_MODEL: &str = "models/default.colibri";

pub fn resolve(cli: Option<&Path>) -> Result<PathBuf, Error> {
    if let Some(p) = cli {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("COLIBRI_MODEL").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        candidates.extend(exe.ancestors().skip(1).map(|dir| dir.join(DEFAULT_MODEL)));
    }
    candidates.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(DEFAULT_MODEL));
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| Error::InvalidArgument {
        reason: format!("no model given: pass -m FILE, set COLIBRI_MODEL, or keep {DEFAULT_MODEL} beside the build"),
    })
}

/// Open the model at `path`; an error names the path and says what to do (a directory is a
/// checkpoint to convert first; a file that is missing or not a model says so).
pub fn open(path: &Path, opts: &LoadOptions) -> Result<Model, Error> {
    let shown = path.display();
    let reason = if path.is_dir() {
        let out = path.file_name().map_or("model".into(), |n| n.to_string_lossy().into_owned());
        format!(
            "{shown} is a directory, not a .colibri model: if it holds a HuggingFace checkpoint, convert it \
             first: colibri convert {shown} -o {out}.colibri"
        )
    } else if !path.exists() {
        format!("{shown}: no such file (give a .colibri model with -m FILE, or set COLIBRI_MODEL)")
    } else {
        return Model::open(path, opts).map_err(|e| match e {
            Error::BadMagic { found } if &found == b"GGUF" => e,
            Error::BadMagic { .. } | Error::NotAFile { .. } | Error::FileTooSmall { .. } => Error::InvalidArgument {
                reason: format!("{shown}: {e}; a .colibri model is made by `colibri convert CHECKPOINT -o FILE`"),
            },
            other => other,
        });
    };
    Err(Error::InvalidArgument { reason })
}

/// For a command that failed because its model is a GGUF file: the exact conversion to run. The
/// GGUF path is the first command-line argument (or `$COLIBRI_MODEL`) that is one.
pub fn gguf_advice(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    if !matches!(e.downcast_ref::<Error>(), Some(Error::BadMagic { found }) if found == b"GGUF") {
        return None;
    }
    let candidates = std::env::args_os().skip(1).chain(std::env::var_os("COLIBRI_MODEL"));
    let path = candidates.map(PathBuf::from).find(|p| p.is_file() && colibri_convert::gguf::is_gguf(p))?;
    let out = path.with_extension("colibri");
    Some(format!(
        "{} is a GGUF file (llama.cpp's format), not a .colibri file: convert it once with \
         `colibri convert {} -o {}` and use {} (the converted file is validated, checksummed and laid out per \
         expert; tensors keep their GGUF types)",
        path.display(),
        path.display(),
        out.display(),
        out.display()
    ))
}
