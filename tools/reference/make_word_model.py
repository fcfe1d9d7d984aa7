#!/usr/bin/env python3
"""A trained word-level model: tests/fixtures/kjv-words/.

A word-level Transformer-XL with an adaptive softmax (8,000 words in three clusters, cutoffs
600 and 2,400, div_val 4: embeddings of 128, 32 and 8 dimensions, tied to the output layer as
Hugging Face ties them), trained on the words of the King James Bible (the demo model's text,
`bible -f Gen1:1-Rev22:21` of the Debian package bible-kjv, with the same held-out tail:
Colossians 1:12 to the end of Revelation, never trained on).

Words are what the original code's `Vocab` makes of a line: `line.strip().split()` (punctuation
stays on the word, case is kept) and `<eos>` at its end. The vocabulary is built as the original
`Vocab.build_vocab` builds one (here by Hugging Face's `TransfoXLTokenizer`, its port): the
special symbols first (`<eos>`, then `<UNK>`, which the original `_build_from_file` requires of a
vocabulary file), then the 7,998 most frequent words of the training text. Words outside it
become `<UNK>`.

Writes tests/fixtures/kjv-words/:
  config.json, model.safetensors   the model (float32, Hugging Face names)
  vocab.txt                        the vocabulary as the original code's vocab_file: one symbol
                                   per line, id = line number
  heldout.txt                      the first 40 KB (whole lines) of the held-out text
  heldout.ids.txt                  its token ids (one line per text line, `<eos>` included)
  calib.txt                        16 KB (whole lines) of training text, for int8 calibration
  seg_empty.logp.npy               float64 ln p of the first 512 held-out tokens (segments of 64,
                                   mem_len 64, empty start), shape (511,)
  seg_empty.rows.npy               the full rows of its first 2 positions, shape (2, 8000)
  stream_empty.logp.npy            the first 128 tokens one at a time (tgt_len 1), shape (127,)
  reference.json                   the cases, PyTorch's bits per token on all of heldout.txt in
                                   float64 and float32, the corpus digest, training figures

Run (pinned requirements of requirements.txt, `apt-get install bible-kjv`):
    python tools/reference/make_word_model.py            # trains: about 15 minutes, 1 thread
    python tools/reference/make_word_model.py --reuse    # keeps the weights, rewrites the rest
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402  (make_config, save_model, load_model, score, ...)

from transformers import TransfoXLTokenizer  # noqa: E402

OUT = mf.FIXTURES / "kjv-words"
SPECIAL = ["<eos>", "<UNK>"]
N_TOKEN = 8000
CONFIG = dict(n_token=N_TOKEN, cutoffs=[600, 2400], d_model=128, d_embed=128, n_head=4, d_head=32,
              d_inner=192, div_val=4, n_layer=4, mem_len=64, tgt_len=64, clamp_len=-1,
              same_length=True, pre_lnorm=False, untie_r=True, tie_word_embeddings=True,
              proj_share_all_but_first=True, dropout=0.1)
SEED = 2024
STREAMS = 16
STEPS = 4000
LR = 2e-3
WARMUP = 200
SEG_TOKENS = 512
STREAM_TOKENS = 128
ROWS_K = 2
# The text of bible-kjv 4.38 (Debian bookworm), as make_fixtures.load_corpus gives it.
EXPECTED_CORPUS_SHA256 = "b5c4940bcfeee072c0935b5200d0f9d88a00a0199cb0961d16133458fcdfae5d"


def symbols(line: str) -> list[str]:
    """The original `Vocab.tokenize(line, add_eos=True)` with lower_case off, delimiter None."""
    return line.strip().split() + ["<eos>"]


def build_vocabulary(train: str) -> TransfoXLTokenizer:
    tok = TransfoXLTokenizer(special=SPECIAL, lower_case=False, max_size=N_TOKEN - len(SPECIAL))
    tok.count_sents([symbols(line)[:-1] for line in train.splitlines()])
    tok.build_vocab()
    assert len(tok.idx2sym) == N_TOKEN, len(tok.idx2sym)
    assert tok.idx2sym[: len(SPECIAL)] == SPECIAL
    return tok


def encode_lines(tok: TransfoXLTokenizer, text: str) -> list[list[int]]:
    return [[tok._convert_token_to_id(s) for s in symbols(line)] for line in text.splitlines()]


def lr_at(step: int, steps: int) -> float:
    """Linear warm-up, then cosine decay to 2 % of the peak."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, steps - WARMUP)
    return LR * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_model(ids: list[int], steps: int):
    """STREAMS parallel streams over contiguous slices of the training ids, the memories carried
    from segment to segment (back to the start, memory cleared, when a stream runs out), Adam,
    gradients clipped at 0.25. The loss is the adaptive softmax's own NLL (HF's `crit` with
    labels), which computes only the clusters the targets fall in."""
    torch.manual_seed(SEED)
    model = mf.TransfoXLLMHeadModel(mf.make_config(**CONFIG))
    model.train()
    tgt_len = CONFIG["tgt_len"]
    data = torch.tensor(ids, dtype=torch.long)
    stream_len = data.numel() // STREAMS
    streams = data[: stream_len * STREAMS].view(STREAMS, stream_len)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"[words] {n_params} parameters, {len(ids)} training tokens, {STREAMS} streams x {tgt_len} "
          f"tokens, {steps} steps ({steps * STREAMS * tgt_len / len(ids):.2f} epochs)", flush=True)
    t0 = time.time()
    mems, pos, acc, acc_n, last = None, 0, 0.0, 0, float("nan")
    for step in range(steps):
        if pos + tgt_len + 1 > stream_len:
            pos, mems = 0, None
        x = streams[:, pos : pos + tgt_len]
        y = streams[:, pos + 1 : pos + tgt_len + 1]
        pos += tgt_len
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps)
        out = model.transformer(input_ids=x, mems=mems)
        mems = out.mems  # detached by HF
        hidden = out.last_hidden_state  # (bsz, tgt_len, d_model)
        # crit shifts by one (hidden[:, :-1] predicts labels[:, 1:]): pad so that hidden[:, t]
        # is scored against y[:, t].
        nll = model.crit(torch.cat([hidden, hidden[:, :1]], 1), torch.cat([y[:, :1], y], 1))
        loss = nll.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        acc += loss.item()
        acc_n += 1
        if (step + 1) % 250 == 0 or step + 1 == steps:
            last = acc / acc_n / math.log(2)
            print(f"[words] step {step + 1:5d}  train {last:.3f} bits/token  lr {lr_at(step, steps):.2e}  "
                  f"{time.time() - t0:.0f}s", flush=True)
            acc, acc_n = 0.0, 0
    model.eval()
    return model, time.time() - t0, last


@torch.no_grad()
def bits_per_token(model, tokens: list[int]) -> float:
    cfg = model.config
    case = mf.Case("eval", cfg.tgt_len, cfg.mem_len, cfg.clamp_len, cfg.same_length, "empty", len(tokens))
    logp, _ = mf.score(model, tokens, case)
    return float(-logp.mean() / math.log(2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--corpus", help="KJV text file in `bible -f` format (default: run `bible`)")
    ap.add_argument("--reuse", action="store_true",
                    help="keep the committed model.safetensors (no training); rewrite everything else")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    mf.use_patched_attention(True)  # float64 needs it; in float32 it equals HF's bit for bit

    corpus = mf.load_corpus(args.corpus)
    digest = hashlib.sha256(corpus).hexdigest()
    print(f"[words] corpus {len(corpus)} bytes (sha256 {digest})")
    if digest != EXPECTED_CORPUS_SHA256:
        print("[words] warning: not the text the committed model was trained on (another bible-kjv?)")
    train, _region, heldout, calib, split = mf.split_corpus(corpus)
    train_text, heldout_text = train.decode("utf-8"), heldout.decode("utf-8")

    tok = build_vocabulary(train_text)
    unk = tok.sym2idx["<UNK>"]
    train_ids = [i for line in encode_lines(tok, train_text) for i in line]
    heldout_lines = encode_lines(tok, heldout_text)
    heldout_ids = [i for line in heldout_lines for i in line]
    print(f"[words] vocabulary {len(tok.idx2sym)} symbols; training {len(train_ids)} tokens "
          f"({train_ids.count(unk) / len(train_ids):.2%} <UNK>), held out {len(heldout_ids)} tokens "
          f"({heldout_ids.count(unk) / len(heldout_ids):.2%} <UNK>)")

    training = {}
    if args.reuse:
        assert (OUT / "model.safetensors").exists(), "--reuse needs the committed model"
        training = json.loads((OUT / "reference.json").read_text())["training"]
        print("[words] reusing the committed model (no training)")
    else:
        model, seconds, last = train_model(train_ids, args.steps)
        if OUT.exists():
            shutil.rmtree(OUT)
        mf.save_model(model, OUT, ["safetensors"])
        training = {"steps": args.steps, "streams": STREAMS, "tgt_len": CONFIG["tgt_len"], "lr": LR,
                    "seed": SEED, "threads": args.threads, "seconds": round(seconds),
                    "last_train_bits_per_token": round(last, 4)}

    (OUT / "vocab.txt").write_text("".join(s + "\n" for s in tok.idx2sym), encoding="utf-8")
    (OUT / "heldout.txt").write_bytes(heldout)
    (OUT / "calib.txt").write_bytes(calib)
    (OUT / "heldout.ids.txt").write_text("".join(" ".join(map(str, line)) + "\n" for line in heldout_lines))

    model32 = mf.load_model(OUT, "safetensors")
    model64 = mf.load_model(OUT, "safetensors").double()
    cfg = model32.config
    bpt32 = bits_per_token(model32, heldout_ids)
    bpt64 = bits_per_token(model64, heldout_ids)
    print(f"[words] held-out bits/token ({len(heldout_ids)} tokens, tgt_len 64, mem_len 64, empty start): "
          f"float64 {bpt64:.6f}, float32 {bpt32:.6f}")

    cases = [
        mf.Case("seg_empty", cfg.tgt_len, cfg.mem_len, cfg.clamp_len, cfg.same_length, "empty", SEG_TOKENS),
        mf.Case("stream_empty", 1, cfg.mem_len, cfg.clamp_len, cfg.same_length, "empty", STREAM_TOKENS),
    ]
    results = {}
    for case in cases:
        logp, full = mf.score(model64, heldout_ids, case)
        results[case.name] = logp
        mf.save_npy(OUT / f"{case.name}.logp.npy", logp)
        if case.name == "seg_empty":
            rows = full[:ROWS_K]
            assert torch.allclose(rows.exp().sum(-1), torch.ones(ROWS_K, dtype=torch.float64), atol=1e-9)
            mf.save_npy(OUT / f"{case.name}.rows.npy", rows)
    # same_length: segments and streaming agree on the common prefix.
    mf.first_positions_equal(results["seg_empty"], results["stream_empty"], STREAM_TOKENS - 1,
                             "seg_empty vs stream_empty")

    reference = {
        "generator": "tools/reference/make_word_model.py",
        "versions": {"torch": torch.__version__, "transformers": mf.transformers.__version__},
        "corpus_sha256": digest,
        "training": training,
        "vocabulary": {"file": "vocab.txt", "symbols": N_TOKEN, "special": SPECIAL, "lower_case": False},
        "heldout": {"file": "heldout.txt", "tokens": len(heldout_ids), "unk": heldout_ids.count(unk),
                    "bits_per_token_f64": round(bpt64, 6), "bits_per_token_f32": round(bpt32, 6)},
        "cases": [{"name": c.name, "tgt_len": c.tgt_len, "mem_len": c.mem_len, "clamp_len": c.clamp_len,
                   "same_length": c.same_length, "mem_init": c.mem_init, "n_tokens": c.n_tokens,
                   "logp": f"{c.name}.logp.npy"} for c in cases],
    }
    reference["cases"][0].update({"rows": "seg_empty.rows.npy", "rows_k": ROWS_K})
    (OUT / "reference.json").write_text(json.dumps(reference, indent=2) + "\n")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"[words] wrote {OUT} ({total} bytes)")


if __name__ == "__main__":
    main()
