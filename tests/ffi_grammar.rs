//! The C ABI's structured output on the default model: colibri_grammar_new's statuses and last
//! errors for NULL, garbage and refused schemas; colibri_generate under a grammar ending on
//! end-of-sequence only with a document of the schema, over many seeds; the older
//! colibri_generate_params size; stop strings end a grammar's output; a grammar refused with
//! ignore_eos or another model's session.

mod common;

use colibri::ffi::*;
use serde_json::Value;
use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr::{null, null_mut};

const SCHEMA: &str = r#"{"type": "object", "properties": {"answer": {"enum": ["yes", "no"]},
  "count": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["answer", "count"],
  "additionalProperties": false}"#;
const PROMPT: [i32; 6] = [17, 300, 5, 2048, 99, 1000];

fn open_model() -> *mut colibri_model {
    common::open_default_model_c()
}

fn grammar(m: *const colibri_model, format: i32, schema: &[u8]) -> (colibri_status, *mut colibri_grammar, String) {
    let mut g = std::ptr::NonNull::<colibri_grammar>::dangling().as_ptr();
    let st = unsafe { colibri_grammar_new(m, format, schema.as_ptr().cast::<c_char>(), schema.len(), &mut g) };
    let err = unsafe { CStr::from_ptr(colibri_last_error_message()) }.to_string_lossy().into_owned();
    (st, g, err)
}

unsafe extern "C" fn collect(ud: *mut c_void, _token: i32, text: *const c_char, len: usize) -> i32 {
    // SAFETY: the test passes a &mut Vec<u8>; the library passes len readable bytes.
    unsafe { (*ud.cast::<Vec<u8>>()).extend_from_slice(std::slice::from_raw_parts(text.cast::<u8>(), len)) };
    0
}

fn generate(s: *mut colibri_session, p: &colibri_generate_params) -> (colibri_status, String, i32) {
    let mut text = Vec::<u8>::new();
    let mut r = colibri_generate_result::default();
    let ud = (&mut text as *mut Vec<u8>).cast::<c_void>();
    let st = unsafe { colibri_generate(s, PROMPT.as_ptr(), PROMPT.len(), p, Some(collect), ud, null_mut(), 0, &mut r) };
    (st, String::from_utf8(text).unwrap(), r.finish_reason)
}

#[test]
fn bad_schemas_get_a_status_and_a_last_error() {
    let m = open_model();
    let mut g = null_mut();
    let st = unsafe { colibri_grammar_new(m, COLIBRI_RESPONSE_JSON_SCHEMA, null(), 5, &mut g) };
    assert_eq!((st, g), (COLIBRI_STATUS_NULL_ARGUMENT, null_mut()));
    let (st, g, err) = grammar(m, COLIBRI_RESPONSE_JSON_SCHEMA, b"{\"type\": \xff\xfe}");
    assert_eq!((st, g.is_null()), (COLIBRI_STATUS_INVALID_ARGUMENT, true));
    assert!(err.contains("not UTF-8"), "{err}");
    let (st, _, err) = grammar(m, COLIBRI_RESPONSE_JSON_SCHEMA, b"{\"type\": ");
    assert_eq!(st, COLIBRI_STATUS_INVALID_ARGUMENT);
    assert!(err.contains("not valid JSON"), "{err}");
    let (st, _, err) = grammar(m, COLIBRI_RESPONSE_JSON_SCHEMA, br#"{"type": "no-such-type"}"#);
    assert_eq!(st, COLIBRI_STATUS_INVALID_ARGUMENT);
    assert!(err.contains("response format"), "{err}");
    assert_eq!(grammar(m, 99, b"").0, COLIBRI_STATUS_INVALID_ARGUMENT);
    assert_eq!(grammar(null(), COLIBRI_RESPONSE_JSON_OBJECT, b"").0, COLIBRI_STATUS_NULL_ARGUMENT);
    unsafe { colibri_model_free(m) };
}

#[test]
fn generations_that_end_on_end_of_sequence_are_documents_of_the_schema() {
    let m = open_model();
    let (st, g, _) = grammar(m, COLIBRI_RESPONSE_JSON_SCHEMA, SCHEMA.as_bytes());
    assert_eq!(st, COLIBRI_STATUS_OK);
    let mut s = null_mut();
    assert_eq!(unsafe { colibri_session_new(m, null(), &mut s) }, COLIBRI_STATUS_OK);
    let mut finished = 0;
    for seed in 0..16 {
        let mut p = colibri_generate_params::default();
        (p.temperature, p.top_k, p.seed, p.max_tokens, p.grammar) = (1.0, 0, seed, 48, g);
        assert_eq!(unsafe { colibri_session_reset(s) }, COLIBRI_STATUS_OK);
        let (st, text, finish) = generate(s, &p);
        assert_eq!(st, COLIBRI_STATUS_OK);
        if finish == COLIBRI_FINISH_EOS {
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("seed {seed}: {text:?}: {e}"));
            assert!(["yes", "no"].contains(&v["answer"].as_str().unwrap()), "{text}");
            assert!(v["count"].as_u64().unwrap() <= 9 && v.as_object().unwrap().len() == 2, "{text}");
            finished += 1;
        } else {
            assert_eq!(finish, COLIBRI_FINISH_LENGTH, "seed {seed}");
        }
    }
    assert!(finished >= 12, "{finished}/16 seeds finished a document");

    // The size before `grammar` is still read (no grammar).
    let mut old = colibri_generate_params { max_tokens: 4, ..Default::default() };
    old.struct_size = std::mem::offset_of!(colibri_generate_params, grammar) as u32;
    assert_eq!(generate(s, &old).0, COLIBRI_STATUS_OK);
    // A stop string ends the output under a grammar (the document is then incomplete: `{"` is
    // the only start the schema allows); ignore_eos is refused.
    let stop = CString::new("\"").unwrap();
    let stops = [stop.as_ptr()];
    let p = colibri_generate_params { grammar: g, stop: stops.as_ptr(), n_stop: 1, ..Default::default() };
    assert_eq!(generate(s, &p), (COLIBRI_STATUS_OK, "{".to_string(), COLIBRI_FINISH_STOP));
    let p = colibri_generate_params { grammar: g, ignore_eos: 1, ..Default::default() };
    assert_eq!(generate(s, &p).0, COLIBRI_STATUS_INVALID_ARGUMENT);

    // A grammar of another model's vocabulary is refused.
    let other = open_model();
    let mut s2 = null_mut();
    assert_eq!(unsafe { colibri_session_new(other, null(), &mut s2) }, COLIBRI_STATUS_OK);
    let p = colibri_generate_params { grammar: g, ..Default::default() };
    assert_eq!(generate(s2, &p).0, COLIBRI_STATUS_INVALID_ARGUMENT);
    unsafe {
        colibri_session_free(s2);
        colibri_model_free(other);
        colibri_session_free(s);
        colibri_grammar_free(g);
        colibri_model_free(m);
    }
}
