#!/usr/bin/env python3
"""Regenerate tests/fixtures/tf/: checkpoints of the original Transformer-XL TensorFlow code.

Each fixture is a tiny random model written as the authors' `tf/model.py` names its
variables (optimizer slots `/Adam`, `/Adam_1`, `global_step` and the like included), saved by
TensorFlow's own `tf.compat.v1.train.Saver` (graph mode) as `model.ckpt-0.{index,data-*}` with
its `checkpoint` state file, beside the `corpus-info.json` the TensorFlow code writes and, for
the vocabulary fixtures, a `cache.pkl` (its pickled `data_utils.Corpus`, protocol 2).

The expected log-probabilities are independent of txl's reader: the checkpoint TensorFlow
wrote is read back (Hugging Face's `load_tf_weights_in_transfo_xl` for the adaptive layout
with `cutoff_{i}` embeddings; for div_val 1, which that loader cannot read, this script's own
mapping through `tf.train.load_checkpoint`) into Hugging Face's `TransfoXLLMHeadModel`
(transformers 4.37.2), which scores the fixture's tokens in float64 as `make_fixtures.py`
does (segments of tgt_len, memories carried).

Per fixture (tests/fixtures/tf/<name>/):
  checkpoint, model.ckpt-0.index, model.ckpt-0.data-00000-of-00001   TensorFlow's files
  corpus-info.json                                                  vocab_size, cutoffs, dataset
  cache.pkl                                                         the corpus with its vocabulary (some)
  tokens.txt                                                        token ids
  case.json                                                         the convert flags and the scoring case
  seg.logp.npy                                                      ln p(t[i+1] | t[..=i]), float64
and tests/fixtures/tf/damaged/{wrong_shape,missing_tensor}/: checkpoints that must be refused.

Run with tools/reference/regenerate_tf.sh (it makes the virtual environment).
"""

from __future__ import annotations

import collections
import json
import pickle
import shutil
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_fixtures as mf  # noqa: E402  (the Hugging Face helpers: config, init, scoring)
import tensorflow as tf  # noqa: E402
import torch  # noqa: E402
from transformers import TransfoXLLMHeadModel  # noqa: E402

OUT = mf.REPO / "tests" / "fixtures" / "tf"
T = "transformer/"
# tf.contrib.layers.layer_norm's epsilon, which the TensorFlow code uses.
TF_EPS = 1e-12


# ---------------------------------------------------------------------------
# The fixtures
# ---------------------------------------------------------------------------

FIXTURES = [
    # enwik8-like: bytes as decimal symbols, div_val 1, d_embed == d_model, shared biases.
    dict(name="enwik8_div1", dataset="enwik8", vocab="bytes", n_token=48, cutoffs=[], d_model=16, d_embed=16,
         n_head=2, d_head=8, d_inner=32, div_val=1, n_layer=2, untie_r=False, share_all_but_first=False,
         convert=["--tgt-len", "8", "--mem-len", "16"], clamp_len=1000, same_length=True, seed=11),
    # text8-like: characters, div_val 1 with d_embed != d_model (proj_W), untie_r.
    dict(name="text8_div1_proj", dataset="text8", vocab="chars", n_token=27, cutoffs=[], d_model=16, d_embed=24,
         n_head=2, d_head=8, d_inner=32, div_val=1, n_layer=2, untie_r=True, share_all_but_first=False,
         convert=["--tgt-len", "6", "--mem-len", "9", "--clamp-len", "5"], clamp_len=5, same_length=True, seed=12),
    # WikiText-103-like: cutoffs, div_val 4, untie_r, proj_share_all_but_first (read by HF's TF loader).
    dict(name="wt103_div4", dataset="wt103", vocab=None, n_token=100, cutoffs=[20, 60], d_model=16, d_embed=32,
         n_head=2, d_head=8, d_inner=32, div_val=4, n_layer=2, untie_r=True, share_all_but_first=True,
         convert=["--tgt-len", "6", "--mem-len", "12", "--clamp-len", "8"], clamp_len=8, same_length=True, seed=13),
    # div_val 1 with cutoffs and d_embed != d_model, shared biases, cluster 0's projection its
    # own, cluster 1's the embedding's; no dataset the paper evaluated (train_gpu.py's defaults).
    dict(name="div1_cutoffs_proj", dataset="ptb", vocab=None, n_token=60, cutoffs=[24], d_model=16, d_embed=24,
         n_head=2, d_head=8, d_inner=32, div_val=1, n_layer=3, untie_r=False, share_all_but_first=True,
         convert=["--tgt-len", "5", "--mem-len", "7"], clamp_len=-1, same_length=False, seed=14),
    # One Billion Word-like: div_val 4 with proj_same_dim False (no proj_W where a table is
    # d_model wide: the identity), no projection shared (read by this script's own mapping: HF's
    # TF loader expects every cutoff_{i}/proj_W).
    dict(name="lm1b_div4_samedim", dataset="lm1b", vocab=None, n_token=90, cutoffs=[30, 60], d_model=16, d_embed=16,
         n_head=2, d_head=8, d_inner=32, div_val=4, n_layer=2, untie_r=True, share_all_but_first=False,
         proj_same_dim=False, convert=["--tgt-len", "4", "--mem-len", "6"], clamp_len=-1, same_length=True, seed=15),
]
N_TOKENS = 40


def proj_same_dim(f: dict) -> bool:
    return f.get("proj_same_dim", True)


def has_emb_proj(f: dict, i: int) -> bool:
    """Whether embedding table i has a `proj_W` (the TensorFlow code's condition)."""
    width = f["d_embed"] // f["div_val"] ** i
    if f["div_val"] == 1:
        return f["d_embed"] != f["d_model"]
    return not (width == f["d_model"] and not proj_same_dim(f))


def has_out_proj(f: dict, i: int) -> bool:
    """Whether softmax cluster i has a `proj` of its own (untied, and not the identity)."""
    width = f["d_embed"] // f["div_val"] ** i
    if tf_tie_projs(f)[i]:
        return False
    return not ((f["div_val"] == 1 or not proj_same_dim(f)) and width == f["d_model"])


def tf_tie_projs(f: dict) -> list[bool]:
    """The TensorFlow code's tie_projs: with no cutoffs the embedding's projection is always
    used; otherwise proj_share_all_but_first ties every cluster but the first."""
    if not f["cutoffs"]:
        return [True]
    return [False] + [f["share_all_but_first"]] * len(f["cutoffs"])


def hf_config(f: dict):
    return mf.make_config(
        n_token=f["n_token"], cutoffs=f["cutoffs"], d_model=f["d_model"], d_embed=f["d_embed"],
        n_head=f["n_head"], d_head=f["d_head"], d_inner=f["d_inner"], div_val=f["div_val"],
        n_layer=f["n_layer"], mem_len=0, tgt_len=0, clamp_len=0, same_length=False, pre_lnorm=False,
        untie_r=f["untie_r"], tie_word_embeddings=True, proj_share_all_but_first=f["share_all_but_first"],
        layer_norm_epsilon=TF_EPS,
    )


# ---------------------------------------------------------------------------
# Hugging Face weights -> the TensorFlow code's variables
# ---------------------------------------------------------------------------


def tf_variables(model: TransfoXLLMHeadModel, f: dict) -> dict[str, np.ndarray]:
    """The model's weights under the TensorFlow code's names and layouts ([in, out] kernels)."""
    a = lambda t: t.detach().to(torch.float32).numpy().copy()  # noqa: E731
    tr, crit = model.transformer, model.crit
    v: dict[str, np.ndarray] = {}
    n_clusters = len(f["cutoffs"])
    proj = f["div_val"] != 1 or f["d_embed"] != f["d_model"]
    if f["div_val"] == 1:
        v[T + "adaptive_embed/lookup_table"] = a(tr.word_emb.emb_layers[0].weight)
        if proj:
            v[T + "adaptive_embed/proj_W"] = a(tr.word_emb.emb_projs[0]).T
    else:
        for i in range(n_clusters + 1):
            v[T + f"adaptive_embed/cutoff_{i}/lookup_table"] = a(tr.word_emb.emb_layers[i].weight)
            if has_emb_proj(f, i):
                v[T + f"adaptive_embed/cutoff_{i}/proj_W"] = a(tr.word_emb.emb_projs[i]).T
    if f["untie_r"]:
        v[T + "r_w_bias"] = np.stack([a(layer.dec_attn.r_w_bias) for layer in tr.layers])
        v[T + "r_r_bias"] = np.stack([a(layer.dec_attn.r_r_bias) for layer in tr.layers])
    else:
        v[T + "r_w_bias"] = a(tr.r_w_bias)
        v[T + "r_r_bias"] = a(tr.r_r_bias)
    for l, layer in enumerate(tr.layers):
        p = T + f"layer_{l}/"
        att, ff = layer.dec_attn, layer.pos_ff
        v[p + "rel_attn/qkv/kernel"] = a(att.qkv_net.weight).T
        v[p + "rel_attn/r/kernel"] = a(att.r_net.weight).T
        v[p + "rel_attn/o/kernel"] = a(att.o_net.weight).T
        v[p + "rel_attn/LayerNorm/gamma"] = a(att.layer_norm.weight)
        v[p + "rel_attn/LayerNorm/beta"] = a(att.layer_norm.bias)
        v[p + "ff/layer_1/kernel"] = a(ff.CoreNet[0].weight).T
        v[p + "ff/layer_1/bias"] = a(ff.CoreNet[0].bias)
        v[p + "ff/layer_2/kernel"] = a(ff.CoreNet[3].weight).T
        v[p + "ff/layer_2/bias"] = a(ff.CoreNet[3].bias)
        v[p + "ff/LayerNorm/gamma"] = a(ff.layer_norm.weight)
        v[p + "ff/LayerNorm/beta"] = a(ff.layer_norm.bias)
    if n_clusters == 0:
        v[T + "adaptive_softmax/bias"] = a(crit.out_layers[0].bias)
    else:
        ends = [0] + f["cutoffs"] + [f["n_token"]]
        for i in range(n_clusters + 1):
            s = T + f"adaptive_softmax/cutoff_{i}/"
            if f["div_val"] == 1:
                v[s + "b"] = a(crit.out_layers[0].bias)[ends[i]:ends[i + 1]]
            else:
                v[s + "b"] = a(crit.out_layers[i].bias)
            if proj and has_out_proj(f, i):
                v[s + "proj"] = a(crit.out_projs[i]).T
        v[T + "adaptive_softmax/cutoff_0/cluster_W"] = a(crit.cluster_weight)
        v[T + "adaptive_softmax/cutoff_0/cluster_b"] = a(crit.cluster_bias)
    return {k: np.ascontiguousarray(x) for k, x in v.items()}


def write_tf_checkpoint(variables: dict[str, np.ndarray], out_dir: Path, seed: int, slots: bool = True) -> None:
    """model.ckpt-0.{index,data-00000-of-00001} and `checkpoint`, written by TensorFlow's Saver
    in graph mode, with Adam's slots and the step counter as training leaves them."""
    rng = np.random.default_rng(seed)
    graph = tf.Graph()
    with graph.as_default():
        tf_vars = []
        for name, value in variables.items():
            tf_vars.append(tf.compat.v1.Variable(value, name=name))
            for slot in ("Adam", "Adam_1") if slots else ():
                noise = rng.normal(0, 0.01, value.shape).astype(np.float32)
                tf_vars.append(tf.compat.v1.Variable(noise, name=f"{name}/{slot}"))
        tf_vars.append(tf.compat.v1.Variable(np.int64(0), name="global_step"))
        tf_vars.append(tf.compat.v1.Variable(np.float32(0.9), name="beta1_power"))
        tf_vars.append(tf.compat.v1.Variable(np.float32(0.999), name="beta2_power"))
        saver = tf.compat.v1.train.Saver(tf_vars)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(out_dir / "model.ckpt"), global_step=0, write_meta_graph=False)
    # Names as given, or the reader below would not find them.
    names = {name for name, _ in tf.train.list_variables(str(out_dir / "model.ckpt-0"))}
    assert set(variables) <= names, sorted(set(variables) - names)
    # The state file as the authors' release has it: a path relative to its directory.
    (out_dir / "checkpoint").write_text(
        'model_checkpoint_path: "model.ckpt-0"\nall_model_checkpoint_paths: "model.ckpt-0"\n'
    )


# ---------------------------------------------------------------------------
# The TensorFlow checkpoint -> Hugging Face, independently of txl
# ---------------------------------------------------------------------------


def load_own(model: TransfoXLLMHeadModel, f: dict, prefix: str) -> None:
    """The TensorFlow code's names into Hugging Face's model by this script's own mapping, for
    the layouts Hugging Face's TF loader cannot read: div_val 1 (`adaptive_embed/lookup_table`),
    and tables without `proj_W` (`proj_same_dim = False`: the identity)."""
    reader = tf.train.load_checkpoint(prefix)
    get = lambda n: torch.from_numpy(np.array(reader.get_tensor(T + n)))  # noqa: E731
    tr, crit = model.transformer, model.crit
    n_clusters = len(f["cutoffs"])
    proj = f["div_val"] != 1 or f["d_embed"] != f["d_model"]
    with torch.no_grad():
        emb_projs = []  # each table's projection as Hugging Face holds it ([d_model, width])
        if f["div_val"] == 1:
            tr.word_emb.emb_layers[0].weight.copy_(get("adaptive_embed/lookup_table"))
            if proj:
                emb_projs.append(get("adaptive_embed/proj_W").T)
        else:
            for i in range(n_clusters + 1):
                c = f"adaptive_embed/cutoff_{i}/"
                tr.word_emb.emb_layers[i].weight.copy_(get(c + "lookup_table"))
                if has_emb_proj(f, i):
                    emb_projs.append(get(c + "proj_W").T)
                else:
                    emb_projs.append(torch.eye(f["d_model"]))
        for i, p in enumerate(emb_projs):
            tr.word_emb.emb_projs[i].copy_(p)
        if f["untie_r"]:
            for l, layer in enumerate(tr.layers):
                layer.dec_attn.r_w_bias.copy_(get("r_w_bias")[l])
                layer.dec_attn.r_r_bias.copy_(get("r_r_bias")[l])
        else:
            tr.r_w_bias.copy_(get("r_w_bias"))
            tr.r_r_bias.copy_(get("r_r_bias"))
        for l, layer in enumerate(tr.layers):
            p = f"layer_{l}/"
            att, ff = layer.dec_attn, layer.pos_ff
            att.qkv_net.weight.copy_(get(p + "rel_attn/qkv/kernel").T)
            att.r_net.weight.copy_(get(p + "rel_attn/r/kernel").T)
            att.o_net.weight.copy_(get(p + "rel_attn/o/kernel").T)
            att.layer_norm.weight.copy_(get(p + "rel_attn/LayerNorm/gamma"))
            att.layer_norm.bias.copy_(get(p + "rel_attn/LayerNorm/beta"))
            ff.CoreNet[0].weight.copy_(get(p + "ff/layer_1/kernel").T)
            ff.CoreNet[0].bias.copy_(get(p + "ff/layer_1/bias"))
            ff.CoreNet[3].weight.copy_(get(p + "ff/layer_2/kernel").T)
            ff.CoreNet[3].bias.copy_(get(p + "ff/layer_2/bias"))
            ff.layer_norm.weight.copy_(get(p + "ff/LayerNorm/gamma"))
            ff.layer_norm.bias.copy_(get(p + "ff/LayerNorm/beta"))
        if n_clusters == 0:
            crit.out_layers[0].bias.copy_(get("adaptive_softmax/bias"))
            if proj:  # the TensorFlow code scores through the embedding's projection
                crit.out_projs[0].copy_(emb_projs[0])
        else:
            for i in range(n_clusters + 1):
                c = f"adaptive_softmax/cutoff_{i}/"
                if f["div_val"] != 1:
                    crit.out_layers[i].bias.copy_(get(c + "b"))
                if proj:
                    own = has_out_proj(f, i)
                    table = 0 if f["div_val"] == 1 else i
                    crit.out_projs[i].copy_(get(c + "proj").T if own else emb_projs[table])
            if f["div_val"] == 1:
                crit.out_layers[0].bias.copy_(
                    torch.cat([get(f"adaptive_softmax/cutoff_{i}/b") for i in range(n_clusters + 1)])
                )
            crit.cluster_weight.copy_(get("adaptive_softmax/cutoff_0/cluster_W"))
            crit.cluster_bias.copy_(get("adaptive_softmax/cutoff_0/cluster_b"))
        # The output layers are the embedding tables (one Parameter each, tied).
        for out, emb in zip(crit.out_layers, tr.word_emb.emb_layers):
            assert out.weight is emb.weight


def reference_model(f: dict, prefix: str) -> TransfoXLLMHeadModel:
    model = TransfoXLLMHeadModel(hf_config(f)).eval()
    if f["div_val"] == 1 or not proj_same_dim(f):
        load_own(model, f, prefix)
    else:
        mf.hf_txl.load_tf_weights_in_transfo_xl(model, model.config, prefix)
    return model


# ---------------------------------------------------------------------------
# The corpus pickle and corpus-info.json
# ---------------------------------------------------------------------------


def corpus_classes():
    """`data_utils.Corpus` and `vocabulary.Vocab` as the TensorFlow code's modules name them
    (plain classes: pickle records the module and class names and the attribute dicts)."""
    data_utils = types.ModuleType("data_utils")
    vocabulary = types.ModuleType("vocabulary")

    class Corpus:
        pass

    class Vocab:
        pass

    Corpus.__module__, Corpus.__qualname__ = "data_utils", "Corpus"
    Vocab.__module__, Vocab.__qualname__ = "vocabulary", "Vocab"
    data_utils.Corpus, vocabulary.Vocab = Corpus, Vocab
    sys.modules["data_utils"], sys.modules["vocabulary"] = data_utils, vocabulary
    return Corpus, Vocab


def symbols_for(kind: str, n_token: int) -> list[str]:
    if kind == "bytes":  # prep_enwik8.py: each byte as its decimal value
        text = b"In the beginning God created the heaven and the earth. And the earth was without form, void; [[x]] 2019!?"
        counts = collections.Counter(text.replace(b"\n", b""))
        ordered = [b for b, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
        extra = [b for b in range(256) if b not in counts and b != 10]
        return [str(b) for b in (ordered + extra)[:n_token]]
    assert kind == "chars"  # prep_text8.py: characters, `_` for a space
    return ["_"] + [chr(c) for c in range(ord("a"), ord("z") + 1)][: n_token - 1]


def write_cache_pkl(symbols: list[str], tokens: list[int], path: Path) -> None:
    Corpus, Vocab = corpus_classes()
    vocab = Vocab()
    vocab.__dict__.update(
        counter=collections.Counter({s: len(symbols) - i for i, s in enumerate(symbols)}),
        special=[], min_freq=0, max_size=None, lower_case=False, delimiter=None, vocab_file=None,
        idx2sym=list(symbols), sym2idx=collections.OrderedDict((s, i) for i, s in enumerate(symbols)),
    )
    corpus = Corpus()
    arr = np.array(tokens, dtype=np.int64)
    corpus.__dict__.update(dataset="enwik8", vocab=vocab, train=arr, valid=arr[:10], test=arr[:10], cutoffs=[])
    with open(path, "wb") as fp:
        pickle.dump(corpus, fp, protocol=2)


# ---------------------------------------------------------------------------


def make(f: dict) -> TransfoXLLMHeadModel:
    out = OUT / f["name"]
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    torch.manual_seed(f["seed"])
    model = TransfoXLLMHeadModel(hf_config(f)).eval()
    mf.scaled_random_init(model, seed=f["seed"], gain=1.0, emb_std=0.3)
    with torch.no_grad():  # where the TensorFlow code has no projection, the identity
        if f["div_val"] != 1:
            for i in range(len(f["cutoffs"]) + 1):
                if not has_emb_proj(f, i):
                    model.transformer.word_emb.emb_projs[i].copy_(torch.eye(f["d_model"]))
                if not has_out_proj(f, i) and not tf_tie_projs(f)[i]:
                    model.crit.out_projs[i].copy_(torch.eye(f["d_model"]))
    write_tf_checkpoint(tf_variables(model, f), out, f["seed"])

    cutoffs = [0] + f["cutoffs"] + [f["n_token"]] if f["cutoffs"] else []
    info = {"vocab_size": f["n_token"], "cutoffs": cutoffs, "dataset": f["dataset"]}
    (out / "corpus-info.json").write_text(json.dumps(info) + "\n")

    rng = np.random.default_rng(f["seed"])
    tokens = [int(t) for t in rng.integers(0, f["n_token"], N_TOKENS)]
    (out / "tokens.txt").write_text(" ".join(map(str, tokens)) + "\n")
    if f["vocab"]:
        symbols = symbols_for(f["vocab"], f["n_token"])
        assert len(symbols) == f["n_token"]
        write_cache_pkl(symbols, tokens, out / "cache.pkl")

    # The reference: the checkpoint TensorFlow wrote, read back into Hugging Face, float64.
    ref = reference_model(f, str(out / "model.ckpt-0")).double()
    tgt_len = int(f["convert"][f["convert"].index("--tgt-len") + 1])
    mem_len = int(f["convert"][f["convert"].index("--mem-len") + 1])
    case = mf.Case("seg", tgt_len, mem_len, max(f["clamp_len"], 0), f["same_length"], "empty", N_TOKENS)
    mf.use_patched_attention(True)
    logp, _ = mf.score(ref, tokens, case)
    mf.save_npy(out / "seg.logp.npy", logp)
    (out / "case.json").write_text(json.dumps({
        "convert": f["convert"], "tgt_len": tgt_len, "mem_len": mem_len, "clamp_len": max(f["clamp_len"], 0),
        "same_length": f["same_length"], "mem_init": "empty", "n_tokens": N_TOKENS,
        "generator": "tools/reference/make_tf_fixtures.py", "tensorflow": tf.__version__,
        "transformers": mf.transformers.__version__, "torch": torch.__version__.split("+")[0],
    }, indent=2) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"[{f['name']}] {size} bytes, mean ln p {float(logp.mean()):.4f}")
    return model


def make_damaged(model: TransfoXLLMHeadModel, f: dict) -> None:
    """Checkpoints TensorFlow writes but txl must refuse (no optimizer slots): one tensor of
    the wrong shape (`damaged/wrong_shape`), one tensor missing (`damaged/missing_tensor`)."""
    good = tf_variables(model, f)
    info = json.dumps({"vocab_size": f["n_token"], "cutoffs": [], "dataset": f["dataset"]}) + "\n"
    wrong = dict(good)
    name = T + "layer_1/ff/layer_2/bias"
    wrong[name] = np.concatenate([wrong[name], np.zeros(1, np.float32)])
    missing = {k: v for k, v in good.items() if k != T + "layer_1/ff/LayerNorm/beta"}
    for sub, variables in (("wrong_shape", wrong), ("missing_tensor", missing)):
        out = OUT / "damaged" / sub
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        write_tf_checkpoint(variables, out, f["seed"], slots=False)
        (out / "corpus-info.json").write_text(info)
        print(f"[damaged/{sub}] written")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    tf.compat.v1.disable_eager_execution()
    models = {f["name"]: make(f) for f in FIXTURES}
    make_damaged(models["enwik8_div1"], FIXTURES[0])


if __name__ == "__main__":
    main()
