//! What every handler shares: the configuration, the model slot (the engine new requests get;
//! swapped whole on reload), the scheduler's channel, the admission count, the KV budget and the
//! metrics.

use super::args::ServeConfig;
use super::budget::KvBudget;
use super::engine::Engine;
use super::job::Admission;
use super::metrics::Metrics;
use super::scheduler::Scheduler;
use std::sync::{Arc, RwLock};

/// The engine new requests use. Replaced atomically; requests keep the `Arc` they took.
#[derive(Default)]
pub struct ModelSlot(RwLock<Option<Arc<Engine>>>);

impl ModelSlot {
    /// The serving engine, or None while the first model is loading.
    pub fn get(&self) -> Option<Arc<Engine>> {
        self.0.read().ok().and_then(|g| g.clone())
    }

    /// Serve `engine` from now on; returns the one it replaces.
    pub fn set(&self, engine: Arc<Engine>) -> Option<Arc<Engine>> {
        match self.0.write() {
            Ok(mut g) => g.replace(engine),
            Err(poisoned) => poisoned.into_inner().replace(engine),
        }
    }
}

pub struct AppState {
    pub config: ServeConfig,
    /// The bound port (the Host check compares it; --port 0 picks one).
    pub port: u16,
    pub kv: Arc<KvBudget>,
    pub slot: ModelSlot,
    pub scheduler: Scheduler,
    pub admission: Arc<Admission>,
    pub metrics: Arc<Metrics>,
}

pub type Shared = Arc<AppState>;
