#!/usr/bin/env python3
"""Regenerate the reference fixtures under tests/fixtures/.

The fixtures are produced with Hugging Face `TransfoXLLMHeadModel`
(transformers 4.37.2), which serves as the reference implementation of
Transformer-XL that the Rust crates are checked against.

What this script writes (all paths relative to the repository root):

  tests/fixtures/manifest.json        index of every model and test case
  tests/fixtures/demo/                 small byte-level model trained on the KJV Bible
  tests/fixtures/<random model>/       tiny random-init models covering config variants

For every model a set of "cases" is scored in float64: the token sequence is
fed in consecutive segments of `tgt_len` tokens while the returned memories
(`mems`) are carried from one segment to the next, exactly like `txl score`.
Each case stores

  <case>.logp.npy   shape (n_tokens - 1,)   logp[i] = ln p(t[i+1] | t[0..=i])
  <case>.rows.npy   shape (rows_k, n_token) full log-prob rows of the first
                                            rows_k positions

See tools/reference/README.md for the full description and how to run it.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

warnings.filterwarnings("ignore")  # TransfoXL is deprecated and warns a lot

import safetensors  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from transformers import TransfoXLConfig, TransfoXLLMHeadModel  # noqa: E402
from transformers.models.deprecated.transfo_xl import modeling_transfo_xl as hf_txl  # noqa: E402

transformers.logging.set_verbosity_error()

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
GENERATOR = "tools/reference/make_fixtures.py"

# Number of full log-prob rows stored per case.
ROWS_K = 4


# ---------------------------------------------------------------------------
# Attention mask patch
# ---------------------------------------------------------------------------
#
# HF masks the attention scores with
#     attn_score.float().masked_fill(mask, finfo(attn_score.dtype).min).type_as(attn_score)
# i.e. the scores make a round trip through float32.  In float64 this both
# loses precision and fails outright ("value cannot be converted to type float
# without overflow", because finfo(float64).min does not fit in float32).
# The patched forward below is a verbatim copy of
# RelPartialLearnableMultiHeadAttn.forward except that the mask is filled in
# the scores' own dtype.  For float32 models the two are identical, which
# `check_patch_is_exact` verifies bit for bit.

_ORIGINAL_ATTN_FORWARD = hf_txl.RelPartialLearnableMultiHeadAttn.forward


def _patched_attn_forward(self, w, r, attn_mask=None, mems=None, head_mask=None, output_attentions=False):
    qlen, rlen, bsz = w.size(0), r.size(0), w.size(1)

    if mems is not None:
        cat = torch.cat([mems, w], 0)
        if self.pre_lnorm:
            w_heads = self.qkv_net(self.layer_norm(cat))
        else:
            w_heads = self.qkv_net(cat)
        r_head_k = self.r_net(r)

        w_head_q, w_head_k, w_head_v = torch.chunk(w_heads, 3, dim=-1)
        w_head_q = w_head_q[-qlen:]
    else:
        if self.pre_lnorm:
            w_heads = self.qkv_net(self.layer_norm(w))
        else:
            w_heads = self.qkv_net(w)
        r_head_k = self.r_net(r)

        w_head_q, w_head_k, w_head_v = torch.chunk(w_heads, 3, dim=-1)

    klen = w_head_k.size(0)

    w_head_q = w_head_q.view(qlen, bsz, self.n_head, self.d_head)
    w_head_k = w_head_k.view(klen, bsz, self.n_head, self.d_head)
    w_head_v = w_head_v.view(klen, bsz, self.n_head, self.d_head)

    r_head_k = r_head_k.view(rlen, self.n_head, self.d_head)

    rw_head_q = w_head_q + self.r_w_bias
    AC = torch.einsum("ibnd,jbnd->ijbn", (rw_head_q, w_head_k))

    rr_head_q = w_head_q + self.r_r_bias
    BD = torch.einsum("ibnd,jnd->ijbn", (rr_head_q, r_head_k))
    BD = self._rel_shift(BD)

    attn_score = AC + BD
    attn_score.mul_(self.scale)

    mask_value = torch.finfo(attn_score.dtype).min

    if attn_mask is not None and torch.sum(attn_mask).item():
        attn_mask = attn_mask == 1
        # --- the only change: no .float() / .type_as() round trip ---
        if attn_mask.dim() == 2:
            attn_score = attn_score.masked_fill(attn_mask[None, :, :, None], mask_value)
        elif attn_mask.dim() == 3:
            attn_score = attn_score.masked_fill(attn_mask[:, :, :, None], mask_value)

    attn_prob = nn.functional.softmax(attn_score, dim=1)
    attn_prob = self.dropatt(attn_prob)

    if head_mask is not None:
        attn_prob = attn_prob * head_mask

    attn_vec = torch.einsum("ijbn,jbnd->ibnd", (attn_prob, w_head_v))
    attn_vec = attn_vec.contiguous().view(attn_vec.size(0), attn_vec.size(1), self.n_head * self.d_head)

    attn_out = self.o_net(attn_vec)
    attn_out = self.drop(attn_out)

    if self.pre_lnorm:
        outputs = [w + attn_out]
    else:
        outputs = [self.layer_norm(w + attn_out)]

    if output_attentions:
        outputs.append(attn_prob)

    return outputs


def use_patched_attention(enabled: bool) -> None:
    hf_txl.RelPartialLearnableMultiHeadAttn.forward = _patched_attn_forward if enabled else _ORIGINAL_ATTN_FORWARD


# ---------------------------------------------------------------------------
# Model construction, random init, saving
# ---------------------------------------------------------------------------


def make_config(
    *,
    n_token: int,
    cutoffs: list[int],
    d_model: int,
    d_embed: int,
    n_head: int,
    d_head: int,
    d_inner: int,
    div_val: int,
    n_layer: int,
    mem_len: int,
    tgt_len: int,
    clamp_len: int,
    same_length: bool,
    pre_lnorm: bool,
    untie_r: bool,
    tie_word_embeddings: bool,
    proj_share_all_but_first: bool,
    dropout: float = 0.0,
    layer_norm_epsilon: float = 1e-5,
) -> TransfoXLConfig:
    """A TransfoXLConfig with every field spelled out (HF defaults are not relied upon).

    `tie_projs` is derived by HF from `proj_share_all_but_first`:
    True -> [False, True, True, ...], False -> all False.
    `tgt_len` is not an HF field; it is stored in config.json for our converter.
    """
    return TransfoXLConfig(
        vocab_size=n_token,
        cutoffs=list(cutoffs),
        d_model=d_model,
        d_embed=d_embed,
        n_head=n_head,
        d_head=d_head,
        d_inner=d_inner,
        div_val=div_val,
        pre_lnorm=pre_lnorm,
        n_layer=n_layer,
        mem_len=mem_len,
        clamp_len=clamp_len,
        same_length=same_length,
        proj_share_all_but_first=proj_share_all_but_first,
        attn_type=0,
        sample_softmax=-1,
        adaptive=True,
        dropout=dropout,
        dropatt=0.0,
        untie_r=untie_r,
        init="normal",
        init_range=0.01,
        proj_init_std=0.01,
        init_std=0.02,
        layer_norm_epsilon=layer_norm_epsilon,
        eos_token_id=0,
        tie_word_embeddings=tie_word_embeddings,
        tgt_len=tgt_len,
    )


@torch.no_grad()
def scaled_random_init(model: TransfoXLLMHeadModel, seed: int, gain: float, emb_std: float) -> None:
    """Overwrite all parameters with a large-scale random init.

    HF's own init (std 0.02, zero biases, unit layer norms) gives nearly
    uniform output distributions, which makes poor test data.  Here
      * weight matrices and projections: normal, std gain / sqrt(fan_in)
      * embeddings and cluster weights:  normal, std emb_std
      * layer norms: weight 1 +- 0.2, bias +- 0.2
      * r_w_bias / r_r_bias +- 0.3, cluster biases +- 0.5, other biases +- 0.2
    Tied parameters are shared Parameter objects and are visited once.
    """
    gen = torch.Generator().manual_seed(seed)

    def normal_(p: torch.Tensor, mean: float, std: float) -> None:
        p.copy_(mean + std * torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype))

    for name, p in model.named_parameters():  # named_parameters() skips tied duplicates
        if name.endswith("layer_norm.weight"):
            normal_(p, 1.0, 0.2)
        elif name.endswith("layer_norm.bias"):
            normal_(p, 0.0, 0.2)
        elif name.endswith(("r_w_bias", "r_r_bias")):
            normal_(p, 0.0, 0.3)
        elif "emb_layers" in name or "cluster_weight" in name:
            normal_(p, 0.0, emb_std)
        elif "cluster_bias" in name:
            normal_(p, 0.0, 0.5)
        elif name.endswith("bias"):
            normal_(p, 0.0, 0.2)
        elif "out_projs" in name:
            # used as linear(hidden, proj.t()): (d_proj, d_emb_i) maps d_proj -> d_emb_i
            normal_(p, 0.0, gain / math.sqrt(p.shape[0]))
        else:
            # nn.Linear weights (out, in), emb_projs (d_proj, d_emb_i) used as linear(emb, proj),
            # untied out_layers weights (n_i, d_emb_i): fan_in is the last dimension
            normal_(p, 0.0, gain / math.sqrt(p.shape[-1]))


def save_model(model: TransfoXLLMHeadModel, out_dir: Path, formats: list[str]) -> None:
    """Write config.json and the requested weight files (model.safetensors / pytorch_model.bin).

    Each format is written through `save_pretrained` into a scratch directory
    and copied, so that nothing else (generation_config.json) ends up in the
    fixture directory.  config.json is written by `write_config`.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    for fmt in formats:
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp, safe_serialization=(fmt == "safetensors"))
            weights = "model.safetensors" if fmt == "safetensors" else "pytorch_model.bin"
            shutil.copyfile(Path(tmp) / weights, out_dir / weights)
    write_config(model.config, out_dir / "config.json")


# Every TransfoXLConfig field, written to config.json even when it equals HF's default.
CONFIG_KEYS = [
    "vocab_size", "cutoffs", "d_model", "d_embed", "n_head", "d_head", "d_inner", "div_val",
    "pre_lnorm", "n_layer", "mem_len", "clamp_len", "same_length", "tie_projs", "attn_type",
    "sample_softmax", "adaptive", "dropout", "dropatt", "untie_r", "init", "init_range",
    "proj_init_std", "init_std", "layer_norm_epsilon", "eos_token_id", "tie_word_embeddings",
    "tgt_len",
]


def write_config(config: TransfoXLConfig, path: Path) -> None:
    """config.json as save_pretrained writes it, plus every field in CONFIG_KEYS.

    save_pretrained leaves out fields equal to HF's defaults (same_length=true,
    untie_r=true, tie_word_embeddings=true, ...); here they are always present.
    """
    d = config.to_diff_dict()
    for key in CONFIG_KEYS:
        d[key] = getattr(config, key)
    path.write_text(json.dumps(dict(sorted(d.items())), indent=2) + "\n")


def load_model(model_dir: Path, fmt: str) -> TransfoXLLMHeadModel:
    model = TransfoXLLMHeadModel.from_pretrained(str(model_dir), use_safetensors=(fmt == "safetensors"))
    return model.eval()


# ---------------------------------------------------------------------------
# Scoring (the semantics of `txl score`)
# ---------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    tgt_len: int
    mem_len: int
    clamp_len: int
    same_length: bool
    mem_init: str  # "empty" or "zeros"
    n_tokens: int


@torch.no_grad()
def score(model: TransfoXLLMHeadModel, tokens: list[int], case: Case, carry_mems: bool = True):
    """Score tokens[:case.n_tokens] segment by segment.

    Returns (logp, full) with logp[i] = ln p(t[i+1] | t[0..=i]) of shape (N-1,)
    and full = all log-prob rows, shape (N, n_token).

    mem_init "zeros": the first call gets mems=None, so HF creates mem_len
    all-zero memory states itself.  "empty": the first call gets zero-length
    memories (one (0, 1, d_model) tensor per layer), i.e. no context at all.
    With carry_mems=False the memory is reset before every segment (used only
    as a sanity check).
    """
    tr = model.transformer
    model.reset_memory_length(case.mem_len)  # sets transformer.mem_len
    tr.same_length = case.same_length
    tr.clamp_len = case.clamp_len
    dtype = next(model.parameters()).dtype

    def initial_mems():
        if case.mem_init == "zeros":
            return None
        assert case.mem_init == "empty"
        return [torch.zeros(0, 1, model.config.d_model, dtype=dtype) for _ in range(model.config.n_layer)]

    ids = torch.tensor(tokens[: case.n_tokens], dtype=torch.long)[None, :]
    mems = initial_mems()
    rows = []
    for start in range(0, ids.size(1), case.tgt_len):
        if not carry_mems:
            mems = initial_mems()
        out = model(input_ids=ids[:, start : start + case.tgt_len], mems=mems)
        mems = out.mems
        rows.append(out.prediction_scores[0])
    full = torch.cat(rows, dim=0)
    targets = ids[0, 1:]
    logp = full[:-1].gather(1, targets[:, None])[:, 0]
    return logp, full


def entropy(full: torch.Tensor) -> torch.Tensor:
    return -(full.exp() * full).sum(dim=-1)


def save_npy(path: Path, arr: torch.Tensor) -> None:
    a = np.ascontiguousarray(arr.detach().to(torch.float64).numpy(), dtype="<f8")
    np.save(path, a, allow_pickle=False)


# ---------------------------------------------------------------------------
# The random-init models
# ---------------------------------------------------------------------------


@dataclass
class RandomModel:
    name: str
    description: str
    seed: int
    config: dict
    n_tokens: int
    gain: float = 1.0  # init scale of weight matrices, see scaled_random_init
    emb_std: float = 0.5  # init std of embeddings and cluster weights
    cases: list[Case] = field(default_factory=list)


def std_cases(tgt_len: int, mem_len: int, clamp_len: int, same_length: bool, n: int) -> list[Case]:
    """Segment evaluation and streaming (tgt_len 1), each with both memory starts."""
    out = []
    for kind, t in (("seg", tgt_len), ("stream", 1)):
        for init in ("empty", "zeros"):
            out.append(Case(f"{kind}_{init}", t, mem_len, clamp_len, same_length, init, n))
    return out


def random_models() -> list[RandomModel]:
    models = []

    # 1. Adaptive embedding + adaptive softmax, div_val 2, tied weights and projections.
    cfg = dict(n_token=300, cutoffs=[40, 120], d_model=24, d_embed=32, n_head=2, d_head=8, d_inner=48,
               div_val=2, n_layer=2, mem_len=10, tgt_len=6, clamp_len=0, same_length=False,
               pre_lnorm=False, untie_r=False, tie_word_embeddings=True, proj_share_all_but_first=True)
    m = RandomModel(
        "adaptive_div2",
        "adaptive embedding/softmax with cutoffs [40,120], div_val 2 (cluster dims 32/16/8), "
        "tied output weights, tie_projs [False,True,True] (head projection untied), "
        "untie_r false (shared r_w_bias/r_r_bias), post-LN, same_length false, no clamping",
        seed=101, gain=1.0, emb_std=0.3, config=cfg, n_tokens=48)
    m.cases = std_cases(6, 10, 0, False, 48)
    m.cases.append(Case("seg_samelen_empty", 6, 10, 0, True, "empty", 48))
    models.append(m)

    # 2. div_val 1 with cutoffs and d_embed != d_model; pre-LN; active clamp without same_length.
    cfg = dict(n_token=200, cutoffs=[50, 120], d_model=24, d_embed=16, n_head=3, d_head=8, d_inner=40,
               div_val=1, n_layer=2, mem_len=8, tgt_len=5, clamp_len=4, same_length=False,
               pre_lnorm=True, untie_r=True, tie_word_embeddings=True, proj_share_all_but_first=True)
    m = RandomModel(
        "div1_proj_prelnorm",
        "div_val 1 with cutoffs [50,120] and d_embed 16 != d_model 24: one embedding projection; "
        "tie_projs [False,True,True] so the head cluster has its own output projection and the tails "
        "share the embedding projection; tied output weights; pre_lnorm true; untie_r true; "
        "clamp_len 4 (active) with same_length false",
        seed=202, gain=1.0, emb_std=0.2, config=cfg, n_tokens=40)
    m.cases = std_cases(5, 8, 4, False, 40)
    m.cases.append(Case("seg_noclamp_empty", 5, 8, 0, False, "empty", 40))
    models.append(m)

    # 3. Untied output layer, div_val 2, no projection sharing; clamp + same_length active.
    cfg = dict(n_token=150, cutoffs=[30, 90], d_model=16, d_embed=16, n_head=4, d_head=4, d_inner=32,
               div_val=2, n_layer=3, mem_len=12, tgt_len=7, clamp_len=5, same_length=True,
               pre_lnorm=False, untie_r=True, tie_word_embeddings=False, proj_share_all_but_first=False)
    m = RandomModel(
        "untied_div2_clamp_samelen",
        "untied output weights (tie_word_embeddings false) with cutoffs [30,90], div_val 2, "
        "tie_projs all False; untie_r true; post-LN; clamp_len 5 and same_length true (both active); "
        "also cases with them off and with tgt_len > mem_len",
        seed=303, gain=1.3, emb_std=0.5, config=cfg, n_tokens=56)
    m.cases = std_cases(7, 12, 5, True, 56)
    m.cases.append(Case("seg_plain_empty", 7, 12, 0, False, "empty", 56))
    m.cases.append(Case("seg_longseg_empty", 9, 4, 5, True, "empty", 56))
    m.cases.append(Case("seg_longseg_zeros", 9, 4, 5, True, "zeros", 56))
    models.append(m)

    # 4. Plain full softmax, small memory, long stream.
    n_long = 240  # 30 x mem_len
    cfg = dict(n_token=97, cutoffs=[], d_model=16, d_embed=16, n_head=2, d_head=8, d_inner=32,
               div_val=1, n_layer=2, mem_len=8, tgt_len=6, clamp_len=0, same_length=False,
               pre_lnorm=True, untie_r=False, tie_word_embeddings=True, proj_share_all_but_first=True)
    m = RandomModel(
        "full_softmax_long",
        "plain full softmax (cutoffs []), d_embed == d_model (no projections), mem_len 8, "
        "240-token stream (30 x mem_len) scored with tgt_len 1 and tgt_len 6; pre_lnorm true; untie_r false",
        seed=404, gain=1.0, emb_std=0.3, config=cfg, n_tokens=n_long)
    m.cases = std_cases(6, 8, 0, False, n_long)
    m.cases.append(Case("seg_samelen_empty", 6, 8, 0, True, "empty", n_long))
    m.cases.append(Case("stream_samelen_empty", 1, 8, 0, True, "empty", n_long))
    models.append(m)

    # 5. mem_len 0 in the config.
    cfg = dict(n_token=50, cutoffs=[20], d_model=20, d_embed=20, n_head=1, d_head=16, d_inner=32,
               div_val=1, n_layer=1, mem_len=0, tgt_len=6, clamp_len=0, same_length=False,
               pre_lnorm=False, untie_r=False, tie_word_embeddings=True, proj_share_all_but_first=True)
    m = RandomModel(
        "no_mem",
        "mem_len 0 in the config (no recurrence: each segment sees only itself); one tail cluster "
        "(cutoffs [20]), div_val 1, d_embed == d_model; single layer and head; untie_r false; "
        "same_length false (same_length with mem_len 0 masks every key in HF); "
        "one case overrides mem_len to 8 at run time",
        seed=505, gain=1.0, emb_std=0.5, config=cfg, n_tokens=30)
    m.cases = [
        Case("seg_empty", 6, 0, 0, False, "empty", 30),
        Case("seg_zeros", 6, 0, 0, False, "zeros", 30),
        Case("stream_empty", 1, 0, 0, False, "empty", 30),
        Case("whole_empty", 30, 0, 0, False, "empty", 30),
        Case("seg_mem8_empty", 6, 8, 0, False, "empty", 30),
        Case("seg_mem8_zeros", 6, 8, 0, False, "zeros", 30),
    ]
    models.append(m)

    # 6. Another LayerNorm epsilon, with embeddings small enough that it matters: the first
    # LayerNorm of each layer sees a variance near 1e-2, so 1e-3 against HF's default 1e-5
    # moves every log-probability (check_epsilon_matters shows by how much).
    cfg = dict(n_token=80, cutoffs=[30], d_model=16, d_embed=16, n_head=2, d_head=8, d_inner=32,
               div_val=1, n_layer=2, mem_len=6, tgt_len=5, clamp_len=0, same_length=False,
               pre_lnorm=False, untie_r=True, tie_word_embeddings=False, proj_share_all_but_first=True,
               layer_norm_epsilon=1e-3)
    m = RandomModel(
        "layer_norm_eps",
        "layer_norm_epsilon 1e-3 (every other fixture has HF's default 1e-5) with small embeddings "
        "(std 0.02, variance ~6e-3 after the sqrt(d_model) scale) so the epsilon matters; one tail cluster "
        "(cutoffs [30]), div_val 1, untied output weights; post-LN; untie_r true",
        seed=606, gain=1.0, emb_std=0.02, config=cfg, n_tokens=36)
    m.cases = std_cases(5, 6, 0, False, 36)
    models.append(m)
    return models


def make_tokens(n_token: int, cutoffs: list[int], n: int, seed: int) -> list[int]:
    """Random ids in [0, n_token) that are guaranteed to hit every cluster boundary."""
    rng = np.random.default_rng(seed)
    toks = rng.integers(0, n_token, size=n).tolist()
    special = {0, 1, n_token - 1, n_token - 2}
    for c in cutoffs:
        special.update({c - 1, c, c + 1})
    special = sorted(special)
    positions = rng.choice(np.arange(1, n), size=len(special), replace=False)
    for pos, tok in zip(positions, special):
        toks[pos] = tok
    toks[0] = int(rng.integers(0, n_token))
    return [int(t) for t in toks]


# ---------------------------------------------------------------------------
# Demo model: byte-level Transformer-XL trained on the King James Bible
# ---------------------------------------------------------------------------

DEMO_CONFIG = dict(n_token=256, cutoffs=[], d_model=128, d_embed=128, n_head=4, d_head=32, d_inner=256,
                   div_val=1, n_layer=4, mem_len=64, tgt_len=64, clamp_len=-1, same_length=True,
                   pre_lnorm=False, untie_r=True, tie_word_embeddings=True, proj_share_all_but_first=True,
                   dropout=0.1)
DEMO_SEED = 1234
DEMO_STREAMS = 16  # parallel streams per batch
DEMO_STEPS = 2400  # ~6 minutes on one CPU thread
DEMO_LR = 2e-3
DEMO_WARMUP = 100
HELDOUT_FRACTION = 0.05
HELDOUT_BYTES = 40_000
CALIB_BYTES = 16_000

_VERSE_REF = re.compile(rb"^[1-3]?[A-Za-z]+\d+:\d+ ")


def load_corpus(path: str | None) -> bytes:
    """The KJV text, one verse per line, verse references stripped.

    Default source: the `bible` program of the Debian package `bible-kjv`
    (`bible -f Gen1:1-Rev22:21` prints "Ge1:1 In the beginning ..." lines).
    """
    if path:
        raw = Path(path).read_bytes()
    else:
        if shutil.which("bible") is None:
            sys.exit("the `bible` program is missing: apt-get install bible-kjv (or pass --corpus FILE)")
        raw = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True).stdout
    lines = []
    for line in raw.splitlines():
        if not line.strip():
            continue
        m = _VERSE_REF.match(line)
        lines.append(line[m.end():] if m else line)
    return b"\n".join(lines) + b"\n"


def line_aligned(data: bytes, pos: int) -> int:
    """The first line start at or after pos."""
    if pos == 0:
        return 0
    nl = data.find(b"\n", pos - 1)
    return len(data) if nl < 0 else nl + 1


def split_corpus(data: bytes):
    split = line_aligned(data, int(len(data) * (1 - HELDOUT_FRACTION)))
    train, heldout_region = data[:split], data[split:]
    heldout = heldout_region[: line_aligned(heldout_region, HELDOUT_BYTES)]
    c0 = line_aligned(train, len(train) // 2)
    calib = train[c0 : line_aligned(train, c0 + CALIB_BYTES)]
    return train, heldout_region, heldout, calib, split


def cosine_lr(step: int, steps: int) -> float:
    """Linear warm-up, then cosine decay to 2 % of the peak learning rate."""
    if step < DEMO_WARMUP:
        return DEMO_LR * (step + 1) / DEMO_WARMUP
    progress = (step - DEMO_WARMUP) / max(1, steps - DEMO_WARMUP)
    return DEMO_LR * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_demo(train: bytes, steps: int) -> TransfoXLLMHeadModel:
    """The demo model trained on `train` (train_byte_model with the demo's settings)."""
    return train_byte_model(train, steps, DEMO_CONFIG, DEMO_SEED, "demo")


def train_byte_model(train: bytes, steps: int, config: dict, seed: int, label: str) -> TransfoXLLMHeadModel:
    """Train a byte-level model with the Transformer-XL recurrence: DEMO_STREAMS parallel
    streams over contiguous slices of the training text, mems carried between consecutive
    segments (back to the start, memory cleared, when a stream runs out), Adam with the
    cosine_lr schedule, gradients clipped at 0.25."""
    torch.manual_seed(seed)
    cfg = make_config(**config)
    model = TransfoXLLMHeadModel(cfg)
    model.train()
    tgt_len, bsz = cfg.tgt_len, DEMO_STREAMS
    data = torch.frombuffer(bytearray(train), dtype=torch.uint8).long()
    stream_len = data.numel() // bsz
    streams = data[: stream_len * bsz].view(bsz, stream_len)
    opt = torch.optim.Adam(model.parameters(), lr=DEMO_LR)

    n_params = sum(p.numel() for p in model.parameters())
    print(f"[{label}] {n_params} parameters, {len(train)} training bytes, {bsz} streams x {tgt_len} bytes, "
          f"{steps} steps")
    t0 = time.time()
    mems, pos, acc, acc_n = None, 0, 0.0, 0
    for step in range(steps):
        if pos + tgt_len + 1 > stream_len:  # wrap around (not with the demo's settings; with shorter texts)
            pos, mems = 0, None
        x = streams[:, pos : pos + tgt_len]
        y = streams[:, pos + 1 : pos + tgt_len + 1]
        pos += tgt_len
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, steps)
        out = model(input_ids=x, mems=mems)
        mems = out.mems  # already detached by HF
        loss = -out.prediction_scores.gather(2, y[..., None]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        acc += loss.item()
        acc_n += 1
        if (step + 1) % 250 == 0 or step + 1 == steps:
            print(f"[{label}] step {step + 1:5d}  train {acc / acc_n / math.log(2):.3f} bits/byte"
                  f"  lr {cosine_lr(step, steps):.2e}  {time.time() - t0:.0f}s", flush=True)
            acc, acc_n = 0.0, 0
    model.eval()
    return model


@torch.no_grad()
def bits_per_byte(model: TransfoXLLMHeadModel, data: bytes) -> float:
    """Bits/byte of `data`: one stream, the config's tgt_len / mem_len / same_length / clamp_len, empty start."""
    cfg = model.config
    case = Case("eval", cfg.tgt_len, cfg.mem_len, cfg.clamp_len, cfg.same_length, "empty", len(data))
    logp, _ = score(model, list(data), case)
    return float(-logp.mean() / math.log(2))


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------


def check_patch_is_exact(model_dir: Path, tokens: list[int], case: Case) -> None:
    """In float32 the patched attention must reproduce HF's original output bit for bit."""
    model = load_model(model_dir, "safetensors")  # float32
    use_patched_attention(False)
    ref, ref_full = score(model, tokens, case)
    use_patched_attention(True)
    new, new_full = score(model, tokens, case)
    assert torch.equal(ref, new) and torch.equal(ref_full, new_full), "patched attention differs in float32"
    print(f"[check] {model_dir.name}/{case.name}: float32 patched == HF original (bitwise)")


def check_hf_float64_needs_patch(model_dir: Path, tokens: list[int], case: Case) -> None:
    """Document why the patch exists: unpatched HF cannot run masked float64 attention."""
    model = load_model(model_dir, "safetensors").double()
    use_patched_attention(False)
    try:
        score(model, tokens, case)
        print("[check] note: unpatched HF float64 ran without error")
    except RuntimeError as e:
        print(f"[check] unpatched HF float64 with an attention mask fails: {e}")
    finally:
        use_patched_attention(True)


def first_positions_equal(a: torch.Tensor, b: torch.Tensor, n: int, what: str) -> None:
    d = (a[:n] - b[:n]).abs().max().item()
    assert d < 1e-12, f"{what}: first {n} positions differ by {d}"


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def tokens_of(spec: RandomModel) -> list[int]:
    return [int(t) for t in (FIXTURES / spec.name / "tokens.txt").read_text().split()]


def case_entry(case: Case, rows_k: int) -> dict:
    return {
        "name": case.name,
        "tgt_len": case.tgt_len,
        "mem_len": case.mem_len,
        "clamp_len": case.clamp_len,
        "same_length": case.same_length,
        "mem_init": case.mem_init,
        "n_tokens": case.n_tokens,
        "logp": f"{case.name}.logp.npy",
        "rows": f"{case.name}.rows.npy",
        "rows_k": rows_k,
    }


def write_cases(model64, model_dir: Path, tokens: list[int], cases: list[Case], summary: list) -> dict:
    """Score every case in float64, write the .npy files, return {case name: (logp, full)}."""
    results = {}
    for case in cases:
        logp, full = score(model64, tokens, case)
        k = min(ROWS_K, case.n_tokens)
        save_npy(model_dir / f"{case.name}.logp.npy", logp)
        save_npy(model_dir / f"{case.name}.rows.npy", full[:k])
        results[case.name] = (logp, full)
        summary.append((model_dir.name, case, -logp.mean().item(), entropy(full).mean().item(),
                        math.log(model64.config.vocab_size)))
    return results


def process_random_model(spec: RandomModel, summary: list) -> dict:
    out_dir = FIXTURES / spec.name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    cfg = spec.config

    torch.manual_seed(spec.seed)
    model = TransfoXLLMHeadModel(make_config(**cfg)).eval()
    scaled_random_init(model, spec.seed, spec.gain, spec.emb_std)
    save_model(model, out_dir, ["safetensors", "bin"])

    tokens = make_tokens(cfg["n_token"], cfg["cutoffs"], spec.n_tokens, spec.seed)
    (out_dir / "tokens.txt").write_text(" ".join(map(str, tokens)) + "\n")

    # All references come from the weights as saved on disk, upcast to float64.
    model64 = load_model(out_dir, "safetensors").double()
    results = write_cases(model64, out_dir, tokens, spec.cases, summary)

    # Both weight formats load to the same model, although safetensors drops tied duplicates.
    with safe_open(str(out_dir / "model.safetensors"), "pt") as f:
        st_keys = set(f.keys())
    bin_keys = set(torch.load(out_dir / "pytorch_model.bin", weights_only=True).keys())
    assert st_keys <= bin_keys
    print(f"[info] {spec.name}: only in pytorch_model.bin: {sorted(bin_keys - st_keys)}")
    model64_bin = load_model(out_dir, "bin").double()
    c0 = spec.cases[0]
    assert torch.equal(score(model64_bin, tokens, c0)[0], results[c0.name][0]), "bin != safetensors"

    run_model_checks(spec, out_dir, model64, tokens, results)

    return {
        "name": spec.name,
        "dir": spec.name,
        "formats": ["safetensors", "bin"],
        "description": spec.description,
        "tokens": "tokens.txt",
        "cases": [case_entry(c, min(ROWS_K, c.n_tokens)) for c in spec.cases],
    }


def run_model_checks(spec: RandomModel, out_dir: Path, model64, tokens: list[int], results: dict) -> None:
    by_name = {c.name: c for c in spec.cases}
    n_token = spec.config["n_token"]
    for name, (logp, full) in results.items():
        case = by_name[name]
        # Rows are normalised distributions and clearly non-uniform.
        lse = torch.logsumexp(full, dim=-1)
        assert (lse.abs() < 1e-12).all(), f"{spec.name}/{name}: rows not normalised"
        ent = entropy(full).mean().item()
        assert ent < 0.8 * math.log(n_token), f"{spec.name}/{name}: entropy {ent:.3f} too close to uniform"
        # mem_len 0: "empty" and "zeros" starts are the same thing.
        if case.mem_len == 0 and case.mem_init == "empty":
            twin = Case(name, case.tgt_len, 0, case.clamp_len, case.same_length, "zeros", case.n_tokens)
            assert torch.equal(score(model64, tokens, twin)[0], logp), "mem_len 0: empty != zeros"

    # Segment vs streaming (empty start): identical on the positions of the first
    # segment that fit in the memory window, different later on in general.
    for c in spec.cases:
        if c.mem_init != "empty" or c.tgt_len == 1:
            continue
        for s in spec.cases:
            if (s.tgt_len == 1 and s.mem_init == "empty" and s.mem_len == c.mem_len
                    and s.clamp_len == c.clamp_len and s.same_length == c.same_length):
                n = max(1, min(c.tgt_len, c.mem_len))
                first_positions_equal(results[c.name][0], results[s.name][0], n, f"{c.name} vs {s.name}")

    # same_length makes every query attend to exactly the last mem_len positions
    # (itself included), so with it the result cannot depend on tgt_len at all.
    for c in spec.cases:
        if not c.same_length or c.tgt_len == 1:
            continue
        for s in spec.cases:
            if (s.tgt_len == 1 and s.same_length and s.mem_init == c.mem_init and s.mem_len == c.mem_len
                    and s.clamp_len == c.clamp_len):
                d = (results[c.name][0] - results[s.name][0]).abs().max().item()
                assert d < 1e-10, f"{spec.name}: same_length {c.name} vs {s.name} differ by {d}"

    # With memory covering the whole sequence (and same_length off) segmenting
    # must not matter at all.
    n = spec.n_tokens
    full_mem = [Case("x", t, n, spec.config["clamp_len"], False, "empty", n) for t in (1, 5, n)]
    ref = score(model64, tokens, full_mem[-1])[0]
    for c in full_mem[:-1]:
        d = (score(model64, tokens, c)[0] - ref).abs().max().item()
        assert d < 1e-10, f"{spec.name}: tgt_len {c.tgt_len} with unbounded memory differs by {d}"

    # Carrying the memory between segments matters.
    seg = next(c for c in spec.cases if c.tgt_len > 1 and c.mem_len > 0 and c.mem_init == "empty")
    no_carry, _ = score(model64, tokens, seg, carry_mems=False)
    diff = (no_carry - results[seg.name][0]).abs()
    assert diff[: seg.tgt_len].max().item() == 0.0, "first segment must not depend on carrying"
    assert diff[seg.tgt_len :].max().item() > 1e-3, "carried memory has no effect"

    # float32 agrees with float64 to float32 accuracy.
    model32 = load_model(out_dir, "safetensors")
    d32 = (score(model32, tokens, seg)[0].double() - results[seg.name][0]).abs().max().item()
    assert d32 < 1e-3, f"float32 vs float64 differ by {d32}"
    print(f"[check] {spec.name}: ok (segment/stream prefix, unbounded memory, carry, f32~f64 {d32:.1e})")

    if model64.config.layer_norm_epsilon != 1e-5:
        check_epsilon_matters(spec, model64, tokens, results)


# A reader that ignored the config's epsilon and used HF's default must miss every case by far
# more than the tests' tolerance (1e-4).
EPSILON_MIN_EFFECT = 1e-2


def check_epsilon_matters(spec: RandomModel, model64, tokens: list[int], results: dict) -> None:
    """Every case scored with HF's default LayerNorm epsilon (1e-5) instead of the config's differs
    from the fixture by more than EPSILON_MIN_EFFECT somewhere."""
    default = copy.deepcopy(model64)
    for module in default.modules():
        if isinstance(module, nn.LayerNorm):
            module.eps = 1e-5
    worst = []
    for case in spec.cases:
        logp, full = score(default, tokens, case)
        ref_logp, ref_full = results[case.name]
        k = min(ROWS_K, case.n_tokens)
        d = max((logp - ref_logp).abs().max().item(), (full[:k] - ref_full[:k]).abs().max().item())
        assert d > EPSILON_MIN_EFFECT, f"{spec.name}/{case.name}: epsilon 1e-5 changes ln p by only {d:.2e}"
        worst.append(d)
    print(f"[check] {spec.name}: epsilon {model64.config.layer_norm_epsilon:g} -> 1e-5 changes ln p by "
          f"{min(worst):.2e} to {max(worst):.2e} (max |Δ| per case)")


def process_demo(args, summary: list) -> tuple[dict, float]:
    out_dir = FIXTURES / "demo"
    corpus = load_corpus(args.corpus)
    train, heldout_region, heldout, calib, split = split_corpus(corpus)
    print(f"[demo] corpus {len(corpus)} bytes (sha256 {hashlib.sha256(corpus).hexdigest()[:16]}), "
          f"train {len(train)}, held out {len(heldout_region)} (from byte {split})")
    assert len(heldout) >= 12000

    if args.reuse_demo:
        assert (out_dir / "model.safetensors").exists(), "--reuse-demo needs an existing demo model"
        print("[demo] reusing the existing tests/fixtures/demo model (no training)")
    else:
        model = train_demo(train, args.steps)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        save_model(model, out_dir, ["safetensors"])
    (out_dir / "heldout.txt").write_bytes(heldout)
    (out_dir / "calib.txt").write_bytes(calib)

    model32 = load_model(out_dir, "safetensors")
    bpb = bits_per_byte(model32, heldout)
    print(f"[demo] held-out bits/byte (float32, tgt_len 64, mem_len 64, empty start, "
          f"{len(heldout)} bytes): {bpb:.4f}")

    cfg = model32.config
    n_seg, n_stream = 1024, 256
    cases = [
        Case("seg_empty", cfg.tgt_len, cfg.mem_len, cfg.clamp_len, cfg.same_length, "empty", n_seg),
        Case("seg_zeros", cfg.tgt_len, cfg.mem_len, cfg.clamp_len, cfg.same_length, "zeros", n_seg),
        Case("stream_empty", 1, cfg.mem_len, cfg.clamp_len, cfg.same_length, "empty", n_stream),
        Case("stream_zeros", 1, cfg.mem_len, cfg.clamp_len, cfg.same_length, "zeros", n_stream),
    ]
    model64 = model32.double()
    tokens = list(heldout)
    results = write_cases(model64, out_dir, tokens, cases, summary)
    # same_length is on, so segment and streaming evaluation agree on the common prefix.
    for init in ("empty", "zeros"):
        first_positions_equal(results[f"seg_{init}"][0], results[f"stream_{init}"][0], n_stream - 1,
                              f"demo seg_{init} vs stream_{init}")
    entry = {
        "name": "demo",
        "dir": "demo",
        "formats": ["safetensors"],
        "description": "byte-level Transformer-XL (vocab 256, full softmax, 4 layers, d_model 128) trained on "
                       f"the King James Bible; heldout.txt is never trained on ({bpb:.3f} bits/byte), "
                       "calib.txt comes from the training text",
        "tokens": {"bytes": "heldout.txt", "limit": n_seg},
        "cases": [case_entry(c, min(ROWS_K, c.n_tokens)) for c in cases],
    }
    return entry, bpb


def validate_manifest(manifest: dict) -> None:
    """Every file named in the manifest exists and has the promised dtype and shape."""
    for entry in manifest["models"]:
        d = FIXTURES / entry["dir"]
        config = json.loads((d / "config.json").read_text())
        files = {"safetensors": "model.safetensors", "bin": "pytorch_model.bin"}
        assert {f for f in files if (d / files[f]).exists()} == set(entry["formats"])
        tok = entry["tokens"]
        n_avail = len((d / tok["bytes"]).read_bytes()) if isinstance(tok, dict) else len((d / tok).read_text().split())
        for c in entry["cases"]:
            assert c["n_tokens"] <= n_avail
            logp, rows = np.load(d / c["logp"]), np.load(d / c["rows"])
            assert logp.dtype == np.dtype("<f8") and logp.shape == (c["n_tokens"] - 1,)
            assert rows.dtype == np.dtype("<f8") and rows.shape == (c["rows_k"], config["vocab_size"])
            assert logp.flags.c_contiguous and rows.flags.c_contiguous


def print_summary(summary: list) -> None:
    print()
    print(f"{'model':28s} {'case':22s} {'N':>4s} {'tgt':>4s} {'mem':>4s} {'clamp':>5s} {'sl':>2s} "
          f"{'mean NLL':>9s} {'entropy':>8s} {'ln(V)':>6s}")
    for model, c, nll, ent, lnv in summary:
        print(f"{model:28s} {c.name:22s} {c.n_tokens:4d} {c.tgt_len:4d} {c.mem_len:4d} {c.clamp_len:5d} "
              f"{int(c.same_length):2d} {nll:9.4f} {ent:8.4f} {lnv:6.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", help="KJV text file in `bible -f` format (default: run `bible`)")
    ap.add_argument("--steps", type=int, default=DEMO_STEPS, help="demo training steps")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (default 1: with 2+ threads torch slows down badly when other "
                         "processes keep the cores busy; results may depend on this number)")
    ap.add_argument("--reuse-demo", action="store_true",
                    help="keep the existing demo model instead of retraining it (fixtures are still rewritten)")
    ap.add_argument("--only", action="append", metavar="NAME",
                    help="regenerate only this random model (repeatable); the other models, the demo and "
                         "their manifest entries are left as they are")
    args = ap.parse_args()

    t0 = time.time()
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"safetensors {safetensors.__version__}, numpy {np.__version__}")
    FIXTURES.mkdir(parents=True, exist_ok=True)

    summary: list = []
    specs = random_models()
    if args.only:
        unknown = set(args.only) - {s.name for s in specs}
        if unknown:
            ap.error(f"--only: no random model named {', '.join(sorted(unknown))}")
        old_entries = {e["name"]: e for e in json.loads((FIXTURES / "manifest.json").read_text())["models"]}
    entries = []
    use_patched_attention(True)
    for spec in specs:
        if args.only and spec.name not in args.only:
            entries.append(old_entries[spec.name])
        else:
            entries.append(process_random_model(spec, summary))
    regenerated = [s for s in specs if not args.only or s.name in args.only]

    # Patch checks, on segment cases (several tokens per call, so the mask is in play).
    for spec in regenerated:
        check_patch_is_exact(FIXTURES / spec.name, tokens_of(spec), spec.cases[0])
    check_hf_float64_needs_patch(FIXTURES / regenerated[0].name, tokens_of(regenerated[0]), regenerated[0].cases[0])

    if args.only:
        entries.append(old_entries["demo"])
        bpb = None
    else:
        demo_entry, bpb = process_demo(args, summary)
        entries.append(demo_entry)

    manifest = {
        "generator": GENERATOR,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "models": entries,
    }
    (FIXTURES / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    validate_manifest(manifest)

    print_summary(summary)
    total = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    if bpb is not None:
        print(f"\ndemo held-out bits/byte: {bpb:.4f}")
    print(f"tests/fixtures total size: {total / 1e6:.2f} MB")
    print(f"wall time: {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
