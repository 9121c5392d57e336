//! Hot reload (SIGUSR1) and shutdown (SIGTERM / SIGINT). A reload re-opens the model path off the
//! async threads, verifies it fully, and only then swaps the slot: running requests keep their
//! engine, new ones get the new one; a bad or missing file is a log line and changes nothing.

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
        loop {
            tokio::select! {
                _ = self.usr1.recv() => reload(&state).await,
                _ = self.term.recv() => break,
                _ = self.int.recv() => break,
            }
        }
        eprintln!("shutting down: draining in-flight requests");
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
    let (path, ctx) = (state.config.model_path.clone(), state.config.ctx);
    let loaded = tokio::task::spawn_blocking(move || Engine::load(&path, ctx, generation)).await;
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
