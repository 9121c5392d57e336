//! The scheduler: one OS thread that owns every running sequence and drives the model. Each turn
//! it takes new jobs from its channel, drops sequences whose client is gone or whose time is up,
//! admits waiting jobs up to `parallel` running sequences, then runs ONE `forward_batch` step per
//! model generation over all running sequences (prompt chunks of new ones and the last token of
//! decoding ones together: continuous batching), samples each sequence's next token with its own
//! sampler, and sends the token to the request's channel. Handlers talk to it through channels
//! only; sequences of different model generations are never batched together. The choices of one
//! prompt compute it once: when the first choice's prompt is done, the others (its followers)
//! get copies of its session and wait at the front of the queue to sample their first tokens.

use super::engine::Engine;
use super::job::{Done, Ending, Event, Job, Prefilled, Timing, Token};
use super::logprobs::token_logprob;
use super::metrics::Metrics;
use super::prompt_cache::PromptCache;
use colibri::decoder::{Decoder, Finish};
use colibri::forward::{forward_batch, ForwardOptions, Input, LogitsMode, Sequence};
use colibri::session::{RouteRecord, Session, SessionOptions};
use colibri::Error;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most prompt tokens one sequence feeds per step, so a long prompt does not stall the others.
const PREFILL_CHUNK: usize = 256;

pub enum Command {
    Run(Box<Job>),
    /// Finish the current step, drop everything, end the thread.
    Shutdown,
}

/// The handlers' side: a channel into the scheduler thread.
#[derive(Clone)]
pub struct Scheduler {
    tx: Sender<Command>,
}

impl Scheduler {
    /// Start the scheduler thread, keeping finished sessions in a prompt cache of at most
    /// `cache_bytes` bytes (0: none). Its thread-locals are created first
    /// (`threads::prepare_thread`).
    pub fn start(
        parallel: usize,
        cache_bytes: u64,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<(Scheduler, JoinHandle<()>)> {
        let (tx, rx) = std::sync::mpsc::channel();
        let cache = PromptCache::new(cache_bytes);
        let handle = std::thread::Builder::new().name("colibri-scheduler".into()).spawn(move || {
            crate::prepare_thread();
            Loop { rx, parallel, metrics, waiting: VecDeque::new(), active: Vec::new(), cache }.run()
        })?;
        Ok((Scheduler { tx }, handle))
    }

    /// Queue a job (its admission ticket was taken by the caller). False if the thread is gone.
    pub fn submit(&self, job: Job) -> bool {
        self.tx.send(Command::Run(Box::new(job))).is_ok()
    }

    pub fn shutdown(&self) {
        let _ = self.tx.send(Command::Shutdown);
    }
}

/// One running sequence.
struct Active {
    job: Box<Job>,
    session: Session,
    /// The generation's decisions (sampling, end of sequence, text, stop strings, limit).
    decoder: Decoder,
    /// Prompt tokens already in the session (fed, or reused from the prompt cache).
    fed: usize,
    /// Prompt tokens the session came with from the prompt cache.
    cached: usize,
    last_token_at: Option<Instant>,
    /// Time from enqueueing to admission, and to the first token.
    timing: Timing,
    /// Rows fed in the current step and whether they end with logits to sample from.
    step_rows: usize,
    step_samples: bool,
}

impl Active {
    /// Start a job on the session it came with (its prompt computed by another choice), on a
    /// session from the prompt cache when one shares a prefix with its prompt, else on a new one.
    fn start(mut job: Box<Job>, cache: &mut PromptCache) -> Result<Active, Error> {
        let engine = &job.engine;
        let need = (job.prompt.len() + job.params.decode.max_tokens).min(engine.n_ctx).max(1);
        let prefilled = job.prefilled.take().map(|p| p.session);
        let prefilled_at = prefilled.as_ref().map_or(0, Session::position);
        let opts = SessionOptions { n_ctx: need, routing_seed: job.params.routing_seed, ..SessionOptions::default() };
        let hit = if prefilled.is_some() { None } else { cache.copy(engine, &job.prompt, &opts) };
        let (mut session, cached) = match (hit, prefilled) {
            (Some(hit), _) => {
                let mut s = hit.session;
                s.set_routing_seed(job.params.routing_seed);
                (s, hit.reused)
            }
            (None, Some(s)) => (s, 0),
            (None, None) => (Session::new(engine.model.config(), &opts)?, 0),
        };
        session.set_trace(true);
        let eos = &engine.model.config().eos_token_ids;
        let mut decoder = Decoder::new(&job.params.decode, eos, &job.prompt, Some(&engine.tokenizer))?;
        if job.params.logprobs.is_some() {
            decoder.keep_last_logits();
        }
        decoder.set_logit_bias(&job.params.logit_bias);
        let timing = Timing { queued: Some(job.enqueued.elapsed()), first_token: None };
        let (fed, last_token_at, step_rows, step_samples) = (cached.max(prefilled_at), None, 0, false);
        Ok(Active { job, session, decoder, fed, cached, last_token_at, timing, step_rows, step_samples })
    }

    /// Plan this step: the next prompt chunk, or the last generated token. Sets `step_rows` and
    /// `step_samples`; returns which logits the step needs. LongRoPE models (Phi-MoE) choose
    /// their rotary factors per call, as transformers does: a prompt that reaches past the
    /// original context is fed in one call, and the decode step that first crosses it feeds the
    /// whole history again (`reencode`), as transformers' generate() does.
    fn plan(&mut self) -> LogitsMode {
        let n = self.job.prompt.len();
        let original = self.job.engine.model.config().longrope_original();
        if self.fed < n {
            let chunk = if original.is_some_and(|o| n > o) { n } else { PREFILL_CHUNK };
            self.step_rows = chunk.min(n - self.fed);
            self.step_samples = self.fed + self.step_rows == n;
        } else {
            self.step_rows = if self.reencode() { self.decoder.history().len() } else { 1 };
            self.step_samples = true;
        }
        if self.step_samples {
            LogitsMode::Last
        } else {
            LogitsMode::None
        }
    }

    /// The next decode step is the first past LongRoPE's original context: it re-encodes.
    fn reencode(&self) -> bool {
        self.fed == self.job.prompt.len()
            && self.job.engine.model.config().longrope_original() == Some(self.session.position())
    }

    fn send(&self, e: Event) -> bool {
        self.job.events.send(e).is_ok()
    }
}

/// End a sequence with its own error: its place and KV claim go back first, then the event.
fn fail(mut a: Active, e: &Error) {
    a.job.end(Event::Failed(e.to_string()));
}

/// A job's prompt may join a batch only with ids of its model's vocabulary (the handlers check
/// this too; a batch step refuses the whole batch for one bad id).
fn check_ids(job: &Job) -> Result<(), Error> {
    let vocab = job.engine.model.config().vocab_size;
    match job.prompt.iter().find(|&&id| id as usize >= vocab) {
        Some(id) => Err(Error::InvalidArgument {
            reason: format!("token id {id} is outside the model's vocabulary of {vocab}"),
        }),
        None => Ok(()),
    }
}

struct Loop {
    rx: Receiver<Command>,
    parallel: usize,
    metrics: Arc<Metrics>,
    waiting: VecDeque<Box<Job>>,
    active: Vec<Active>,
    cache: PromptCache,
}

enum After {
    Continue,
    End(Ending),
    Drop,
}

impl Loop {
    fn run(mut self) {
        loop {
            if !self.receive() {
                return;
            }
            self.cancel_gone();
            self.admit();
            self.gauges();
            self.step();
            self.gauges();
        }
    }

    fn gauges(&self) {
        self.metrics.queue_depth.store(self.waiting.len() as u64, Ordering::Relaxed);
        self.metrics.active.store(self.active.len() as u64, Ordering::Relaxed);
    }

    /// Take every pending command; block while there is nothing to do. False on shutdown.
    fn receive(&mut self) -> bool {
        if self.active.is_empty() && self.waiting.is_empty() {
            match self.rx.recv_timeout(Duration::from_millis(200)) {
                Ok(Command::Run(job)) => self.waiting.push_back(job),
                Ok(Command::Shutdown) | Err(RecvTimeoutError::Disconnected) => return false,
                Err(RecvTimeoutError::Timeout) => return true,
            }
        }
        loop {
            match self.rx.try_recv() {
                Ok(Command::Run(job)) => self.waiting.push_back(job),
                Ok(Command::Shutdown) => return false,
                Err(_) => return true,
            }
        }
    }

    /// Drop waiting and running sequences whose client went away (their receiver is closed)
    /// and end those whose deadline passed.
    fn cancel_gone(&mut self) {
        let now = Instant::now();
        self.waiting.retain(|j| !j.events.is_closed());
        for j in self.waiting.iter_mut().filter(|j| j.deadline.is_some_and(|d| now >= d)) {
            let (prompt_tokens, timing) = (j.prompt.len(), Timing::default());
            let done = Done { finish: Ending::Timeout, prompt_tokens, completion_tokens: 0, cached_tokens: 0, timing };
            j.end(Event::Done(done));
        }
        self.waiting.retain(|j| j.deadline.is_none_or(|d| now < d));
        let mut i = 0;
        while i < self.active.len() {
            let a = &self.active[i];
            if a.job.events.is_closed() {
                self.active.swap_remove(i);
            } else if a.job.deadline.is_some_and(|d| now >= d) {
                let a = self.active.swap_remove(i);
                self.finish(a, Ending::Timeout);
            } else {
                i += 1;
            }
        }
    }

    fn admit(&mut self) {
        while self.active.len() < self.parallel {
            let Some(mut job) = self.waiting.pop_front() else { break };
            let events: Vec<_> =
                std::iter::once(job.events.clone()).chain(job.followers.iter().map(|f| f.events.clone())).collect();
            let inherited = job.prefilled.as_ref().map(|p| p.trace.clone());
            if let Err(e) = check_ids(&job) {
                job.end(Event::Failed(e.to_string()));
                continue;
            }
            if job.params.decode.max_tokens == 0 {
                let finish = Ending::Finished(Finish::Length);
                let timing = Timing { queued: Some(job.enqueued.elapsed()), first_token: None };
                let done =
                    Done { finish, prompt_tokens: job.prompt.len(), completion_tokens: 0, cached_tokens: 0, timing };
                job.end(Event::Done(done));
                continue;
            }
            match Active::start(job, &mut self.cache) {
                Ok(a) => {
                    self.metrics.cached_prompt_tokens.fetch_add(a.cached as u64, Ordering::Relaxed);
                    self.active.push(a);
                    // A follower: its prompt is computed, it samples its first token now.
                    if let Some(trace) = inherited {
                        let i = self.active.len() - 1;
                        let after = self.sample(i, &trace);
                        self.settle(i, after);
                    }
                }
                // The job (its place, its KV claim, its followers) was dropped inside `start`.
                Err(e) => events.iter().for_each(|ev| {
                    let _ = ev.send(Event::Failed(e.to_string()));
                }),
            }
        }
    }

    /// One forward step per model generation present, then sampling. A failed step is
    /// attributed to the sequences that cause it: a rejected batch changes no session, so each of
    /// its sequences is stepped alone, and only those that fail alone end, with their own error.
    fn step(&mut self) {
        self.reserve_memory();
        let mut engines: Vec<Arc<Engine>> = Vec::new();
        for a in &self.active {
            if !engines.iter().any(|e| Arc::ptr_eq(e, &a.job.engine)) {
                engines.push(a.job.engine.clone());
            }
        }
        for engine in engines {
            let members: Vec<usize> =
                (0..self.active.len()).filter(|&i| Arc::ptr_eq(&self.active[i].job.engine, &engine)).collect();
            let mut failed: Vec<(usize, Error)> = Vec::new();
            match self.forward(&engine, &members) {
                Ok(()) => {}
                Err(e) if members.len() == 1 => failed.push((members[0], e)),
                Err(_) => {
                    for &i in &members {
                        if let Err(e) = self.forward(&engine, &[i]) {
                            failed.push((i, e));
                        }
                    }
                }
            }
            // Back to front, so that swap_remove leaves the indices still to visit in place.
            for &i in members.iter().rev() {
                if let Some(pos) = failed.iter().position(|(j, _)| *j == i) {
                    let (_, e) = failed.swap_remove(pos);
                    fail(self.active.swap_remove(i), &e);
                    continue;
                }
                let after = self.after_step(i);
                self.settle(i, after);
            }
        }
    }

    /// One `forward_batch` over the active sequences at `which` (all of one engine).
    fn forward(&mut self, engine: &Arc<Engine>, which: &[usize]) -> Result<(), Error> {
        let mut batch: Vec<Sequence<'_>> = Vec::new();
        for (_, a) in self.active.iter_mut().enumerate().filter(|(i, _)| which.contains(i)) {
            let logits = a.plan();
            let reencode = a.reencode();
            let Active { job, decoder, session, fed, step_rows, .. } = a;
            let ids = if *fed < job.prompt.len() {
                &job.prompt[*fed..*fed + *step_rows]
            } else if reencode {
                session.reset();
                decoder.history()
            } else {
                let history = decoder.history();
                &history[history.len() - 1..]
            };
            let opts = ForwardOptions { logits, routing: job.params.routing };
            batch.push(Sequence { session, input: Input::Tokens(ids), opts });
        }
        let model = &engine.model;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| forward_batch(model, &mut batch)))
            .unwrap_or_else(|_| Err(Error::InvalidArgument { reason: "the engine panicked".into() }))
    }

    /// Grow each sequence's KV cache for its rows of the coming step, one sequence at a time:
    /// a request whose memory cannot be had ends alone with the error, the others step on
    /// (the batch step would otherwise fail for all of them).
    fn reserve_memory(&mut self) {
        let mut i = 0;
        while i < self.active.len() {
            let a = &mut self.active[i];
            a.plan();
            match a.session.reserve(a.session.position() + a.step_rows) {
                Ok(()) => i += 1,
                Err(e) => fail(self.active.swap_remove(i), &e),
            }
        }
    }

    /// What `after` says of sequence `i`: it goes on, is dropped, or ends.
    fn settle(&mut self, i: usize, after: After) {
        match after {
            After::Continue => {}
            After::Drop => {
                self.active.swap_remove(i);
            }
            After::End(end) => {
                let a = self.active.swap_remove(i);
                self.finish(a, end);
            }
        }
    }

    /// Book-keeping after a step for sequence `i`: count routing; when its prompt is done, hand
    /// copies of its session to its followers; then sample if it has logits.
    fn after_step(&mut self, i: usize) -> After {
        let metrics = self.metrics.clone();
        let a = &mut self.active[i];
        let trace = a.session.take_trace();
        metrics.count_experts(trace.iter().map(|r| (r.layer, &r.experts[..])));
        if a.fed < a.job.prompt.len() {
            a.fed += a.step_rows;
            metrics.prompt_tokens.fetch_add(a.step_rows as u64, Ordering::Relaxed);
        }
        if !a.step_samples {
            return After::Continue;
        }
        self.hand_over(i, &trace);
        self.sample(i, &trace)
    }

    /// Give each follower of sequence `i` (whose prompt is done) a copy of its session and put
    /// them at the front of the queue, in choice order; a follower whose copy fails ends alone.
    fn hand_over(&mut self, i: usize, trace: &[RouteRecord]) {
        let a = &mut self.active[i];
        let followers = std::mem::take(&mut a.job.followers);
        let copies: Vec<Result<Session, Error>> = followers
            .iter()
            .map(|f| {
                let opts = SessionOptions { n_ctx: a.session.n_ctx(), ..SessionOptions::default() };
                let mut s = Session::new(a.job.engine.model.config(), &opts)?;
                s.copy_from(&a.session)?;
                s.set_routing_seed(f.params.routing_seed);
                Ok(s)
            })
            .collect();
        for (mut f, copy) in followers.into_iter().zip(copies).rev() {
            match copy {
                Ok(session) => {
                    f.prefilled = Some(Prefilled { session, trace: trace.to_vec() });
                    self.waiting.push_front(Box::new(f));
                }
                Err(e) => {
                    f.end(Event::Failed(e.to_string()));
                }
            }
        }
    }

    /// Sample sequence `i`'s next token from its session's logits (`trace`: the routing records
    /// of the step that computed them) and send it.
    fn sample(&mut self, i: usize, trace: &[RouteRecord]) -> After {
        let metrics = self.metrics.clone();
        let a = &mut self.active[i];
        let engine = a.job.engine.clone();
        let step = match a.decoder.next(Some(&engine.tokenizer), a.session.logits()) {
            Ok(step) => step,
            Err(e) => {
                a.job.end(Event::Failed(e.to_string()));
                return After::Drop;
            }
        };
        let now = Instant::now();
        match a.last_token_at {
            None => {
                let ttft = now.duration_since(a.job.enqueued);
                a.timing.first_token = Some(ttft);
                Metrics::observe(&metrics.ttft, ttft.as_secs_f64())
            }
            Some(t) => Metrics::observe(&metrics.inter_token, now.duration_since(t).as_secs_f64()),
        }
        a.last_token_at = Some(now);
        metrics.generated_tokens.fetch_add(1, Ordering::Relaxed);
        if step.finish == Some(Finish::Eos) {
            return After::End(Ending::Finished(Finish::Eos));
        }
        let routing = a.job.params.return_routing.then(|| {
            let last = a.session.position() - 1;
            let mut rows: Vec<_> = trace.iter().filter(|r| r.position == last).collect();
            rows.sort_by_key(|r| r.layer);
            rows.into_iter().map(|r| r.experts.clone()).collect()
        });
        let logprob = a.job.params.logprobs.map(|n| token_logprob(a.decoder.last_logits(), step.token, n));
        if !a.send(Event::Token(Token { id: Some(step.token), text: step.text, logprob, routing })) {
            return After::Drop;
        }
        match step.finish {
            Some(f) => After::End(Ending::Finished(f)),
            None if a.session.position() >= a.session.n_ctx() => After::End(Ending::Finished(Finish::ContextFull)),
            None => After::Continue,
        }
    }

    /// Flush held-back text and send the final event (gauges first: a client that reads the
    /// metrics right after its response sees this sequence gone).
    fn finish(&mut self, mut a: Active, end: Ending) {
        self.gauges();
        let why = match end {
            Ending::Finished(f) => f,
            Ending::Timeout => Finish::Length,
        };
        let (tail, finish) = a.decoder.finish(Some(&a.job.engine.tokenizer), why);
        let end = if finish == why { end } else { Ending::Finished(finish) };
        if !tail.is_empty() {
            a.send(Event::Token(Token { id: None, text: tail, logprob: None, routing: None }));
        }
        let completion_tokens = a.decoder.generated();
        let (prompt_tokens, timing, cached_tokens) = (a.job.prompt.len(), a.timing, a.cached);
        let done = Done { finish: end, prompt_tokens, completion_tokens, cached_tokens, timing };
        // The session goes into the prompt cache (and the gauges say so) before the client hears
        // it is done: a next request sent on the answer finds it.
        let Active { mut job, session, decoder, .. } = a;
        if let Some(tokens) = decoder.history().get(..session.position()) {
            self.cache.put(&job.engine, tokens, session);
        }
        self.metrics.prompt_cache_bytes.store(self.cache.bytes(), Ordering::Relaxed);
        self.metrics.prompt_cache_sessions.store(self.cache.len() as u64, Ordering::Relaxed);
        job.end(Event::Done(done));
    }
}

#[cfg(test)]
mod tests;
