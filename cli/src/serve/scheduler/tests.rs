//! The scheduler's failure isolation: a sequence that fails ends alone, the others step on.

use super::*;
use crate::serve::budget::KvBudget;
use crate::serve::job::{Admission, JobParams};
use colibri::decoder::DecodeParams;
use colibri::forward::RoutingOptions;
use colibri::sampler::SamplerParams;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

const CLAIM: u64 = 100;

struct Fixture {
    engine: Arc<Engine>,
    budget: Arc<KvBudget>,
    admission: Arc<Admission>,
    run: Loop,
}

fn fixture() -> Fixture {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/default.colibri");
    let (_tx, rx) = std::sync::mpsc::channel();
    let metrics = Arc::new(Metrics::default());
    Fixture {
        engine: Arc::new(Engine::load(&path, 64, Default::default(), 1).unwrap()),
        budget: KvBudget::new(10 * CLAIM),
        admission: Admission::new(8),
        run: Loop {
            rx,
            parallel: 4,
            metrics,
            waiting: VecDeque::new(),
            active: Vec::new(),
            cache: PromptCache::new(0),
        },
    }
}

impl Fixture {
    fn job(&self, prompt: Vec<u32>) -> (Box<Job>, UnboundedReceiver<Event>) {
        let (events, rx) = unbounded_channel();
        let decode = DecodeParams {
            sampler: SamplerParams::greedy(),
            max_tokens: 8,
            stop: Vec::new(),
            ignore_eos: true,
            grammar: None,
            end_ids: Vec::new(),
        };
        let params = JobParams {
            decode,
            routing: RoutingOptions::default(),
            routing_seed: 0,
            return_routing: false,
            logprobs: None,
            logit_bias: Vec::new(),
        };
        let job = Job {
            engine: self.engine.clone(),
            prompt,
            params,
            events,
            enqueued: Instant::now(),
            deadline: None,
            ticket: self.admission.try_enter().unwrap(),
            kv: self.budget.claim(CLAIM).unwrap(),
            followers: Vec::new(),
            prefilled: None,
        };
        (Box::new(job), rx)
    }
}

fn failure(rx: &mut UnboundedReceiver<Event>) -> String {
    match rx.try_recv() {
        Ok(Event::Failed(m)) => m,
        other => panic!("expected a failure, got {other:?}"),
    }
}

/// A batch step refused because of one sequence ends that sequence alone; the others step on
/// to their normal end.
#[test]
fn a_failing_sequence_ends_alone() {
    let mut f = fixture();
    let vocab = f.engine.model.config().vocab_size as u32;
    let (good, mut good_rx) = f.job(vec![1, 2, 3]);
    let (bad, mut bad_rx) = f.job(vec![1, vocab, 3]);
    let (other, mut other_rx) = f.job(vec![4, 5]);
    for j in [good, bad, other] {
        f.run.active.push(Active::start(j, &mut PromptCache::new(0)).unwrap());
    }
    f.run.step();
    assert!(failure(&mut bad_rx).contains(&format!("token id {vocab}")));
    assert_eq!(f.run.active.len(), 2);
    assert_eq!(f.budget.used(), 2 * CLAIM, "the failed sequence's claim went back");
    while !f.run.active.is_empty() {
        f.run.step();
    }
    for rx in [&mut good_rx, &mut other_rx] {
        let mut tokens = 0;
        loop {
            match rx.try_recv() {
                Ok(Event::Token(t)) => tokens += usize::from(t.id.is_some()),
                Ok(Event::Done(d)) => {
                    assert_eq!((d.completion_tokens, tokens), (8, 8));
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(f.budget.used(), 0);
}

/// A prompt with an id outside the vocabulary fails at admission and never joins a batch.
#[test]
fn a_prompt_outside_the_vocabulary_never_joins_a_batch() {
    let mut f = fixture();
    let vocab = f.engine.model.config().vocab_size as u32;
    let (bad, mut bad_rx) = f.job(vec![vocab + 7]);
    let (good, _good_rx) = f.job(vec![1]);
    f.run.waiting.extend([bad, good]);
    f.run.admit();
    assert!(failure(&mut bad_rx).contains("outside the model's vocabulary"));
    assert_eq!(f.run.active.len(), 1);
    assert_eq!(f.budget.used(), CLAIM);
}

/// The events of a finished sequence: its token ids and its `Done`.
fn generated(rx: &mut UnboundedReceiver<Event>) -> (Vec<u32>, Done) {
    let mut ids = Vec::new();
    loop {
        match rx.try_recv() {
            Ok(Event::Token(t)) => ids.extend(t.id),
            Ok(Event::Done(d)) => return (ids, d),
            other => panic!("{other:?}"),
        }
    }
}

/// Choices riding with a job end with it when it fails before its prompt is computed; when its
/// prompt is done, each continues from a copy of its session (the prompt computed once).
#[test]
fn followers_end_with_their_leader_or_continue_from_its_prompt() {
    let mut f = fixture();
    let vocab = f.engine.model.config().vocab_size as u32;
    let (mut bad, mut bad_rx) = f.job(vec![1, vocab, 3]);
    let (rider, mut rider_rx) = f.job(vec![1, vocab, 3]);
    bad.followers.push(*rider);
    f.run.waiting.push_back(bad);
    f.run.admit();
    assert!(failure(&mut bad_rx).contains(&format!("token id {vocab}")));
    assert!(failure(&mut rider_rx).contains(&format!("token id {vocab}")), "the follower ends with its leader");
    assert_eq!(f.budget.used(), 0, "both claims went back");

    let prompt: Vec<u32> = (0..20).map(|i| i * 53 % vocab).collect();
    let (mut lead, mut lead_rx) = f.job(prompt.clone());
    let (rider, mut rider_rx) = f.job(prompt.clone());
    lead.followers.push(*rider);
    f.run.waiting.push_back(lead);
    while !(f.run.active.is_empty() && f.run.waiting.is_empty()) {
        f.run.admit();
        f.run.step();
    }
    assert_eq!(f.run.metrics.prompt_tokens.load(Ordering::Relaxed), 20, "the prompt was computed once");
    let ((a, da), (b, db)) = (generated(&mut lead_rx), generated(&mut rider_rx));
    assert_eq!((a.len(), da.completion_tokens, db.completion_tokens), (8, 8, 8));
    assert_eq!(a, b, "greedy choices of one prompt generate the same tokens");
    assert_eq!(f.budget.used(), 0);
}
