//! The prompt cache: sessions of finished requests kept with the tokens they hold, so that a
//! new request whose prompt starts with the same tokens (a chat's history, a long system
//! prompt) continues from that KV cache instead of recomputing it. A hit hands out a copy of
//! the shared prefix and keeps the entry, so concurrent requests sharing a system prompt all
//! reuse it; the copy belongs to the request (its KV claim covers it). Bounded in bytes (the
//! memory the kept sessions hold), least recently used evicted first; owned by the scheduler
//! thread.
//!
//! Correctness per layer kind: attention layers (full or sliding-window: the cache keeps every
//! position) are copied up to the shared prefix exactly (`Session::copy_prefix_from`); a model
//! with recurrent (DeltaNet) layers can only continue from the whole kept state or the start of
//! its last call, so such an entry is reused only when the new prompt extends one of those
//! points (the copy says which); LongRoPE models (Phi-3.5-MoE) are not cached, since their keys
//! depend on the length of the call that computed them.

use super::engine::Engine;
use colibri::session::{Session, SessionOptions};
use std::sync::Arc;

/// Shortest shared prefix worth reusing (below it, recomputing is as cheap).
const MIN_REUSE: usize = 8;

struct Entry {
    engine: Arc<Engine>,
    /// The ids of the session's cached tokens (session.position() of them).
    tokens: Vec<u32>,
    session: Session,
    bytes: u64,
    last_used: u64,
}

/// Kept sessions, at most `limit` bytes of them.
pub struct PromptCache {
    entries: Vec<Entry>,
    limit: u64,
    clock: u64,
}

/// A session copied from the cache: it holds `reused` tokens of the prompt.
pub struct Hit {
    pub session: Session,
    pub reused: usize,
}

fn shared_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Memory a session holds: its allocated KV positions and its recurrent state.
fn held_bytes(s: &Session) -> u64 {
    (s.kv_reserved() as u64).saturating_mul(s.kv_bytes_per_token() as u64).saturating_add(s.state_bytes() as u64)
}

impl PromptCache {
    /// A cache of at most `limit` bytes (0: nothing is kept).
    pub fn new(limit: u64) -> PromptCache {
        PromptCache { entries: Vec::new(), limit, clock: 0 }
    }

    /// Bytes the kept sessions hold.
    pub fn bytes(&self) -> u64 {
        self.entries.iter().map(|e| e.bytes).sum()
    }

    /// Sessions kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    fn cacheable(engine: &Engine) -> bool {
        engine.model.config().longrope_original().is_none()
    }

    /// A new session of `opts` holding the longest prefix (≥ MIN_REUSE tokens) `prompt` shares
    /// with a kept session of `engine` — at most prompt.len() − 1 tokens, so that the last
    /// prompt token is fed and gives logits — copied from it; the entry stays (as the most
    /// recently used). Entries of other engines (an old model generation) are dropped.
    pub fn copy(&mut self, engine: &Arc<Engine>, prompt: &[u32], opts: &SessionOptions) -> Option<Hit> {
        self.entries.retain(|e| Arc::ptr_eq(&e.engine, engine));
        let mut order: Vec<(usize, usize)> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (shared_prefix(&e.tokens, prompt).min(prompt.len().saturating_sub(1)), i))
            .filter(|&(n, _)| n >= MIN_REUSE)
            .collect();
        order.sort_by(|a, b| b.cmp(a));
        if order.is_empty() {
            // No candidate: no session made (a DeltaNet model's zeroed recurrent state alone is
            // many MiB per layer).
            return None;
        }
        let mut session = Session::new(engine.model.config(), opts).ok()?;
        for (n, i) in order {
            // A recurrent model refuses cut points it cannot restore (and a copy may not find
            // its memory): try the next entry.
            if session.copy_prefix_from(&self.entries[i].session, n).is_ok() {
                self.clock += 1;
                self.entries[i].last_used = self.clock;
                return Some(Hit { session, reused: n });
            }
        }
        None
    }

    /// Keep `session` (holding `tokens`) of `engine`, evicting the least recently used entries
    /// to stay within the limit; a session larger than the whole limit is dropped. An entry
    /// whose tokens are a prefix of the new one's is replaced by it.
    pub fn put(&mut self, engine: &Arc<Engine>, tokens: &[u32], session: Session) {
        if !Self::cacheable(engine) || tokens.len() != session.position() || tokens.len() < MIN_REUSE {
            return;
        }
        let bytes = held_bytes(&session);
        if bytes > self.limit {
            return;
        }
        self.entries.retain(|e| {
            Arc::ptr_eq(&e.engine, engine) && !(e.tokens.len() <= tokens.len() && tokens.starts_with(&e.tokens))
        });
        while self.bytes() + bytes > self.limit {
            let Some(oldest) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].last_used) else { break };
            self.entries.swap_remove(oldest);
        }
        self.clock += 1;
        let entry = Entry { engine: engine.clone(), tokens: tokens.to_vec(), session, bytes, last_used: self.clock };
        self.entries.push(entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use colibri::forward::{forward, ForwardOptions, Input};

    /// Two requests sharing a kept prefix both get a copy of it, the entry and the cache's
    /// bytes stay, and each copy holds what the kept session held (it continues as it would).
    #[test]
    fn a_hit_copies_and_keeps_the_entry() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/default.colibri");
        let engine = Arc::new(Engine::load(&path, 64, Default::default(), 1).unwrap());
        let (m, opts) = (&engine.model, SessionOptions { n_ctx: 64, ..Default::default() });
        let kept: Vec<u32> = (0..20).map(|i| i * 37 % 4096).collect();
        let mut s = Session::new(m.config(), &opts).unwrap();
        forward(m, &mut s, Input::Tokens(&kept), &ForwardOptions::default()).unwrap();
        let mut cache = PromptCache::new(1 << 30);
        cache.put(&engine, &kept, s);
        let bytes = cache.bytes();
        let mut want = Session::new(m.config(), &opts).unwrap();
        forward(m, &mut want, Input::Tokens(&kept), &ForwardOptions::default()).unwrap();
        want.truncate(12).unwrap();
        forward(m, &mut want, Input::Tokens(&[7, 8]), &ForwardOptions::default()).unwrap();
        for tail in [[1u32, 2, 3], [4, 5, 6]] {
            let prompt = [&kept[..12], &tail[..]].concat();
            let hit = cache.copy(&engine, &prompt, &opts).expect("a hit");
            assert_eq!((hit.reused, hit.session.position()), (12, 12));
            assert_eq!((cache.len(), cache.bytes()), (1, bytes), "the entry stays");
            let mut got = hit.session;
            forward(m, &mut got, Input::Tokens(&[7, 8]), &ForwardOptions::default()).unwrap();
            assert_eq!(got.logits(), want.logits(), "the copy continues as the kept session cut there");
        }
        assert!(cache.copy(&engine, &[9; 30], &opts).is_none(), "nothing shared");
    }
}
