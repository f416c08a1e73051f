"""PagedKVCache and paged_attention against SDPA on the equivalent contiguous tensors."""
import random

import pytest
import torch
import torch.nn.functional as F

from gpumemlab.kvcache import NoFreeBlocksError, PagedKVCache, paged_attention


def _fill(cache, seqs_lens, gen, chunk=5):
    """Append in interleaved chunks so that each sequence's blocks are scattered in the pool."""
    ref = {s: ([], []) for s in seqs_lens}
    left = dict(seqs_lens)
    while any(left.values()):
        for s in seqs_lens:
            n = min(chunk, left[s])
            if n:
                k = torch.randn(n, cache.num_heads, cache.head_dim, generator=gen, dtype=torch.float64)
                v = torch.randn(n, cache.num_heads, cache.head_dim, generator=gen, dtype=torch.float64)
                cache.append(s, k, v)
                ref[s][0].append(k)
                ref[s][1].append(v)
                left[s] -= n
    return {s: (torch.cat(k), torch.cat(v)) for s, (k, v) in ref.items()}


def test_append_and_gather_round_trip_through_scattered_blocks():
    gen = torch.Generator().manual_seed(0)
    cache = PagedKVCache(64, 4, 2, 8, dtype=torch.float64)
    ref = _fill(cache, {"a": 13, "b": 7, "c": 20}, gen, chunk=3)
    table = cache.block_table("a")
    assert any(b - a != 1 for a, b in zip(table, table[1:]))            # really scattered
    for s, (k, v) in ref.items():
        gk, gv = cache.gather(s)
        assert torch.equal(gk, k) and torch.equal(gv, v)
    # 13, 7 and 20 tokens in blocks of 4 take 4 + 2 + 5 blocks
    assert cache.num_free_blocks == 64 - 11


@pytest.mark.parametrize("case", range(12))
def test_decode_attention_matches_sdpa(case):
    rnd = random.Random(case)
    gen = torch.Generator().manual_seed(case)
    block_size = rnd.choice([1, 2, 3, 8, 16])
    kv_heads, group, head_dim = rnd.choice([1, 2, 4]), rnd.choice([1, 2]), rnd.choice([4, 8, 16])
    lens = {f"s{i}": rnd.randint(1, 40) for i in range(rnd.randint(1, 5))}
    blocks = sum(-(-n // block_size) for n in lens.values()) + 3
    cache = PagedKVCache(blocks, block_size, kv_heads, head_dim, dtype=torch.float64)
    ref = _fill(cache, lens, gen, chunk=rnd.randint(1, 7))
    seqs = list(lens)
    q = torch.randn(len(seqs), kv_heads * group, head_dim, generator=gen, dtype=torch.float64)
    out = paged_attention(q, cache, seqs)
    for i, s in enumerate(seqs):
        k, v = (t.transpose(0, 1).repeat_interleave(group, 0) for t in ref[s])   # [h, L, d]
        expected = F.scaled_dot_product_attention(q[i][:, None], k, v)[:, 0]
        torch.testing.assert_close(out[i], expected)


@pytest.mark.parametrize("case", range(6))
def test_prefill_attention_matches_causal_sdpa(case):
    rnd = random.Random(100 + case)
    gen = torch.Generator().manual_seed(case)
    block_size, heads, head_dim = rnd.choice([2, 4, 16]), 2, 8
    lens = {i: rnd.randint(6, 30) for i in range(3)}
    q_len = rnd.randint(1, 6)
    cache = PagedKVCache(60, block_size, heads, head_dim, dtype=torch.float64)
    ref = _fill(cache, lens, gen)
    q = torch.randn(3, q_len, heads, head_dim, generator=gen, dtype=torch.float64)
    out = paged_attention(q, cache, list(lens))
    for i, s in enumerate(lens):
        k, v = (t.transpose(0, 1) for t in ref[s])
        n = lens[s]
        # query j sits at position n - q_len + j and sees keys up to it
        mask = torch.arange(n)[None, :] <= (n - q_len + torch.arange(q_len))[:, None]
        expected = F.scaled_dot_product_attention(q[i].transpose(0, 1), k, v, attn_mask=mask)
        torch.testing.assert_close(out[i], expected.transpose(0, 1))
    # a full prefill (q_len == length) equals SDPA's own causal mode
    cache2 = PagedKVCache(20, 4, heads, head_dim, dtype=torch.float64)
    ref2 = _fill(cache2, {"x": 10}, gen)
    qx = torch.randn(1, 10, heads, head_dim, generator=gen, dtype=torch.float64)
    k, v = (t.transpose(0, 1) for t in ref2["x"])
    expected = F.scaled_dot_product_attention(qx[0].transpose(0, 1), k, v, is_causal=True)
    torch.testing.assert_close(paged_attention(qx, cache2, ["x"])[0], expected.transpose(0, 1))


def test_fork_copy_on_write_keeps_parent_data_and_shares_full_blocks():
    gen = torch.Generator().manual_seed(1)
    cache = PagedKVCache(16, 4, 1, 4, dtype=torch.float64)
    ref = _fill(cache, {"parent": 6}, gen)
    cache.fork("parent", "child")
    used = cache.num_blocks - cache.num_free_blocks
    k1, v1 = torch.ones(1, 1, 4, dtype=torch.float64), torch.zeros(1, 1, 4, dtype=torch.float64)
    cache.append("child", k1, v1)
    assert cache.num_blocks - cache.num_free_blocks == used + 1          # one copied block
    assert cache.block_table("child")[0] == cache.block_table("parent")[0]
    pk, _ = cache.gather("parent")
    ck, _ = cache.gather("child")
    assert torch.equal(pk, ref["parent"][0])                            # parent untouched
    assert torch.equal(ck[:6], ref["parent"][0]) and torch.equal(ck[6], k1[0])
    usage = cache.memory_usage()
    assert usage["shared_saving_bytes"] == cache.block_nbytes           # block 0 is held once
    assert usage["token_bytes"] == (6 + 1 + 2) * cache.block_nbytes // 4  # p:6, child's copy: 2+1


def test_prefix_sharing_and_free():
    gen = torch.Generator().manual_seed(2)
    cache = PagedKVCache(12, 4, 1, 4)
    prefix_k, prefix_v = torch.randn(9, 1, 4, generator=gen), torch.randn(9, 1, 4, generator=gen)
    cache.add_prefix("system", prefix_k, prefix_v)
    for r in range(3):
        cache.fork("system", r)
        cache.append(r, torch.randn(2, 1, 4, generator=gen), torch.randn(2, 1, 4, generator=gen))
    # prefix: 3 blocks; each request copies the partial block (1 token + 2 new) = 1 block each
    assert cache.num_free_blocks == 12 - 3 - 3
    with pytest.raises(ValueError, match="shared prefix"):
        cache.append("system", prefix_k[:1], prefix_v[:1])
    for r in range(3):
        cache.free(r)
    cache.free("system")
    assert cache.num_free_blocks == 12


def test_full_cache_raises_and_bad_input_is_named():
    cache = PagedKVCache(2, 4, 1, 4)
    cache.append("a", torch.zeros(8, 1, 4), torch.zeros(8, 1, 4))
    with pytest.raises(NoFreeBlocksError):
        cache.append("a", torch.zeros(1, 4), torch.zeros(1, 4))
    with pytest.raises(ValueError, match="shaped"):
        cache.append("b", torch.zeros(3, 2, 4), torch.zeros(3, 2, 4))
    with pytest.raises(TypeError, match="torch.Tensor"):
        cache.append("b", [0.0], [0.0])
    with pytest.raises(ValueError, match="multiple"):
        paged_attention(torch.zeros(1, 3, 4), PagedKVCache(2, 4, 2, 4), ["x"])
    with pytest.raises(ValueError, match="holds no block"):
        PagedKVCache.from_memory(100, 16, 8, 64)
    assert PagedKVCache.from_memory("1MiB", 16, 8, 64).num_blocks == 1024 * 1024 // (2 * 16 * 8 * 64 * 4)
