//! Status codes of the C ABI. The numbers are frozen: a retired value stays as a comment and is
//! never reused. `colibri_status` is a plain int32_t so C callers may hand back any value.

use crate::error::Error;
use std::ffi::c_char;

/// Result of every fallible C entry point: `COLIBRI_STATUS_OK` (0) or an error (non-zero).
#[allow(non_camel_case_types)]
pub type colibri_status = i32;

/// Success.
pub const COLIBRI_STATUS_OK: colibri_status = 0;
/// An argument has an invalid value (a token id out of range, a bad parameter, …).
pub const COLIBRI_STATUS_INVALID_ARGUMENT: colibri_status = 1;
/// A required pointer argument is NULL.
pub const COLIBRI_STATUS_NULL_ARGUMENT: colibri_status = 2;
/// An operating-system call failed (file missing, unreadable, …).
pub const COLIBRI_STATUS_IO: colibri_status = 3;
/// The model file is malformed, truncated or inconsistent.
pub const COLIBRI_STATUS_INVALID_MODEL: colibri_status = 4;
/// The feature is not in this build (tokenizer, chat templates) or not supported by the model.
pub const COLIBRI_STATUS_UNSUPPORTED: colibri_status = 5;
/// An output buffer is too small; the required size was written where the function says.
pub const COLIBRI_STATUS_BUFFER_TOO_SMALL: colibri_status = 6;
/// The tokens do not fit the session's context.
pub const COLIBRI_STATUS_CONTEXT_FULL: colibri_status = 7;
/// A bug inside the library was caught at the boundary; the process keeps running. The
/// object the call was working on should be freed.
pub const COLIBRI_STATUS_PANIC: colibri_status = 8;
/// A params struct has a struct_size this library does not know.
pub const COLIBRI_STATUS_BAD_STRUCT_SIZE: colibri_status = 9;
/// Memory the call needed (a KV cache, logits) could not be allocated; nothing was changed and
/// the process keeps running.
pub const COLIBRI_STATUS_OUT_OF_MEMORY: colibri_status = 10;
/// The session is in use by another call — another thread's, or the running call whose
/// callback made this one (a session serves one call at a time). Nothing was done; retry once
/// that call has returned.
pub const COLIBRI_STATUS_BUSY: colibri_status = 11;
/// The model file was truncated or rewritten in place after it was opened (see
/// `colibri_model_params.sigbus_guard`): the call's results were discarded; load the model again.
pub const COLIBRI_STATUS_MODEL_CHANGED: colibri_status = 12;
/// A route callback returned COLIBRI_ROUTE_ABORT: the call was undone — the session (its cached
/// tokens, its routing RNG) is as it was before the call, and no logits were written.
pub const COLIBRI_STATUS_ABORTED: colibri_status = 13;

/// Map a library error to its status, by variant: every variant is listed, so a new one must
/// be given its status here (no message text is ever read).
pub(crate) fn status_of(e: &Error) -> colibri_status {
    match e {
        Error::Io { .. } | Error::NotAFile { .. } => COLIBRI_STATUS_IO,
        Error::InvalidArgument { .. } => COLIBRI_STATUS_INVALID_ARGUMENT,
        Error::ContextFull { .. } => COLIBRI_STATUS_CONTEXT_FULL,
        Error::Unsupported { .. } => COLIBRI_STATUS_UNSUPPORTED,
        Error::OutOfMemory { .. } => COLIBRI_STATUS_OUT_OF_MEMORY,
        Error::ModelChanged { .. } => COLIBRI_STATUS_MODEL_CHANGED,
        Error::FileTooSmall { .. }
        | Error::BadMagic { .. }
        | Error::UnsupportedVersion { .. }
        | Error::BadHeader { .. }
        | Error::TooLarge { .. }
        | Error::OutOfBounds { .. }
        | Error::Layout { .. }
        | Error::NonZeroPadding { .. }
        | Error::Truncated { .. }
        | Error::TrailingBytes { .. }
        | Error::BadTensorName { .. }
        | Error::DuplicateTensor { .. }
        | Error::UnknownDtype { .. }
        | Error::BadShape { .. }
        | Error::ByteLength { .. }
        | Error::Misaligned { .. }
        | Error::TruncatedData { .. }
        | Error::MissingTensor { .. }
        | Error::UnexpectedTensor { .. }
        | Error::TensorMismatch { .. }
        | Error::BadConfig { .. }
        | Error::HeaderMismatch { .. }
        | Error::Metadata { .. }
        | Error::NonFinite { .. }
        | Error::NonFiniteScale { .. }
        | Error::Checksum { .. }
        | Error::Unusable { .. } => COLIBRI_STATUS_INVALID_MODEL,
    }
}

/// A static, NUL-terminated description of any status value, known or not. Never NULL.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn colibri_status_str(status: colibri_status) -> *const c_char {
    let s: &'static str = match status {
        COLIBRI_STATUS_OK => "ok\0",
        COLIBRI_STATUS_INVALID_ARGUMENT => "invalid argument\0",
        COLIBRI_STATUS_NULL_ARGUMENT => "NULL argument\0",
        COLIBRI_STATUS_IO => "I/O error\0",
        COLIBRI_STATUS_INVALID_MODEL => "invalid model file\0",
        COLIBRI_STATUS_UNSUPPORTED => "unsupported\0",
        COLIBRI_STATUS_BUFFER_TOO_SMALL => "buffer too small\0",
        COLIBRI_STATUS_CONTEXT_FULL => "context full\0",
        COLIBRI_STATUS_PANIC => "internal error (panic caught)\0",
        COLIBRI_STATUS_BAD_STRUCT_SIZE => "unknown struct_size\0",
        COLIBRI_STATUS_OUT_OF_MEMORY => "out of memory\0",
        COLIBRI_STATUS_BUSY => "session busy\0",
        COLIBRI_STATUS_MODEL_CHANGED => "the model file changed on disk after it was loaded\0",
        COLIBRI_STATUS_ABORTED => "aborted by a callback\0",
        _ => "unknown status\0",
    };
    s.as_ptr().cast()
}
