//! Session state files: a session's cached tokens (KV rows of every attention layer, the
//! recurrent state of DeltaNet layers), its routing RNG and its last logits, written to a file
//! and read back into a session of the same model — as llama.cpp's state files, so a host can
//! keep a long system prompt or a conversation on disk and continue it later without
//! recomputing it. The routing trace is not saved.
//!
//! Layout (little-endian), version 1:
//! ```text
//! 0   magic "COLISTAT"
//! 8   u32 version, u32 KV element (0 f32, 1 f16, 2 bf16)
//! 16  u64 model fingerprint: xxh64 of the model file's bytes before its tensor data
//! 24  u64 positions (tokens cached), u64 token ids stored (0 or positions)
//! 40  u64 K row, u64 V row, u64 layers that cache KV, u64 recurrent values
//! 72  u64 logits values, 80 u64 × 4 routing RNG state
//! 112 token ids (u32 each), logits (f32), then per caching layer K [positions × K row] and
//!     V [positions × V row] in the KV element type, then the recurrent state (f32)
//! end u64 xxh64 of every byte before it
//! ```
//! Saving writes a temporary file beside the target and renames it into place; loading reads
//! and checks the whole file before it changes the session, so a bad file changes nothing.

use super::{RecurrentState, Session, Store};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::rng::Rng;
use std::io::Write;
use std::path::Path;
use xxhash_rust::xxh64::{xxh64, Xxh64};

const MAGIC: &[u8; 8] = b"COLISTAT";
const VERSION: u32 = 1;
const HEAD: usize = 112;

/// The identity a state file is tied to: a hash of the model file's header, metadata and tensor
/// table (which carries every tensor's checksum).
pub fn model_fingerprint(model: &Model) -> u64 {
    let end = usize::try_from(model.parsed().header.data_offset).unwrap_or(usize::MAX);
    let bytes = model.bytes();
    xxh64(&bytes[..end.min(bytes.len())], 0)
}

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::InvalidArgument { reason: format!("state file {}: {}", path.display(), reason.into()) }
}

/// The fixed-size head of a state file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Head {
    element: u32,
    fingerprint: u64,
    positions: u64,
    tokens: u64,
    k_row: u64,
    v_row: u64,
    layers: u64,
    recurrent: u64,
    logits: u64,
    rng: [u64; 4],
}

impl Head {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEAD);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.element.to_le_bytes());
        let words = [self.fingerprint, self.positions, self.tokens, self.k_row, self.v_row, self.layers];
        for w in words.into_iter().chain([self.recurrent, self.logits]).chain(self.rng) {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    fn decode(b: &[u8], path: &Path) -> Result<Head> {
        if b.len() < HEAD + 8 || &b[..8] != MAGIC {
            return Err(bad(path, "not a colibri session state file (no COLISTAT magic)"));
        }
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default());
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
        if u32_at(8) != VERSION {
            return Err(bad(path, format!("version {} (this library reads {VERSION})", u32_at(8))));
        }
        Ok(Head {
            element: u32_at(12),
            fingerprint: u64_at(16),
            positions: u64_at(24),
            tokens: u64_at(32),
            k_row: u64_at(40),
            v_row: u64_at(48),
            layers: u64_at(56),
            recurrent: u64_at(64),
            logits: u64_at(72),
            rng: [u64_at(80), u64_at(88), u64_at(96), u64_at(104)],
        })
    }

    fn element_size(&self) -> u64 {
        if self.element == 0 {
            4
        } else {
            2
        }
    }

    /// Total file length the head implies (None on overflow).
    fn file_len(&self) -> Option<u64> {
        let kv = self.k_row.checked_add(self.v_row)?.checked_mul(self.positions)?.checked_mul(self.layers)?;
        let parts = [
            self.tokens.checked_mul(4)?,
            self.logits.checked_mul(4)?,
            kv.checked_mul(self.element_size())?,
            self.recurrent.checked_mul(4)?,
        ];
        parts.into_iter().try_fold(HEAD as u64 + 8, |a, p| a.checked_add(p))
    }
}

fn element_code(s: &Store) -> u32 {
    match s {
        Store::F32(_) => 0,
        Store::Half { bf16: false, .. } => 1,
        Store::Half { bf16: true, .. } => 2,
    }
}

/// Writes through a hasher: every byte written is also hashed.
struct Hashed<W: Write> {
    out: W,
    hash: Xxh64,
}

impl<W: Write> Hashed<W> {
    fn put(&mut self, b: &[u8]) -> Result<()> {
        self.hash.update(b);
        self.out.write_all(b).map_err(|e| Error::io("write session state", e))
    }

    fn f32s(&mut self, v: &[f32]) -> Result<()> {
        v.chunks(4096).try_for_each(|c| self.put(&c.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()))
    }

    fn store(&mut self, s: &Store, values: usize) -> Result<()> {
        match s {
            Store::F32(d) => self.f32s(&d[..values]),
            Store::Half { bits, .. } => bits[..values]
                .chunks(8192)
                .try_for_each(|c| self.put(&c.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())),
        }
    }
}

impl Session {
    /// Write this session's state (its `position()` cached tokens, recurrent state, routing RNG
    /// and last logits) for `model` to `path`, with `tokens` — the ids of the cached tokens, or
    /// empty — stored beside it for the host. Written to a temporary file and renamed into
    /// place: a failure leaves any previous file at `path` as it was.
    pub fn save_state(&self, model: &Model, tokens: &[u32], path: &Path) -> Result<()> {
        if !self.kv.fits(model.config()) || !self.rec.fits(model.config()) {
            return Err(Error::InvalidArgument { reason: "the session belongs to another model".into() });
        }
        if !tokens.is_empty() && tokens.len() != self.pos {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "{} token ids given for {} cached tokens (give all of them or none)",
                    tokens.len(),
                    self.pos
                ),
            });
        }
        let (layers, _) = self.caching();
        let head = Head {
            element: self.kv.k.first().map_or(0, element_code),
            fingerprint: model_fingerprint(model),
            positions: self.pos as u64,
            tokens: tokens.len() as u64,
            k_row: self.kv.row as u64,
            v_row: self.kv.v_row as u64,
            layers: layers.len() as u64,
            recurrent: (self.rec.bytes() / 4) as u64,
            logits: self.logits.len() as u64,
            rng: self.rng.state(),
        };
        let tmp = path.with_file_name(format!(
            ".{}.tmp{}",
            path.file_name().and_then(|n| n.to_str()).unwrap_or("state"),
            std::process::id()
        ));
        let written = self.write_body(&head, tokens, &layers, &tmp);
        let renamed =
            written.and_then(|()| std::fs::rename(&tmp, path).map_err(|e| Error::io("rename session state", e)));
        if renamed.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        renamed
    }

    /// The attention layers' indices, and the cached values per layer.
    fn caching(&self) -> (Vec<usize>, usize) {
        let layers = (0..self.kv.attends.len()).filter(|&l| self.kv.attends[l]).collect();
        (layers, self.pos * (self.kv.row + self.kv.v_row))
    }

    fn write_body(&self, head: &Head, tokens: &[u32], layers: &[usize], tmp: &Path) -> Result<()> {
        let file = std::fs::File::create(tmp).map_err(|e| Error::io("create session state", e))?;
        let mut w = Hashed { out: std::io::BufWriter::new(file), hash: Xxh64::new(0) };
        w.put(&head.encode())?;
        w.put(&tokens.iter().flat_map(|t| t.to_le_bytes()).collect::<Vec<u8>>())?;
        w.f32s(&self.logits)?;
        for &l in layers {
            w.store(&self.kv.k[l], self.pos * self.kv.row)?;
            w.store(&self.kv.v[l], self.pos * self.kv.v_row)?;
        }
        for layer in self.rec.layers() {
            w.f32s(&layer.conv)?;
            w.f32s(&layer.delta)?;
        }
        let sum = w.hash.digest().to_le_bytes();
        w.out.write_all(&sum).map_err(|e| Error::io("write session state", e))?;
        let file = w.out.into_inner().map_err(|e| Error::io("write session state", e.into_error()))?;
        file.sync_all().map_err(|e| Error::io("sync session state", e))
    }

    /// Replace this session's state with the one saved in `path` (by `save_state`, for the same
    /// model file) and return the token ids stored with it (empty if none were). The whole file
    /// is read and checked (magic, version, model, shapes, length, checksum, the session's
    /// context) before anything changes: on any error the session is as it was. The KV rows
    /// are converted to this session's KV element type if the file's differs.
    pub fn load_state(&mut self, model: &Model, path: &Path) -> Result<Vec<u32>> {
        let c = model.config();
        let bytes = read_all(path)?;
        let head = Head::decode(&bytes, path)?;
        let (layers, _) = self.caching();
        let want = (self.kv.row as u64, self.kv.v_row as u64, layers.len() as u64, (self.rec.bytes() / 4) as u64);
        if head.fingerprint != model_fingerprint(model) || !self.kv.fits(c) {
            return Err(bad(path, "it was saved for another model file"));
        }
        if (head.k_row, head.v_row, head.layers, head.recurrent) != want || head.element > 2 {
            return Err(bad(path, "its shapes do not match this model's cache"));
        }
        if head.file_len() != Some(bytes.len() as u64) {
            return Err(bad(
                path,
                format!("{} bytes where its head implies {:?} (truncated?)", bytes.len(), head.file_len()),
            ));
        }
        let (body, sum) = bytes.split_at(bytes.len() - 8);
        if xxh64(body, 0).to_le_bytes() != sum {
            return Err(bad(path, "checksum mismatch (the file is damaged)"));
        }
        let positions = usize::try_from(head.positions).map_err(|_| bad(path, "too many positions"))?;
        if positions > self.n_ctx() {
            return Err(Error::ContextFull { cached: 0, new: positions, n_ctx: self.n_ctx(), sequence: None });
        }
        if head.tokens != 0 && head.tokens != head.positions {
            return Err(bad(path, "its token ids do not cover its positions"));
        }
        let mut logits = Vec::new();
        crate::fallible::reserve_exact(&mut logits, head.logits as usize)
            .map_err(|_| Error::OutOfMemory { what: "restored logits".into(), bytes: head.logits.saturating_mul(4) })?;
        self.kv.reserve(positions)?;
        let mut r = Reader { b: &body[HEAD..] };
        let tokens = (0..head.tokens).map(|_| r.u32()).collect();
        logits.extend((0..head.logits).map(|_| r.f32()));
        for &l in &layers {
            for (store, row) in [(&mut self.kv.k[l], self.kv.row), (&mut self.kv.v[l], self.kv.v_row)] {
                for i in 0..positions * row {
                    store.set(i, r.element(head.element));
                }
            }
        }
        for layer in self.rec.layers_mut() {
            layer.conv.iter_mut().chain(layer.delta.iter_mut()).for_each(|x| *x = r.f32());
        }
        self.pos = positions;
        self.logits = logits;
        self.rng = Rng::from_state(head.rng);
        self.after_restore();
        Ok(tokens)
    }
}

/// The number of token ids stored in the state file at `path` (reads its head only; `load_state`
/// checks the whole file).
pub fn stored_tokens(path: &Path) -> Result<usize> {
    use std::io::Read;
    let mut head = [0u8; HEAD + 8];
    let mut f = std::fs::File::open(path).map_err(|e| Error::io("open session state", e))?;
    f.read_exact(&mut head).map_err(|_| bad(path, "shorter than a state file's head"))?;
    let tokens = Head::decode(&head, path)?.tokens;
    usize::try_from(tokens).map_err(|_| bad(path, "too many token ids"))
}

fn read_all(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| Error::io("open session state", e))?;
    let len = f.metadata().map_err(|e| Error::io("stat session state", e))?.len();
    let mut bytes = Vec::new();
    crate::fallible::reserve_exact(&mut bytes, len as usize)
        .map_err(|_| Error::OutOfMemory { what: "reading a session state file".into(), bytes: len })?;
    f.read_to_end(&mut bytes).map_err(|e| Error::io("read session state", e))?;
    Ok(bytes)
}

/// Sequential little-endian reads from a body whose length was checked against its head.
struct Reader<'a> {
    b: &'a [u8],
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (a, rest) = self.b.split_at(N);
        self.b = rest;
        a.try_into().unwrap_or([0; N])
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }

    fn f32(&mut self) -> f32 {
        f32::from_le_bytes(self.take())
    }

    /// One KV element of file type `element` (0 f32, 1 f16, 2 bf16) as f32.
    fn element(&mut self, element: u32) -> f32 {
        match element {
            0 => self.f32(),
            1 => half::f16::from_bits(u16::from_le_bytes(self.take())).to_f32(),
            _ => half::bf16::from_bits(u16::from_le_bytes(self.take())).to_f32(),
        }
    }
}

/// RecurrentState as it is needed here: its layers in order.
impl RecurrentState {
    fn layers(&self) -> impl Iterator<Item = &super::LayerState> {
        self.current()
    }

    fn layers_mut(&mut self) -> impl Iterator<Item = &mut super::LayerState> {
        self.replace()
    }
}
