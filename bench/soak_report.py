"""Counting for bench/soak.py: outcomes by kind, expected failures by status, unexpected ones
with their first examples, reloads, bursts, the server's memory samples, and the report
(a JSON-ready dict and its text rendering). Python 3 standard library only.
"""
from __future__ import annotations

import os
import threading
from collections import Counter, defaultdict

EXAMPLES = 10


def sample_proc(pid: int) -> dict:
    """Memory and handles of a process: VmRSS / RssAnon / RssFile / VmSize (KiB), threads, open
    file descriptors, and mappings of .colibri files (a model that is never unmapped shows)."""
    out = {}
    try:
        for line in open(f"/proc/{pid}/status", encoding="utf-8"):
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "VmSize", "VmHWM"):
                out[key] = int(value.split()[0])
            elif key == "Threads":
                out[key] = int(value)
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            out["model_files_mapped"] = len({ln.split(None, 5)[5].strip() for ln in f
                                             if ".colibri" in ln and len(ln.split(None, 5)) == 6})
    except OSError as e:
        out["error"] = str(e)
    return out


class Tally:
    """Thread-safe counts of everything the soak saw."""

    def __init__(self):
        self.lock = threading.Lock()
        self.kinds = defaultdict(lambda: {"total": 0, "ok": 0, "expected": Counter(),
                                          "disconnect": 0, "unexpected": 0})
        self.expected_by_status = Counter()
        self.unexpected_reasons = Counter()
        self.examples: list[dict] = []
        self.reloads = {"done": 0, "failed": 0}
        self.bursts = {"count": 0, "with_503": 0, "503s": 0}
        self.samples: list[dict] = []
        self.server: dict = {}
        self.duration = 0.0

    def record(self, o) -> None:
        with self.lock:
            k = self.kinds[o.kind]
            k["total"] += 1
            if o.verdict == "ok":
                k["ok"] += 1
            elif o.verdict == "expected":
                k["expected"][str(o.status)] += 1
                self.expected_by_status[str(o.status)] += 1
            elif o.verdict == "disconnect":
                k["disconnect"] += 1
            else:
                k["unexpected"] += 1
                self._unexpected(o.kind, o.status, o.reason, o.detail)

    def _unexpected(self, kind, status, reason, detail="") -> None:
        self.unexpected_reasons[f"{kind}: {reason}"] += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append({"kind": kind, "status": status, "reason": reason, "detail": detail})

    def problem(self, reason: str) -> None:
        """An unexpected finding that is not one request's answer (the server's state)."""
        with self.lock:
            self._unexpected("server", None, reason)

    def burst(self, n503: int) -> None:
        with self.lock:
            self.bursts["count"] += 1
            self.bursts["503s"] += n503
            self.bursts["with_503"] += int(n503 > 0)

    def reloaded(self, why: str | None) -> None:
        with self.lock:
            if why is None:
                self.reloads["done"] += 1
            else:
                self.reloads["failed"] += 1
                self._unexpected("reload", None, why)

    def sample(self, at: float, s: dict, final: bool = False) -> None:
        with self.lock:
            self.samples.append({"t_s": round(at, 1), "final": final, **s})

    def progress(self, at: float) -> str:
        with self.lock:
            total = sum(k["total"] for k in self.kinds.values())
            bad = sum(self.unexpected_reasons.values())
            rss = self.samples[-1].get("VmRSS") if self.samples else None
            return (f"[{at / 60:5.1f} min] requests {total}, unexpected {bad}, "
                    f"reloads {self.reloads['done']}, RSS {rss} KiB")

    def report(self, meta: dict, tolerance: float) -> dict:
        with self.lock:
            rss = [s["VmRSS"] for s in self.samples if "VmRSS" in s]
            start = rss[0] if rss else None
            end = rss[-1] if len(rss) > 1 else None
            ratio = round(end / start, 4) if start and end else None
            unexpected = sum(self.unexpected_reasons.values())
            flat = ratio is not None and ratio <= 1 + tolerance
            kinds = {name: {**k, "expected": dict(k["expected"])} for name, k in sorted(self.kinds.items())}
            return {
                **meta,
                "duration_s": round(self.duration, 1),
                "requests": {"total": sum(k["total"] for k in kinds.values()), "by_kind": kinds},
                "expected_failures_by_status": dict(sorted(self.expected_by_status.items())),
                "unexpected": {"count": unexpected, "by_reason": dict(self.unexpected_reasons),
                               "examples": self.examples},
                "reloads": dict(self.reloads),
                "bursts": dict(self.bursts),
                "rss_kib": {"start": start, "end": end, "max": max(rss) if rss else None,
                            "end_over_start": ratio, "samples": self.samples},
                "server": dict(self.server),
                "verdict": {"unexpected_zero": unexpected == 0, "rss_flat": flat,
                            "pass": unexpected == 0 and flat},
            }


def render(r: dict) -> str:
    """The report as text."""
    lines = [f"soak of colibri serve: {r['duration_s'] / 60:.1f} min timed, commit {r['commit']}, {r['date']}",
             f"  {r['command']}", f"  server: {r['server_command']}",
             f"requests: {r['requests']['total']}"]
    for name, k in r["requests"]["by_kind"].items():
        exp = ", ".join(f"{s}: {n}" for s, n in sorted(k["expected"].items())) or "-"
        lines.append(f"  {name:<18} {k['total']:>7}  ok {k['ok']:>6}  expected [{exp}]  "
                     f"disconnects {k['disconnect']}  unexpected {k['unexpected']}")
    lines.append("expected failures by status: "
                 + (", ".join(f"{s}: {n}" for s, n in r["expected_failures_by_status"].items()) or "none"))
    u = r["unexpected"]
    lines.append(f"unexpected: {u['count']}")
    for reason, n in sorted(u["by_reason"].items(), key=lambda x: -x[1]):
        lines.append(f"  {n:>5}  {reason}")
    for e in u["examples"][:5]:
        lines.append(f"  e.g. {e['kind']} status {e['status']}: {e['reason']}: {e['detail'][:160]}")
    b, rl = r["bursts"], r["reloads"]
    lines.append(f"reloads: {rl['done']} done, {rl['failed']} failed; bursts: {b['count']} "
                 f"({b['with_503']} met a 503, {b['503s']} 503s in all)")
    m = r["rss_kib"]
    lines.append(f"RSS (KiB): start {m['start']}, end {m['end']}, max {m['max']}, end/start {m['end_over_start']}")
    s = r["server"]
    lines.append(f"server: alive at end {s.get('alive_at_end')}, 5xx counted {s.get('server_5xx')}, "
                 f"exit status {s.get('exit_code')}")
    v = r["verdict"]
    lines.append(f"verdict: {'PASS' if v['pass'] else 'FAIL'} (unexpected = 0: {v['unexpected_zero']}, "
                 f"RSS flat: {v['rss_flat']})")
    return "\n".join(lines)
