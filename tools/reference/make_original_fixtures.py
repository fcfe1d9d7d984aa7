"""Checkpoints in the original Transformer-XL training code's layout, for `txl convert`.

The original PyTorch code (kimiyoung/transformer-xl, `pytorch/`, commit
81b1b1955b5729b311e1548998eb2a89cb528178) saves `torch.save(model, f)`: the whole
`MemTransformerLM` module, pickled by class name. This script rebuilds that layout with the
classes in `original_layout/` (written from the layout, not copied), fills them with the
weights of Hugging Face fixtures in `tests/fixtures/`, and writes under
`tests/fixtures/original/<model>/`:

    model.pt             torch.save(model)                     (ZIP, PyTorch >= 1.6)
    model_legacy.pt      the same in the legacy stream format  (adaptive_div2 only)
    state_dict.pt        torch.save(model.state_dict())
    foreign_class.pt     model.pt with one module of a class the original code does not use
    ext_len.pt           model.pt saved with ext_len 16         (no_mem only)
    attn_type.pt         model.pt saved with attn_type 2        (no_mem only)
    missing_tensor.pt    model.pt without crit.cluster_bias     (adaptive_div2 only)

The weights map to the original key names by dropping Hugging Face's `transformer.` prefix,
except for one difference in meaning: the original `ProjectedAdaptiveLogSoftmax` scores tail
cluster i with head column -i (the last row of `cluster_weight` is cluster 1), while Hugging
Face scores it with column cutoffs[0] + i - 1 (the first row is cluster 1). So the rows of
`crit.cluster_weight` and `crit.cluster_bias` are written in reverse order, and the script
checks, with its own few lines of the original's head indexing against Hugging Face's
`forward`, that the reversed weights give Hugging Face's log-probabilities exactly.

Run as the last step of `regenerate.sh`, or alone by `regenerate_original.sh` (the HF fixtures
must exist).
"""

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "original_layout"))

from mem_transformer import MemTransformerLM  # noqa: E402

FIXTURES = HERE.parent.parent / "tests" / "fixtures"
OUT = FIXTURES / "original"

# (HF fixture, extra files). adaptive_div2: adaptive, div_val 2, two tail clusters (the
# reversal matters), post-LayerNorm. full_softmax_long: full softmax, pre-LayerNorm.
# no_mem: adaptive with div_val 1 (cutoffs not in the tensor shapes), no memory.
MODELS = [
    ("adaptive_div2", ["model_legacy.pt", "missing_tensor.pt"]),
    ("full_softmax_long", []),
    ("no_mem", ["foreign_class.pt", "ext_len.pt", "attn_type.pt"]),
]


def build(config: dict) -> MemTransformerLM:
    """A MemTransformerLM with the HF config's hyper-parameters (the original names)."""
    assert config["untie_r"] is False, "the original code shares r_w_bias / r_r_bias"
    clamp_len = config["clamp_len"] if config["clamp_len"] > 0 else -1
    return MemTransformerLM(
        config["vocab_size"], config["n_layer"], config["n_head"], config["d_model"],
        config["d_head"], config["d_inner"], dropout=0.0, dropatt=0.0,
        tie_weight=config["tie_word_embeddings"], d_embed=config["d_embed"],
        div_val=config["div_val"], tie_projs=config["tie_projs"], pre_lnorm=config["pre_lnorm"],
        tgt_len=config["tgt_len"], ext_len=0, mem_len=config["mem_len"],
        cutoffs=config["cutoffs"], same_length=config["same_length"], attn_type=0,
        clamp_len=clamp_len, sample_softmax=-1,
    )


def hf_tensor(hf: dict, name: str):
    """The HF tensor for original name `name`, or None when HF keeps only its tied copy."""
    if name.startswith("crit."):
        tensor = hf.get(name)
        if tensor is not None and name in ("crit.cluster_weight", "crit.cluster_bias"):
            tensor = tensor.flip(0)  # HF row i-1 is original row n_clusters - i
        return tensor
    return hf["transformer." + name]


def fill(model: MemTransformerLM, hf: dict) -> None:
    filled = set()
    with torch.no_grad():
        for name, param in model.named_parameters(remove_duplicate=False):
            tensor = hf_tensor(hf, name)
            if tensor is None:
                continue
            assert tuple(param.shape) == tuple(tensor.shape), name
            param.copy_(tensor)
            filled.add(id(param))
    missing = [n for n, p in model.named_parameters(remove_duplicate=False) if id(p) not in filled]
    assert not missing, f"no HF weights for {missing}"


def original_head_logprob(model: MemTransformerLM, hidden: torch.Tensor) -> torch.Tensor:
    """Full log-probabilities as the original ProjectedAdaptiveLogSoftmax scores them: tail
    cluster i (1-based) takes head column -i."""
    crit = model.crit
    cutoff_ends = crit.cutoff_ends

    def logits(h, weight, bias, proj):
        if proj is not None:
            h = h @ proj
        return h @ weight.t() + bias

    def layer(i):
        if crit.div_val == 1:
            lo, hi = cutoff_ends[i], cutoff_ends[i + 1]
            return crit.out_layers[0].weight[lo:hi], crit.out_layers[0].bias[lo:hi]
        return crit.out_layers[i].weight, crit.out_layers[i].bias

    def proj(i):
        return crit.out_projs[i] if len(crit.out_projs) > i else None

    if crit.n_clusters == 0:
        return torch.log_softmax(logits(hidden, *layer(0), proj(0)), dim=-1)
    w0, b0 = layer(0)
    head = torch.log_softmax(
        logits(hidden, torch.cat([w0, crit.cluster_weight]), torch.cat([b0, crit.cluster_bias]), proj(0)),
        dim=-1,
    )
    parts = [head[:, : crit.shortlist_size]]
    for i in range(1, crit.n_clusters + 1):
        tail = torch.log_softmax(logits(hidden, *layer(i), proj(i)), dim=-1)
        parts.append(head[:, -i, None] + tail)
    return torch.cat(parts, dim=-1)


def check_against_hf(name: str, model: MemTransformerLM) -> None:
    from transformers import TransfoXLLMHeadModel

    hf = TransfoXLLMHeadModel.from_pretrained(str(FIXTURES / name), use_safetensors=True).eval()
    hidden = torch.randn(7, model.d_model, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = hf.crit(hidden)  # labels=None: every log-probability, by `forward`
        got = original_head_logprob(model, hidden)
    difference = (expected - got).abs().max().item()
    assert difference < 1e-5, f"{name}: the original head indexing differs from HF's by {difference}"
    line = f"{name}: original head indexing, reversed cluster rows: HF forward to {difference:.1e}"
    if model.crit.n_clusters > 1:
        # The check can fail: with the rows left in HF's order the log-probabilities differ.
        with torch.no_grad():
            model.crit.cluster_weight.copy_(model.crit.cluster_weight.flip(0))
            model.crit.cluster_bias.copy_(model.crit.cluster_bias.flip(0))
            unreversed = (expected - original_head_logprob(model, hidden)).abs().max().item()
            model.crit.cluster_weight.copy_(model.crit.cluster_weight.flip(0))
            model.crit.cluster_bias.copy_(model.crit.cluster_bias.flip(0))
        assert unreversed > 1e-3, f"{name}: the cluster order does not matter ({unreversed})"
        line += f" (rows not reversed: off by {unreversed:.2f})"
    print(line)


def main() -> None:
    torch.manual_seed(0)
    for name, extras in MODELS:
        config = json.loads((FIXTURES / name / "config.json").read_text())
        hf = load_file(str(FIXTURES / name / "model.safetensors"))
        model = build(config)
        fill(model, hf)
        model.eval()
        check_against_hf(name, model)
        out = OUT / name
        out.mkdir(parents=True, exist_ok=True)
        torch.save(model, out / "model.pt")
        torch.save(model.state_dict(), out / "state_dict.pt")
        if "model_legacy.pt" in extras:
            torch.save(model, out / "model_legacy.pt", _use_new_zipfile_serialization=False)
        if "missing_tensor.pt" in extras:
            broken = build(config)
            fill(broken, hf)
            del broken.crit._parameters["cluster_bias"]
            torch.save(broken, out / "missing_tensor.pt")
        if "foreign_class.pt" in extras:
            foreign = build(config)
            fill(foreign, hf)
            foreign.layers[0].pos_ff.CoreNet[1] = torch.nn.GELU()
            torch.save(foreign, out / "foreign_class.pt")
        for attribute, value in [("ext_len", 16), ("attn_type", 2)]:
            if f"{attribute}.pt" in extras:
                # Only the attribute differs: txl must refuse it by the setting's name.
                setattr(model, attribute, value)
                torch.save(model, out / f"{attribute}.pt")
                setattr(model, attribute, 0)
        sizes = ", ".join(f"{p.name} {p.stat().st_size}" for p in sorted(out.iterdir()))
        print(f"wrote {out}: {sizes}")


if __name__ == "__main__":
    main()
