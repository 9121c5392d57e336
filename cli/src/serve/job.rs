//! What a handler hands the scheduler (a `Job`: the engine it was tokenised with, the prompt ids,
//! the generation parameters, the channel for its events, the other choices that continue from
//! its prompt) and what comes back (`Event`s), plus the admission count that bounds running +
//! waiting jobs.

use super::budget::KvClaim;
use super::engine::Engine;
use colibri::decoder::{DecodeParams, Finish};
use colibri::forward::RoutingOptions;
use colibri::session::{RouteRecord, Session};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// Generation parameters of one request, already validated and clamped.
#[derive(Clone, Debug)]
pub struct JobParams {
    /// Sampling, stop strings, end-of-sequence handling and the token limit (already clamped
    /// to the context left after the prompt).
    pub decode: DecodeParams,
    pub routing: RoutingOptions,
    /// Seed of the session's routing RNG (Gumbel routing).
    pub routing_seed: u64,
    /// Send each token's experts per layer.
    pub return_routing: bool,
    /// Send each token's log-probability and this many alternatives.
    pub logprobs: Option<usize>,
    /// (token id, bias) added to the logits before sampling (OpenAI `logit_bias`).
    pub logit_bias: Vec<(u32, f32)>,
}

pub struct Job {
    pub engine: Arc<Engine>,
    pub prompt: Vec<u32>,
    pub params: JobParams,
    pub events: UnboundedSender<Event>,
    pub enqueued: Instant,
    pub deadline: Option<Instant>,
    /// Held while the job is queued or running: released before its last event, or when dropped.
    pub ticket: Ticket,
    /// The job's share of the KV budget: released before its last event, or when dropped.
    pub kv: KvClaim,
    /// Other choices of the same prompt: once this job's prompt is computed, each gets a copy of
    /// its session (`prefilled`) instead of computing the prompt again. They end with this job
    /// if it ends before that.
    pub followers: Vec<Job>,
    /// The prompt already computed (a copy of the session of the choice that computed it).
    pub prefilled: Option<Prefilled>,
}

/// A session holding a job's whole prompt, with the routing records of the step that computed
/// its last position (its first token's routing).
pub struct Prefilled {
    pub session: Session,
    pub trace: Vec<RouteRecord>,
}

impl Job {
    /// Send the job's last event (`Done` or `Failed`) — and to its followers still waiting for
    /// its prompt — its admission place and KV claim given back first: a client that sends its
    /// next request as soon as this one ends finds them free. False if the client is gone.
    pub fn end(&mut self, last: Event) -> bool {
        for mut f in self.followers.drain(..) {
            f.end(last.clone());
        }
        self.kv.release();
        self.ticket.release();
        self.events.send(last).is_ok()
    }
}

/// Log-probabilities of one generated token under the model's distribution (log-softmax of the
/// raw logits): its own and the `n` most likely.
#[derive(Clone, Debug)]
pub struct TokenLogprob {
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

#[derive(Clone, Debug)]
pub struct Token {
    /// None for the final text-only event that flushes held-back text.
    pub id: Option<u32>,
    /// Newly completed text (may be empty).
    pub text: String,
    pub logprob: Option<TokenLogprob>,
    /// Experts chosen per layer at the position whose logits gave this token.
    pub routing: Option<Vec<Vec<u32>>>,
}

/// Why a sequence ended: the generation's own reasons (`Finish`), or the request's time limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Finished(Finish),
    /// The request's time limit passed.
    Timeout,
}

impl Ending {
    /// The OpenAI `finish_reason`.
    pub fn openai(self) -> &'static str {
        match self {
            Ending::Finished(Finish::Eos | Finish::StopString | Finish::Callback) => "stop",
            Ending::Finished(Finish::Length | Finish::ContextFull) | Ending::Timeout => "length",
        }
    }

    /// The `finish_reason` of `/generate` (docs/api.md), which names a full context.
    pub fn simple(self) -> &'static str {
        match self {
            Ending::Finished(Finish::ContextFull) => "context",
            other => other.openai(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Done {
    pub finish: Ending,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens reused from the prompt cache (counted in prompt_tokens too).
    pub cached_tokens: usize,
    pub timing: Timing,
}

/// Where a sequence's time went, from its enqueueing (for the request log).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timing {
    /// Until the scheduler admitted it (None: never admitted).
    pub queued: Option<std::time::Duration>,
    /// Until its first generated token (None: none generated).
    pub first_token: Option<std::time::Duration>,
}

#[derive(Clone, Debug)]
pub enum Event {
    Token(Token),
    Done(Done),
    /// The engine failed on this sequence (message safe to show).
    Failed(String),
}

/// Counts jobs queued or running against a fixed capacity (--parallel + --queue).
pub struct Admission {
    in_system: AtomicUsize,
    capacity: usize,
}

/// One admitted place; releasing or dropping it gives the place back.
pub struct Ticket(Option<Arc<Admission>>);

impl Ticket {
    /// Give the place back now (idempotent).
    pub fn release(&mut self) {
        if let Some(a) = self.0.take() {
            a.in_system.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.release();
    }
}

impl Admission {
    pub fn new(capacity: usize) -> Arc<Admission> {
        Arc::new(Admission { in_system: AtomicUsize::new(0), capacity })
    }

    /// A place, or None when running + waiting jobs already fill the capacity.
    pub fn try_enter(self: &Arc<Self>) -> Option<Ticket> {
        self.in_system
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.capacity).then_some(n + 1))
            .ok()
            .map(|_| Ticket(Some(self.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::Admission;

    #[test]
    fn admission_is_bounded_and_tickets_give_places_back() {
        let a = Admission::new(2);
        let t1 = a.try_enter().unwrap();
        let _t2 = a.try_enter().unwrap();
        assert!(a.try_enter().is_none());
        drop(t1);
        let mut t3 = a.try_enter().unwrap();
        t3.release();
        t3.release();
        let _t4 = a.try_enter().expect("t3's place is back");
        assert!(a.try_enter().is_none(), "released once, however often asked");
    }
}
