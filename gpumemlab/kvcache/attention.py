"""paged_attention: attention over a PagedKVCache, reading K/V through the block tables.

Models what vLLM's PagedAttention kernel computes (paper §4.1, ``csrc/attention/paged_attention_v1.cu``
and ``vllm/attention/ops/paged_attn.py``): each query attends to its own sequence's tokens, which
live in non-contiguous blocks found through the block table. Here the blocks are gathered with one
index tensor (``index_select`` by block id, no Python loop per token or block) and the softmax runs in
``torch.nn.functional.scaled_dot_product_attention`` with a mask for padding and causality; the real
kernel fuses the gather into the attention loop instead of copying.
"""
from __future__ import annotations


def _check_query(q, cache):
    import torch
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor, not {type(q).__name__}")
    if q.dim() not in (3, 4):
        raise ValueError("q must be [batch, heads, head_dim] (decode) or "
                         f"[batch, q_len, heads, head_dim] (prefill), got {list(q.shape)}")
    heads, head_dim = q.shape[-2], q.shape[-1]
    if head_dim != cache.head_dim:
        raise ValueError(f"q's head_dim {head_dim} differs from the cache's {cache.head_dim}")
    if heads % cache.num_heads:
        raise ValueError(f"q's {heads} heads are not a multiple of the cache's {cache.num_heads} KV heads")


def gather_kv(cache, seqs, *, reuse_workspace: bool = False):
    """Padded K and V of ``seqs``: ``(k, v, lens)``, k and v ``[batch, padded_len, heads, head_dim]``.

    With ``reuse_workspace`` the result lives in a buffer the cache keeps for the next call (as
    vLLM keeps preallocated workspaces): touching fresh memory costs more than the copy itself.
    """
    import torch
    tables, lens = cache.block_tables_tensor(seqs)
    batch, width = tables.shape
    shape = (batch, width * cache.block_size, cache.num_heads, cache.head_dim)
    flat = tables.reshape(-1)
    if not reuse_workspace:
        return (cache.k_cache.index_select(0, flat).view(shape),
                cache.v_cache.index_select(0, flat).view(shape), lens)
    k_out, v_out = cache.workspace(flat.numel())
    torch.index_select(cache.k_cache, 0, flat, out=k_out)
    torch.index_select(cache.v_cache, 0, flat, out=v_out)
    return k_out.view(shape), v_out.view(shape), lens


def paged_attention(q, cache, seqs, *, scale=None):
    """Attention of ``q`` over the cached K/V of ``seqs`` (one query row per sequence).

    Args:
        q: ``[batch, heads, head_dim]``: the newest token of each sequence (decode); or
           ``[batch, q_len, heads, head_dim]``: the last ``q_len`` tokens of each sequence, causal
           (prefill when ``q_len`` equals the length). Their K/V must already be appended.
           Query heads may be a multiple of the cache's KV heads (grouped-query attention).
        cache: a :class:`PagedKVCache`.
        seqs: the sequence of each batch row.
        scale: softmax scale; ``1/sqrt(head_dim)`` by default, as SDPA.

    Returns:
        A tensor shaped like ``q``.
    """
    import torch
    import torch.nn.functional as F

    _check_query(q, cache)
    decode = q.dim() == 3
    q4 = q.unsqueeze(1) if decode else q                      # [b, q_len, h, d]
    batch, q_len, heads = q4.shape[0], q4.shape[1], q4.shape[2]
    if len(seqs) != batch:
        raise ValueError(f"q has {batch} rows but {len(seqs)} sequences were given")
    k, v, lens = gather_kv(cache, seqs, reuse_workspace=True)
    if int(lens.min()) < q_len:
        raise ValueError(f"q_len {q_len} exceeds the shortest sequence ({int(lens.min())} tokens); "
                         "append the queries' K/V before attending")
    k, v = k.transpose(1, 2), v.transpose(1, 2)               # [b, kv_h, L, d]
    if heads != cache.num_heads:
        group = heads // cache.num_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    keys = torch.arange(k.shape[2], device=k.device)
    if decode:
        mask = (keys[None, :] < lens[:, None])[:, None, None, :]          # [b, 1, 1, L]
        if bool(mask.all()):
            mask = None                                                   # no padding to hide
    else:
        q_pos = lens[:, None] - q_len + torch.arange(q_len, device=k.device)[None, :]   # [b, q_len]
        mask = (keys[None, None, :] <= q_pos[:, :, None])[:, None]       # causal, hides padding too
    out = F.scaled_dot_product_attention(q4.transpose(1, 2).to(k.dtype), k, v, attn_mask=mask,
                                         scale=scale)
    out = out.transpose(1, 2).to(q.dtype)                                 # [b, q_len, h, d]
    return out[:, 0] if decode else out
