"""The module tree that the original Transformer-XL training code pickles.

`torch.save(model, f)` in the original `pytorch/train.py` (kimiyoung/transformer-xl,
commit 81b1b1955b5729b311e1548998eb2a89cb528178) pickles a `MemTransformerLM` by class name
(`mem_transformer.MemTransformerLM`) with each module's `__dict__`: its attributes, its
parameters and its children. These classes are written here from that layout alone, to make
checkpoints that `txl convert` must read: the same module name, class names, attribute names
(set in the same order) and module tree, and nothing else. They have no forward pass.

Only what `attn_type` 0 builds is here, plus the classes of the other attention types as
bare names (a checkpoint of those must be refused by name of its attention type, not of an
unknown class).
"""

import torch
import torch.nn as nn

from proj_adaptive_softmax import ProjectedAdaptiveLogSoftmax


class PositionalEmbedding(nn.Module):
    def __init__(self, demb):
        super().__init__()
        self.demb = demb
        inv_freq = 1 / (10000 ** (torch.arange(0.0, demb, 2.0) / demb))
        self.register_buffer("inv_freq", inv_freq)


class PositionwiseFF(nn.Module):
    def __init__(self, d_model, d_inner, dropout, pre_lnorm=False):
        super().__init__()
        self.d_model = d_model
        self.d_inner = d_inner
        self.dropout = dropout
        self.CoreNet = nn.Sequential(
            nn.Linear(d_model, d_inner),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
            nn.Linear(d_inner, d_model),
            nn.Dropout(dropout),
        )
        self.layer_norm = nn.LayerNorm(d_model)
        self.pre_lnorm = pre_lnorm


class RelMultiHeadAttn(nn.Module):
    def __init__(self, n_head, d_model, d_head, dropout, dropatt=0, tgt_len=None, ext_len=None,
                 mem_len=None, pre_lnorm=False):
        super().__init__()
        self.n_head = n_head
        self.d_model = d_model
        self.d_head = d_head
        self.dropout = dropout
        self.qkv_net = nn.Linear(d_model, 3 * n_head * d_head, bias=False)
        self.drop = nn.Dropout(dropout)
        self.dropatt = nn.Dropout(dropatt)
        self.o_net = nn.Linear(n_head * d_head, d_model, bias=False)
        self.layer_norm = nn.LayerNorm(d_model)
        self.scale = 1 / (d_head ** 0.5)
        self.pre_lnorm = pre_lnorm


class RelPartialLearnableMultiHeadAttn(RelMultiHeadAttn):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.r_net = nn.Linear(self.d_model, self.n_head * self.d_head, bias=False)


class RelPartialLearnableDecoderLayer(nn.Module):
    def __init__(self, n_head, d_model, d_head, d_inner, dropout, **kwargs):
        super().__init__()
        self.dec_attn = RelPartialLearnableMultiHeadAttn(n_head, d_model, d_head, dropout, **kwargs)
        self.pos_ff = PositionwiseFF(d_model, d_inner, dropout, pre_lnorm=kwargs.get("pre_lnorm"))


class RelLearnableDecoderLayer(nn.Module):
    """attn_type 1 (Shaw et al.): named only."""


class DecoderLayer(nn.Module):
    """attn_type 2 and 3 (absolute positions): named only."""


class AdaptiveEmbedding(nn.Module):
    def __init__(self, n_token, d_embed, d_proj, cutoffs, div_val=1):
        super().__init__()
        self.n_token = n_token
        self.d_embed = d_embed
        self.cutoffs = cutoffs + [n_token]
        self.div_val = div_val
        self.d_proj = d_proj
        self.emb_scale = d_proj ** 0.5
        self.cutoff_ends = [0] + self.cutoffs
        self.emb_layers = nn.ModuleList()
        self.emb_projs = nn.ParameterList()
        if div_val == 1:
            self.emb_layers.append(nn.Embedding(n_token, d_embed))
            if d_proj != d_embed:
                self.emb_projs.append(nn.Parameter(torch.zeros(d_proj, d_embed)))
        else:
            for i in range(len(self.cutoffs)):
                rows = self.cutoff_ends[i + 1] - self.cutoff_ends[i]
                width = d_embed // (div_val ** i)
                self.emb_layers.append(nn.Embedding(rows, width))
                self.emb_projs.append(nn.Parameter(torch.zeros(d_proj, width)))


class MemTransformerLM(nn.Module):
    def __init__(self, n_token, n_layer, n_head, d_model, d_head, d_inner, dropout, dropatt,
                 tie_weight=True, d_embed=None, div_val=1, tie_projs=(False,), pre_lnorm=False,
                 tgt_len=None, ext_len=None, mem_len=None, cutoffs=(), same_length=False,
                 attn_type=0, clamp_len=-1, sample_softmax=-1):
        super().__init__()
        cutoffs = list(cutoffs)
        self.n_token = n_token
        d_embed = d_model if d_embed is None else d_embed
        self.d_embed = d_embed
        self.d_model = d_model
        self.n_head = n_head
        self.d_head = d_head
        self.word_emb = AdaptiveEmbedding(n_token, d_embed, d_model, cutoffs, div_val=div_val)
        self.drop = nn.Dropout(dropout)
        self.n_layer = n_layer
        self.tgt_len = tgt_len
        self.mem_len = mem_len
        self.ext_len = ext_len
        self.max_klen = tgt_len + ext_len + mem_len
        self.attn_type = attn_type
        self.layers = nn.ModuleList()
        for _ in range(n_layer):
            self.layers.append(RelPartialLearnableDecoderLayer(
                n_head, d_model, d_head, d_inner, dropout, tgt_len=tgt_len, ext_len=ext_len,
                mem_len=mem_len, dropatt=dropatt, pre_lnorm=pre_lnorm))
        self.sample_softmax = sample_softmax
        self.crit = ProjectedAdaptiveLogSoftmax(n_token, d_embed, d_model, cutoffs, div_val=div_val)
        # Tied weights are one Parameter under two names, as the original assigns them.
        if tie_weight:
            for i in range(len(self.crit.out_layers)):
                self.crit.out_layers[i].weight = self.word_emb.emb_layers[i].weight
        for i, tied in enumerate(tie_projs):
            if tied and div_val == 1 and d_model != d_embed:
                self.crit.out_projs[i] = self.word_emb.emb_projs[0]
            elif tied and div_val != 1:
                self.crit.out_projs[i] = self.word_emb.emb_projs[i]
        self.same_length = same_length
        self.clamp_len = clamp_len
        self.pos_emb = PositionalEmbedding(self.d_model)
        self.r_w_bias = nn.Parameter(torch.zeros(self.n_head, self.d_head))
        self.r_r_bias = nn.Parameter(torch.zeros(self.n_head, self.d_head))
