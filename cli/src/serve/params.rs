//! Request bodies → checked values: reading the body under the size cap, parsing it as a JSON
//! object, and typed, range-checked access to its fields (each error names its field), plus the
//! generation parameters every endpoint shares (sampling, stop, max_tokens, MoE routing).

use super::args::ServeConfig;
use super::engine::Engine;
use super::error::ApiError;
use super::job::JobParams;
use axum::body::Body;
use colibri::decoder::DecodeParams;
use colibri::forward::{RoutingMode, RoutingOptions};
use colibri::sampler::SamplerParams;
use serde_json::{Map, Value};
use std::time::Duration;

/// Most stop strings, and bytes per stop string.
pub const MAX_STOPS: usize = 4;
pub const MAX_STOP_BYTES: usize = 256;
/// Largest integer accepted for counts such as max_tokens or top_k.
const MAX_COUNT: u64 = 1 << 24;
/// Largest alternatives per token for logprobs.
pub const MAX_TOP_LOGPROBS: u64 = 20;

/// Longest wait for a request body (against clients that send it slowly).
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The body, at most `cap` bytes: more → 413; a body that breaks off (shorter than its
/// Content-Length, then EOF) → 400.
async fn read_capped(body: Body, cap: usize) -> Result<Vec<u8>, ApiError> {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(ApiError::incomplete_body)?;
        if out.len() + chunk.len() > cap {
            return Err(ApiError::too_large(cap));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// The body as a JSON object, read under the size cap and a time limit: too long → 413, too
/// slow → 408, cut short → 400, not JSON / not an object → 400.
pub async fn read_object(body: Body, config: &ServeConfig) -> Result<Map<String, Value>, ApiError> {
    let cap = config.max_body;
    let limit = config.timeout.map_or(BODY_TIMEOUT, |t| t.min(BODY_TIMEOUT));
    let bytes = tokio::time::timeout(limit, read_capped(body, cap)).await.map_err(|_| ApiError::body_timeout())??;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::bad_request("the body must be a JSON object")),
        Err(e) => Err(ApiError::bad_request(format!("invalid JSON: {e}"))),
    }
}

/// Typed access to the fields of a request object; `null` counts as absent.
pub struct Fields<'a>(pub &'a Map<String, Value>);

impl<'a> Fields<'a> {
    pub fn get(&self, name: &str) -> Option<&'a Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    /// A number in `lo..=hi` (finite by construction: JSON has no NaN / Inf).
    pub fn f32_in(&self, name: &str, default: f32, lo: f32, hi: f32) -> Result<f32, ApiError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => match v.as_f64() {
                Some(x) if x >= f64::from(lo) && x <= f64::from(hi) => Ok(x as f32),
                Some(x) => Err(ApiError::invalid(name, format!("{name} = {x} is outside [{lo}, {hi}]"))),
                None => Err(ApiError::invalid(name, format!("{name} must be a number"))),
            },
        }
    }

    /// A non-negative integer ≤ `hi`.
    pub fn uint(&self, name: &str, hi: u64) -> Result<Option<u64>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(x) if x <= hi => Ok(Some(x)),
                Some(x) => Err(ApiError::invalid(name, format!("{name} = {x} is above {hi}"))),
                None => Err(ApiError::invalid(name, format!("{name} must be a non-negative integer"))),
            },
        }
    }

    pub fn bool(&self, name: &str) -> Result<bool, ApiError> {
        match self.get(name) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(ApiError::invalid(name, format!("{name} must be a boolean"))),
        }
    }

    pub fn str(&self, name: &str) -> Result<Option<&'a str>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(ApiError::invalid(name, format!("{name} must be a string"))),
        }
    }

    /// `stop`: a string or a list of at most MAX_STOPS strings of at most MAX_STOP_BYTES.
    pub fn stops(&self) -> Result<Vec<String>, ApiError> {
        let list: Vec<&Value> = match self.get("stop") {
            None => return Ok(Vec::new()),
            Some(Value::Array(a)) => a.iter().collect(),
            Some(v) => vec![v],
        };
        if list.len() > MAX_STOPS {
            return Err(ApiError::invalid("stop", format!("at most {MAX_STOPS} stop strings")));
        }
        list.into_iter()
            .map(|v| match v.as_str() {
                Some(s) if s.len() <= MAX_STOP_BYTES => Ok(s.to_string()),
                Some(_) => {
                    Err(ApiError::invalid("stop", format!("a stop string is longer than {MAX_STOP_BYTES} bytes")))
                }
                None => Err(ApiError::invalid("stop", "stop must be a string or a list of strings")),
            })
            .collect()
    }

    /// The optional `model` field must name the served model: its id or one of `aliases`.
    pub fn check_model(&self, engine: &Engine, aliases: &[String]) -> Result<(), ApiError> {
        match self.get("model") {
            None => Ok(()),
            Some(Value::String(m)) if *m == engine.id || aliases.contains(m) => Ok(()),
            Some(Value::String(m)) => Err(ApiError::model_not_found(m)),
            Some(_) => Err(ApiError::invalid("model", "model must be a string")),
        }
    }
}

/// Defaults that differ between the OpenAI endpoints and /generate.
pub struct Defaults {
    pub sampler: SamplerParams,
    /// None = up to the end of the context.
    pub max_tokens: Option<usize>,
    /// Seed when the request gives none: None = a fresh random one.
    pub seed: Option<u64>,
}

impl Defaults {
    /// OpenAI semantics: temperature 1, every filter off, a random seed.
    pub fn openai(max_tokens: Option<usize>) -> Defaults {
        let sampler = SamplerParams { temperature: 1.0, ..SamplerParams::greedy() };
        Defaults { sampler: SamplerParams { penalty_last_n: 64, ..sampler }, max_tokens, seed: None }
    }

    /// docs/api.md: llama.cpp-like sampling, a random seed, 64 tokens.
    pub fn generate() -> Defaults {
        Defaults { sampler: SamplerParams::default(), max_tokens: Some(64), seed: None }
    }
}

/// A fresh seed for a request that gives none (reported back, so it can be repeated).
fn random_seed() -> u64 {
    colibri::rng::resolve_seed(colibri::rng::SEED_RANDOM)
}

/// Most tokens (prompt + max_tokens) one request may claim on `engine`: --max-request-tokens,
/// never above the context.
pub fn request_cap(config: &ServeConfig, engine: &Engine) -> usize {
    config.max_request_tokens.unwrap_or(engine.n_ctx).min(engine.n_ctx)
}

/// max_tokens of a request with a prompt of `prompt_len` tokens: as asked (clamped to the
/// context left), else the endpoint's default (clamped to what the request may claim, so a
/// request without max_tokens never claims the whole context). A claim past `cap` is a 400.
fn max_tokens(f: &Fields<'_>, d: &Defaults, engine: &Engine, prompt_len: usize, cap: usize) -> Result<usize, ApiError> {
    let asked = f.uint("max_tokens", MAX_COUNT)?.or(f.uint("max_completion_tokens", MAX_COUNT)?);
    let left = engine.n_ctx.saturating_sub(prompt_len);
    let room = cap.saturating_sub(prompt_len);
    match asked.map(|n| (n as usize).min(left)) {
        Some(n) if n > room => Err(ApiError::request_too_large(
            if f.get("max_tokens").is_some() { "max_tokens" } else { "max_completion_tokens" },
            format!(
                "the prompt ({prompt_len} tokens) and max_tokens ({n}) claim {} tokens; a request may claim {cap} \
                 (--max-request-tokens)",
                prompt_len + n
            ),
        )),
        Some(n) => Ok(n),
        None => Ok(d.max_tokens.unwrap_or(left).min(room)),
    }
}

/// Sampling, stop, max_tokens and MoE fields shared by every generating endpoint, for a prompt
/// of `prompt_len` tokens on `engine` (already checked against `cap`, see `check_prompt`).
pub fn job_params(
    f: &Fields<'_>,
    d: &Defaults,
    engine: &Engine,
    prompt_len: usize,
    cap: usize,
) -> Result<JobParams, ApiError> {
    let s = &d.sampler;
    let seed = f.uint("seed", u64::MAX)?.or(d.seed).unwrap_or_else(random_seed);
    let sampler = SamplerParams {
        temperature: f.f32_in("temperature", s.temperature, 0.0, 100.0)?,
        top_k: f.uint("top_k", MAX_COUNT)?.map_or(s.top_k, |k| k as usize),
        top_p: f.f32_in("top_p", s.top_p, 0.0, 1.0)?,
        min_p: f.f32_in("min_p", s.min_p, 0.0, 1.0)?,
        repetition_penalty: f.f32_in("repetition_penalty", s.repetition_penalty, 0.0, 100.0)?,
        presence_penalty: f.f32_in("presence_penalty", s.presence_penalty, -2.0, 2.0)?,
        frequency_penalty: f.f32_in("frequency_penalty", s.frequency_penalty, -2.0, 2.0)?,
        penalty_last_n: s.penalty_last_n,
        seed,
    };
    if sampler.top_p <= 0.0 {
        return Err(ApiError::invalid("top_p", "top_p must be in (0, 1]"));
    }
    if sampler.repetition_penalty <= 0.0 {
        return Err(ApiError::invalid("repetition_penalty", "repetition_penalty must be > 0"));
    }
    sampler.validate().map_err(|e| ApiError::bad_request(e.to_string()))?;
    let max_tokens = max_tokens(f, d, engine, prompt_len, cap)?;
    let moe = &engine.model.config().moe;
    let top_k = match f.uint("moe_top_k", MAX_COUNT)? {
        Some(k) if k == 0 || k as usize > moe.n_experts => {
            return Err(ApiError::invalid("moe_top_k", format!("moe_top_k must be in 1..={}", moe.n_experts)))
        }
        k => k.map(|k| k as usize),
    };
    let mode = match f.str("routing")? {
        None | Some("topk") => RoutingMode::TopK,
        Some("gumbel") => RoutingMode::Gumbel,
        Some(_) => return Err(ApiError::invalid("routing", "routing must be \"topk\" or \"gumbel\"")),
    };
    Ok(JobParams {
        decode: DecodeParams {
            sampler,
            max_tokens,
            stop: f.stops()?,
            ignore_eos: f.bool("ignore_eos")?,
            grammar: None,
            end_ids: Vec::new(),
        },
        routing: RoutingOptions { mode, top_k },
        routing_seed: f.uint("routing_seed", u64::MAX)?.unwrap_or(seed),
        return_routing: f.bool("return_routing")?,
        logprobs: None,
        logit_bias: logit_bias(f, engine)?,
    })
}

/// `logit_bias`: {"token id": bias in [-100, 100]}, ids of the model's vocabulary, sorted by id.
fn logit_bias(f: &Fields<'_>, engine: &Engine) -> Result<Vec<(u32, f32)>, ApiError> {
    let bad = |m: String| ApiError::invalid("logit_bias", m);
    let map = match f.get("logit_bias") {
        None => return Ok(Vec::new()),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(bad("logit_bias must be an object of token id to bias".into())),
    };
    let vocab = engine.tokenizer.vocab_size().min(engine.model.config().vocab_size);
    let mut out = map
        .iter()
        .map(|(k, v)| {
            let shown: String = k.chars().take(24).collect();
            let id = k.parse::<u32>().ok().filter(|&i| (i as usize) < vocab);
            let id = id.ok_or_else(|| bad(format!("logit_bias key '{shown}' is not a token id below {vocab}")))?;
            match v.as_f64() {
                Some(b) if (-100.0..=100.0).contains(&b) => Ok((id, b as f32)),
                _ => Err(bad(format!("logit_bias of token {id} must be a number in [-100, 100]"))),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    out.sort_by_key(|p| p.0);
    Ok(out)
}

/// Most choices one request may ask for (`n`), as OpenAI allows.
pub const MAX_CHOICES: u64 = 128;

/// `n`: how many independent choices, 1..=MAX_CHOICES and no more than the server admits at
/// once (--parallel + --queue); each is a sequence of its own against the KV budget.
pub fn choices(f: &Fields<'_>, config: &ServeConfig) -> Result<usize, ApiError> {
    let fits = (config.parallel + config.queue) as u64;
    match f.uint("n", MAX_COUNT)? {
        None => Ok(1),
        Some(0) => Err(ApiError::invalid("n", "n must be at least 1")),
        Some(n) if n > MAX_CHOICES.min(fits) => Err(ApiError::invalid(
            "n",
            format!(
                "n = {n} is above {} (at most {MAX_CHOICES}, and --parallel + --queue = {fits})",
                MAX_CHOICES.min(fits)
            ),
        )),
        Some(n) => Ok(n as usize),
    }
}

/// Most prompt bytes accepted before tokenising: no token is shorter than a byte, so anything
/// longer than a few bytes per context position cannot fit.
pub fn prompt_byte_cap(engine: &Engine) -> usize {
    engine.n_ctx.saturating_mul(16).max(4096)
}

/// Tokenise `text` (capped first) and check it with `check_prompt`.
pub fn tokenize(engine: &Engine, param: &str, text: &str, add_special: bool, cap: usize) -> Result<Vec<u32>, ApiError> {
    let bytes = prompt_byte_cap(engine);
    if text.len() > bytes {
        return Err(ApiError::invalid(param, format!("the prompt is longer than {bytes} bytes")));
    }
    let ids = engine.tokenizer.encode(text, add_special).map_err(|e| ApiError::invalid(param, e.to_string()))?;
    check_prompt(engine, param, ids, cap)
}

/// A prompt must hold at least one token, only ids of the model's vocabulary, and leave room
/// for one more token in what one request may claim (`cap`, at most the context).
pub fn check_prompt(engine: &Engine, param: &str, ids: Vec<u32>, cap: usize) -> Result<Vec<u32>, ApiError> {
    if ids.is_empty() {
        return Err(ApiError::invalid(param, "the prompt encodes to no tokens"));
    }
    let vocab = engine.model.config().vocab_size;
    if let Some(id) = ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(ApiError::invalid(param, format!("token id {id} is outside the model's vocabulary of {vocab}")));
    }
    if ids.len() >= cap {
        let limit = if cap < engine.n_ctx { "a request may claim" } else { "the context holds" };
        return Err(ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::invalid(param, format!("the prompt has {} tokens; {limit} {cap}", ids.len()))
        });
    }
    Ok(ids)
}
