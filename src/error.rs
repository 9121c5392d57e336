//! The one error type of the crate: every failure the library can report, as a value.
//!
//! Each variant names one class of problem; `Error::code()` gives a stable snake_case
//! identifier for tests, logs and the C ABI's status mapping.

use std::fmt;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error the library returns.
#[derive(Debug)]
pub enum Error {
    /// An operating-system call failed (open, read, write, mmap, rename, ...).
    Io { op: &'static str, source: std::io::Error },
    /// The path exists but is not a regular file (a directory, FIFO, socket, device).
    NotAFile { kind: &'static str },
    /// The file is shorter than the fixed header (or empty).
    FileTooSmall { size: u64, need: u64 },
    /// The first four bytes are not "COLI".
    BadMagic { found: [u8; 4] },
    /// The format version is 0 or newer than this library understands.
    UnsupportedVersion { found: u32, supported: u32 },
    /// A header or table field holds a value that cannot be right (e.g. header_size, record_size).
    BadHeader { field: &'static str, value: u64, reason: &'static str },
    /// A size or count is above the sanity cap for its kind.
    TooLarge { what: &'static str, value: u64, cap: u64 },
    /// A section (metadata, table, strings, data) runs past the end of the file or overflows.
    OutOfBounds { what: String, offset: u64, len: u64, file_size: u64 },
    /// Sections or tensors are not where the layout rules place them (gap, overlap, order).
    Layout { what: String, expected: u64, found: u64 },
    /// Bytes that must be zero (reserved fields, padding) are not.
    NonZeroPadding { what: String, offset: u64 },
    /// The file is shorter than its header says (truncated copy or interrupted write).
    Truncated { expected: u64, actual: u64 },
    /// The file is longer than its last tensor.
    TrailingBytes { end_of_data: u64, file_size: u64 },
    /// A tensor name is empty, not UTF-8, too long or contains NUL.
    BadTensorName { index: usize, reason: &'static str },
    /// Two tensors share one name.
    DuplicateTensor { name: String },
    /// The dtype id is unknown to this version.
    UnknownDtype { tensor: String, id: u32 },
    /// ndim, a dimension or the element count is invalid.
    BadShape { tensor: String, reason: String },
    /// shape × dtype does not give the recorded byte length.
    ByteLength { tensor: String, expected: u64, found: u64 },
    /// A data offset (or expert stride) is not on the required boundary.
    Misaligned { tensor: String, offset: u64, align: u64 },
    /// A tensor's data runs past the end of the file (truncated file) or its end overflows.
    TruncatedData { tensor: String, end: u64, file_size: u64 },
    /// A tensor the config requires is absent.
    MissingTensor { name: String },
    /// A tensor the config does not know about is present.
    UnexpectedTensor { name: String },
    /// A tensor's shape or dtype disagrees with the config.
    TensorMismatch { name: String, reason: String },
    /// The model configuration is inconsistent (0 experts, top_k > n_experts, ...).
    BadConfig { reason: String },
    /// A fixed-header field disagrees with the metadata or tensor table.
    HeaderMismatch { field: &'static str, header: u64, actual: u64 },
    /// A metadata entry is missing, malformed or oversized.
    Metadata { key: String, reason: String },
    /// A tensor holds NaN or Inf values.
    NonFinite { tensor: String, index: u64 },
    /// A block-quantised tensor holds a NaN or Inf block scale (block index, gaps not counted).
    NonFiniteScale { tensor: String, block: u64 },
    /// A tensor's checksum does not match its data.
    Checksum { tensor: String, expected: u64, found: u64 },
    /// A caller passed an invalid argument.
    InvalidArgument { reason: String },
    /// The new tokens do not fit the session's context: `cached` already there, `new` asked
    /// for, room for `n_ctx`; `sequence` names the sequence of a batch.
    ContextFull { cached: usize, new: usize, n_ctx: usize, sequence: Option<usize> },
    /// The requested feature or input kind is not supported (by this build or this version).
    Unsupported { what: String },
    /// Memory an input asked for could not be allocated (`bytes` of it, for `what`); nothing
    /// was changed.
    OutOfMemory { what: String, bytes: u64 },
    /// The file is intact but cannot serve: its tokenizer, chat template or a canary forward
    /// pass fails (`usable::prove`).
    Unusable { what: String },
    /// The mapped model file was modified in place after it was opened (`reason`): results
    /// computed from it cannot be trusted; open the file again.
    ModelChanged { reason: &'static str },
}

impl Error {
    /// Stable snake_case identifier of the error class.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Io { .. } => "io",
            Error::NotAFile { .. } => "not_a_file",
            Error::FileTooSmall { .. } => "file_too_small",
            Error::BadMagic { .. } => "bad_magic",
            Error::UnsupportedVersion { .. } => "unsupported_version",
            Error::BadHeader { .. } => "bad_header",
            Error::TooLarge { .. } => "too_large",
            Error::OutOfBounds { .. } => "out_of_bounds",
            Error::Layout { .. } => "layout",
            Error::NonZeroPadding { .. } => "non_zero_padding",
            Error::Truncated { .. } => "truncated",
            Error::TrailingBytes { .. } => "trailing_bytes",
            Error::BadTensorName { .. } => "bad_tensor_name",
            Error::DuplicateTensor { .. } => "duplicate_tensor",
            Error::UnknownDtype { .. } => "unknown_dtype",
            Error::BadShape { .. } => "bad_shape",
            Error::ByteLength { .. } => "byte_length",
            Error::Misaligned { .. } => "misaligned",
            Error::TruncatedData { .. } => "truncated_data",
            Error::MissingTensor { .. } => "missing_tensor",
            Error::UnexpectedTensor { .. } => "unexpected_tensor",
            Error::TensorMismatch { .. } => "tensor_mismatch",
            Error::BadConfig { .. } => "bad_config",
            Error::HeaderMismatch { .. } => "header_mismatch",
            Error::Metadata { .. } => "metadata",
            Error::NonFinite { .. } | Error::NonFiniteScale { .. } => "non_finite",
            Error::Checksum { .. } => "checksum",
            Error::InvalidArgument { .. } => "invalid_argument",
            Error::ContextFull { .. } => "context_full",
            Error::Unsupported { .. } => "unsupported",
            Error::OutOfMemory { .. } => "out_of_memory",
            Error::Unusable { .. } => "unusable",
            Error::ModelChanged { .. } => "model_changed",
        }
    }

    /// Shorthand for an I/O error with the operation that failed.
    pub fn io(op: &'static str, source: std::io::Error) -> Self {
        Error::Io { op, source }
    }

    pub(crate) fn config(reason: impl Into<String>) -> Self {
        Error::BadConfig { reason: reason.into() }
    }

    pub(crate) fn shape(tensor: &str, reason: impl Into<String>) -> Self {
        Error::BadShape { tensor: tensor.to_string(), reason: reason.into() }
    }
}

/// The magic of llama.cpp's GGUF files.
const GGUF_MAGIC: [u8; 4] = *b"GGUF";

/// The message of a GGUF file given where a .colibri file is expected.
const GGUF_ADVICE: &str = "not a .colibri file (magic \"GGUF\", not \"COLI\"): a GGUF file (llama.cpp's format); \
     convert it once with \
     `colibri convert MODEL.gguf -o MODEL.colibri` (the converted file is validated, checksummed and laid out per \
     expert; tensors keep their GGUF types)";

/// The BadMagic message (with the conversion to run for a GGUF file).
fn bad_magic(f: &mut fmt::Formatter<'_>, found: &[u8; 4]) -> fmt::Result {
    if *found == GGUF_MAGIC {
        return f.write_str(GGUF_ADVICE);
    }
    write!(f, "not a .colibri file: magic is {:?}, expected \"COLI\"", String::from_utf8_lossy(found))
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { op, source } => write!(f, "{op} failed: {source}"),
            Error::NotAFile { kind } => write!(f, "not a regular file (it is a {kind})"),
            Error::FileTooSmall { size, need } => {
                write!(f, "file too small: {size} bytes, a .colibri header needs {need}")
            }
            Error::BadMagic { found } => bad_magic(f, found),
            Error::UnsupportedVersion { found, supported } => {
                write!(f, "unsupported format version {found} (this build reads version {supported})")
            }
            Error::BadHeader { field, value, reason } => write!(f, "bad header field {field} = {value}: {reason}"),
            Error::TooLarge { what, value, cap } => write!(f, "{what} is {value}, above the limit of {cap}"),
            Error::OutOfBounds { what, offset, len, file_size } => write!(
                f,
                "{what} at offset {offset} with length {len} runs past the end of the file ({file_size} bytes)"
            ),
            Error::Layout { what, expected, found } => {
                write!(f, "layout error: {what} is at {found}, expected {expected}")
            }
            Error::NonZeroPadding { what, offset } => write!(f, "{what} at offset {offset} must be zero"),
            Error::Truncated { expected, actual } => {
                write!(f, "file is truncated: the header says {expected} bytes, the file has {actual}")
            }
            Error::TrailingBytes { end_of_data, file_size } => {
                write!(f, "trailing bytes: data ends at {end_of_data} but the file has {file_size} bytes")
            }
            Error::BadTensorName { index, reason } => write!(f, "tensor #{index} has a bad name: {reason}"),
            Error::DuplicateTensor { name } => write!(f, "duplicate tensor name '{name}'"),
            Error::UnknownDtype { tensor, id } => write!(f, "tensor '{tensor}' has unknown dtype id {id}"),
            Error::BadShape { tensor, reason } => write!(f, "tensor '{tensor}' has a bad shape: {reason}"),
            Error::ByteLength { tensor, expected, found } => {
                write!(f, "tensor '{tensor}' records {found} bytes but its shape and dtype need {expected}")
            }
            Error::Misaligned { tensor, offset, align } => {
                write!(f, "tensor '{tensor}' data offset {offset} is not a multiple of {align}")
            }
            Error::TruncatedData { tensor, end, file_size } => write!(
                f,
                "tensor '{tensor}' ends at {end}, past the end of the file ({file_size} bytes): truncated file?"
            ),
            Error::MissingTensor { name } => write!(f, "required tensor '{name}' is missing"),
            Error::UnexpectedTensor { name } => write!(f, "unexpected tensor '{name}' for this model config"),
            Error::TensorMismatch { name, reason } => write!(f, "tensor '{name}' does not fit the config: {reason}"),
            Error::BadConfig { reason } => write!(f, "bad model config: {reason}"),
            Error::HeaderMismatch { field, header, actual } => {
                write!(f, "header field {field} = {header} disagrees with the file contents ({actual})")
            }
            Error::Metadata { key, reason } => write!(f, "metadata '{key}': {reason}"),
            Error::NonFinite { tensor, index } => {
                write!(f, "tensor '{tensor}' holds a NaN or Inf value at element {index}")
            }
            Error::NonFiniteScale { tensor, block } => {
                write!(f, "tensor '{tensor}' holds a NaN or Inf quantisation scale in block {block}")
            }
            Error::Checksum { tensor, expected, found } => {
                write!(f, "checksum mismatch in tensor '{tensor}': recorded {expected:016x}, data gives {found:016x}")
            }
            Error::InvalidArgument { reason } => write!(f, "invalid argument: {reason}"),
            Error::ContextFull { cached, new, n_ctx, sequence } => {
                write!(f, "context full: {cached} cached + {new} new tokens exceed the context of {n_ctx} tokens")?;
                match sequence {
                    Some(i) => write!(f, " (sequence {i} of the batch)"),
                    None => Ok(()),
                }
            }
            Error::Unsupported { what } => write!(f, "unsupported: {what}"),
            Error::OutOfMemory { what, bytes } => {
                write!(f, "out of memory: {what} needs {bytes} bytes that could not be allocated")
            }
            Error::Unusable { what } => write!(f, "unusable model: {what}"),
            Error::ModelChanged { reason } => write!(
                f,
                "the model file changed on disk after it was opened: {reason}; open it again (replace model files \
                 by writing a new file and renaming it over the old one)"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
