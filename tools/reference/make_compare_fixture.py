#!/usr/bin/env python3
"""Write tests/fixtures/compare/: what `txl compare` must report, computed independently.

The reference is the `adaptive_div2` fixture model (tests/fixtures/adaptive_div2, written by
make_fixtures.py). The candidate is the same model with seeded Gaussian noise added to every
parameter (std NOISE times that tensor's own standard deviation), saved as a Hugging Face
checkpoint (config.json + model.safetensors, float32). Both are scored with Hugging Face
`TransfoXLLMHeadModel` in float64 (make_fixtures.py's `score`, with its float64 attention
patch) on `tokens.txt` with the session settings in SESSION, and expected.json holds what
tools/src/compare.rs defines, over the N - 1 predictions of N tokens:

  tokens                     N
  reference_bits_per_token   mean of -ln p_ref(t[i+1] | t[..=i]) / ln 2
  candidate_bits_per_token   the same for the candidate
  relative_delta             (candidate - reference) / reference
  mean_kl                    mean over predictions of KL(ref || cand) = sum_v p_ref(v) (ln p_ref(v) - ln p_cand(v)), nats
  top1_agreement             fraction of predictions where both rank the same token first
  max_abs_delta_logp         largest |ln p_ref(t[i+1]) - ln p_cand(t[i+1])|

The script asserts that top-1 agreement is clearly between 0.5 and 1 and that at every
prediction both models' first token leads the second by more than MIN_MARGIN nats, so that
float32 rounding (the core is within 1e-5 of these float64 values) cannot change a top-1.

    ~/.cache/txl-reference-venv/bin/python tools/reference/make_compare_fixture.py   # about 2 s

tools/tests/compare_fixture.rs runs `txl convert` and `txl compare` on these files.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore")

import make_fixtures as mf  # noqa: E402  (this folder; imports torch and transformers)

OUT = mf.FIXTURES / "compare"
REFERENCE = "adaptive_div2"
SEED = 7070
# Noise std relative to each tensor's standard deviation.
NOISE = 0.1
N_TOKENS = 96
# Session settings of the comparison: tgt_len, mem_len and clamp_len differ from the reference's
# config (6, 10, 0) and mem_init from `txl compare`'s default (empty), so the Rust test must
# pass each to both sides; same_length stays the config's false (with it on, the results would
# not depend on tgt_len at all). 96 tokens in segments of 5 leave a last segment of one token,
# which predicts nothing scored.
SESSION = dict(tgt_len=5, mem_len=8, clamp_len=4, same_length=False, mem_init="zeros")
# Smallest gap allowed between the first and second log-probability of any prediction.
MIN_MARGIN = 1e-4


@torch.no_grad()
def add_noise(model, seed: int, noise: float) -> None:
    """Every parameter (tied ones once) plus noise of std `noise` x its own std, in float64,
    rounded to the parameter's dtype."""
    gen = torch.Generator().manual_seed(seed)
    for _, p in model.named_parameters():
        p64 = p.detach().to(torch.float64)
        std = p64.std().item() if p64.numel() > 1 else abs(p64.item())
        p.copy_((p64 + noise * std * torch.randn(p.shape, generator=gen, dtype=torch.float64)).to(p.dtype))


def top_margins(full: torch.Tensor) -> torch.Tensor:
    """First minus second log-probability of every row."""
    top2 = full.topk(2, dim=-1).values
    return top2[:, 0] - top2[:, 1]


def comparison(ref_full: torch.Tensor, cand_full: torch.Tensor, tokens: list[int]) -> dict:
    """tools/src/compare.rs's Comparison, in float64: rows i = 0..N-2 predict tokens[i + 1]."""
    n = len(tokens) - 1
    targets = torch.tensor(tokens[1:], dtype=torch.long)
    p, q = ref_full[:n], cand_full[:n]
    lp = p.gather(1, targets[:, None])[:, 0]
    lq = q.gather(1, targets[:, None])[:, 0]
    ref_bits = (-lp.sum().item()) / n / math.log(2)
    cand_bits = (-lq.sum().item()) / n / math.log(2)
    kl = (p.exp() * (p - q)).sum(dim=-1)
    return {
        "tokens": len(tokens),
        "reference_bits_per_token": ref_bits,
        "candidate_bits_per_token": cand_bits,
        "relative_delta": (cand_bits - ref_bits) / ref_bits,
        "mean_kl": kl.mean().item(),
        "top1_agreement": (p.argmax(dim=-1) == q.argmax(dim=-1)).double().mean().item(),
        "max_abs_delta_logp": (lp - lq).abs().max().item(),
    }


def main() -> None:
    torch.set_num_threads(1)
    mf.use_patched_attention(True)
    ref_dir = mf.FIXTURES / REFERENCE
    config = json.loads((ref_dir / "config.json").read_text())

    OUT.mkdir(parents=True, exist_ok=True)
    candidate = mf.load_model(ref_dir, "safetensors")  # float32, as on disk
    add_noise(candidate, SEED, NOISE)
    candidate.config._name_or_path = ""  # else config.json names this machine's folder
    mf.save_model(candidate, OUT, ["safetensors"])

    tokens = mf.make_tokens(config["vocab_size"], config["cutoffs"], N_TOKENS, SEED)
    (OUT / "tokens.txt").write_text(" ".join(map(str, tokens)) + "\n")

    # Both from the float32 weights on disk, upcast.
    ref64 = mf.load_model(ref_dir, "safetensors").double()
    cand64 = mf.load_model(OUT, "safetensors").double()
    case = mf.Case("compare", n_tokens=N_TOKENS, **SESSION)
    _, ref_full = mf.score(ref64, tokens, case)
    _, cand_full = mf.score(cand64, tokens, case)

    expected = comparison(ref_full, cand_full, tokens)
    margin = min(top_margins(ref_full[:-1]).min().item(), top_margins(cand_full[:-1]).min().item())
    assert margin > MIN_MARGIN, f"a top-1 leads by only {margin:.2e}: change SEED or NOISE"
    assert 0.6 <= expected["top1_agreement"] <= 0.95, f"top-1 agreement {expected['top1_agreement']}"
    # The candidate is neither the reference nor unrelated to it.
    assert 1e-3 < expected["mean_kl"] < 1.0, expected["mean_kl"]

    fixture = {
        "generator": "tools/reference/make_compare_fixture.py",
        "reference": REFERENCE,
        "candidate_noise": NOISE,
        "seed": SEED,
        "session": SESSION,
        "min_top1_margin": margin,
        "expected": expected,
    }
    (OUT / "expected.json").write_text(json.dumps(fixture, indent=2) + "\n")
    for key, value in expected.items():
        print(f"{key:26s} {value}")
    print(f"smallest top-1 margin      {margin:.3e}")


if __name__ == "__main__":
    main()
