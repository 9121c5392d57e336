//! Server metrics and their Prometheus text rendering: requests by endpoint and status, prompt
//! and generated tokens, queue depth, active sequences, time-to-first-token and inter-token
//! histograms, per-layer expert selection counts, reloads. Updated by the handlers and the
//! scheduler; read by `GET /metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Upper bounds (seconds) of the latency histogram buckets.
const BUCKETS: [f64; 14] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

#[derive(Default)]
pub struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    pub fn observe(&mut self, seconds: f64) {
        for (c, &b) in self.counts.iter_mut().zip(&BUCKETS) {
            if seconds <= b {
                *c += 1;
            }
        }
        self.count += 1;
        self.sum += seconds;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (c, b) in self.counts.iter().zip(&BUCKETS) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {c}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"+Inf\"}} {}\n{name}_sum {}\n{name}_count {}",
            self.count, self.sum, self.count
        );
    }
}

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    pub prompt_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
    /// Prompt tokens taken from the prompt cache instead of computed.
    pub cached_prompt_tokens: AtomicU64,
    /// Bytes and sessions the prompt cache holds.
    pub prompt_cache_bytes: AtomicU64,
    pub prompt_cache_sessions: AtomicU64,
    pub queue_depth: AtomicU64,
    pub active: AtomicU64,
    pub reloads: AtomicU64,
    pub reload_failures: AtomicU64,
    pub generation: AtomicU64,
    pub ttft: Mutex<Histogram>,
    pub inter_token: Mutex<Histogram>,
    /// [layer][expert] → times chosen (for the model now serving; reset on reload).
    experts: Mutex<Vec<Vec<u64>>>,
}

impl Metrics {
    pub fn count_request(&self, endpoint: &str, status: u16) {
        if let Ok(mut m) = self.requests.lock() {
            *m.entry((endpoint.to_string(), status)).or_default() += 1;
        }
    }

    /// Add one step's expert choices: (layer, experts) pairs.
    pub fn count_experts<'a>(&self, choices: impl Iterator<Item = (usize, &'a [u32])>) {
        let Ok(mut m) = self.experts.lock() else { return };
        for (layer, experts) in choices {
            if m.len() <= layer {
                m.resize_with(layer + 1, Vec::new);
            }
            for &e in experts {
                let row = &mut m[layer];
                if row.len() <= e as usize {
                    row.resize(e as usize + 1, 0);
                }
                row[e as usize] += 1;
            }
        }
    }

    /// Start counting afresh for a model: `experts_per_layer[l]` experts in layer l (0 for a
    /// dense layer), every count at 0 so unchosen experts show too.
    pub fn reset_experts(&self, experts_per_layer: impl Iterator<Item = usize>) {
        if let Ok(mut m) = self.experts.lock() {
            *m = experts_per_layer.map(|n| vec![0; n]).collect();
        }
    }

    pub fn observe(h: &Mutex<Histogram>, seconds: f64) {
        if let Ok(mut h) = h.lock() {
            h.observe(seconds);
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# HELP colibri_requests_total HTTP requests by endpoint and status.");
        let _ = writeln!(out, "# TYPE colibri_requests_total counter");
        if let Ok(m) = self.requests.lock() {
            for ((endpoint, status), n) in m.iter() {
                let _ = writeln!(out, "colibri_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}");
            }
        }
        let counters = [
            ("colibri_prompt_tokens_total", "Prompt tokens processed.", &self.prompt_tokens),
            ("colibri_generated_tokens_total", "Tokens generated.", &self.generated_tokens),
            (
                "colibri_cached_prompt_tokens_total",
                "Prompt tokens reused from the prompt cache.",
                &self.cached_prompt_tokens,
            ),
            ("colibri_reloads_total", "Successful model reloads.", &self.reloads),
            ("colibri_reload_failures_total", "Rejected model reloads.", &self.reload_failures),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", v.load(Ordering::Relaxed));
        }
        let gauges = [
            ("colibri_queue_depth", "Requests waiting for a sequence slot.", &self.queue_depth),
            ("colibri_active_sequences", "Sequences being decoded.", &self.active),
            ("colibri_prompt_cache_bytes", "Memory held by the prompt cache's sessions.", &self.prompt_cache_bytes),
            ("colibri_prompt_cache_sessions", "Sessions kept by the prompt cache.", &self.prompt_cache_sessions),
            ("colibri_model_generation", "Generation of the serving model (1 + reloads).", &self.generation),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}", v.load(Ordering::Relaxed));
        }
        if let Ok(h) = self.ttft.lock() {
            h.render(&mut out, "colibri_time_to_first_token_seconds", "From arrival to the first generated token.");
        }
        if let Ok(h) = self.inter_token.lock() {
            h.render(&mut out, "colibri_inter_token_seconds", "Between consecutive tokens of a sequence.");
        }
        let name = "colibri_expert_selections_total";
        let _ = writeln!(out, "# HELP {name} Times each expert was chosen, per MoE layer.\n# TYPE {name} counter");
        if let Ok(m) = self.experts.lock() {
            for (layer, row) in m.iter().enumerate() {
                for (expert, n) in row.iter().enumerate() {
                    let _ = writeln!(out, "{name}{{layer=\"{layer}\",expert=\"{expert}\"}} {n}");
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histograms_and_experts() {
        let m = Metrics::default();
        m.count_request("/v1/completions", 200);
        m.count_request("/v1/completions", 200);
        m.count_experts([(1usize, &[3u32, 5][..])].into_iter());
        Metrics::observe(&m.ttft, 0.02);
        let text = m.render();
        assert!(text.contains("colibri_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2"));
        assert!(text.contains("colibri_expert_selections_total{layer=\"1\",expert=\"5\"} 1"));
        assert!(!text.contains("colibri_expert_selections_total{layer=\"0\""));
        assert!(text.contains("colibri_time_to_first_token_seconds_bucket{le=\"0.025\"} 1"));
        assert!(text.contains("colibri_time_to_first_token_seconds_bucket{le=\"0.01\"} 0"));
    }
}
