//! The server-wide KV budget (`--kv-budget`): the KV-cache bytes every admitted request may reach
//! at worst (KV bytes per token × the tokens it claims: prompt + max_tokens), summed over the
//! queued and running ones, never above the budget. A request that does not fit what remains is
//! refused before it is queued (503 + Retry-After), so the cache of a running request can always
//! grow; its claim goes back when the request ends, however it ends ([`KvClaim`] is dropped with
//! the job, or released before its last event).

use colibri::Error;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Share of MemAvailable the default budget takes.
const DEFAULT_SHARE: (u64, u64) = (1, 2);
/// Budget when /proc/meminfo cannot be read.
const FALLBACK_BYTES: u64 = 4 << 30;

pub struct KvBudget {
    total: u64,
    used: AtomicU64,
}

/// Why a claim was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// More than the whole budget: it can never fit.
    Never { need: u64, total: u64 },
    /// More than what is left now; it may fit once running requests end.
    NotNow { need: u64, free: u64 },
}

/// Bytes of the budget held by one request; given back on `release` or drop.
pub struct KvClaim {
    budget: Arc<KvBudget>,
    bytes: u64,
}

impl KvClaim {
    /// Give the bytes back now (idempotent).
    pub fn release(&mut self) {
        let bytes = std::mem::take(&mut self.bytes);
        if bytes > 0 {
            self.budget.used.fetch_sub(bytes, Ordering::AcqRel);
        }
    }
}

impl KvClaim {
    /// This claim as `parts` claims of equal bytes (the remainder to the first), for a request
    /// whose choices end separately; the whole was claimed at once, so it fits or not as one.
    pub fn split(mut self, parts: usize) -> Vec<KvClaim> {
        let parts = parts.max(1) as u64;
        let bytes = std::mem::take(&mut self.bytes);
        (0..parts)
            .map(|i| KvClaim {
                budget: self.budget.clone(),
                bytes: bytes / parts + if i == 0 { bytes % parts } else { 0 },
            })
            .collect()
    }
}

impl Drop for KvClaim {
    fn drop(&mut self) {
        self.release();
    }
}

impl KvBudget {
    pub fn new(total: u64) -> Arc<KvBudget> {
        Arc::new(KvBudget { total, used: AtomicU64::new(0) })
    }

    /// Claim `need` bytes if they fit in what remains.
    pub fn claim(self: &Arc<Self>, need: u64) -> Result<KvClaim, Refused> {
        if need > self.total {
            return Err(Refused::Never { need, total: self.total });
        }
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(need).filter(|&n| n <= self.total)
            })
            .map(|_| KvClaim { budget: self.clone(), bytes: need })
            .map_err(|used| Refused::NotNow { need, free: self.total.saturating_sub(used) })
    }

    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// Prometheus gauges: the budget and the bytes claimed.
    pub fn render(&self, out: &mut String) {
        let gauges = [
            ("colibri_kv_budget_bytes", "KV-cache bytes all requests together may claim (--kv-budget).", self.total),
            ("colibri_kv_budget_used_bytes", "KV-cache bytes claimed by queued and running requests.", self.used()),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
    }
}

/// A size: bytes, or a number with a binary suffix K, M, G or T (optionally followed by B or
/// iB, any case): `8G`, `512M`, `1.5G`, `4096`.
pub fn parse_size(text: &str) -> Result<u64, Error> {
    let bad =
        || Error::InvalidArgument { reason: format!("size {text:?}: expected bytes or a number with K, M, G or T") };
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let unit = lower.trim_end_matches("ib").trim_end_matches('b');
    let (number, shift) = match unit.chars().last() {
        Some('k') => (&unit[..unit.len() - 1], 10),
        Some('m') => (&unit[..unit.len() - 1], 20),
        Some('g') => (&unit[..unit.len() - 1], 30),
        Some('t') => (&unit[..unit.len() - 1], 40),
        _ if unit.len() == lower.len() => (unit, 0),
        _ => return Err(bad()),
    };
    let number = number.trim();
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(bad());
    }
    let value: f64 = number.parse().map_err(|_| bad())?;
    let bytes = value * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// MemAvailable of /proc/meminfo in bytes.
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The default budget: half of MemAvailable at start (4 GiB when it cannot be read).
pub fn default_budget() -> u64 {
    mem_available().map_or(FALLBACK_BYTES, |m| m / DEFAULT_SHARE.1 * DEFAULT_SHARE.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        for (text, want) in [
            ("4096", 4096),
            ("8G", 8 << 30),
            ("512M", 512 << 20),
            ("512m", 512 << 20),
            ("64KiB", 64 << 10),
            ("2GB", 2 << 30),
            ("1.5G", 3 << 29),
            ("1T", 1 << 40),
        ] {
            assert_eq!(parse_size(text).unwrap(), want, "{text}");
        }
        for bad in ["", "G", "-1G", "8X", "1e3", "8 G B", "nan", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn claims_fit_the_budget_and_come_back() {
        let b = KvBudget::new(100);
        let mut a = b.claim(60).unwrap();
        assert_eq!(b.claim(50).err(), Some(Refused::NotNow { need: 50, free: 40 }));
        assert_eq!(b.claim(101).err(), Some(Refused::Never { need: 101, total: 100 }));
        let c = b.claim(40).unwrap();
        assert_eq!(b.used(), 100);
        a.release();
        a.release();
        assert_eq!(b.used(), 40);
        drop(a);
        drop(c);
        let mut parts = b.claim(100).unwrap().split(3);
        assert_eq!(b.used(), 100, "split keeps every byte claimed");
        parts.remove(0).release();
        assert_eq!(b.used(), 66);
        drop(parts);
        assert_eq!(b.used(), 0);
        assert!(default_budget() > 0);
    }
}
