//! `colibri_grammar`: a response format (any JSON object, or JSON valid against a JSON Schema)
//! compiled against one model's vocabulary, for `colibri_generate_params.grammar`. The model
//! prepares its vocabulary for grammars once, on the first colibri_grammar_new; a grammar is
//! immutable and each generation that uses it starts at its beginning.

use super::handle::*;
use super::model::colibri_model;
use super::panic::{guard, guard_or, Failure};
use super::status::*;
use crate::grammar::{Grammar, ResponseFormat};
use crate::model::Model;
use std::ffi::c_char;
use std::sync::Arc;

/// What a grammar asks of the output (`colibri_grammar_new`). Frozen numbers.
#[allow(non_camel_case_types)]
pub type colibri_response_format = i32;
/// Any JSON object (OpenAI's `json_object`); the schema argument is ignored.
pub const COLIBRI_RESPONSE_JSON_OBJECT: colibri_response_format = 1;
/// JSON valid against the JSON Schema given as text (`$ref`s local, `#/...`).
pub const COLIBRI_RESPONSE_JSON_SCHEMA: colibri_response_format = 2;

/// A compiled response format (opaque to C). Immutable: one grammar may serve any number of
/// generations, on any thread, of sessions of the model it was made for.
pub struct colibri_grammar {
    pub(crate) grammar: Grammar,
    pub(crate) model: Arc<Model>,
}

/// Compile a response format against `model`'s vocabulary into `*grammar_out` (free it with
/// colibri_grammar_free). `schema` is `schema_len` bytes of UTF-8 JSON (not NUL-terminated;
/// read during the call only) for COLIBRI_RESPONSE_JSON_SCHEMA, ignored (may be NULL) for
/// COLIBRI_RESPONSE_JSON_OBJECT. Output under a grammar is JSON with ", " between items, ": "
/// after keys and no other whitespace outside strings; a generation that ends on
/// end-of-sequence (COLIBRI_FINISH_EOS) has produced a complete, valid document.
/// COLIBRI_STATUS_INVALID_ARGUMENT (the last error says why) for an unknown format, a schema
/// that is not UTF-8, not JSON, or refused by the grammar engine; COLIBRI_STATUS_UNSUPPORTED
/// for a model without tokenizer or end-of-sequence token, or a build without grammars. The
/// first call on a model prepares its vocabulary (1-2 s for a 150k-token vocabulary).
/// Safe to call concurrently.
///
/// # Safety
/// `model` a valid model; `schema` NULL or readable for schema_len bytes; `grammar_out` writable.
#[no_mangle]
pub unsafe extern "C" fn colibri_grammar_new(
    model: *const colibri_model,
    format: colibri_response_format,
    schema: *const c_char,
    schema_len: usize,
    grammar_out: *mut *mut colibri_grammar,
) -> colibri_status {
    guard(|| {
        if grammar_out.is_null() {
            return Err(Failure::null("grammar_out"));
        }
        put(grammar_out, std::ptr::null_mut());
        let m = borrow(model, "model")?;
        let format = match format {
            COLIBRI_RESPONSE_JSON_OBJECT => ResponseFormat::JsonObject,
            COLIBRI_RESPONSE_JSON_SCHEMA => {
                if schema.is_null() {
                    return Err(Failure::null("schema"));
                }
                let bytes = slice(schema.cast::<u8>(), schema_len, "schema")?;
                let text = std::str::from_utf8(bytes).map_err(|e| {
                    Failure::new(COLIBRI_STATUS_INVALID_ARGUMENT, format!("the JSON Schema is not UTF-8: {e}"))
                })?;
                ResponseFormat::json_schema_text(text)?
            }
            other => {
                return Err(Failure::new(
                    COLIBRI_STATUS_INVALID_ARGUMENT,
                    format!("response format {other} is not a COLIBRI_RESPONSE_* value"),
                ))
            }
        };
        let vocab = m.grammar_vocab.get(m.tokenizer()?)?;
        let grammar = vocab.compile(&format)?;
        put(grammar_out, Box::into_raw(Box::new(colibri_grammar { grammar, model: m.model.clone() })));
        Ok(())
    })
}

/// Release a grammar. NULL is a no-op.
///
/// # Safety
/// `grammar` must be NULL or a pointer from colibri_grammar_new, freed once, not in use by a
/// running colibri_generate.
#[no_mangle]
pub unsafe extern "C" fn colibri_grammar_free(grammar: *mut colibri_grammar) {
    guard_or((), || {
        if !grammar.is_null() {
            // SAFETY: the pointer came from Box::into_raw in colibri_grammar_new.
            drop(unsafe { Box::from_raw(grammar) });
        }
    })
}

/// The grammar at `p` (NULL: none) as a fresh copy for one generation on `model`.
pub(crate) fn for_generation(p: *const colibri_grammar, model: &Arc<Model>) -> Result<Option<Grammar>, Failure> {
    if p.is_null() {
        return Ok(None);
    }
    let g = borrow(p, "params.grammar")?;
    if !Arc::ptr_eq(&g.model, model) {
        return Err(Failure::new(
            COLIBRI_STATUS_INVALID_ARGUMENT,
            "params.grammar was made for another model than the session's",
        ));
    }
    Ok(Some(g.grammar.clone()))
}
