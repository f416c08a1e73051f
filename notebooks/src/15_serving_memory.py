# %% [markdown]
# # 15 · Serving memory beyond pages
#
# Notebook 08 showed how a paged KV cache stops a server from wasting memory inside its KV pool.
# This notebook looks **around** the pages, at four questions that decide how much memory a real
# server has and whether it stays up:
#
# 1. **The start-up budget.** How does a server (vLLM here) decide how big its KV pool is, and
#    how much of the card its CUDA graphs take?
# 2. **Prefix caching.** Requests that share a prefix (a system prompt, few-shot examples, the
#    history of a chat) can reuse its KV cache. How much, and what does it cost?
# 3. **A CPU tier.** Does a host-memory cache under the GPU cache help?
# 4. **Two allocators on one card.** In RL post-training, a trainer and an inference engine share
#    a GPU: the engine sleeps while the trainer runs. Why does the wake-up run out of memory?
#
# Every number below is computed by the simulated GPU of the earlier notebooks or by the
# serving simulator; docs/KVCACHE.md says which vLLM and SGLang rules are modelled.

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
from torch import nn
torch.set_num_threads(1)
kv = gml.kvcache
gpu = gml.device()
print(gpu.describe())
print("real GPU" if gpu.kind == "cuda" else "simulated GPU (no CUDA device here, or GPUMEMLAB_DEVICE=sim)")

# %% [markdown]
# ## 1. The start-up budget
#
# At start-up vLLM runs one forward pass at the largest batch, to measure the activations, and
# then computes:
#
# * **requested** = total memory × `gpu_memory_utilization`;
# * **KV cache** = requested − weights − activation peak − memory used outside torch − the
#   CUDA-graph pool, as vLLM sizes it at start-up;
# * **blocks** = KV cache ÷ (bytes of one block in all layers); **maximum concurrency** = blocks ÷
#   blocks of one request of `max_model_len` tokens.
#
# The graphs (one per batch size: 1, 2, 4, 8, ..., 512) are captured after the KV cache is
# allocated, so the pool is budgeted before they exist. vLLM's rule is linear: it captures the
# two largest sizes and multiplies the second one's growth of the pool by the number of sizes.
# How the graphs themselves are then captured is lesson 13's subject.
#
# `kv.budget` does this arithmetic and then runs the start-up on a simulated card: the model's
# forward pass is recorded with `gml.capture` (on PyTorch's `meta` device: shapes only, no
# memory), and each capture is replayed into a graph pool of the simulated allocator.

# %% tags=["predict"]
gml.predict("15.p1", "For 51 capture sizes, will vLLM's linear estimate be larger or smaller than what the "
            "shared graph pool really reserves?", choices=["larger", "about the same", "smaller"])


# %%
def block():
    return nn.Sequential(nn.Linear(4096, 14336), nn.GELU(), nn.Linear(14336, 4096))

model = nn.Sequential(block(), block()).to("meta")          # two Llama-3-8B-sized MLP blocks
traces = kv.ForwardTraces(model, lambda n: torch.empty(n, 4096, device="meta"))
sizes = kv.vllm_capture_sizes(512)
b = kv.budget(model, "llama-3-8b", total_memory="24GiB", gpu_memory_utilization=0.9,
              activation_peak=traces(8192), capture_sizes=sizes, graph_traces=traces,
              max_model_len=8192)
print(b.table())
gml.reveal("15.p1", "larger" if b.graph_estimate > 1.1 * b.graph_reserved
           else "smaller" if b.graph_reserved > 1.1 * b.graph_estimate else "about the same")

# %% tags=["check"] jupyter={"source_hidden": true}
assert b.available_kv == b.requested - b.weights - b.activation_peak - b.graph_estimate
assert b.num_blocks == b.available_kv // b.page_bytes // b.num_layers
assert b.graph_estimate > b.graph_reserved

# %% [markdown]
# The estimate is too large. vLLM captures the graphs largest first, all into one shared pool:
# after the largest graph, each smaller capture is served from blocks the larger ones freed inside
# that pool, and adds little or nothing; the rule still charges every size. The KV cache loses
# what the pool never uses.
#
# The table also says that the server uses **more** than it requested. The profile counts the
# *allocated* peak of the forward pass; the card needs the *reserved* peak. The replay shows why:

# %%
forward = traces(8192)
print([(action, gml.format_size(size)) for action, _, size in forward])
card = gml.SimulatedGPU("24GiB", record_history=False, record_frames=False)
allocated_peak, reserved_peak = kv.run_events(card, forward)
print(f"allocated peak {gml.format_size(allocated_peak)}, reserved peak {gml.format_size(reserved_peak)}")
full = kv.budget(model, "llama-3-8b", total_memory="24GiB", gpu_memory_utilization=1.0,
                 activation_peak=forward, capture_sizes=sizes, graph_traces=traces, max_model_len=8192)
print("at gpu_memory_utilization=1.0:", full.verdict())

# %% tags=["check"] jupyter={"source_hidden": true}
assert reserved_peak > allocated_peak
assert not full.fits and "short" in full.failure

# %% [markdown]
# The 128 MiB output of the first block is carved out of a freed 448 MiB block, so the next
# 448 MiB activation needs a new segment: fragmentation, as in notebook 02. At a utilization of
# 1.0 that difference is an out-of-memory error in the first real forward pass. vLLM prints a
# `--kv-cache-memory` value after start-up for this reason: the bytes that would have fit
# (`b.suggested_kv_memory`).
#
# ## 2. Prefix caching
#
# vLLM hashes every **full** block of a prompt together with the hash of the block before it, so
# equal hashes mean equal prefixes. Freed blocks keep their hash in an LRU queue and are reused on
# a hit; they are evicted only when a new block is needed. SGLang keeps the same cache in a
# **radix tree** of tokens and matches at token granularity.
#
# Ten requests share a 70-token system prompt, each with 10 tokens of its own; they run one after
# the other with blocks of 16 tokens.

# %% tags=["predict"]
gml.predict("15.p2", "How many prompt tokens does vLLM's prefix cache reuse over the ten requests?",
            kind="number", unit="tokens")

# %%
system = tuple(range(1000, 1070))
hand = kv.PrefixWorkload("hand", tuple(
    kv.PrefixRequest(system + tuple(range(10 * i, 10 * i + 10)), tuple(range(5000 + 5 * i, 5005 + 5 * i)))
    for i in range(10)), 0)
blocks16 = kv.simulate_prefix(hand, "vllm", num_blocks=100, block_size=16, max_running=1)
radix = kv.simulate_prefix(hand, "radix", num_blocks=100, block_size=16, max_running=1)
print("vLLM, blocks of 16:", blocks16.hits_per_request)
print("radix tree:        ", radix.hits_per_request)
gml.reveal("15.p2", blocks16.hit_tokens)

# %% tags=["check"] jupyter={"source_hidden": true}
assert blocks16.hit_tokens == 9 * (70 // 16) * 16
assert radix.hit_tokens == 9 * 70

# %% [markdown]
# Now three seeded workloads: a common 1000-token system prompt, eight few-shot templates, and
# chats whose every turn repeats the conversation so far. The pool is counted in token slots, so
# that changing the block size keeps the memory the same.

# %%
rows = kv.prefix_sweep(num_requests=300, block_sizes=(1, 16, 64, 256),
                       pool_tokens=(16_384, 65_536, 262_144))
print(kv.sweep_table(rows))
fig = kv.prefix_figure(rows)
fig

# %% tags=["check"] jupyter={"source_hidden": true}
by = {(r.kind, r.policy, r.block_size, r.pool_tokens): r for r in rows}
assert by[("system-prompt", "vllm", 16, 65_536)].hit_rate > by[("system-prompt", "vllm", 256, 65_536)].hit_rate
assert by[("multi-turn", "vllm", 16, 262_144)].hit_rate > by[("multi-turn", "vllm", 16, 16_384)].hit_rate

# %% [markdown]
# Reading the figure: large blocks lose the partly filled block at the end of every shared prefix;
# a system prompt that every request touches stays cached even in a small pool, while chat
# histories, each reused once after a pause, need a pool large enough to hold them all. The cache
# costs no memory: cached blocks only fill what the running requests leave free, and are evicted
# on demand. At a 0 % hit rate it costs one hash per full block, and nothing else.
#
# ## 3. A CPU tier under the GPU cache
#
# Blocks evicted from the GPU can move to host memory; a later hit copies them back over PCIe
# instead of recomputing them. The table gives the host tier's size as a multiple of the GPU pool.

# %%
tier = kv.cpu_tier_rows(num_requests=600, gpu_blocks=1024, ratios=(0, 1, 4))
print(kv.cpu_tier_table(tier))

# %% tags=["check"] jupyter={"source_hidden": true}
host = {(k, ratio): h for k, ratio, g, h, c, s in tier}
assert host[("system-prompt", 4)] == 0
assert host[("multi-turn", 4)] > host[("multi-turn", 1)] > 0

# %% [markdown]
# The tier helps a workload whose prefixes come back after the GPU evicted them (chats), and the
# more the larger it is; it adds nothing where the GPU keeps the prefix anyway (the system prompt)
# or where nothing is shared. And it only pays while copying a block is faster than recomputing
# it (the last column: seconds saved against a prefill of 10,000 tokens/s).
#
# ## 4. Two allocators on one card
#
# A 24 GiB card holds an inference engine (6 GiB of weights, 15 GiB of KV cache, a 512 MiB
# CUDA-graph pool) and a trainer. The engine maps its weights and KV cache **itself**, straight
# from the driver (vLLM's sleep-mode allocator); the trainer uses PyTorch's caching allocator.
# The engine sleeps (weights copied to the host, everything unmapped), the trainer runs a step
# and offloads its states, then the engine wakes up.

# %% tags=["predict"]
gml.predict("15.p3", "Which setting lets the engine wake up?",
            choices=["as it is", "empty_cache() before wake_up()",
                     "empty_cache() with expandable_segments:True", "none of them"])

# %%
cycles = {
    "as it is": kv.sleep_wake_cycle("24GiB"),
    "empty_cache() before wake_up()": kv.sleep_wake_cycle("24GiB", empty_cache_before_wake=True),
    "empty_cache() with expandable_segments:True": kv.sleep_wake_cycle(
        "24GiB", empty_cache_before_wake=True, alloc_conf="expandable_segments:True"),
}
for name, cycle in cycles.items():
    print(f"--- {name}\n{cycle.table()}\n")
first = next((name for name, c in cycles.items() if c.woke), "none of them")
gml.reveal("15.p3", first)

# %% tags=["check"] jupyter={"source_hidden": true}
assert not cycles["as it is"].woke and not cycles["empty_cache() before wake_up()"].woke
assert cycles["empty_cache() with expandable_segments:True"].woke

# %% [markdown]
# Without `empty_cache()` the trainer's caching allocator keeps what it freed, and the engine's
# `cuMemCreate` goes to the driver directly: nobody asks the cache to let go. With it, every whole
# free segment goes back, except the 3 GiB segment that a 64 MiB tensor kept after the step was
# carved from. Expandable segments return free 20 MiB pages, so that tensor keeps only its own.
# The graph pool stays through it all: the engine's graphs are alive while it sleeps.
#
# ## On your GPU: a shared graph pool, outputs released or kept
#
# `gml.experiment` runs this lesson's graph-pool experiment as a seeded scenario on a simulated
# card of `gpu`'s size (the model's prediction) and, when `gpu` (the first cell's `gml.device()`)
# is a real CUDA card, captures the same graphs there too: four batch sizes, largest first, into
# one shared pool, first releasing each graph's output at once (as vLLM does), then keeping every
# output alive. Without CUDA it says so in one line and shows the prediction alone.

# %%
print(gml.experiment(["graph_pool_outputs"], gpu))

# %% [markdown]
# ## Exercise: offload the buffers that let the engine wake with more
#
# Same card, same engine weights and graphs, `empty_cache()` before the wake-up, default
# allocator settings, but the engine now wants a larger KV cache than the 15 GiB above
# (`KV_15()`), and the trainer is an RL step that keeps 24 rollout buffers after it
# (`BUFFERS_15`: log-probs, values, rewards of its rollouts) beside sixteen activations
# (`ACTS_15`). Before `empty_cache()` the trainer may copy some buffers to the host, up to a copy
# budget (`OFFLOAD_AT_MOST_15`). Which buffers should it offload so that the engine wakes up?
# Reason from the trainer's own evidence: run its step on a card of your own
# (`kv.TrainerStep(activations=ACTS_15, keep=BUFFERS_15).run(card)` returns the kept buffers, in
# order) and read the block map. The check runs the cycle with your buffers offloaded.

# %% tags=["exercise"]
from gpumemlab.lessons.serving_memory import ACTS_15, BUFFERS_15, KV_15, OFFLOAD_AT_MOST_15
gml.exercise("15.ex")
print(f"KV cache {gml.format_size(KV_15())}, copy budget {gml.format_size(OFFLOAD_AT_MOST_15)}, "
      f"{len(BUFFERS_15)} buffers adding up to {gml.format_size(sum(BUFFERS_15))}")
my_offload = []          # change this: the numbers of the buffers to copy to the host
gml.exercise.check("15.ex", my_offload)

# %%
gml.quiz("15")
