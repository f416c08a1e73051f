"""Lesson 07's model: a small decoder-style language model (embedding, attention and MLP blocks
with layer norms, an output head) whose training step is recorded on the CPU with
``gml.capture`` and replayed on the simulated GPU. It lives here, not in the notebook, so that
the lesson and the checker of its exercise (``lessons/activations.py``) record the very
same step. ``ckpt=True`` wraps each block in ``torch.utils.checkpoint.checkpoint(...,
use_reentrant=False)``. Weights are random and seeded: memory does not depend on what the model
has learned. Importing this module imports torch.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from gpumemlab.recordings.capture import capture

VOCAB, D_MODEL, HEADS, LAYERS = 1000, 128, 4, 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
        self.attn = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(D_MODEL, 4 * D_MODEL), nn.GELU(), nn.Linear(4 * D_MODEL, D_MODEL))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, ckpt=False):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(D_MODEL, VOCAB)
        self.ckpt = ckpt

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.ckpt else block(x)
        return self.head(x)


@functools.lru_cache(maxsize=64)
def record_step(batch, seq=64, ckpt=False):
    """One training step (forward, loss, backward, Adam step) recorded with gml.capture; kept per
    (batch, seq, ckpt), since a recording is only read afterwards."""
    torch.manual_seed(0)
    model = TinyLM(ckpt)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, VOCAB, (batch, seq + 1))
    with capture(model, opt, frames=False) as rec:
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del logits, loss
    return rec
