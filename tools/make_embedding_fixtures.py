#!/usr/bin/env python3
"""Write the final-normed hidden states of the oracle fixtures' prompts (embedding oracles).

    /work/venv/bin/python tools/make_embedding_fixtures.py            # every fixture
    /work/venv/bin/python tools/make_embedding_fixtures.py --only olmoe,mixtral_gqa

For each committed fixture checkpoint tests/fixtures/models/<name>/ (its f32 oracle; the fp8 one
has its own tests and is skipped) this loads the checkpoint exactly as tools/make_fixtures.py does
(float32, eager attention and experts, its Phi-MoE LongRoPE patch), runs the teacher-forced prompt
`input_ids` of oracle/meta.json once with `output_hidden_states=True`, and writes

    oracle/hidden_f32.npy   float32 [T, hidden]: hidden_states[-1], the final-normed hidden states

Before writing, it checks per family that this entry really is the one after the final norm and the
one the logits come from: it equals `model.model.norm(output of the last decoder layer)` (captured
with a forward hook), the base model's `last_hidden_state`, and the logits of the same call equal the
committed oracle/logits_f32.npy (so the prompt and the weights are the oracle's). Deterministic: no
random draws; reruns are byte-identical.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402  (its import patches Phi-MoE's LongRoPE as the oracle does)


def is_fp8(d: Path) -> bool:
    q = json.loads((d / "config.json").read_text()).get("quantization_config") or {}
    return q.get("quant_method") == "fp8"


def last_layer_output(model, ids: torch.Tensor) -> tuple[object, torch.Tensor]:
    """One forward with output_hidden_states, and the raw output of the last decoder layer."""
    seen: list[torch.Tensor] = []

    def hook(_mod, _inp, out):
        seen.append(out[0] if isinstance(out, tuple) else out)

    h = model.model.layers[-1].register_forward_hook(hook)
    try:
        out = model(input_ids=ids, use_cache=False, output_hidden_states=True)
    finally:
        h.remove()
    assert len(seen) == 1, len(seen)
    return out, seen[0]


def hidden_of(d: Path) -> np.ndarray:
    meta = json.loads((d / "oracle" / "meta.json").read_text())
    model = mf.load_fixture(d, meta["family"])
    ids = torch.tensor([meta["input_ids"]], dtype=torch.long)
    with torch.no_grad():
        out, pre = last_layer_output(model, ids)
        hidden = out.hidden_states[-1][0].float()
        normed = model.model.norm(pre)[0].float()
        base = model.model(input_ids=ids, use_cache=False).last_hidden_state[0].float()
    scale = hidden.abs().max().item()
    assert torch.allclose(hidden, normed, rtol=0, atol=1e-6 * scale), f"{d.name}: hidden_states[-1] is not norm(last layer)"
    assert torch.allclose(hidden, base, rtol=0, atol=1e-6 * scale), f"{d.name}: hidden_states[-1] != last_hidden_state"
    want = torch.from_numpy(np.load(d / "oracle" / "logits_f32.npy"))
    got = out.logits[0].float()
    assert got.shape == want.shape, (got.shape, want.shape)
    assert torch.allclose(got, want, rtol=0, atol=1e-5 * want.abs().max().item()), f"{d.name}: logits differ from the oracle"
    return hidden.numpy().astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated fixture names")
    args = ap.parse_args()
    only = {s for s in args.only.split(",") if s}
    dirs = sorted(p.parent.parent for p in mf.MODEL_DIR.glob("*/oracle/logits_f32.npy"))
    for d in dirs:
        if (only and d.name not in only) or is_fp8(d):
            continue
        h = hidden_of(d)
        np.save(d / "oracle" / "hidden_f32.npy", h)
        print(f"{d.name:<24} hidden_f32.npy {list(h.shape)}  max|h| {np.abs(h).max():.3f}", flush=True)


if __name__ == "__main__":
    main()
