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
    def __init__(self, need_weights=False):
        super().__init__()
        self.need_weights = need_weights
        self.ln1, self.ln2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
        self.attn = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(D_MODEL, 4 * D_MODEL), nn.GELU(), nn.Linear(4 * D_MODEL, D_MODEL))

    def forward(self, x):
        h = self.ln1(x)
        # need_weights=False lets MultiheadAttention run fused attention (scaled_dot_product_
        # attention): no sequence x sequence matrix is kept. True computes softmax(QK^T) itself.
        x = x + self.attn(h, h, h, need_weights=self.need_weights)[0]
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, ckpt=False, need_weights=False):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.blocks = nn.ModuleList(Block(need_weights) for _ in range(LAYERS))
        self.head = nn.Linear(D_MODEL, VOCAB)
        self.ckpt = ckpt

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.ckpt else block(x)
        return self.head(x)


@functools.lru_cache(maxsize=64)
def record_step(batch, seq=64, ckpt=False, need_weights=False):
    """One training step (forward, loss, backward, Adam step) recorded with gml.capture; kept per
    (batch, seq, ckpt, need_weights), since a recording is only read afterwards."""
    torch.manual_seed(0)
    model = TinyLM(ckpt, need_weights)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, VOCAB, (batch, seq + 1))
    with capture(model, opt, frames=False) as rec:
        rec.set_memory_metadata("forward")      # phase marks: compared timelines line them up
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        rec.set_memory_metadata("backward")
        loss.backward()
        rec.set_memory_metadata("optimizer step")
        opt.step()
        opt.zero_grad(set_to_none=True)
        rec.set_memory_metadata("")
        del logits, loss
    return rec


def step_flops(batch=8, seq=64, ckpt=False, early_stop=True) -> dict:
    """Floating-point operations of one forward and backward, counted by
    ``torch.utils.flop_counter.FlopCounterMode`` (matrix products): {"step": the whole step,
    "blocks_forward": the blocks' forward pass alone}. Counted, so the same on every machine.
    ``early_stop=False`` turns off ``torch.utils.checkpoint.set_checkpoint_early_stop``: by default
    non-reentrant checkpointing stops recomputing a block once every saved tensor is back."""
    from torch.utils.checkpoint import set_checkpoint_early_stop
    from torch.utils.flop_counter import FlopCounterMode
    torch.manual_seed(0)
    model = TinyLM(ckpt)
    tokens = torch.randint(0, VOCAB, (batch, seq + 1))
    with FlopCounterMode(display=False) as counter:
        logits = model(tokens[:, :-1])
    blocks = sum(sum(v.values()) for k, v in counter.get_flop_counts().items()
                 if k.count(".") == 2 and k.startswith("TinyLM.blocks."))
    with FlopCounterMode(display=False) as counter, set_checkpoint_early_stop(early_stop):
        logits = model(tokens[:, :-1])
        F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1)).backward()
    return {"step": counter.get_total_flops(), "blocks_forward": blocks}
