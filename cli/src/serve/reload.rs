//! Hot reload (SIGUSR1) and shutdown (SIGTERM / SIGINT). A reload re-opens the model path off the
//! async threads, verifies it fully, and only then swaps the slot: running requests keep their
//! engine, new ones get the new one; a bad or missing file is a log line and changes nothing.
//! The served file rewritten in place (rather than replaced by rename) is noticed within a
//! second (`Model::check_unchanged`): requests on it fail, new ones get 503, and the path is
//! reloaded every second until it holds a good file again.

use super::engine::Engine;
use super::state::Shared;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// The signal streams, installed before the socket is announced so an early signal is not fatal.
pub struct Signals {
    usr1: Signal,
    term: Signal,
    int: Signal,
}

impl Signals {
    pub fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            usr1: signal(SignalKind::user_defined1())?,
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Serve reloads until SIGTERM or SIGINT arrives.
    pub async fn run(mut self, state: Shared) {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = self.usr1.recv() => reload(&state).await,
                _ = tick.tick() => watch(&state).await,
                _ = self.term.recv() => break,
                _ = self.int.recv() => break,
            }
        }
        eprintln!("shutting down: draining in-flight requests");
    }
}

/// Reload when the served file changed under its mapping.
async fn watch(state: &Shared) {
    let changed = state.slot.get().and_then(|e| e.model.check_unchanged().err());
    if let Some(e) = changed {
        eprintln!("{e}: reloading");
        reload(state).await;
    }
}

/// Load, verify and swap in the model at the configured path.
pub async fn reload(state: &Shared) {
    let Some(current) = state.slot.get() else {
        eprintln!("reload ignored: the first model is still loading");
        return;
    };
    let generation = current.generation + 1;
    drop(current);
    let (path, ctx, opts) = (state.config.model_path.clone(), state.config.ctx, state.config.load.clone());
    let template = state.config.chat_template.clone();
    let load = move || Engine::load(&path, ctx, opts, generation)?.with_template_opt(template.as_deref());
    let loaded = tokio::task::spawn_blocking(load).await;
    match loaded {
        Ok(Ok(engine)) => {
            let id = engine.id.clone();
            state.metrics.reset_experts(engine.experts_per_layer());
            state.slot.set(Arc::new(engine));
            state.metrics.reloads.fetch_add(1, Ordering::Relaxed);
            state.metrics.generation.store(generation, Ordering::Relaxed);
            eprintln!("reloaded model {id}: generation {generation}");
        }
        Ok(Err(e)) => {
            state.metrics.reload_failures.fetch_add(1, Ordering::Relaxed);
            eprintln!("reload rejected ({e}); the old model keeps serving");
        }
        Err(e) => {
            state.metrics.reload_failures.fetch_add(1, Ordering::Relaxed);
            eprintln!("reload failed ({e}); the old model keeps serving");
        }
    }
}
