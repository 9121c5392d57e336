#!/usr/bin/env python3
"""Train colibri's default model: a tiny Mixtral-family MoE on the King James Bible.

Provenance and licence: see docs/default-model.md. The corpus comes from
tools/get_default_corpus.sh (Debian `bible-kjv-text`, public-domain KJV text).

What this script does, end to end (CPU only):
  1. reads the corpus (one verse per line, chapters separated by a blank line)
     and holds out the last ~1% of it (whole chapters, end of Revelation) for
     validation;
  2. trains a byte-level BPE tokenizer (vocab 4096) on the training part and
     writes tokenizer.json, tokenizer_config.json (with a ChatML chat_template);
  3. trains a MixtralForCausalLM (4 layers, hidden 256, 8 experts, top-2,
     ~9.7M parameters) with AdamW, warmup + cosine decay, for a fixed step
     count (--steps) or a wall-clock budget (--minutes);
  4. saves config.json, generation_config.json, model.safetensors (float32)
     with save_pretrained(), plus training_info.json;
  5. reloads the saved directory with Auto* classes and prints the final
     train/val loss, perplexity, a per-layer expert routing histogram over the
     validation text (fails if an expert is never used) and greedy + sampled
     generations.

Example (the command used for the shipped model is in docs/default-model.md):
  tools/get_default_corpus.sh /work/artifacts/corpus/kjv.txt
  /work/venv/bin/python tools/train_default.py \
      --corpus /work/artifacts/corpus/kjv.txt --out /work/artifacts/default-hf --minutes 35
"""

import argparse
import hashlib
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

SEED = 1234  # seeds python `random`, numpy and torch

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
BOS_EOS = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
PROMPTS = ["In the beginning", "And the LORD said", "Blessed are"]


def log(*a):
    print(*a, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", default="/work/artifacts/corpus/kjv.txt")
    p.add_argument("--out", default="/work/artifacts/default-hf")
    p.add_argument("--minutes", type=float, default=35.0,
                   help="wall-clock budget of the training loop; the cosine schedule follows elapsed time "
                        "(ignored if --steps is given)")
    p.add_argument("--steps", type=int, default=0, help="fixed number of optimizer steps (reproducible schedule)")
    p.add_argument("--max-minutes", type=float, default=0.0,
                   help="with --steps: hard wall-clock stop (the run then ends early, before the schedule finishes)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--ctx", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--aux-coef", type=float, default=0.02, help="router_aux_loss_coef (load balancing)")
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--val-frac", type=float, default=0.01)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--report-only", action="store_true",
                   help="skip training; reload --out and print the evaluation report")
    return p.parse_args()


def set_seeds(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ----------------------------------------------------------------------------- data

def load_chapters(path, val_frac):
    with open(path, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8")
    chapters = [c.strip("\n") + "\n" for c in text.split("\n\n") if c.strip()]
    total = sum(len(c) for c in chapters)
    n_val, val_chars = 0, 0
    while val_chars < val_frac * total:
        n_val += 1
        val_chars += len(chapters[-n_val])
    return chapters[:-n_val], chapters[-n_val:], hashlib.sha256(raw).hexdigest()


def train_tokenizer(chapters, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(chapters, trainer=trainer, length=len(chapters))
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    for i, s in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(s) == i
    return tok


def save_tokenizer(tok, out):
    from transformers import PreTrainedTokenizerFast

    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS_EOS,
        eos_token=BOS_EOS,
        unk_token=None,
        pad_token=BOS_EOS,
        additional_special_tokens=SPECIAL_TOKENS[1:],
        model_max_length=512,
        clean_up_tokenization_spaces=False,
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    hf_tok.save_pretrained(out)  # transformers 5 writes the template to chat_template.jinja
    # Also put the template inline in tokenizer_config.json and use the long-standing class name,
    # so that readers other than transformers 5 (e.g. colibri's converter) find everything there.
    cfg_path = os.path.join(out, "tokenizer_config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg["add_bos_token"] = False
    cfg["add_eos_token"] = False
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    return hf_tok


def encode_stream(tok, chapters):
    """<|endoftext|> before every chapter, then the chapter's tokens."""
    eos = tok.token_to_id(BOS_EOS)
    ids = []
    for enc in tok.encode_batch(chapters):
        ids.append(eos)
        ids.extend(enc.ids)
    return np.asarray(ids, dtype=np.int64)


# ----------------------------------------------------------------------------- model

def make_config(args, tok_vocab):
    from transformers import MixtralConfig

    return MixtralConfig(
        vocab_size=tok_vocab,
        hidden_size=256,
        intermediate_size=320,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=32,
        hidden_act="silu",
        num_local_experts=8,
        num_experts_per_tok=2,
        max_position_embeddings=512,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        router_aux_loss_coef=args.aux_coef,
        output_router_logits=True,
        router_jitter_noise=0.0,
        sliding_window=None,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )


def losses(model, x, aux_coef):
    """x: (B, T+1) token ids. Returns (total, ce, aux)."""
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    out = model(input_ids=x[:, :-1], output_router_logits=True, use_cache=False)
    ce = F.cross_entropy(out.logits.reshape(-1, out.logits.size(-1)), x[:, 1:].reshape(-1))
    # Load-balancing loss computed per layer and averaged (as in Switch Transformer / Mixtral).
    # transformers' built-in out.aux_loss pools the router logits of all layers first, which only
    # balances experts across layers jointly and lets single layers starve an expert.
    cfg = model.config
    aux = torch.stack([load_balancing_loss_func((lg,), cfg.num_local_experts, cfg.num_experts_per_tok)
                       for lg in out.router_logits]).mean()
    return ce + aux_coef * aux, ce, aux


def windows(stream, ctx):
    """Non-overlapping (ctx+1)-token windows covering the stream (targets do not overlap)."""
    n = (len(stream) - 1) // ctx
    return torch.from_numpy(np.stack([stream[i * ctx: i * ctx + ctx + 1] for i in range(n)]))


@torch.no_grad()
def evaluate(model, wins, bs=16):
    was_training = model.training
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, len(wins), bs):
        x = wins[i:i + bs]
        out = model(input_ids=x[:, :-1], use_cache=False)
        tot += F.cross_entropy(out.logits.reshape(-1, out.logits.size(-1)), x[:, 1:].reshape(-1),
                               reduction="sum").item()
        n += x[:, 1:].numel()
    model.train(was_training)
    return tot / n


# ----------------------------------------------------------------------------- train

def train(args):
    from transformers import MixtralForCausalLM

    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    train_ch, val_ch, corpus_sha = load_chapters(args.corpus, args.val_frac)
    log(f"corpus {args.corpus} sha256={corpus_sha}")
    log(f"chapters: train {len(train_ch)}, val {len(val_ch)} "
        f"(val chars {sum(map(len, val_ch))} = "
        f"{100 * sum(map(len, val_ch)) / (sum(map(len, train_ch)) + sum(map(len, val_ch))):.2f}%)")

    tok = train_tokenizer(train_ch, args.vocab)
    save_tokenizer(tok, args.out)
    train_ids = encode_stream(tok, train_ch)
    val_ids = encode_stream(tok, val_ch)
    log(f"tokenizer: vocab {tok.get_vocab_size()}, train tokens {len(train_ids)}, val tokens {len(val_ids)} "
        f"({sum(map(len, train_ch)) / len(train_ids):.2f} chars/token) [{time.time() - t_start:.0f}s]")

    set_seeds(args.seed)
    config = make_config(args, tok.get_vocab_size())
    model = MixtralForCausalLM(config)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "embeddings not tied"
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: MixtralForCausalLM, {n_params} parameters ({n_params / 1e6:.2f}M)")
    assert n_params < 11_000_000

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed_tokens" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed_tokens" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    val_wins = windows(val_ids, args.ctx)
    rng = np.random.default_rng(args.seed)
    # fixed sample of training windows for a comparable "train loss" at eval time
    tr_pos = rng.integers(0, len(train_ids) - args.ctx - 1, size=64)
    train_eval_wins = torch.from_numpy(np.stack([train_ids[p:p + args.ctx + 1] for p in tr_pos]))

    budget = args.minutes * 60.0
    mode = f"{args.steps} steps" if args.steps else f"{args.minutes} min"
    log(f"training: batch {args.batch} x ctx {args.ctx} = {args.batch * args.ctx} tokens/step, "
        f"lr {args.lr} -> {args.min_lr}, warmup {args.warmup}, aux coef {args.aux_coef}, budget {mode}, "
        f"seed {args.seed}, threads {torch.get_num_threads()}")

    def lr_at(step, progress):
        warm = min(1.0, (step + 1) / args.warmup)
        cos = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return warm * (args.min_lr + (args.lr - args.min_lr) * cos)

    model.train()
    t0 = time.time()
    step, ema_ce, ema_aux, tokens = 0, None, None, 0
    history = []
    while True:
        elapsed = time.time() - t0
        progress = step / args.steps if args.steps else elapsed / budget
        if progress >= 1.0:
            break
        if args.steps and args.max_minutes and elapsed > args.max_minutes * 60:
            log(f"stopping early at step {step}: --max-minutes {args.max_minutes} reached")
            break
        lr = lr_at(step, progress)
        for g in opt.param_groups:
            g["lr"] = lr
        pos = rng.integers(0, len(train_ids) - args.ctx - 1, size=args.batch)
        x = torch.from_numpy(np.stack([train_ids[p:p + args.ctx + 1] for p in pos]))
        loss, ce, aux = losses(model, x, args.aux_coef)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
        opt.step()
        step += 1
        tokens += x[:, :-1].numel()
        ema_ce = ce.item() if ema_ce is None else 0.95 * ema_ce + 0.05 * ce.item()
        ema_aux = aux.item() if ema_aux is None else 0.95 * ema_aux + 0.05 * aux.item()
        if step % args.log_every == 0:
            el = time.time() - t0
            log(f"step {step:5d} | ce {ce.item():.4f} (ema {ema_ce:.4f}) | aux {ema_aux:.4f} | lr {lr:.2e} | "
                f"gnorm {gnorm:.2f} | {tokens / el:.0f} tok/s | {el / 60:.1f} min")
        if step % args.eval_every == 0:
            tl, vl = evaluate(model, train_eval_wins), evaluate(model, val_wins)
            history.append({"step": step, "minutes": round((time.time() - t0) / 60, 2),
                            "train_loss": round(tl, 4), "val_loss": round(vl, 4)})
            log(f"== eval step {step}: train {tl:.4f} | val {vl:.4f} (ppl {math.exp(vl):.2f})")

    train_minutes = (time.time() - t0) / 60
    tl, vl = evaluate(model, train_eval_wins), evaluate(model, val_wins)
    history.append({"step": step, "minutes": round(train_minutes, 2), "train_loss": round(tl, 4),
                    "val_loss": round(vl, 4)})
    log(f"== final step {step}: train {tl:.4f} | val {vl:.4f} (ppl {math.exp(vl):.2f}) | "
        f"{tokens} tokens ({tokens / len(train_ids):.2f} epochs) in {train_minutes:.1f} min")

    # ---- save (float32; colibri's converter produces bf16)
    model.config.output_router_logits = False  # inference default
    model.config.use_cache = True
    model.save_pretrained(args.out, safe_serialization=True)
    model.generation_config.bos_token_id = 0
    model.generation_config.eos_token_id = 0
    model.generation_config.pad_token_id = 0
    model.generation_config.save_pretrained(args.out)
    # Older readers of Mixtral configs look for a top-level rope_theta; keep both spellings.
    cfg_path = os.path.join(args.out, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["rope_theta"] = cfg["rope_parameters"]["rope_theta"]
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")

    info = {
        "script": "tools/train_default.py",
        "argv": sys.argv[1:],
        "args": vars(args),
        "seed": args.seed,
        "corpus": os.path.basename(args.corpus),
        "corpus_sha256": corpus_sha,
        "corpus_source": "Debian bookworm packages bible-kjv-text 4.38 / bible-kjv 4.38 (King James Version, "
                         "public domain), extracted by tools/get_default_corpus.sh",
        "train_chapters": len(train_ch), "val_chapters": len(val_ch),
        "train_tokens": int(len(train_ids)), "val_tokens": int(len(val_ids)),
        "parameters": n_params,
        "steps": step, "tokens_seen": tokens, "epochs": round(tokens / len(train_ids), 3),
        "train_minutes": round(train_minutes, 2),
        "final_train_loss": round(tl, 4), "final_val_loss": round(vl, 4),
        "final_val_ppl": round(math.exp(vl), 3),
        "history": history,
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                     "tokenizers": __import__("tokenizers").__version__},
    }
    with open(os.path.join(args.out, "training_info.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    log(f"saved to {args.out} [{(time.time() - t_start) / 60:.1f} min since start]")


# ----------------------------------------------------------------------------- report

@torch.no_grad()
def report(args):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t = time.time()
    tok = AutoTokenizer.from_pretrained(args.out)
    model = AutoModelForCausalLM.from_pretrained(args.out, dtype=torch.float32)
    model.eval()
    cfg = model.config
    n_params = sum(p.numel() for p in model.parameters())
    log(f"\n===== report: reloaded {args.out} ({type(model).__name__}, {n_params} parameters, "
        f"{cfg.num_local_experts} experts, top-{cfg.num_experts_per_tok})")
    for f in sorted(os.listdir(args.out)):
        log(f"  {f:28s} {os.path.getsize(os.path.join(args.out, f)):>10d} bytes")

    train_ch, val_ch, _ = load_chapters(args.corpus, args.val_frac)
    val_ids = encode_stream(tok.backend_tokenizer, val_ch)
    val_wins = windows(val_ids, args.ctx)
    vl = evaluate(model, val_wins)
    log(f"val loss {vl:.4f}  perplexity {math.exp(vl):.2f}  ({val_wins[:, 1:].numel()} val tokens, "
        f"{math.log2(math.e) * vl * val_wins[:, 1:].numel() / sum(map(len, val_ch)):.3f} bits/char)")

    # routing histogram: tokens routed to each expert (top-k), per layer, over the validation text
    E, K = cfg.num_local_experts, cfg.num_experts_per_tok
    counts = torch.zeros(cfg.num_hidden_layers, E, dtype=torch.long)
    for i in range(0, len(val_wins), 16):
        out = model(input_ids=val_wins[i:i + 16, :-1], output_router_logits=True, use_cache=False)
        for layer, logits in enumerate(out.router_logits):
            idx = logits.topk(K, dim=-1).indices.reshape(-1)
            counts[layer] += torch.bincount(idx, minlength=E)
    n_tok = val_wins[:, 1:].numel()
    log(f"\nrouting histogram over {n_tok} validation tokens (top-{K}: each token counted {K}x; "
        f"uniform = {100 / E:.1f}%)")
    log("layer | " + " | ".join(f"  e{e}  " for e in range(E)))
    for layer in range(cfg.num_hidden_layers):
        log(f"  {layer}   | " + " | ".join(f"{c:6d}" for c in counts[layer].tolist()))
        log(f"      | " + " | ".join(f"{100 * c / (K * n_tok):5.1f}%" for c in counts[layer].tolist()))
    dead = [(layer, e) for layer in range(cfg.num_hidden_layers) for e in range(E) if counts[layer, e] == 0]

    log("\ngenerations (prompt encoded without <|endoftext|>, 60 new tokens):")
    for prompt in PROMPTS:
        ids = tok(prompt, return_tensors="pt").input_ids
        g = model.generate(ids, max_new_tokens=60, do_sample=False, pad_token_id=tok.eos_token_id)
        log(f"\n[greedy]  {prompt!r}\n{tok.decode(g[0], skip_special_tokens=True)}")
        torch.manual_seed(args.seed)
        s = model.generate(ids, max_new_tokens=60, do_sample=True, temperature=0.8, top_p=0.9, top_k=0,
                           pad_token_id=tok.eos_token_id)
        log(f"[sampled T=0.8 top_p=0.9 seed={args.seed}]  {prompt!r}\n{tok.decode(s[0], skip_special_tokens=True)}")

    chat = tok.apply_chat_template([{"role": "user", "content": "Hello"}], tokenize=False, add_generation_prompt=True)
    log(f"\nchat_template check: {chat!r}")
    log(f"report took {time.time() - t:.0f}s")
    if dead:
        log(f"ERROR: dead experts (layer, expert): {dead} -- raise --aux-coef and retrain")
        sys.exit(3)
    log("all experts used in every layer")


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    set_seeds(args.seed)
    t = time.time()
    if not args.report_only:
        train(args)
    report(args)
    log(f"total wall time {(time.time() - t) / 60:.1f} min")


if __name__ == "__main__":
    main()
