# %% [markdown]
# # 08 · Paged KV caches: fragmentation in inference, and the OS fix
#
# A language model generating text keeps, for every layer, the **keys and values** (K/V) of every
# token seen so far, so that each new token attends to them without recomputing. That **KV cache**
# grows by one token per step per request, and nobody knows in advance how long a request will
# run. Serving many chat requests at once is therefore a memory-allocation problem, and before
# 2023 most servers solved it badly: each request got one **contiguous** buffer sized for the
# longest possible answer.
#
# vLLM's **PagedAttention** (Kwon et al., SOSP 2023) applies the operating system's answer:
# store the KV cache in fixed-size **pages** (blocks of, by default, 16 tokens), give each request
# a **block table** that maps its logical token positions to physical blocks anywhere in memory,
# take a block only when the previous one is full, and let requests **share** blocks
# (copy-on-write) when they have a common prefix. This notebook measures each part.

# %%
# Which device does this notebook run on?
try:
    import gpumemlab as gml
except ImportError:  # a clone without `pip install -e .`: use the package next to notebooks/
    import pathlib, sys
    sys.path.insert(0, str(pathlib.Path.cwd().parent))
    import gpumemlab as gml
# %matplotlib inline
import torch
torch.set_num_threads(1)
kv = gml.kvcache
gpu = gml.device()
print(gpu.describe())
print("real GPU" if gpu.kind == "cuda" else "simulated GPU (no CUDA device here, or GPUMEMLAB_DEVICE=sim)")

# %% [markdown]
# ## How big is a KV cache?
#
# Per token: 2 (K and V) × layers × KV heads × head size × bytes per number. OPT-13B has 40
# layers, 40 heads of 128 numbers, in float16 (2 bytes).

# %% tags=["predict"]
gml.predict("08.p1", "How much KV cache does OPT-13B need per token?")

# %%
opt = kv.model_shape("opt-13b")
per_token = opt.kv_bytes_per_token
print(f"{opt.name}: {opt.num_layers} layers, {opt.num_kv_heads} KV heads of {opt.head_dim}, {opt.dtype}")
print(f"KV cache per token: {gml.format_size(per_token)}; one request of {opt.max_seq_len} tokens: "
      f"{gml.format_size(per_token * opt.max_seq_len)}")
gml.reveal("08.p1", per_token)
for name in ("llama-2-7b", "llama-3-8b", "mistral-7b"):
    shape = kv.model_shape(name)
    print(f"  {shape.name:30} {gml.format_size(shape.kv_bytes_per_token):>12} per token")

# %% tags=["check"] jupyter={"source_hidden": true}
assert per_token == 2 * opt.num_layers * opt.num_kv_heads * opt.head_dim * 2

# %% [markdown]
# ## Contiguous reservations through a caching allocator
#
# `kv.simulate` serves a seeded stream of chat-like requests (lengths drawn to resemble ShareGPT
# conversations) with 12 GiB of KV memory for OPT-13B, as in the paper's setup on an A100-40GB.
# The contiguous strategies place each request's buffer with the **simulated caching allocator**
# of the earlier notebooks, so their external fragmentation is the real thing:
#
# * **Static (FasterTransformer-like)**: fixed batches, every request reserves the maximum length;
# * **Orca (Max)**: continuous batching, maximum-length reservations;
# * **Orca (Pow2)**: reserves the true length rounded up to a power of two;
# * **Orca (Oracle)**: reserves exactly the true length (it knows the future);
# * **vLLM (paged)**: 16-token blocks on demand, nothing reserved.
#
# Memory is split the way the paper's Fig. 2 does: **token states** (K/V of tokens that exist),
# **reserved** (slots held for tokens the request will produce later), **internal fragmentation**
# (slots it will never use), and **external fragmentation & others** (memory between buffers that
# no request can use).

# %% tags=["predict"]
gml.predict("08.p2", "Served paged (vLLM), what percentage of the KV memory holds real token states on average?",
            kind="number", unit="%")

# %%
workload = kv.sharegpt_like(400, seed=0)
print(workload.describe())
results = {s: kv.simulate(s, workload, "12GiB", model="opt-13b") for s in kv.STRATEGIES}
print(f"{'strategy':22}{'tokens':>9}{'reserved':>10}{'internal':>10}{'ext.+other':>12}{'mean batch':>12}")
for s, r in results.items():
    sh = r.shares
    print(f"{r.label:22}{100 * sh['token_states']:8.1f}%{100 * sh['reserved']:9.1f}%"
          f"{100 * sh['internal_fragmentation']:9.1f}%"
          f"{100 * (sh['external_fragmentation'] + sh['unused']):11.1f}%{r.mean_batch_size:12.2f}")
gml.reveal("08.p2", round(100 * results["paged"].token_states, 1))

# %% tags=["check"] jupyter={"source_hidden": true}
assert results["paged"].token_states > 0.9
assert max(r.token_states for s, r in results.items() if s != "paged") < 0.6
assert results["paged"].mean_batch_size > 1.5 * results["orca-oracle"].mean_batch_size

# %% [markdown]
# Reading the table: with maximum-length reservations most of the memory holds nothing, so few
# requests fit at once (mean batch). Even the oracle, which wastes no slot on purpose, loses
# memory to reservations and to gaps between buffers. Paged memory keeps almost all of it busy
# with real token states, so several times more requests run concurrently: that is where the
# 2-4× throughput gains the vLLM paper reports come from. The price is **preemption**: when blocks run out, vLLM evicts a
# request and recomputes it later.

# %%
comparison = kv.compare(0, num_requests=400, sharing_requests=20, workloads=("sharegpt",))
print(comparison.breakdown_table("sharegpt"))

# %%
fig = comparison.figure("sharegpt")
fig

# %% [markdown]
# The second numbers are the paper's (Fig. 2), measured on the real ShareGPT trace with real
# servers; ours come from a synthetic ShareGPT-like workload and a simplified server. The cell
# below prints where they agree and where they do not.

# %%
from gpumemlab.kvcache import paper
ours = {s: r for (w, s), r in comparison.results.items() if w == "sharegpt"}
order_ours = sorted(paper.FIG2_BREAKDOWN, key=lambda s: ours[s].shares["token_states"])
order_paper = sorted(paper.FIG2_BREAKDOWN, key=lambda s: paper.FIG2_BREAKDOWN[s]["token_states"])
print("token-state share, lowest first: ours", order_ours, "| paper", order_paper)
for s in ("orca-pow2", "orca-oracle"):
    sh, ref = ours[s].shares, paper.FIG2_BREAKDOWN[s]
    ext = 100 * (sh["external_fragmentation"] + sh["unused"])
    print(f"{s:12}: external + others {ext:4.1f} % (paper {ref['external_and_others']:4.1f} %), "
          f"token states {100 * sh['token_states']:4.1f} % (paper {ref['token_states']:4.1f} %), "
          f"reserved {100 * sh['reserved']:4.1f} % (paper {ref['reserved']:4.1f} %)")

# %% [markdown]
# The ordering of the strategies is the paper's, and Orca (Max)'s breakdown is close to it. The
# external fragmentation of Orca (Pow2) and Orca (Oracle) is not: ours is about a quarter to a
# third of the paper's 41.6 % and 36.6 % (the numbers above), and the difference went into token
# states and reserved slots. Our server places every buffer with the simulated caching allocator,
# whose best fit reuses the freed buffers of finished requests, and it admits the first waiting
# request (first come, first served) as soon as the allocator can place its buffer; the paper's
# bar also holds "others", which it does not break down. So the kit reproduces why paging wins (internal fragmentation and reservations), not the
# size of the paper's external fragmentation.
#
# ## A paged KV cache in torch
#
# `kv.PagedKVCache` holds real K/V tensors in pools of blocks (`[num_blocks, block_size, heads,
# head_dim]`) with a block manager: a free list, a block table per sequence, reference counts.
# Three sequences of different lengths:

# %%
HEADS, HEAD_DIM, BLOCK = 4, 32, 16
chat_cache = kv.PagedKVCache(num_blocks=32, block_size=BLOCK, num_heads=HEADS, head_dim=HEAD_DIM)
g = torch.Generator().manual_seed(0)
lengths = {"chat-a": 5, "chat-b": 40, "chat-c": 17}
contiguous = {}
for seq, n in lengths.items():
    k = torch.randn(n, HEADS, HEAD_DIM, generator=g)
    v = torch.randn(n, HEADS, HEAD_DIM, generator=g)
    chat_cache.append(seq, k, v)
    contiguous[seq] = (k, v)
for seq in lengths:
    print(f"{seq}: {chat_cache.seq_len(seq):3} tokens -> blocks {chat_cache.block_table(seq)}")
chat_usage = chat_cache.memory_usage()
print({k: gml.format_size(v) for k, v in chat_usage.items()})

# %% tags=["check"] jupyter={"source_hidden": true}
# each sequence wastes at most one partly filled block
assert chat_usage["internal_fragmentation_bytes"] < len(lengths) * chat_cache.block_nbytes
assert chat_usage["used_bytes"] == sum(-(-n // BLOCK) for n in lengths.values()) * chat_cache.block_nbytes

# %% [markdown]
# Attention reads K/V through the block tables (`kv.paged_attention`). It must give the same
# answer as ordinary attention over contiguous K/V (`torch.nn.functional.scaled_dot_product_attention`):

# %%
import torch.nn.functional as F
seqs = list(lengths)
q = torch.randn(len(seqs), HEADS, HEAD_DIM, generator=g)          # one new token per sequence
paged = kv.paged_attention(q, chat_cache, seqs)
differences = []
for i, seq in enumerate(seqs):
    k, v = contiguous[seq]
    ref = F.scaled_dot_product_attention(q[i].unsqueeze(1), k.transpose(0, 1), v.transpose(0, 1)).squeeze(1)
    differences.append((paged[i] - ref).abs().max().item())
print(f"paged attention against SDPA for {len(seqs)} sequences: largest difference {max(differences):.1e}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert max(differences) < 1e-5

# %% [markdown]
# ## Sharing with copy-on-write
#
# Parallel sampling (several answers to one prompt) and beam search start many sequences from the
# same prefix. `fork` makes the child's block table point at the parent's blocks and raises their
# reference counts; no K/V is copied. When a child writes into a **shared, partly filled** last
# block, that one block is copied first (copy-on-write); full blocks stay shared for good.

# %%
prompt_len = 20                                              # 1 full block + 4 tokens
cache = kv.PagedKVCache(num_blocks=32, block_size=BLOCK, num_heads=HEADS, head_dim=HEAD_DIM)
cache.append("prompt", torch.randn(prompt_len, HEADS, HEAD_DIM, generator=g),
             torch.randn(prompt_len, HEADS, HEAD_DIM, generator=g))
for i in range(3):
    cache.fork("prompt", f"sample-{i}")
shared = cache.block_table("prompt")
print("after fork: tables", {s: cache.block_table(s) for s in cache.sequences},
      "ref counts", [cache.manager.ref_count(b) for b in shared])
before = cache.num_free_blocks
for i in range(3):                                           # each sample generates one token
    cache.append(f"sample-{i}", torch.randn(HEADS, HEAD_DIM, generator=g), torch.randn(HEADS, HEAD_DIM, generator=g))
print("after one token each:", {s: cache.block_table(s) for s in cache.sequences})
usage = cache.memory_usage()
print(f"blocks taken by the three writes: {before - cache.num_free_blocks}; "
      f"saved by sharing: {gml.format_size(usage['shared_saving_bytes'])}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert all(cache.block_table(f"sample-{i}")[0] == shared[0] for i in range(3))   # full block still shared
assert len({cache.block_table(f"sample-{i}")[1] for i in range(3)}) == 3          # last block copied

# %% [markdown]
# How much sharing saves on a workload depends on how long the shared prefix is relative to what
# each branch generates; the study below replays the paper's Fig. 15 setup on the synthetic
# requests (beam search shares more, because beams also share most of their generated tokens).

# %%
print(comparison.sharing_table())

# %% [markdown]
# ### Where our figures and the paper's differ, and why
#
# The figure above puts the paper's values as black crosses beside ours. Three disagreements are
# left besides the external fragmentation explained earlier; the cell below measures each cause.
#
# 1. **Batch sizes (Fig. 13)** are larger than the paper's for Orca (Pow2), Orca (Oracle) and vLLM:
#    our requests all arrive at once, so only memory limits the batch, while the paper sent a
#    Poisson trace at 2 requests/s; and our placements lose less to external fragmentation.
# 2. **Parallel sampling** saves less than the paper's ShareGPT range (16.2 % to 30.5 %; the paper
#    gives only the range, and the kit takes its ends as widths 2 and 6). Sampling shares the
#    prompt only, so the saving follows the prompt's share of each sequence, and the study above
#    used just the first 20 requests (to run fast), whose prompts are shorter than the workload's.
# 3. **Beam search at width 6** saves 80 % here against the paper's 66.3 %. Our beams run over a
#    random language model: every step draws fresh random scores, so the surviving beams soon
#    descend from one recent ancestor and share almost all of their blocks. A real model's beams
#    keep distinct histories longer. The figure does not come from a tunable detail: neither the
#    vocabulary size nor the spread of the random scores moves it.

# %%
import numpy as np
from gpumemlab.kvcache.sharing import beam_search_blocks, parallel_sampling_blocks
from gpumemlab.kvcache.workloads import make_workload

for s in ("orca-max", "orca-pow2", "orca-oracle", "paged"):
    print(f"Fig. 13 {s:12}: mean batch {ours[s].mean_batch_size:6.2f} here, "
          f"{paper.FIG13_BATCH['sharegpt'][s]:6.2f} in the paper")
wl = make_workload("sharegpt", 400, seed=0)

def saving(pairs):
    unshared, shared = (sum(x) for x in zip(*pairs))
    return 100 * (unshared - shared) / unshared

sampling = {}
for n in (20, 400):
    reqs = list(zip(wl.prompt_lens[:n].tolist(), wl.output_lens[:n].tolist()))
    mean_p, mean_o = np.mean([p for p, _ in reqs]), np.mean([o for _, o in reqs])
    sampling[n] = {k: saving([parallel_sampling_blocks(p, o, k, 16) for p, o in reqs]) for k in (2, 6)}
    print(f"parallel sampling, first {n:3} requests (prompt {mean_p:5.1f}, output {mean_o:5.1f} "
          f"tokens on average): width 2 {sampling[n][2]:4.1f} %, width 6 {sampling[n][6]:4.1f} % "
          f"(paper 16.2 % to 30.5 %)")
reqs = list(zip(wl.prompt_lens[:20].tolist(), wl.output_lens[:20].tolist()))
beam6 = {}
for vocab in (2, 32, 1000):
    rng = np.random.default_rng(0)
    beam6[vocab] = saving([beam_search_blocks(p, o, 6, 16, rng, vocab=vocab) for p, o in reqs])
print("beam search, width 6, by vocabulary size:",
      ", ".join(f"{v}: {x:.1f} %" for v, x in beam6.items()),
      f"(paper {paper.FIG15_SAVING['sharegpt']['beam search'][6]} %)")

# %% tags=["check"] jupyter={"source_hidden": true}
paper_ps = paper.FIG15_SAVING["sharegpt"]["parallel sampling"]
assert all(abs(sampling[400][k] - paper_ps[k]) < abs(sampling[20][k] - paper_ps[k]) for k in (2, 6))
assert max(beam6.values()) - min(beam6.values()) < 5
assert min(beam6.values()) > paper.FIG15_SAVING["sharegpt"]["beam search"][6]
assert all(ours[s].mean_batch_size >= paper.FIG13_BATCH["sharegpt"][s] - 0.01
           for s in ("orca-max", "orca-pow2", "orca-oracle", "paged"))

# %% [markdown]
# With all 400 requests, parallel sampling comes within a few points of the paper's range; beam
# search stays above it whatever the vocabulary, which is the random model's doing. The kit
# reproduces why sharing pays (beam search far more than sampling), not the paper's exact values.
#
# How a real server decides how many KV blocks it has in the first place (vLLM profiles a forward
# pass at its largest batch, then gives what `gpu_memory_utilization` leaves to the KV cache) is
# lesson 15's start-up budget.

# %% [markdown]
# ## Block size
#
# Small blocks waste less in each request's last, partly filled block; large blocks make the
# attention kernel's memory accesses more efficient and the tables shorter. The sweep shows the
# memory side of that trade (vLLM uses 16 by default):

# %%
print(comparison.sweep_table())
sweep = {b: r for (w, b), r in comparison.sweep.items() if w == "sharegpt"}

# %% tags=["check"] jupyter={"source_hidden": true}
assert sweep[16].token_states > sweep[256].token_states

# %% [markdown]
# ## The same idea everywhere
#
# Pages plus a mapping table is the idea of notebook 06 too: PyTorch's expandable segments map
# physical pages into one growing virtual range for training, and vAttention keeps the KV cache
# virtually contiguous with CUDA virtual memory so that unmodified attention kernels can read it.
# The direction of the field is memory managers that are paged by default, with better built-in
# visibility (snapshots, profilers) and tighter coupling to offload and recompute.

# %% [markdown]
# ## On your GPU: contiguous against paged KV memory
#
# `gml.experiment` runs this lesson's experiment as a seeded scenario on a simulated card of
# `gpu`'s size (the model's prediction) and, when `gpu` (the first cell's `gml.device()`) is a
# real CUDA card, measures it there too, within `gpu`'s memory budget, step by step. Without
# CUDA it says so in one line and shows the prediction alone.

# %%
print(gml.experiment(["kv_contiguous", "kv_paged"], gpu))

# %% [markdown]
# ## Exercise: size the KV cache blocks for short requests
#
# The sweep above is for long chats. An instruction-following service gets short requests
# (`kv.alpaca_like(400, seed=0)`: about 19 tokens in, 58 out). Served paged, choose the
# **largest** block size (a power of two, 1 to 256 tokens) for which the slots held but not yet
# filled (reserved + internal fragmentation) stay below 5 % of the KV memory. Estimate it from
# what a request wastes in its last block before you simulate it. The check serves the workload
# with your block size and with twice it.

# %% tags=["exercise"]
gml.exercise("08.ex")
my_block_size = 256        # change this
gml.exercise.check("08.ex", my_block_size)

# %%
gml.quiz("08")
