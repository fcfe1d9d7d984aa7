#!/usr/bin/env python3
"""A second trained model for the quantization tests, unlike the demo model in text and shape.

The demo model (make_fixtures.py) is byte-level, 4 layers of d_model 128, post-LayerNorm, its own
r_w_bias / r_r_bias per layer, same_length, trained on the King James Bible. This one is
byte-level too but trained on other text -- the Python reference documentation that ships with
CPython 3.11 (`pydoc_data.topics`, under the PSF licence; the topics joined in sorted order) --
and shaped differently: 6 layers of d_model 96 (4 heads of 24, d_inner 384), pre-LayerNorm,
r_w_bias / r_r_bias shared by all layers (untie_r false), same_length off.

Writes tests/fixtures/second/: config.json and model.safetensors (float32), heldout.txt (the
last 5% of the text, never trained on) and calib.txt (16 KB from the middle of the training
text). pytorch_quantization.py --model second then adds PyTorch's quantization baseline.

regenerate.sh runs it with --reuse (training again on another CPU gives other weights, which the
committed baseline and test limits do not describe).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402  (make_config, save_model, load_model, bits_per_byte, ...)

OUT = mf.FIXTURES / "second"
CONFIG = dict(n_token=256, cutoffs=[], d_model=96, d_embed=96, n_head=4, d_head=24, d_inner=384,
              div_val=1, n_layer=6, mem_len=64, tgt_len=64, clamp_len=-1, same_length=False,
              pre_lnorm=True, untie_r=False, tie_word_embeddings=True, proj_share_all_but_first=True,
              dropout=0.1)
SEED = 4321
STEPS = 1500  # of 16 streams x 64 bytes, with the demo's learning-rate schedule
HELDOUT_FRACTION = 0.05
CALIB_BYTES = 16_000
# The text this script was run on (CPython 3.11's pydoc_data.topics): another CPython version
# has other documentation, so a different model; the script says so instead of failing.
EXPECTED_CORPUS_SHA256 = "95cd2967e46cdfd8c85175faf32eedeb38324eedeabd06417cccb6bd20839d93"


def load_corpus() -> bytes:
    """The Python reference documentation's topics, in sorted order, as UTF-8."""
    import pydoc_data.topics as topics

    text = "".join(topics.topics[key] for key in sorted(topics.topics))
    lines = [line.rstrip() for line in text.splitlines()]
    return ("\n".join(line for line in lines if line) + "\n").encode("utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reuse", action="store_true",
                    help="keep the committed model.safetensors (no training); rewrite the texts")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    corpus = load_corpus()
    digest = hashlib.sha256(corpus).hexdigest()
    print(f"[second] corpus {len(corpus)} bytes (sha256 {digest}), Python {sys.version.split()[0]}")
    if EXPECTED_CORPUS_SHA256 and digest != EXPECTED_CORPUS_SHA256:
        print("[second] warning: not the text the committed model was trained on (another CPython?)")
    split = mf.line_aligned(corpus, int(len(corpus) * (1 - HELDOUT_FRACTION)))
    training, heldout = corpus[:split], corpus[split:]
    c0 = mf.line_aligned(training, len(training) // 2)
    calib = training[c0 : mf.line_aligned(training, c0 + CALIB_BYTES)]
    assert len(heldout) >= 8192, len(heldout)

    if args.reuse:
        assert (OUT / "model.safetensors").exists(), "--reuse needs the committed model"
        print("[second] reusing the committed model (no training)")
    else:
        model = mf.train_byte_model(training, args.steps, CONFIG, SEED, "second")
        if OUT.exists():
            shutil.rmtree(OUT)
        mf.save_model(model, OUT, ["safetensors"])
    (OUT / "heldout.txt").write_bytes(heldout)
    (OUT / "calib.txt").write_bytes(calib)
    model32 = mf.load_model(OUT, "safetensors")
    bpb = mf.bits_per_byte(model32, heldout[:8192])
    print(f"[second] held-out bits/byte (float32, tgt_len 64, mem_len 64, empty start, 8192 bytes): {bpb:.4f}")


if __name__ == "__main__":
    main()
