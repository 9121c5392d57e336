//! `colibri serve` command line and the resolved server configuration (defaults, the API key
//! read from its file, the model path resolved like `colibri run`, the KV budget, the allowed
//! origins).

use super::budget;
use super::cors::Origins;
use crate::model_path;
use colibri::embed::Pooling;
use colibri::tokenizer::MessageSpecials;
use colibri::Error;
use colibri::LoadOptions;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Options of `colibri serve`.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// Model file (default: $COLIBRI_MODEL, then the shipped models/default.colibri).
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// Address to bind (loopback by default; the Host header is then checked against localhost names).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// TCP port (0 = any free port; the bound address is printed on stderr).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Sequences decoded together in one batched step.
    #[arg(long, default_value_t = 4)]
    pub parallel: usize,
    /// Requests waiting beyond --parallel; more get 503 with Retry-After.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health.
    #[arg(long, conflicts_with = "api_key_file")]
    pub api_key: Option<String>,
    /// Read the API key from this file (first line).
    #[arg(long)]
    pub api_key_file: Option<PathBuf>,
    /// Write the process id here once the socket is bound; removed on exit.
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// Worker threads of the engine (default: all cores).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Map the model without the transparent-huge-page advice (by default its weights are read
    /// and mapped in 2 MiB pages where the kernel allows).
    #[arg(long)]
    pub no_hugepages: bool,
    /// Context length per sequence in tokens (default: the model's, capped at 4096).
    #[arg(short = 'c', long, default_value_t = 0)]
    pub ctx: usize,
    /// Seconds one request may take, queueing included (0 = no limit).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Largest request body in bytes (larger: 413).
    #[arg(long, default_value_t = 4 << 20)]
    pub max_body: usize,
    /// Seconds a client may take to send a request head; also how long an idle keep-alive
    /// connection stays open (1..=3600).
    #[arg(long, default_value_t = 10)]
    pub header_timeout: u64,
    /// Tokenise special-token text inside chat messages (`<|im_start|>`, ...) as control tokens,
    /// as transformers does. Off by default: message text stays text, so a client cannot forge
    /// system or assistant turns. Only for trusted clients.
    #[arg(long)]
    pub trust_message_specials: bool,
    /// Most tokens one request may claim, prompt + max_tokens (more: 400; default: the context).
    #[arg(long)]
    pub max_request_tokens: Option<usize>,
    /// max_tokens of a chat request that gives none (clamped to what the request may claim).
    #[arg(long, default_value_t = 1024)]
    pub default_max_tokens: usize,
    /// KV-cache memory all queued and running requests together may claim, each its worst case
    /// (KV bytes per token × prompt + max_tokens); a request past what remains gets 503 with
    /// Retry-After. Bytes or K/M/G/T, e.g. 8G, 512M (default: half of MemAvailable at start).
    #[arg(long, value_parser = budget::parse_size)]
    pub kv_budget: Option<u64>,
    /// Memory for the prompt cache: sessions of finished requests kept so that a request whose
    /// prompt starts with the same tokens (chat history, a long system prompt) reuses their KV
    /// cache; least recently used evicted first; outside --kv-budget. Bytes or K/M/G/T; 0 turns
    /// it off (default: a quarter of the KV budget).
    #[arg(long, value_parser = budget::parse_size)]
    pub prompt_cache: Option<u64>,
    /// Web origins whose pages may call the API (CORS), comma-separated, e.g.
    /// http://localhost:3000; `*` allows every origin. Default: none (requests without an Origin
    /// header and same-origin ones only; others get 403).
    #[arg(long, value_delimiter = ',')]
    pub allowed_origins: Vec<String>,
    /// Render chat requests with this Jinja chat template instead of the model's own (its
    /// syntax also decides how tool calls and reasoning are read back).
    #[arg(long)]
    pub chat_template_file: Option<PathBuf>,
    /// Another name the `model` field may give for the served model (repeatable); /v1/models
    /// lists each. Without one, only the file stem names it.
    #[arg(long = "alias", value_name = "NAME")]
    pub aliases: Vec<String>,
    /// One line per request on stderr (id, endpoint, status, tokens, queue/first-token/total
    /// milliseconds, finish reason): json, logfmt or off.
    #[arg(long, value_enum, default_value = "json")]
    pub request_log: LogFormat,
    /// How /v1/embeddings pools a text's final-normed hidden states into one vector (then
    /// L2-normalised): mean over the tokens, the last token's, or the first token's (cls).
    #[arg(long, default_value = "mean", value_parser = parse_pooling)]
    pub pooling: Pooling,
}

fn parse_pooling(s: &str) -> Result<Pooling, String> {
    Pooling::from_name(s).ok_or_else(|| format!("{s:?} is not a pooling (mean, last or cls)"))
}

/// How request lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// `key=value` pairs (values with spaces or quotes quoted).
    Logfmt,
    /// No request lines.
    Off,
}

/// Largest --parallel / --queue accepted.
const MAX_SLOTS: usize = 4096;

/// The checked configuration the server runs with.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub model_path: PathBuf,
    pub host: IpAddr,
    pub port: u16,
    pub parallel: usize,
    pub queue: usize,
    pub api_key: Option<String>,
    pub pid_file: Option<PathBuf>,
    /// How every loaded model is mapped (`--no-hugepages`) and its worker pool (`-t`,
    /// `COLIBRI_PIN`).
    pub load: LoadOptions,
    /// 0 = the model's context capped at 4096 (decided per loaded model).
    pub ctx: usize,
    pub timeout: Option<Duration>,
    pub max_body: usize,
    pub header_timeout: Duration,
    /// How special-token text inside chat messages is tokenised.
    pub message_specials: MessageSpecials,
    /// None = the context.
    pub max_request_tokens: Option<usize>,
    pub default_max_tokens: usize,
    pub kv_budget: u64,
    /// Bytes the prompt cache may hold (0: off).
    pub prompt_cache: u64,
    pub allowed_origins: Origins,
    /// `--chat-template-file`'s text.
    pub chat_template: Option<String>,
    /// Other names of the served model (--alias).
    pub aliases: Vec<String>,
    pub request_log: LogFormat,
    /// /v1/embeddings' pooling (`--pooling`).
    pub pooling: Pooling,
}

fn invalid(reason: String) -> Error {
    Error::InvalidArgument { reason }
}

impl ServeConfig {
    pub fn from_args(a: &ServeArgs) -> Result<ServeConfig, Error> {
        if a.parallel == 0 || a.parallel > MAX_SLOTS {
            return Err(invalid(format!("--parallel {} outside 1..={MAX_SLOTS}", a.parallel)));
        }
        if a.queue > MAX_SLOTS {
            return Err(invalid(format!("--queue {} above {MAX_SLOTS}", a.queue)));
        }
        if a.max_body < 1024 {
            return Err(invalid(format!("--max-body {} below 1024 bytes", a.max_body)));
        }
        if !(1..=3600).contains(&a.header_timeout) {
            return Err(invalid(format!("--header-timeout {} outside 1..=3600 seconds", a.header_timeout)));
        }
        let api_key = match (&a.api_key, &a.api_key_file) {
            (Some(k), _) => Some(k.clone()),
            (None, Some(f)) => {
                let text = std::fs::read_to_string(f).map_err(|e| Error::io("read --api-key-file", e))?;
                Some(text.lines().next().unwrap_or("").trim().to_string())
            }
            (None, None) => None,
        };
        if a.max_request_tokens.is_some_and(|n| n < 2) {
            return Err(invalid("--max-request-tokens must be at least 2".into()));
        }
        if a.default_max_tokens == 0 {
            return Err(invalid("--default-max-tokens must be at least 1".into()));
        }
        if a.kv_budget == Some(0) {
            return Err(invalid("--kv-budget must be above 0".into()));
        }
        if let Some(a) = a.aliases.iter().find(|a| a.is_empty() || a.len() > 256) {
            return Err(invalid(format!("--alias '{a}': a name must have 1 to 256 bytes")));
        }
        if api_key.as_deref().is_some_and(str::is_empty) {
            return Err(invalid("the API key is empty".into()));
        }
        let kv_budget = a.kv_budget.unwrap_or_else(budget::default_budget);
        Ok(ServeConfig {
            model_path: model_path::resolve(a.model.as_deref())?,
            host: a.host,
            port: a.port,
            parallel: a.parallel,
            queue: a.queue,
            api_key,
            pid_file: a.pid_file.clone(),
            load: LoadOptions {
                hugepages: !a.no_hugepages,
                threads: crate::threads::options(a.threads),
                ..LoadOptions::default()
            },
            ctx: a.ctx,
            timeout: (a.timeout > 0).then(|| Duration::from_secs(a.timeout)),
            max_body: a.max_body,
            header_timeout: Duration::from_secs(a.header_timeout),
            message_specials: if a.trust_message_specials {
                MessageSpecials::AsTokens
            } else {
                MessageSpecials::AsText
            },
            max_request_tokens: a.max_request_tokens,
            default_max_tokens: a.default_max_tokens,
            kv_budget,
            prompt_cache: a.prompt_cache.unwrap_or(kv_budget / 4),
            allowed_origins: Origins::parse(&a.allowed_origins)?,
            chat_template: match &a.chat_template_file {
                Some(f) => Some(std::fs::read_to_string(f).map_err(|e| Error::io("read --chat-template-file", e))?),
                None => None,
            },
            aliases: a.aliases.iter().fold(Vec::new(), |mut v, a| {
                if !v.contains(a) {
                    v.push(a.clone());
                }
                v
            }),
            request_log: a.request_log,
            pooling: a.pooling,
        })
    }
}
