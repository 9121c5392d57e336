//! One generation's token-by-token decisions, the same for every caller (`generate`, the C
//! ABI through it, and the server's scheduler, which batches many): sample the next id from a
//! step's logits (ids the tokenizer cannot decode are never sampled; with a grammar, only the
//! ids its mask allows — the end-of-sequence ids once its document is complete), end on an end-of-sequence
//! token, detokenise incrementally, hold back text that may become a stop string, count tokens
//! against the limit. Feeding the chosen id back to the model is the caller's job, and so are
//! the finish reasons only the caller can see (its callback, a full context).

use crate::error::{Error, Result};
use crate::grammar::Grammar;
use crate::sampler::{apply_mask, Sampler, SamplerParams};
use crate::stop::StopMatcher;
use crate::tokenizer::{DecodeState, Tokenizer};

/// A logit bias at or below this bans its token (OpenAI: "-100 should result in a ban").
pub const BAN_BIAS: f32 = -100.0;

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// The token limit was reached.
    Length,
    /// An end-of-sequence token was sampled.
    Eos,
    /// A stop string appeared.
    StopString,
    /// The caller's callback asked to stop.
    Callback,
    /// The context is full.
    ContextFull,
}

/// What a generation decides with.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeParams {
    /// Most tokens to generate.
    pub max_tokens: usize,
    pub sampler: SamplerParams,
    /// Keep going past end-of-sequence tokens.
    pub ignore_eos: bool,
    /// Stop when the text contains one of these (the stop string itself is never emitted).
    pub stop: Vec<String>,
    /// Constrain the output to this grammar (at its start). Stop strings still end the output
    /// (which may then be an incomplete document); `ignore_eos` cannot be combined with it
    /// (once the document is complete only end-of-sequence ids are allowed).
    pub grammar: Option<Grammar>,
    /// Further ids that end the generation as end-of-sequence does (a chat template's
    /// end-of-turn token, `chat_output::end_of_turn_ids`).
    pub end_ids: Vec<u32>,
}

impl Default for DecodeParams {
    fn default() -> Self {
        DecodeParams {
            max_tokens: 128,
            sampler: SamplerParams::default(),
            ignore_eos: false,
            stop: Vec::new(),
            grammar: None,
            end_ids: Vec::new(),
        }
    }
}

/// One sampled token.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub token: u32,
    /// Text now safe to show (may be empty: an incomplete character, or text held back).
    pub text: String,
    /// Set when this token ends the generation: `Eos` (the token is the end-of-sequence id:
    /// not text, not to be fed), `StopString` or `Length`.
    pub finish: Option<Finish>,
}

/// The decisions of one generation. Text needs the model's tokenizer, given to every call
/// (the same one each time; without one, steps carry no text and stop strings are refused).
pub struct Decoder {
    sampler: Sampler,
    /// Prompt then generated ids (the penalties' window).
    history: Vec<u32>,
    text: DecodeState,
    stop: StopMatcher,
    eos: Vec<u32>,
    ignore_eos: bool,
    max_tokens: usize,
    generated: usize,
    grammar: Option<Grammar>,
    /// [vocab] the sampler's working copy of a step's logits (it applies its penalties in place).
    work: Vec<f32>,
    /// [vocab] the last step's logits as the sampler got them, when kept (`keep_last_logits`).
    kept: Option<Vec<f32>>,
    /// (id, bias) added to every step's logits before sampling (`set_logit_bias`).
    bias: Vec<(u32, f32)>,
}

impl Decoder {
    /// A generation after `prompt` (its ids seed the penalty window) for a model whose
    /// end-of-sequence ids are `eos`.
    pub fn new(params: &DecodeParams, eos: &[u32], prompt: &[u32], tokenizer: Option<&Tokenizer>) -> Result<Decoder> {
        if tokenizer.is_none() && !params.stop.is_empty() {
            return Err(Error::InvalidArgument { reason: "stop strings need the model's tokenizer".into() });
        }
        if params.grammar.is_some() && params.ignore_eos {
            return Err(Error::InvalidArgument {
                reason: "a grammar cannot be combined with ignore_eos (once its document is complete only \
                         end-of-sequence ids are allowed)"
                    .into(),
            });
        }
        let mut eos = eos.to_vec();
        for &id in &params.end_ids {
            if !eos.contains(&id) {
                eos.push(id);
            }
        }
        Ok(Decoder {
            sampler: Sampler::new(params.sampler.clone())?,
            history: prompt.to_vec(),
            text: DecodeState::new(true),
            stop: StopMatcher::new(params.stop.clone()),
            eos,
            ignore_eos: params.ignore_eos,
            max_tokens: params.max_tokens,
            generated: 0,
            grammar: params.grammar.clone(),
            work: Vec::new(),
            kept: None,
            bias: Vec::new(),
        })
    }

    /// Choose the next token from a step's logits ([vocab]).
    pub fn next(&mut self, tokenizer: Option<&Tokenizer>, logits: &[f32]) -> Result<Step> {
        self.work.clear();
        self.work.extend_from_slice(logits);
        // Ids the tokenizer cannot decode (a model vocabulary padded past the tokenizer's) are
        // never sampled.
        let decodable = tokenizer.map_or(usize::MAX, Tokenizer::vocab_size);
        if decodable < self.work.len() {
            self.work[decodable..].fill(f32::NEG_INFINITY);
        }
        for &(id, b) in &self.bias {
            if let Some(x) = self.work.get_mut(id as usize) {
                *x = if b <= BAN_BIAS { f32::NEG_INFINITY } else { *x + b };
            }
        }
        if let Some(g) = self.grammar.as_mut() {
            apply_mask(&mut self.work, g.allowed()?);
        }
        // After the mask: log-probabilities are those of the distribution sampled from.
        if let Some(kept) = self.kept.as_mut() {
            kept.clear();
            kept.extend_from_slice(&self.work);
        }
        let token = self.sampler.sample(&mut self.work, &self.history)?;
        if let Some(g) = self.grammar.as_mut() {
            g.commit(token)?;
        }
        self.history.push(token);
        self.generated += 1;
        let grammar_end = self.grammar.as_ref().is_some_and(|g| g.is_end_of_sequence(token));
        if !self.ignore_eos && (self.eos.contains(&token) || grammar_end) {
            return Ok(Step { token, text: String::new(), finish: Some(Finish::Eos) });
        }
        let piece = match tokenizer {
            Some(t) => self.text.push(t, token)?,
            None => String::new(),
        };
        let (text, hit) = self.stop.push(&piece);
        let finish = if hit {
            Some(Finish::StopString)
        } else if self.generated >= self.max_tokens {
            Some(Finish::Length)
        } else {
            None
        };
        Ok(Step { token, text, finish })
    }

    /// End the generation for `why`: the text still held back (an incomplete character, the
    /// start of a stop string that never completed) and the final reason, which becomes
    /// `StopString` if that text completes one.
    pub fn finish(&mut self, tokenizer: Option<&Tokenizer>, why: Finish) -> (String, Finish) {
        if why == Finish::StopString {
            return (String::new(), why);
        }
        let rest = tokenizer.map(|t| self.text.finish(t)).unwrap_or_default();
        let (mut tail, hit) = self.stop.push(&rest);
        if hit {
            return (tail, Finish::StopString);
        }
        tail.push_str(&self.stop.flush());
        (tail, why)
    }

    /// Add `bias` (id, value) to every step's logits before sampling and before the kept copy
    /// (OpenAI's `logit_bias`: log-probabilities see it too); a value at or below `BAN_BIAS`
    /// bans the id. Ids outside the logits are ignored.
    pub fn set_logit_bias(&mut self, bias: &[(u32, f32)]) {
        self.bias = bias.to_vec();
    }

    /// Keep each step's logits as the sampler got them (for log-probabilities); off by default,
    /// since it costs a copy of the vocabulary per token.
    pub fn keep_last_logits(&mut self) {
        self.kept.get_or_insert_with(Vec::new);
    }

    /// The logits the last step sampled from (undecodable ids, and ids a grammar did not allow,
    /// at −∞) when kept, else empty.
    pub fn last_logits(&self) -> &[f32] {
        self.kept.as_deref().unwrap_or(&[])
    }

    /// Tokens generated so far (an end-of-sequence token that ended the generation included).
    pub fn generated(&self) -> usize {
        self.generated
    }

    /// The prompt, then every generated id.
    pub fn history(&self) -> &[u32] {
        &self.history
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Logits whose argmax is `id`.
    fn peak(vocab: usize, id: usize) -> Vec<f32> {
        (0..vocab).map(|i| if i == id { 5.0 } else { 0.0 }).collect()
    }

    fn greedy(max_tokens: usize, ignore_eos: bool) -> DecodeParams {
        DecodeParams { max_tokens, sampler: SamplerParams::greedy(), ignore_eos, ..DecodeParams::default() }
    }

    #[test]
    fn end_of_sequence_ends_unless_ignored_and_the_limit_ends_last() {
        let mut d = Decoder::new(&greedy(3, false), &[7], &[1, 2], None).unwrap();
        assert_eq!(d.next(None, &peak(10, 4)).unwrap().finish, None);
        let eos = d.next(None, &peak(10, 7)).unwrap();
        assert_eq!((eos.token, eos.finish), (7, Some(Finish::Eos)));
        assert_eq!(d.history(), &[1, 2, 4, 7]);
        let mut d = Decoder::new(&greedy(3, true), &[7], &[], None).unwrap();
        let steps: Vec<_> = (0..3).map(|_| d.next(None, &peak(10, 7)).unwrap().finish).collect();
        assert_eq!(steps, vec![None, None, Some(Finish::Length)]);
        assert_eq!(d.generated(), 3);
        assert_eq!(d.finish(None, Finish::Length), (String::new(), Finish::Length));
    }

    #[test]
    fn end_ids_end_the_generation_as_end_of_sequence_does() {
        let p = DecodeParams { end_ids: vec![3, 7], ..greedy(5, false) };
        let mut d = Decoder::new(&p, &[7], &[], None).unwrap();
        assert_eq!(d.next(None, &peak(10, 4)).unwrap().finish, None);
        let end = d.next(None, &peak(10, 3)).unwrap();
        assert_eq!((end.token, end.finish), (3, Some(Finish::Eos)));
        let mut d = Decoder::new(&greedy(5, false), &[7], &[], None).unwrap();
        assert_eq!(d.next(None, &peak(10, 3)).unwrap().finish, None, "not without end_ids");
    }

    #[test]
    fn stop_strings_need_a_tokenizer_and_the_last_logits_are_kept() {
        let with_stop = DecodeParams { stop: vec!["x".into()], ..greedy(4, false) };
        assert!(Decoder::new(&with_stop, &[], &[], None).is_err());
        let mut d = Decoder::new(&greedy(4, false), &[], &[], None).unwrap();
        let logits = peak(6, 2);
        assert_eq!(d.next(None, &logits).unwrap().token, 2);
        assert!(d.last_logits().is_empty(), "not kept unless asked");
        d.keep_last_logits();
        assert_eq!(d.next(None, &logits).unwrap().token, 2);
        assert_eq!(d.last_logits(), &logits[..]);
    }

    #[test]
    fn logit_bias_shifts_and_bans_before_sampling_and_logprobs() {
        let mut d = Decoder::new(&greedy(8, false), &[], &[], None).unwrap();
        d.keep_last_logits();
        d.set_logit_bias(&[(1, 10.0), (99, 5.0)]);
        assert_eq!(d.next(None, &peak(6, 2)).unwrap().token, 1, "+10 beats the peak of 5");
        assert_eq!(d.last_logits()[1], 10.0);
        d.set_logit_bias(&[(2, BAN_BIAS)]);
        let mut l = peak(6, 2);
        l[4] = 1.0;
        assert_eq!(d.next(None, &l).unwrap().token, 4, "the banned peak is never chosen");
        assert_eq!(d.last_logits()[2], f32::NEG_INFINITY);
        d.set_logit_bias(&[(2, -99.0)]);
        assert_eq!(d.last_logits().len(), 6);
        assert_eq!(d.next(None, &peak(6, 2)).unwrap().token, 0, "-99 shifts below the others");
    }
}
