#!/usr/bin/env python3
"""Speed of txl against Hugging Face PyTorch on the same model, machine and run.

Scores the first N bytes of tests/fixtures/MODEL/heldout.txt (`--model demo`, the
default, or `--model second`) with:

  hf_fp32           Hugging Face `TransfoXLLMHeadModel` (transformers 4.37.2), float32,
                    its adaptive softmax asked for each position's next token only, as
                    `txl score` asks the core (the path of its loss)
  hf_dynamic_int8   the same after torch.ao.quantization.quantize_dynamic on its
                    nn.Linear modules (pytorch_quantization.py's variant)
  txl f32, f16, int8, int8 with int8 memory
                    `txl score` on images made from the same checkpoint by
                    `txl convert` and `txl quantize` (plain rounding, no calibration)

in two settings: streaming (tgt_len 1) and segments of 64 (`--tgt-lens`), mem_len 64
(`--mem-len`), the memory starting empty, one thread everywhere (torch.set_num_threads(1); txl has one).
Every engine's tokens per second is the wall time of its scoring loop only (the
model is loaded before the clock starts: `txl score` reports its own loop's
rate). The runs are interleaved, R rounds of every engine in turn, and the
fastest of each engine's R runs counts (other work on the machine only slows a
run down). Each engine's bits per token is printed next to its speed, so a
table can't compare engines that scored different things.

    tools/reference/speed_comparison.py [--model demo] [--tokens 2048] [--rounds 3]

`--shape wt103` times instead a model of the published WikiText-103 shape (18
layers, d_model 1024, 16 heads of 64, d_inner 4096, a 267,735-word adaptive
softmax with cutoffs 20000/40000/200000 and div_val 4; 285 M parameters) with
Hugging Face's random initialisation, written to a temporary directory (1.1 GB,
nothing is kept), scoring the held-out bytes as word ids:

    tools/reference/speed_comparison.py --shape wt103 --tgt-lens 128 --mem-len 128 --tokens 256 --rounds 1

`--keep DIR` keeps the checkpoint, the images and the scored bytes in DIR.

The txl binary is target/release/txl (build it first: cargo build --release -p
txl-tools) or --txl PATH. The result also goes to --out FILE as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402
import pytorch_quantization as pq  # noqa: E402

import transformers  # noqa: E402

# The published WikiText-103 configuration (Dai et al., 2019, and transformers' transfo-xl-wt103).
WT103 = dict(n_token=267735, cutoffs=[20000, 40000, 200000], d_model=1024, d_embed=1024, n_head=16,
             d_head=64, d_inner=4096, div_val=4, n_layer=18, mem_len=1600, tgt_len=128, clamp_len=1000,
             same_length=True, pre_lnorm=False, untie_r=True, tie_word_embeddings=True,
             proj_share_all_but_first=True)
TXL_VARIANTS = [
    # (name, image, --mem-dtype, other flags)
    ("txl f32", "f32", "f32", []),
    ("txl f32, --fast-f32", "f32", "f32", ["--fast-f32"]),
    ("txl f16", "f16", "f16", []),
    ("txl int8", "int8", "f32", []),
    ("txl int8, int8 memory", "int8", "int8", []),
]


def run(args: list[str]) -> str:
    done = subprocess.run(args, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


@torch.no_grad()
def hf_score_targets(model, tokens: list[int], tgt_len: int, mem_len: int) -> torch.Tensor:
    """ln p of each next token, as `txl score` computes it: segment by segment, the memory
    starting empty, the transformer's hidden states and then the adaptive softmax asked for
    each position's next token only (the loss path of Hugging Face's ProjectedAdaptiveLogSoftmax,
    which computes a tail cluster only for the positions whose next token is in it; txl score
    does the same)."""
    cfg = model.config
    transformer = model.transformer
    model.reset_memory_length(mem_len)
    transformer.same_length = cfg.same_length
    transformer.clamp_len = cfg.clamp_len
    ids = torch.tensor(tokens, dtype=torch.long)[None, :]
    mems = [torch.zeros(0, 1, cfg.d_model) for _ in range(cfg.n_layer)]
    logps = []
    with torch.no_grad():
        for start in range(0, ids.size(1), tgt_len):
            out = transformer(input_ids=ids[:, start : start + tgt_len], mems=mems)
            mems = out.mems
            targets = ids[:, start + 1 : start + 1 + tgt_len]
            if targets.size(1) == 0:
                continue
            hidden = out.last_hidden_state[:, : targets.size(1)]
            # the softmax shifts hidden states and labels by one (position i predicts label i + 1):
            # one row after the hidden states and one label before the targets undo that
            hidden = torch.cat([hidden, hidden[:, :1]], dim=1)
            labels = torch.cat([targets[:, :1], targets], dim=1)
            logps.append(-model.crit(hidden, labels, keep_order=True).reshape(-1))
    return torch.cat(logps)


def hf_rate(model, tokens: list[int], tgt_len: int, mem_len: int) -> tuple[float, float]:
    """(tokens per second, bits per token) of scoring `tokens` as `txl score` does."""
    started = time.perf_counter()
    logp = hf_score_targets(model, tokens, tgt_len, mem_len)
    seconds = time.perf_counter() - started
    return len(tokens) / seconds, float(-logp.double().mean() / math.log(2))


def txl_rate(txl: str, image: Path, text: Path, tgt_len: int, mem_len: int, mem_dtype: str,
             flags: list[str]) -> tuple[float, float]:
    out = run([txl, "score", str(image), "--bytes", str(text), "--tgt-len", str(tgt_len),
               "--mem-len", str(mem_len), "--mem-init", "empty", "--mem-dtype", mem_dtype, "--json", *flags])
    report = json.loads(out)
    return report["tokens_per_second"], report["bits_per_token"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(pq.MODELS), default="demo")
    ap.add_argument("--shape", choices=["wt103"], help="a random model of this shape instead of --model")
    ap.add_argument("--tgt-lens", default="1,64", help="segment lengths to time, comma-separated (default 1,64)")
    ap.add_argument("--mem-len", type=int, default=64, help="remembered positions (default 64)")
    ap.add_argument("--tokens", type=int, default=2048, help="held-out bytes scored per run (default 2048)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved runs of every engine (default 3)")
    ap.add_argument("--txl", default=str(mf.REPO / "target" / "release" / "txl"), help="the txl binary")
    ap.add_argument("--out", type=Path, help="also write the result here as JSON")
    ap.add_argument("--keep", type=Path, help="write the checkpoint, images and bytes into this directory and "
                    "keep them (for profiling txl on the same model afterwards); default: a temporary one")
    args = ap.parse_args()
    if not Path(args.txl).is_file():
        raise SystemExit(f"{args.txl} not found: cargo build --release -p txl-tools (or --txl PATH)")
    torch.set_num_threads(1)
    tgt_lens = [int(t) for t in args.tgt_lens.split(",")]
    mem_len = args.mem_len
    name = args.shape or args.model
    data = (mf.FIXTURES / ("demo" if args.shape else args.model) / "heldout.txt").read_bytes()[: args.tokens]
    tokens = list(data)

    with tempfile.TemporaryDirectory() as temporary:
        tmp = args.keep or Path(temporary)
        tmp.mkdir(parents=True, exist_ok=True)
        if args.shape:
            torch.manual_seed(1)
            f32 = mf.TransfoXLLMHeadModel(mf.make_config(**WT103)).eval()
            directory = tmp / "checkpoint"
            mf.save_model(f32, directory, ["safetensors"])
        else:
            directory = mf.FIXTURES / args.model
            f32 = pq.load_f32(directory)
        mf.use_patched_attention(False)  # Hugging Face's own attention, as users run it
        int8, _, _ = pq.dynamic_int8(f32)
        hf = [("hf_fp32", f32), ("hf_dynamic_int8", int8)]

        text = tmp / "heldout.bin"
        text.write_bytes(data)
        images = {"f32": tmp / "f32.txl"}
        run([args.txl, "convert", str(directory), "--out", str(images["f32"])])
        for dtype in ("f16", "int8"):
            images[dtype] = tmp / f"{dtype}.txl"
            run([args.txl, "quantize", str(images["f32"]), "--dtype", dtype, "--out", str(images[dtype])])

        results = []
        for tgt_len in tgt_lens:
            setting = "streaming" if tgt_len == 1 else f"segments of {tgt_len}"
            best: dict[str, tuple[float, float]] = {}
            for _ in range(args.rounds):
                measured = [(engine, hf_rate(model, tokens, tgt_len, mem_len)) for engine, model in hf]
                measured += [(engine, txl_rate(args.txl, images[image], text, tgt_len, mem_len, mem_dtype, flags))
                             for engine, image, mem_dtype, flags in TXL_VARIANTS]
                for engine, (rate, bits) in measured:
                    if engine not in best or rate > best[engine][0]:
                        best[engine] = (rate, bits)
            baseline = best["hf_fp32"][0]
            rows = [{"engine": engine, "tokens_per_second": round(rate, 2),
                     "ratio_to_hf_fp32": round(rate / baseline, 3), "bits_per_token": round(bits, 6)}
                    for engine, (rate, bits) in best.items()]
            results.append({"setting": setting, "tgt_len": tgt_len, "mem_len": mem_len, "engines": rows})

    report = {
        "generator": "tools/reference/speed_comparison.py",
        "model": name,
        "tokens": len(tokens),
        "rounds": args.rounds,
        "threads": 1,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "quantized_engine": torch.backends.quantized.engine, "machine": platform.machine(),
                     "processor": platform.processor()},
        "results": results,
    }
    print(f"{name} model, {len(tokens)} held-out bytes, mem_len {mem_len}, one thread, "
          f"fastest of {args.rounds} interleaved runs (torch {torch.__version__}, "
          f"transformers {transformers.__version__})")
    for r in results:
        print(f"\n{r['setting']} (tgt_len {r['tgt_len']}):")
        print(f"  {'engine':24s} {'tokens/s':>10s} {'x HF fp32':>10s} {'bits/token':>11s}")
        for e in r["engines"]:
            print(f"  {e['engine']:24s} {e['tokens_per_second']:10.1f} {e['ratio_to_hf_fp32']:9.2f}x "
                  f"{e['bits_per_token']:11.4f}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
