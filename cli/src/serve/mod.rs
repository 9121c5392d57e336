//! `colibri serve`: an OpenAI-compatible HTTP server (axum + hyper on tokio) over one scheduler
//! thread that batches the decoding of concurrent requests. This module wires the parts: bind, pid
//! file, signals, the first model load (GET /health says 503 until it is done), the routes and
//! the graceful drain.

mod args;
mod budget;
mod chat_input;
mod chat_reply;
mod conn;
mod cors;
mod engine;
mod error;
mod format;
mod guard;
mod handlers;
mod job;
mod known;
mod logprobs;
mod metrics;
mod openai;
mod params;
mod prompt_cache;
mod reload;
mod reqlog;
mod scheduler;
mod sse;
mod state;

pub use args::ServeArgs;

use args::ServeConfig;
use axum::routing::{get, post};
use axum::Router;
use colibri::Error;
use error::ApiError;
use job::Admission;
use metrics::Metrics;
use scheduler::Scheduler;
use state::{AppState, ModelSlot, Shared};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Longest wait for in-flight requests after SIGTERM before exiting anyway.
const DRAIN_CAP: Duration = Duration::from_secs(30);

fn router(state: Shared) -> Router {
    let not_allowed = || async { ApiError::method_not_allowed() };
    Router::new()
        .route("/v1/completions", post(handlers::completions::completions).fallback(not_allowed))
        .route("/v1/chat/completions", post(handlers::chat::chat).fallback(not_allowed))
        .route("/v1/embeddings", post(handlers::embeddings::embeddings).fallback(not_allowed))
        .route("/generate", post(handlers::generate::generate).fallback(not_allowed))
        .route("/v1/models", get(handlers::info::models).fallback(not_allowed))
        .route("/v1/models/{id}", get(handlers::info::model).fallback(not_allowed))
        .route("/health", get(handlers::info::health).fallback(not_allowed))
        .route("/metrics", get(handlers::info::metrics).fallback(not_allowed))
        .route("/tokenize", post(handlers::tokens::tokenize).fallback(not_allowed))
        .route("/detokenize", post(handlers::tokens::detokenize).fallback(not_allowed))
        .fallback(|| async { ApiError::not_found() })
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard::guard))
        .layer(axum::middleware::from_fn_with_state(state.clone(), reqlog::layer))
        .with_state(state)
}

/// The pid file: written once the socket is bound, removed when dropped.
struct PidFile(Option<PathBuf>);

impl PidFile {
    fn write(path: Option<PathBuf>) -> Result<PidFile, Error> {
        if let Some(p) = &path {
            std::fs::write(p, format!("{}\n", std::process::id())).map_err(|e| Error::io("write --pid-file", e))?;
        }
        Ok(PidFile(path))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// `colibri serve`.
pub fn run(a: &ServeArgs) -> Result<(), Error> {
    let config = ServeConfig::from_args(a)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(crate::prepare_thread)
        .enable_all()
        .build()
        .map_err(|e| Error::io("start the async runtime", e))?;
    rt.block_on(serve(config))
}

async fn serve(config: ServeConfig) -> Result<(), Error> {
    let metrics = Arc::new(Metrics::default());
    let (scheduler, thread) = Scheduler::start(config.parallel, config.prompt_cache, metrics.clone())
        .map_err(|e| Error::io("start the scheduler thread", e))?;
    let signals = reload::Signals::install().map_err(|e| Error::io("install signal handlers", e))?;
    let listener = tokio::net::TcpListener::bind((config.host, config.port))
        .await
        .map_err(|e| Error::io("bind the listening socket", e))?;
    let addr = listener.local_addr().map_err(|e| Error::io("read the bound address", e))?;
    let _pid = PidFile::write(config.pid_file.clone())?;
    eprintln!("KV budget: {} MiB (--kv-budget)", config.kv_budget >> 20);
    eprintln!("prompt cache: {} MiB (--prompt-cache)", config.prompt_cache >> 20);
    let state: Shared = Arc::new(AppState {
        admission: Admission::new(config.parallel + config.queue),
        port: addr.port(),
        kv: budget::KvBudget::new(config.kv_budget),
        config,
        slot: ModelSlot::default(),
        scheduler: scheduler.clone(),
        metrics,
    });
    eprintln!("listening on http://{addr}");

    // The first model loads while /health answers 503; a failure stops the server.
    let fatal: Arc<Mutex<Option<Error>>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    {
        let (state, fatal, stop) = (state.clone(), fatal.clone(), stop.clone());
        tokio::spawn(async move {
            let (path, ctx, opts) = (state.config.model_path.clone(), state.config.ctx, state.config.load.clone());
            let template = state.config.chat_template.clone();
            let load = move || engine::Engine::load(&path, ctx, opts, 1)?.with_template_opt(template.as_deref());
            match tokio::task::spawn_blocking(load).await {
                Ok(Ok(e)) => {
                    eprintln!("model {} ready (context {} tokens)", e.id, e.n_ctx);
                    state.metrics.generation.store(1, Ordering::Relaxed);
                    state.metrics.reset_experts(e.experts_per_layer());
                    state.slot.set(Arc::new(e));
                }
                Ok(Err(e)) => {
                    *fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    stop.notify_one();
                }
                Err(e) => {
                    *fatal.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(Error::InvalidArgument { reason: format!("model load panicked: {e}") });
                    stop.notify_one();
                }
            }
        });
    }
    let draining = Arc::new(tokio::sync::Notify::new());
    let shutdown = {
        let (state, stop, draining) = (state.clone(), stop.clone(), draining.clone());
        async move {
            tokio::select! {
                _ = signals.run(state) => {}
                _ = stop.notified() => {}
            }
            draining.notify_one();
        }
    };
    let server = conn::serve(listener, router(state.clone()), state.config.header_timeout, shutdown);
    let drain_cap = async {
        draining.notified().await;
        tokio::time::sleep(DRAIN_CAP).await;
    };
    tokio::select! {
        r = server => r.map_err(|e| Error::io("serve HTTP", e))?,
        _ = drain_cap => eprintln!("drain took longer than {} s; exiting", DRAIN_CAP.as_secs()),
    }
    scheduler.shutdown();
    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    let fatal = fatal.lock().unwrap_or_else(|p| p.into_inner()).take();
    match fatal {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
