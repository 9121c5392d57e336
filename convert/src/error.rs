//! The converter's errors: a checkpoint that cannot be converted, or a refusal from the library
//! (the config it built, the file it writes).

use std::fmt;

/// Every error of a conversion.
#[derive(Debug)]
pub enum Error {
    /// The checkpoint cannot be converted: missing or malformed files, unsupported contents.
    Source { reason: String },
    /// The library refused something (an invalid config, an I/O failure writing the file).
    Colibri(colibri::Error),
}

/// Result alias of the converter.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A source error with `reason`.
pub(crate) fn fail(reason: impl Into<String>) -> Error {
    Error::Source { reason: reason.into() }
}

impl From<colibri::Error> for Error {
    fn from(e: colibri::Error) -> Error {
        Error::Colibri(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Source { reason } => write!(f, "conversion failed: {reason}"),
            Error::Colibri(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Colibri(e) => Some(e),
            Error::Source { .. } => None,
        }
    }
}
