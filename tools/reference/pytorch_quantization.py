#!/usr/bin/env python3
"""PyTorch's own post-training quantization of a trained model, as a baseline.

Scores the first 8192 bytes of tests/fixtures/MODEL/heldout.txt with the model
(`--model demo`, the default, or `--model second`: make_second_model.py's) (Hugging Face `TransfoXLLMHeadModel`, transformers 4.37.2) exactly like
`txl score`: consecutive segments of tgt_len 64, memories carried, the memory
starting empty, the model's own mem_len / same_length / clamp_len. Three
variants of the model are compared:

  f32                  float32 as loaded
  fp16_weights         every parameter rounded to float16 and back, computed in float32
  dynamic_int8_linear  torch.ao.quantization.quantize_dynamic on the nn.Linear modules (qint8)

For each: bits per token, the relative change against f32, top-1 agreement with
f32, mean KL(f32 || variant) in nats per position and the model size in bytes.
The result goes to tests/fixtures/MODEL/pytorch_quantization.json.

Run after make_fixtures.py (regenerate.sh does); see tools/reference/README.md.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import io
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402  (Case, score, FIXTURES, attention switch; importing runs nothing)

import transformers  # noqa: E402

GENERATOR = "tools/reference/pytorch_quantization.py"
N_TOKENS = 8192

# bits per token of the float32 model on this setup as measured by the Rust core
# (txl score, first 8192 bytes, tgt_len 64, mem_len 64, empty start), for the
# committed demo weights (sha256 of model.safetensors below). A retrained demo
# model (make_fixtures.py without --reuse-demo) gives a different value; then
# the check only prints a warning.
EXPECTED_TOL = 1e-3
# the same for make_second_model.py's model (measured with txl score on the committed weights)
SECOND_F32_BITS = 1.809998
SECOND_SHA256 = "5c2f33664d09fe34e8423723d3b4efa36143310e18343e9246b4ed4a17bbc9aa"
MODELS = {
    "demo": {
        "expected_f32_bits": 2.161778,
        "model_sha256": "d78dd3aa7118e4ef8069456e191451310169d28d721e3a86b2b3a3012dab9c51",
        # (tgt_len, mem_len, same_length, clamp_len)
        "settings": (64, 64, True, -1),
    },
    "second": {
        "expected_f32_bits": SECOND_F32_BITS,
        "model_sha256": SECOND_SHA256,
        "settings": (64, 64, False, -1),
    },
}


def load_f32(directory: Path) -> nn.Module:
    model = mf.TransfoXLLMHeadModel.from_pretrained(str(directory), torch_dtype=torch.float32)
    return model.eval()


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # tied parameters counted once


def state_dict_bytes(model: nn.Module) -> int:
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return buf.tell()


@torch.no_grad()
def score_rows(model: nn.Module, tokens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp, rows): logp[i] = ln p(t[i+1] | t[..=i]) (N-1 values), rows = the N-1 predicting log-prob rows."""
    cfg = model.config
    case = mf.Case("eval", cfg.tgt_len, cfg.mem_len, cfg.clamp_len, cfg.same_length, "empty", len(tokens))
    logp, full = mf.score(model, tokens, case)
    return logp.double(), full[:-1].double()


def fp16_weights(model: nn.Module) -> nn.Module:
    m = copy.deepcopy(model)
    with torch.no_grad():
        for p in m.parameters():
            p.data = p.data.half().float()
    return m.eval()


def dynamic_int8(model: nn.Module) -> tuple[nn.Module, list[str], list[str]]:
    """quantize_dynamic on every nn.Linear except the ones the adaptive softmax reads as raw weights.

    ProjectedAdaptiveLogSoftmax never calls its `out_layers` modules; it reads
    `out_layers[i].weight` / `.bias` as tensors (and out_layers[0].weight is
    tied to the input embedding). A dynamically quantized Linear has no weight
    tensor (`.weight` is a method), so quantizing `crit.out_layers.*` breaks the
    forward pass; they are excluded by name and stay float32 (as intended: the
    output layer is not quantized). Returns (model, quantized, excluded).
    """
    excluded = [name for name, mod in model.named_modules()
                if name.startswith("crit.") and type(mod) is nn.Linear]
    spec: dict = {nn.Linear: torch.ao.quantization.default_dynamic_qconfig}
    spec.update({name: None for name in excluded})
    q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), spec, dtype=torch.qint8)
    dyn_linear = torch.ao.nn.quantized.dynamic.Linear
    quantized = [name for name, mod in q.named_modules() if isinstance(mod, dyn_linear)]
    left = [name for name, mod in q.named_modules() if type(mod) is nn.Linear]
    assert left == excluded, f"unexpected float nn.Linear left: {left}"
    assert quantized, "nothing was quantized"
    return q.eval(), quantized, excluded


def int8_weight_count(q: nn.Module) -> int:
    dyn_linear = torch.ao.nn.quantized.dynamic.Linear
    return sum(m.weight().numel() for m in q.modules() if isinstance(m, dyn_linear))


def check_whole_model_quantize_fails(model: nn.Module, tokens: list[int]) -> str:
    """Document why crit.out_layers is excluded: plain quantize_dynamic(model, {nn.Linear}) cannot run."""
    q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {nn.Linear}, dtype=torch.qint8)
    try:
        score_rows(q.eval(), tokens[:64])
    except Exception as e:  # noqa: BLE001
        msg = f"{type(e).__name__}: {e}".splitlines()[0]
        print(f"[check] quantize_dynamic(model, {{nn.Linear}}) on the whole model fails: {msg}")
        return msg
    raise AssertionError("quantize_dynamic on the whole model unexpectedly ran; revisit the exclusion")


def compare(name: str, ref: tuple, var: tuple, model_bytes: int, extra: dict | None = None) -> dict:
    ref_logp, ref_rows = ref
    logp, rows = var
    n = logp.numel()
    bits = float(-logp.mean() / math.log(2))
    ref_bits = float(-ref_logp.mean() / math.log(2))
    top1 = float((rows.argmax(dim=1) == ref_rows.argmax(dim=1)).double().mean())
    kl = float((ref_rows.exp() * (ref_rows - rows)).sum(dim=1).mean())
    entry = {
        "name": name,
        "bits_per_token": round(bits, 6),
        "relative_delta": round((bits - ref_bits) / ref_bits, 6),
        "top1_agreement": round(top1, 6),
        "mean_kl": float(f"{kl:.6e}"),
        "model_bytes": model_bytes,
        "predictions": n,
    }
    entry.update(extra or {})
    return entry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), default="demo")
    args = ap.parse_args()
    expected = MODELS[args.model]
    directory = mf.FIXTURES / args.model
    out = directory / "pytorch_quantization.json"
    t0 = time.time()
    torch.set_num_threads(1)
    engine = torch.backends.quantized.engine
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}, "
          f"quantized engine {engine}, threads {torch.get_num_threads()}")

    data = (directory / "heldout.txt").read_bytes()[:N_TOKENS]
    assert len(data) == N_TOKENS
    tokens = list(data)

    f32 = load_f32(directory)
    cfg = f32.config
    assert (cfg.tgt_len, cfg.mem_len, cfg.same_length, cfg.clamp_len) == expected["settings"], cfg
    mf.use_patched_attention(False)  # float32: HF's own attention, unpatched
    n_params = parameter_count(f32)

    ref = score_rows(f32, tokens)
    f32_bits = float(-ref[0].mean() / math.log(2))
    model_sha = hashlib.sha256((directory / "model.safetensors").read_bytes()).hexdigest()
    expected_bits = expected["expected_f32_bits"]
    if model_sha == expected["model_sha256"]:
        print(f"[f32] bits/token {f32_bits:.6f} (expected {expected_bits:.6f})")
        assert abs(f32_bits - expected_bits) < EXPECTED_TOL, \
            f"f32 bits/token {f32_bits:.6f} differs from {expected_bits}: the evaluation setup differs"
    else:
        print(f"[f32] bits/token {f32_bits:.6f}; warning: model.safetensors is not the committed {args.model} "
              f"model (sha256 {model_sha[:16]}...), the expected bits per token are not checked")

    variants = [compare("f32", ref, ref, 4 * n_params,
                        {"state_dict_bytes": state_dict_bytes(f32),
                         "notes": "float32 parameters; model_bytes = parameters x 4 (tied weights once)"})]

    m16 = fp16_weights(f32)
    variants.append(compare("fp16_weights", ref, score_rows(m16, tokens), 2 * n_params,
                            {"state_dict_bytes": state_dict_bytes(m16),
                             "notes": "every parameter rounded to float16 and back, computed in float32; "
                                      "model_bytes = parameters x 2 (state_dict_bytes is the float32 file)"}))

    whole_model_error = check_whole_model_quantize_fails(f32, tokens)
    q, quantized, excluded = dynamic_int8(f32)
    q_bytes = state_dict_bytes(q)
    n_int8 = int8_weight_count(q)
    print(f"[int8] quantized {len(quantized)} nn.Linear modules; kept float32: {excluded}")
    variants.append(compare(
        "dynamic_int8_linear", ref, score_rows(q, tokens), q_bytes,
        {"state_dict_bytes": q_bytes,
         "quantized_modules": quantized,
         "int8_parameters": n_int8,
         "float_parameters": n_params - n_int8,
         "parameter_bytes": n_int8 + 4 * (n_params - n_int8),
         "float_linear_modules": excluded,
         "notes": "torch.ao.quantization.quantize_dynamic, dtype qint8, default_dynamic_qconfig "
                  "(per-tensor weights, activations quantized per call); every nn.Linear of the "
                  "transformer layers; embeddings, the adaptive-softmax output layer (crit.out_layers, "
                  "tied to the embedding, excluded by name: HF reads its .weight as a tensor and plain "
                  f"quantize_dynamic(model, {{nn.Linear}}) fails with \"{whole_model_error}\"), "
                  "layer norms, r_w_bias/r_r_bias and the memory stay float32; model_bytes = "
                  "torch.save(state_dict) size; parameter_bytes = int8 weights x 1 + float parameters x 4 "
                  "(without the per-module scales and zero points)"}))

    result = {
        "generator": GENERATOR,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__, "quantized_engine": engine,
                     "machine": platform.machine()},
        "model_sha256": model_sha,
        "text": "heldout.txt",
        "tokens": N_TOKENS,
        "predictions": N_TOKENS - 1,
        "tgt_len": cfg.tgt_len,
        "mem_len": cfg.mem_len,
        "same_length": cfg.same_length,
        "clamp_len": cfg.clamp_len,
        "mem_init": "empty",
        "threads": 1,
        "parameters": n_params,
        "definitions": {
            "bits_per_token": "mean over the predictions of -ln p(t[i+1] | t[..=i]), divided by ln 2",
            "relative_delta": "(bits_per_token - f32 bits_per_token) / f32 bits_per_token",
            "top1_agreement": "fraction of the predicting positions where the argmax equals f32's",
            "mean_kl": "mean over the predicting positions of KL(f32 || variant) in nats",
            "model_bytes": "f32/fp16: parameter bytes at 4/2 bytes each; int8: torch.save(state_dict) size",
        },
        "variants": variants,
    }
    out.write_text(json.dumps(result, indent=2) + "\n")

    print()
    print(f"{'variant':22s} {'bits/tok':>9s} {'rel':>10s} {'top1':>8s} {'KL nats':>10s} {'bytes':>9s}")
    for v in variants:
        print(f"{v['name']:22s} {v['bits_per_token']:9.6f} {v['relative_delta']:+10.6f} "
              f"{v['top1_agreement']:8.4f} {v['mean_kl']:10.3e} {v['model_bytes']:9d}")
    print(f"\nwrote {out.relative_to(mf.REPO)}; wall time {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
