//! The bytes each token id stands for, read from the tokenizer's pieces and its decoder: what a
//! grammar engine matches tokens against. Byte-level BPE pieces ('Ġworld') map back through
//! GPT-2's byte table; sentencepiece pieces ('▁Hello', '<0x0A>') through the Replace and
//! ByteFallback steps of their decoder; added tokens are their literal text, special ones behind
//! the 0xFF marker (which no grammar over UTF-8 text can match). A piece that fits none of these
//! gets no bytes: it is never allowed under a grammar.

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;
use serde_json::Value;

/// The marker byte in front of a special token's text (llguidance's `SPECIAL_TOKEN_MARKER`).
pub const SPECIAL_MARKER: u8 = 0xFF;

/// How the decoder turns a vocabulary piece into text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PieceKind {
    /// GPT-2 byte-level: each character of a piece stands for one byte.
    ByteLevel,
    /// Sentencepiece: `space` stands for ' ', `<0xNN>` pieces are single bytes when
    /// `byte_fallback`.
    SentencePiece { space: char, byte_fallback: bool },
}

/// The piece kind of a tokenizer.json `decoder` section.
pub fn piece_kind(decoder: Option<&Value>) -> Result<PieceKind> {
    let unsupported = |what: String| Error::Unsupported { what };
    let Some(d) = decoder else {
        return Err(unsupported("grammars need a tokenizer with a decoder (tokenizer.json has none)".into()));
    };
    let kind = d.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "ByteLevel" => Ok(PieceKind::ByteLevel),
        "Metaspace" => {
            let space = d.get("replacement").and_then(Value::as_str).and_then(single_char).unwrap_or('▁');
            Ok(PieceKind::SentencePiece { space, byte_fallback: false })
        }
        "Sequence" => {
            let steps = d.get("decoders").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
            if steps.iter().any(|s| s.get("type").and_then(Value::as_str) == Some("ByteLevel")) {
                return Ok(PieceKind::ByteLevel);
            }
            let byte_fallback = steps.iter().any(|s| s.get("type").and_then(Value::as_str) == Some("ByteFallback"));
            let space = steps.iter().find_map(replaced_space).unwrap_or('▁');
            Ok(PieceKind::SentencePiece { space, byte_fallback })
        }
        other => Err(unsupported(format!("grammars do not support the tokenizer decoder {:?}", other))),
    }
}

fn single_char(s: &str) -> Option<char> {
    let mut it = s.chars();
    match (it.next(), it.next()) {
        (Some(c), None) => Some(c),
        _ => None,
    }
}

/// The character a `Replace` (or `Metaspace`) decoder step turns into ' '.
fn replaced_space(step: &Value) -> Option<char> {
    match step.get("type").and_then(Value::as_str)? {
        "Replace" if step.get("content").and_then(Value::as_str) == Some(" ") => {
            step.get("pattern").and_then(|p| p.get("String")).and_then(Value::as_str).and_then(single_char)
        }
        "Metaspace" => step.get("replacement").and_then(Value::as_str).and_then(single_char),
        _ => None,
    }
}

/// [256] the byte of each GPT-2 byte-level character (index: the character's code point below
/// 0x144), 0xFFFF for characters that stand for no byte.
fn byte_level_table() -> Vec<u16> {
    let mut table = vec![0xFFFFu16; 0x144];
    let mut next = 0x100usize;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let c = if printable {
            usize::from(b)
        } else {
            next += 1;
            next - 1
        };
        table[c] = u16::from(b);
    }
    table
}

/// The bytes of a byte-level piece, None if a character stands for no byte.
fn byte_level_bytes(table: &[u16], piece: &str) -> Option<Vec<u8>> {
    piece.chars().map(|c| table.get(c as usize).and_then(|&b| u8::try_from(b).ok())).collect()
}

/// The bytes of a sentencepiece piece: `<0xNN>` → that byte (with byte fallback), else its text
/// with `space` as ' '.
fn sentencepiece_bytes(piece: &str, space: char, byte_fallback: bool) -> Vec<u8> {
    if byte_fallback && piece.len() == 6 && piece.starts_with("<0x") && piece.ends_with('>') {
        if let Ok(b) = u8::from_str_radix(&piece[3..5], 16) {
            return vec![b];
        }
    }
    piece.replace(space, " ").into_bytes()
}

/// [tokenizer.vocab_size()] the bytes of every token id (empty: never allowed under a grammar).
pub fn token_bytes(tokenizer: &Tokenizer) -> Result<Vec<Vec<u8>>> {
    let kind = piece_kind(tokenizer.decoder_json().as_ref())?;
    let added = tokenizer.added_ids();
    let table = byte_level_table();
    let bytes = (0..tokenizer.vocab_size() as u32)
        .map(|id| {
            let Some(piece) = tokenizer.token_piece(id) else { return Vec::new() };
            if tokenizer.is_special(id) {
                return [&[SPECIAL_MARKER][..], piece.as_bytes()].concat();
            }
            if added.binary_search(&id).is_ok() {
                return piece.into_bytes();
            }
            match kind {
                PieceKind::ByteLevel => byte_level_bytes(&table, &piece).unwrap_or_default(),
                PieceKind::SentencePiece { space, byte_fallback } => sentencepiece_bytes(&piece, space, byte_fallback),
            }
        })
        .collect();
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn byte_level_pieces_map_back_to_their_bytes() {
        let t = byte_level_table();
        assert_eq!(byte_level_bytes(&t, "Ġworld"), Some(b" world".to_vec()));
        assert_eq!(byte_level_bytes(&t, "Ċ"), Some(b"\n".to_vec()));
        // 'Ã©' is the two bytes of 'é'.
        assert_eq!(byte_level_bytes(&t, "Ã©"), Some("é".as_bytes().to_vec()));
        assert_eq!(byte_level_bytes(&t, "a b"), None, "a raw space stands for no byte");
    }

    #[test]
    fn sentencepiece_pieces_and_decoder_kinds() {
        assert_eq!(sentencepiece_bytes("▁Hello", '▁', true), b" Hello".to_vec());
        assert_eq!(sentencepiece_bytes("<0x0A>", '▁', true), b"\n".to_vec());
        assert_eq!(sentencepiece_bytes("<0x0A>", '▁', false), b"<0x0A>".to_vec());
        let seq = json!({"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]});
        assert_eq!(piece_kind(Some(&seq)).unwrap(), PieceKind::SentencePiece { space: '▁', byte_fallback: true });
        assert_eq!(piece_kind(Some(&json!({"type": "ByteLevel"}))).unwrap(), PieceKind::ByteLevel);
        assert!(piece_kind(Some(&json!({"type": "WordPiece"}))).is_err());
        assert!(piece_kind(None).is_err());
    }
}
