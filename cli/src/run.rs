//! `colibri run` and `colibri chat`: generate text from a prompt (or an interactive
//! conversation that keeps its KV cache between turns). stdout carries only the generated text;
//! statistics and routing traces go to stderr.

use crate::{model_path, npy, threads};
use colibri::decoder::{DecodeParams, Finish};
use colibri::forward::{Input, RoutingMode, RoutingOptions};
use colibri::generate::{generate, GenerateParams};
use colibri::sampler::SamplerParams;
use colibri::session::{KvDtype, RouteRecord, Session, SessionOptions};
use colibri::tokenizer::{encode_chat, ChatMessage, ChatTemplate, MessageSpecials, Tokenizer};
use colibri::{Error, LoadOptions, Model};
use std::io::{BufRead, Write};
use std::path::PathBuf;

/// Options shared by `run` and `chat`.
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// Model file (default: $COLIBRI_MODEL, then the shipped models/default.colibri).
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// Prompt text.
    #[arg(short = 'p', long, conflicts_with = "file")]
    pub prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(short = 'f', long)]
    pub file: Option<PathBuf>,
    /// Tokens to generate.
    #[arg(short = 'n', long, default_value_t = 128)]
    pub n_predict: usize,
    /// Temperature (0 = greedy).
    #[arg(long, default_value_t = 0.8, allow_negative_numbers = true, value_parser = parse_temp)]
    pub temp: f32,
    /// Top-k filter (0 = off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Top-p (nucleus) filter (1 = off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Min-p filter (0 = off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Presence penalty.
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    /// Frequency penalty.
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// Last tokens the penalties look at.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Random seed of sampling and Gumbel routing (default: a fresh one each run; any value, 0
    /// included, repeats exactly).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop string (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Keep generating past end-of-sequence tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Wrap the prompt in the model's chat template (interactive when no prompt is given).
    #[arg(long)]
    pub chat: bool,
    /// System message for --chat.
    #[arg(long)]
    pub system: Option<String>,
    /// Context length in tokens (default: the model's, capped at 4096).
    #[arg(short = 'c', long, default_value_t = 0)]
    pub ctx: usize,
    /// KV cache element type: f32, f16 or bf16.
    #[arg(long, default_value = "f32", value_parser = ["f32", "f16", "bf16"])]
    pub kv_type: String,
    /// Worker threads (default: all cores).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Read the model into memory instead of mapping it.
    #[arg(long)]
    pub no_mmap: bool,
    /// Lock the model in RAM.
    #[arg(long)]
    pub mlock: bool,
    /// Map the model without the transparent-huge-page advice (by default its weights are read
    /// and mapped in 2 MiB pages where the kernel allows).
    #[arg(long)]
    pub no_hugepages: bool,
    /// Print each token's routing (experts and weights per layer) to stderr.
    #[arg(long)]
    pub debug_routing: bool,
    /// Expert selection: deterministic top-k, or Gumbel-perturbed top-k (seeded by --seed).
    #[arg(long, default_value = "topk", value_parser = ["topk", "gumbel"])]
    pub routing: String,
    /// Experts per token for this run (1..n_experts; default: the model's top-k).
    #[arg(long)]
    pub moe_top_k: Option<usize>,
    /// Feed a float32 .npy of shape [seq, hidden] instead of a tokenised prompt.
    #[arg(long, conflicts_with_all = ["prompt", "file", "chat"])]
    pub embedding: Option<PathBuf>,
}

/// `--temp`: a finite number ≥ 0.
fn parse_temp(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        Ok(_) => Err(format!("the temperature must be a number ≥ 0 (0 = greedy, 0.8 = the default), not {s}")),
        Err(_) => Err(format!("'{s}' is not a number")),
    }
}

struct Loaded {
    model: Model,
    tokenizer: Tokenizer,
    /// Seconds to open (map + validate) the model and build its tokenizer.
    seconds: f64,
}

fn load(a: &RunArgs) -> Result<Loaded, Error> {
    let path = model_path::resolve(a.model.as_deref())?;
    let opts = LoadOptions {
        mmap: !a.no_mmap,
        mlock: a.mlock,
        hugepages: !a.no_hugepages,
        threads: threads::options(a.threads),
        ..LoadOptions::default()
    };
    let t0 = std::time::Instant::now();
    let model = crate::model_path::open(&path, &opts)?;
    let tokenizer = Tokenizer::from_model(&model)?;
    Ok(Loaded { model, tokenizer, seconds: t0.elapsed().as_secs_f64() })
}

fn params(a: &RunArgs) -> GenerateParams {
    GenerateParams {
        decode: DecodeParams {
            max_tokens: a.n_predict,
            sampler: SamplerParams {
                temperature: a.temp,
                top_k: a.top_k,
                top_p: a.top_p,
                min_p: a.min_p,
                repetition_penalty: a.repeat_penalty,
                presence_penalty: a.presence_penalty,
                frequency_penalty: a.frequency_penalty,
                penalty_last_n: a.repeat_last_n,
                seed: a.seed.unwrap_or(colibri::rng::SEED_RANDOM),
            },
            ignore_eos: a.ignore_eos,
            stop: a.stop.clone(),
            grammar: None,
            end_ids: Vec::new(),
        },
        routing: RoutingOptions {
            mode: if a.routing == "gumbel" { RoutingMode::Gumbel } else { RoutingMode::TopK },
            top_k: a.moe_top_k,
        },
    }
}

fn session(a: &RunArgs, model: &Model) -> Result<Session, Error> {
    let kv_dtype = KvDtype::from_name(&a.kv_type).unwrap_or(KvDtype::F32);
    let mut s = Session::new(
        model.config(),
        &SessionOptions {
            n_ctx: a.ctx,
            kv_dtype,
            routing_seed: a.seed.unwrap_or(colibri::rng::SEED_RANDOM),
            ..Default::default()
        },
    )?;
    s.set_trace(a.debug_routing);
    Ok(s)
}

/// Print routing records as `token[i] 'text' layer L -> experts[a,b] weights[x,y]`.
fn print_routing(records: &mut [RouteRecord], ids: &dyn Fn(usize) -> Option<u32>, tok: &Tokenizer) {
    records.sort_by_key(|r| (r.position, r.layer));
    let mut err = std::io::stderr().lock();
    for r in records.iter() {
        let text = ids(r.position).map(|id| tok.token_text(id)).unwrap_or_else(|| "<embedding>".into());
        let experts: Vec<String> = r.experts.iter().map(|e| e.to_string()).collect();
        let weights: Vec<String> = r.weights.iter().map(|w| format!("{w:.2}")).collect();
        let _ = writeln!(
            err,
            "token[{}] {:?} layer {} -> experts[{}] weights[{}]",
            r.position,
            text,
            r.layer,
            experts.join(","),
            weights.join(",")
        );
    }
}

fn print_stats(load_s: f64, prompt_tokens: usize, prompt_s: f64, gen_tokens: usize, gen_s: f64, stop: Finish) {
    eprintln!(
        "\n[load: {:.1} ms | prompt: {prompt_tokens} tokens, {:.1} tokens/s | generation: {gen_tokens} tokens, {:.1} tokens/s | stop: {}]",
        load_s * 1e3,
        prompt_tokens as f64 / prompt_s.max(1e-9),
        gen_tokens as f64 / gen_s.max(1e-9),
        finish_name(stop),
    );
}

/// A finish reason as the statistics line names it.
fn finish_name(f: Finish) -> &'static str {
    match f {
        Finish::Length => "length (-n)",
        Finish::Eos => "end of sequence",
        Finish::StopString => "stop string",
        Finish::Callback => "interrupted",
        Finish::ContextFull => "context full (-c)",
    }
}

/// What `run` feeds: prompt ids, or hidden states from a .npy file.
enum Prompt {
    Tokens(Vec<u32>),
    Embeddings(Vec<f32>),
}

/// Hidden states [seq ≥ 1, hidden] from a float32 .npy file.
fn read_embedding(path: &std::path::Path, h: usize) -> Result<Vec<f32>, Error> {
    let (shape, data) = npy::read_f32_2d(path)?;
    if shape[1] != h || shape[0] == 0 {
        return Err(Error::InvalidArgument {
            reason: format!(
                "{}: shape [{}, {}] does not match [seq ≥ 1, hidden_size {h}]",
                path.display(),
                shape[0],
                shape[1]
            ),
        });
    }
    Ok(data)
}

/// The prompt's ids (-p or -f; wrapped in the chat template with --chat), which must fit a
/// context of `n_ctx` with room for one generated token.
fn prompt_ids(a: &RunArgs, model: &Model, tokenizer: &Tokenizer, n_ctx: usize) -> Result<Vec<u32>, Error> {
    let text = match (&a.prompt, &a.file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => std::fs::read_to_string(f).map_err(|e| Error::io("read prompt file", e))?,
        (None, None) => return Err(Error::InvalidArgument { reason: "give a prompt with -p TEXT or -f FILE".into() }),
    };
    if text.is_empty() {
        return Err(Error::InvalidArgument { reason: "empty prompt".into() });
    }
    let ids = if a.chat {
        let mut msgs = Vec::new();
        if let Some(sys) = &a.system {
            msgs.push(ChatMessage::new("system", sys.as_str()));
        }
        msgs.push(ChatMessage::new("user", text.as_str()));
        chat_ids(model, tokenizer, &msgs)?
    } else {
        tokenizer.encode(&text, true)?
    };
    if ids.is_empty() {
        return Err(Error::InvalidArgument { reason: "the prompt encodes to no tokens".into() });
    }
    if ids.len() >= n_ctx {
        return Err(Error::InvalidArgument {
            reason: format!("prompt of {} tokens does not fit the context of {} tokens (-c)", ids.len(), n_ctx),
        });
    }
    Ok(ids)
}

/// `colibri run`.
pub fn run(a: &RunArgs) -> Result<(), Error> {
    let Loaded { model, tokenizer, seconds: load_s } = load(a)?;
    if a.chat && a.prompt.is_none() && a.file.is_none() {
        return chat_loop(a, &model, &tokenizer);
    }
    let mut s = session(a, &model)?;
    let mut p = params(a);
    if a.chat {
        p.decode.end_ids = chat_end_ids(&model, &tokenizer);
    }
    let prompt = match &a.embedding {
        Some(path) => Prompt::Embeddings(read_embedding(path, model.config().hidden_size)?),
        None => Prompt::Tokens(prompt_ids(a, &model, &tokenizer, s.n_ctx())?),
    };
    let (input, ids) = match &prompt {
        Prompt::Embeddings(e) => (Input::Embeddings(e), Vec::new()),
        Prompt::Tokens(ids) => (Input::Tokens(ids), ids.clone()),
    };
    let all_ids = std::cell::RefCell::new(ids.clone());
    let mut out = std::io::stdout().lock();
    let mut write_err = None;
    let result = generate(&model, &mut s, Some(&tokenizer), input, &p, |step| {
        if let (true, Some(t)) = (a.debug_routing, step.token) {
            all_ids.borrow_mut().push(t);
        }
        if let Err(e) = out.write_all(step.text.as_bytes()).and_then(|_| out.flush()) {
            write_err = Some(e);
            return false;
        }
        true
    });
    if a.debug_routing {
        let ids = all_ids.borrow();
        print_routing(&mut s.take_trace(), &|pos| ids.get(pos).copied(), &tokenizer);
    }
    if let Some(e) = write_err {
        return Err(Error::io("write to stdout", e));
    }
    let r = result?;
    let _ = writeln!(out);
    print_stats(load_s, r.prompt_tokens, r.prompt_seconds, r.tokens.len(), r.gen_seconds, r.finish);
    Ok(())
}

/// The chat template's end-of-turn tokens: with --chat they end the reply as end-of-sequence
/// does (the default model's template ends turns with `<|im_end|>`, its only EOS is id 0).
fn chat_end_ids(model: &Model, tok: &Tokenizer) -> Vec<u32> {
    model.chat_template().map(|t| colibri::chat_output::end_of_turn_ids(t, tok)).unwrap_or_default()
}

/// The conversation through the model's chat template, as prompt ids (message text stays text:
/// special-token strings typed in a message are not control tokens).
fn chat_ids(model: &Model, tok: &Tokenizer, msgs: &[ChatMessage]) -> Result<Vec<u32>, Error> {
    let src =
        model.chat_template().ok_or_else(|| Error::Unsupported { what: "this model has no chat template".into() })?;
    encode_chat(tok, &ChatTemplate::new(src)?, msgs, true, MessageSpecials::AsText)
}

/// Interactive chat: each turn re-renders the conversation, reuses the cached prefix and feeds
/// only the new tokens.
fn chat_loop(a: &RunArgs, model: &Model, tok: &Tokenizer) -> Result<(), Error> {
    let mut s = session(a, model)?;
    let mut p = params(a);
    p.decode.end_ids = chat_end_ids(model, tok);
    let mut msgs = Vec::new();
    if let Some(sys) = &a.system {
        msgs.push(ChatMessage::new("system", sys.as_str()));
    }
    let mut fed: Vec<u32> = Vec::new();
    let c = model.config();
    eprintln!(
        "colibri chat: {} ({} layers, {} experts), context {} tokens. Type a message; Ctrl-D quits.",
        c.family.name(),
        c.n_layers,
        c.moe.n_experts,
        s.n_ctx()
    );
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        eprint!("> ");
        line.clear();
        if stdin.lock().read_line(&mut line).map_err(|e| Error::io("read stdin", e))? == 0 {
            return Ok(());
        }
        let user = line.trim_end_matches(['\n', '\r']);
        if user.is_empty() {
            continue;
        }
        msgs.push(ChatMessage::new("user", user));
        let ids = chat_ids(model, tok, &msgs)?;
        let mut common = fed.iter().zip(&ids).take_while(|(a, b)| a == b).count().min(ids.len().saturating_sub(1));
        match s.truncate(common.min(s.position())) {
            Ok(()) => {}
            // A recurrent (DeltaNet) state cannot be cut back to the shared prefix: start over.
            Err(Error::Unsupported { .. }) => {
                s.reset();
                common = 0;
            }
            Err(e) => return Err(e),
        }
        if ids.len() >= s.n_ctx() {
            return Err(Error::InvalidArgument { reason: "the conversation no longer fits the context (-c)".into() });
        }
        let mut out = std::io::stdout().lock();
        let r = generate(model, &mut s, Some(tok), Input::Tokens(&ids[common..]), &p, |step| {
            out.write_all(step.text.as_bytes()).and_then(|_| out.flush()).is_ok()
        })?;
        let _ = writeln!(out);
        fed = ids;
        fed.extend_from_slice(&r.tokens);
        msgs.push(ChatMessage::new("assistant", r.text.as_str()));
    }
}
