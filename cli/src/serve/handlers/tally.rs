//! The end of a streamed request with several choices: each choice's `Done` counted into the
//! request's log record; the stream is complete (usage and `[DONE]` follow, the log line is
//! written) when the last choice ends.

use crate::serve::job::Done;
use crate::serve::openai::usage;
use crate::serve::reqlog::{Record, StreamRecord};
use serde_json::Value;

pub struct Tally {
    left: usize,
    record: StreamRecord,
    usage: Value,
}

impl Tally {
    /// A stream of `n` choices, logged as `record`.
    pub fn new(n: usize, record: Record) -> Tally {
        Tally { left: n, record: StreamRecord(Some(record)), usage: Value::Null }
    }

    /// Count one choice's end; true when it was the last (the log line is then written).
    pub fn done(&mut self, d: &Done) -> bool {
        if let Some(r) = self.record.0.as_mut() {
            r.add(d);
            self.usage = usage(r.prompt_tokens, r.completion_tokens, r.cached_tokens);
        }
        self.left = self.left.saturating_sub(1);
        if self.left == 0 {
            self.record.finish();
        }
        self.left == 0
    }

    /// The request's `usage` so far.
    pub fn usage(&self) -> Value {
        self.usage.clone()
    }
}
