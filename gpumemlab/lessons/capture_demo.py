"""A small transformer language model built in code, and one training step, for capture demos.

No downloads: the weights are random (seeded). Sizes are small so a CPU step takes well under a
second, yet it has what a real step has: embeddings, attention, MLPs, layer norms, a loss, a
backward pass and an Adam step (optimizer state appears on the first step).
"""
from __future__ import annotations

__all__ = ["tiny_transformer", "train_step"]


def tiny_transformer(vocab: int = 512, d_model: int = 128, n_layers: int = 2, n_heads: int = 4,
                     seq_len: int = 64, seed: int = 0):
    """Return ``(model, optimizer)``: a decoder-only transformer and its Adam optimizer."""
    import torch
    from torch import nn

    torch.manual_seed(seed)

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.seq_len = seq_len
            self.embed = nn.Embedding(vocab, d_model)
            self.pos = nn.Parameter(torch.zeros(seq_len, d_model))
            layer = nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab, bias=False)

        def forward(self, tokens):
            t = tokens.shape[1]
            mask = nn.Transformer.generate_square_subsequent_mask(t)
            x = self.embed(tokens) + self.pos[:t]
            x = self.blocks(x, mask=mask, is_causal=True)
            return self.head(self.norm(x))

    model = TinyLM()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    return model, optimizer


def train_step(model, optimizer, batch_size: int = 8, seed: int = 0):
    """One step: make a random batch, forward, cross-entropy loss, backward, Adam step, zero_grad."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(seed)
    vocab = model.embed.num_embeddings
    tokens = torch.randint(0, vocab, (batch_size, model.seq_len + 1), generator=g)
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()
