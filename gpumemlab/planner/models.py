"""A GPT-style decoder built in code (no downloads), sized by its shape, for the planner's examples,
lesson and benchmark: token embedding, ``layers`` blocks of pre-norm attention and a 4x GELU MLP,
a final norm and an untied output head (the CS336 assignment's ``BasicsTransformerLM`` in spirit).

Attention is written out (``softmax(QK^T/sqrt(d)) V``, the scores materialized, as the Ultra-Scale
Playbook's activation formula assumes) unless ``attention="sdpa"`` (``F.scaled_dot_product_attention``,
whose kernel choice depends on the device). ``model.dims`` holds the shape for the cross-checks.
"""
from __future__ import annotations

import math

__all__ = ["gpt", "parameter_count"]


def gpt(*, layers: int, hidden: int, heads: int, seq: int, vocab: int = 50257,
        attention: str = "math"):
    """A decoder-only transformer; ``model(tokens)`` takes (batch, seq) int64 tokens -> logits."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    if attention not in ("math", "sdpa"):
        raise ValueError(f"attention must be 'math' or 'sdpa', not {attention!r}")

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.up = nn.Linear(hidden, 4 * hidden)
            self.down = nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(hidden, dim=-1)
            q, k, v = (t.view(b, s, heads, hidden // heads).transpose(1, 2) for t in (q, k, v))
            if attention == "sdpa":
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                scores = (q @ k.transpose(-2, -1)) / math.sqrt(hidden // heads)
                mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
                a = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, hidden))
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.pos = nn.Embedding(seq, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(hidden)
            self.head = nn.Linear(hidden, vocab, bias=False)
            self.dims = {"layers": layers, "hidden": hidden, "heads": heads, "seq": seq,
                         "vocab": vocab}

        def forward(self, tokens):
            pos = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.embed(tokens) + self.pos(pos)
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    return GPT()


def parameter_count(*, layers: int, hidden: int, seq: int, vocab: int = 50257, **_) -> int:
    """The parameters ``gpt(...)`` makes, by hand: per block 2 norms (2h each), qkv (3h^2 + 3h),
    proj (h^2 + h), up (4h^2 + 4h), down (4h^2 + h); plus embeddings, final norm, head."""
    h = hidden
    block = 2 * 2 * h + (3 * h * h + 3 * h) + (h * h + h) + (4 * h * h + 4 * h) + (4 * h * h + h)
    return layers * block + vocab * h + seq * h + 2 * h + vocab * h
