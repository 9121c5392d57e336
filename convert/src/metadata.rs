//! The metadata blobs a conversion stores: config, tokenizer.json, tokenizer_config.json, chat
//! template, generation_config.json, the original config.json, provenance (with the
//! quantisation applied) and the user blob.
//! Special-token ids are gathered here and written into the config.

use super::{hf_config, ConvertArgs};
use crate::error::{fail, Result};
use colibri::format::MetaKind;
use colibri::model::{meta_keys, Config};
use serde_json::Value;
use std::path::Path;

/// Largest user metadata blob accepted.
const MAX_USER_METADATA: u64 = 16 << 20;

fn read_json(path: &Path) -> Result<Option<(String, Value)>> {
    if !path.is_file() {
        return Ok(None);
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read {name}: {e}")))?;
    let v = serde_json::from_str(&text).map_err(|e| fail(format!("{name} is not valid JSON: {e}")))?;
    Ok(Some((text, v)))
}

/// Id of a token string in a tokenizer.json (added tokens first, then the model vocab).
fn token_id(tokenizer: &Value, token: &str) -> Option<u32> {
    let added = tokenizer.get("added_tokens").and_then(|a| a.as_array());
    if let Some(t) = added.into_iter().flatten().find(|t| t.get("content").and_then(|c| c.as_str()) == Some(token)) {
        return t.get("id").and_then(|i| i.as_u64()).map(|i| i as u32);
    }
    tokenizer.get("model")?.get("vocab")?.get(token)?.as_u64().map(|i| i as u32)
}

/// A special token in tokenizer_config.json: a string or {"content": "..."}.
fn special(tc: &Value, key: &str) -> Option<String> {
    match tc.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(|c| c.as_str()).map(String::from),
        _ => None,
    }
}

/// The chat template: chat_template.jinja, chat_template.json, or tokenizer_config's entry
/// (a string, or a list of named templates of which "default" is taken).
fn chat_template(dir: &Path, tc: Option<&Value>) -> Result<Option<String>> {
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        return std::fs::read_to_string(&jinja).map(Some).map_err(|e| fail(format!("chat_template.jinja: {e}")));
    }
    let from_value = |v: &Value| -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            Value::Array(list) => list
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .or_else(|| list.first())
                .and_then(|t| t.get("template"))
                .and_then(|t| t.as_str())
                .map(String::from),
            _ => None,
        }
    };
    if let Some((_, v)) = read_json(&dir.join("chat_template.json"))? {
        if let Some(t) = v.get("chat_template").and_then(from_value) {
            return Ok(Some(t));
        }
    }
    Ok(tc.and_then(|tc| tc.get("chat_template")).and_then(from_value))
}

/// Today's date (UTC) as YYYY-MM-DD, from the system clock.
pub(crate) fn today() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let days = (secs / 86_400) as i64;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// One metadata entry as the writer takes it.
pub type MetaEntry = (String, MetaKind, Vec<u8>);

/// Gather the metadata entries read from the checkpoint (all but provenance and the user blob);
/// fills the special-token ids of `config`.
pub fn gather(dir: &Path, hf_text: &str, config: &mut Config, warnings: &mut Vec<String>) -> Result<Vec<MetaEntry>> {
    let (tok_text, tok) = read_json(&dir.join("tokenizer.json"))?.ok_or_else(|| {
        fail(format!("missing tokenizer.json in {} (colibri needs the HuggingFace fast-tokenizer file)", dir.display()))
    })?;
    let tc = read_json(&dir.join("tokenizer_config.json"))?;
    let gen = read_json(&dir.join("generation_config.json"))?;

    // Special tokens: generation_config.json, then config.json, then tokenizer_config.json.
    if let Some((_, g)) = &gen {
        if let Some(b) = hf_config::ids(g.get("bos_token_id")).first() {
            config.bos_token_id = Some(*b);
        }
        for e in hf_config::ids(g.get("eos_token_id")) {
            if !config.eos_token_ids.contains(&e) {
                config.eos_token_ids.push(e);
            }
        }
    }
    if let Some((_, tc)) = &tc {
        if config.bos_token_id.is_none() {
            config.bos_token_id = special(tc, "bos_token").and_then(|t| token_id(&tok, &t));
        }
        if let Some(e) = special(tc, "eos_token").and_then(|t| token_id(&tok, &t)) {
            if !config.eos_token_ids.contains(&e) {
                config.eos_token_ids.push(e);
            }
        }
        if config.pad_token_id.is_none() {
            config.pad_token_id = special(tc, "pad_token").and_then(|t| token_id(&tok, &t));
        }
    }
    let vocab = config.vocab_size as u32;
    let mut drop_bad = |what: &str, id: u32| {
        let ok = id < vocab;
        if !ok {
            warnings.push(format!("{what} id {id} is outside the vocabulary ({vocab}); ignored"));
        }
        ok
    };
    config.bos_token_id = config.bos_token_id.filter(|&i| drop_bad("bos token", i));
    config.pad_token_id = config.pad_token_id.filter(|&i| drop_bad("pad token", i));
    config.eos_token_ids.retain(|&i| drop_bad("eos token", i));

    // The tokenizer must fit the model, as every loader of the file checks (ids inside the
    // vocabulary, bos / eos known): refuse here rather than write a file `validate` refuses.
    match colibri::tokenizer::Tokenizer::from_json(&tok_text, tc.as_ref().map(|(t, _)| t.as_str()), config) {
        Ok(_) | Err(colibri::Error::Unsupported { .. }) => {}
        Err(e) => return Err(fail(format!("tokenizer.json does not fit the model: {e}"))),
    }
    let config_json = serde_json::to_vec(config).map_err(|e| fail(format!("serialising config: {e}")))?;
    let mut meta = vec![
        (meta_keys::CONFIG.to_string(), MetaKind::Json, config_json),
        (meta_keys::TOKENIZER.to_string(), MetaKind::Json, tok_text.into_bytes()),
    ];
    if let Some(t) = chat_template(dir, tc.as_ref().map(|(_, v)| v))? {
        meta.push((meta_keys::CHAT_TEMPLATE.to_string(), MetaKind::Text, t.into_bytes()));
    }
    if let Some((text, _)) = tc {
        meta.push(("tokenizer_config".to_string(), MetaKind::Json, text.into_bytes()));
    }
    if let Some((text, _)) = gen {
        meta.push(("generation_config".to_string(), MetaKind::Json, text.into_bytes()));
    }
    meta.push(("hf_config".to_string(), MetaKind::Json, hf_text.as_bytes().to_vec()));
    Ok(meta)
}

/// The provenance entry: source, converter, date, dtype and (with `--quantize`) `quantization`.
pub fn provenance(dir: &Path, config: &Config, args: &ConvertArgs, quantization: Option<Value>) -> MetaEntry {
    let mut provenance = serde_json::json!({
        "source": super::source_name(dir),
        "architecture": config.family.hf_architecture(),
        "converter": format!("colibri {}", colibri::VERSION),
        "date": today(),
        "dtype": args.dtype.map(|d| d.name()).unwrap_or("source"),
    });
    if let Some(q) = quantization {
        provenance["quantization"] = q;
    }
    (meta_keys::PROVENANCE.to_string(), MetaKind::Json, provenance.to_string().into_bytes())
}

/// The user's `--user-metadata` blob, if any.
pub fn user_blob(args: &ConvertArgs) -> Result<Option<MetaEntry>> {
    let Some(path) = &args.user_metadata else { return Ok(None) };
    let size = std::fs::metadata(path).map_err(|e| fail(format!("--user-metadata {}: {e}", path.display())))?.len();
    if size > MAX_USER_METADATA {
        return Err(fail(format!("--user-metadata file is {size} bytes; the limit is {MAX_USER_METADATA}")));
    }
    let bytes = std::fs::read(path).map_err(|e| fail(format!("--user-metadata {}: {e}", path.display())))?;
    Ok(Some((meta_keys::USER.to_string(), MetaKind::Bytes, bytes)))
}
