//! Which model file a command uses: `-m PATH`, else `$COLIBRI_MODEL`, else the shipped default
//! model `models/default.colibri`, looked up next to the executable's ancestors (so
//! `target/release/colibri` finds `<repo>/models/default.colibri` from any working directory),
//! then at the repository path this binary was built from.

use colibri::Error;
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
