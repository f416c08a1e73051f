# %% [markdown]
# # 02 · Fragmentation: free memory in pieces
#
# The most confusing error in deep learning looks like this:
#
# > `CUDA out of memory. Tried to allocate X GiB. GPU 0 has a total capacity of ... of which
# > Y GiB is free. ... Z GiB is reserved by PyTorch but unallocated.`
#
# Add it up: Y + Z, the memory free on the driver plus the memory PyTorch has cached, is more
# than X, and the tensor still fails. The reason is **fragmentation**: the free memory exists, but it is split
# into pieces, and **no single piece is large enough**. A tensor needs one contiguous range of
# addresses, and the allocator never moves live tensors to close the gaps.
#
# We build that exact state, one block at a time, on a simulated 8 GiB card so that every number
# is exact. (On a real GPU the same story happens with messier numbers; notebook 09 diagnoses a
# recorded run.)

# %%
# Which device does this notebook run on?
try:
    import gpumemlab as gml
except ImportError:  # a clone without `pip install -e .`: use the package next to notebooks/
    import pathlib, sys
    sys.path.insert(0, str(pathlib.Path.cwd().parent))
    import gpumemlab as gml
# %matplotlib inline
gpu = gml.device()
print(gpu.describe())
print("real GPU" if gpu.kind == "cuda" else "simulated GPU (no CUDA device here, or GPUMEMLAB_DEVICE=sim)")

# %% [markdown]
# ## Step 1: one big tensor, then free it
#
# A warm-up phase allocates one 7 GiB buffer. It is larger than 10 MiB, so `get_allocation_size`
# asks the driver for a segment of its own (7 GiB, a multiple of 2 MiB). When the buffer dies,
# the segment stays **cached**: reserved, not allocated.

# %%
GiB, MiB = gml.GiB, gml.MiB

def warm_card():
    """Step 1 on a fresh card. Each step below starts from a fresh one like it, so that any
    cell can run again after Run All and measure the state its own step makes."""
    card = gml.SimulatedGPU("8GiB", alloc_conf="")   # alloc_conf="": defaults, whatever the environment says
    warmup = card.empty(7 * GiB)
    del warmup
    return card

sim = warm_card()
step1 = {"reserved": sim.memory_reserved(), "allocated": sim.memory_allocated(),
         "driver_free": sim.mem_get_info()[0]}
print(f"reserved {gml.format_size(step1['reserved'])}, allocated "
      f"{gml.format_size(step1['allocated'])}, driver free {gml.format_size(step1['driver_free'])}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert step1["reserved"] == 7 * GiB and step1["allocated"] == 0

# %% [markdown]
# ## Step 2: seven 1 GiB tensors carve up the cached segment
#
# Each 1 GiB request goes through `get_free_block`: the best fit in the large pool is the cached
# 7 GiB block. `should_split` says the remainder (more than 1 MiB) is worth keeping, so
# `alloc_found_block` splits it: the front becomes the tensor, the rest a smaller free block.
# Seven requests, zero `cudaMalloc` calls, seven blocks side by side in one segment.

# %%
sim = warm_card()                                 # step 1's card
segments_before = sim.memory_stats()["num_device_alloc"]
blocks = [sim.empty(GiB) for _ in range(7)]
for i, t in enumerate(blocks):
    after = i and t.address == blocks[i - 1].address + blocks[i - 1].nbytes
    print(f"tensor {i}: address {t.address:#x}" + (f", right after tensor {i - 1}" if after else ""))
del t   # the loop variable still refers to tensor 6: drop it, or tensor 6 would never be freed
step2 = {"new_segments": sim.memory_stats()["num_device_alloc"] - segments_before,
         "addresses": [b.address for b in blocks]}

# %% tags=["check"] jupyter={"source_hidden": true}
assert step2["new_segments"] == 0   # no new segment
assert all(b2 - b1 == GiB for b1, b2 in zip(step2["addresses"], step2["addresses"][1:]))

# %% [markdown]
# ## Step 3: free every other tensor
#
# Tensors 0, 2, 4 and 6 die (think: activations of some layers freed while others are kept).
# `free_block` calls `try_merge_blocks` with each freed block's neighbours, but the neighbours are
# live tensors 1, 3 and 5, so nothing merges. The segment now alternates free and allocated
# gigabytes. Before running it: how much memory will be free in total, cached by PyTorch plus
# free on the driver?

# %% tags=["predict"]
gml.predict("02.p1", "After freeing tensors 0, 2, 4 and 6: free memory in total (cached + driver)?")

# %%
sim = warm_card()                                 # steps 1 and 2 again
blocks = [sim.empty(GiB) for _ in range(7)]
for i in (0, 2, 4, 6):
    blocks[i] = None          # the last reference goes: freed, like `del tensor`
driver_free, _ = sim.mem_get_info()
cached_free = sim.memory_reserved() - sim.memory_allocated()
print(f"allocated            {gml.format_size(sim.memory_allocated())}")
print(f"reserved, unused     {gml.format_size(cached_free)}  (cached by PyTorch)")
print(f"free on the driver   {gml.format_size(driver_free)}")
print(f"free in total        {gml.format_size(cached_free + driver_free)}")
seg = sim.memory_snapshot()[0]
print("the segment's blocks:", [f"{gml.format_size(b['size'])} {'used' if b['state'] == 'active_allocated' else 'free'}"
                                for b in seg["blocks"]])
step3 = {"cached_free": cached_free, "driver_free": driver_free}
gml.reveal("02.p1", step3["cached_free"] + step3["driver_free"])

# %% tags=["check"] jupyter={"source_hidden": true}
assert step3 == {"cached_free": 4 * GiB, "driver_free": 1 * GiB}

# %% [markdown]
# The block map draws it. Grey blocks are free and cached, blue ones are allocated.

# %%
fig = gml.show(sim, title="8 GiB card: 4 GiB cached free, in 1 GiB pieces")
print(gml.text_blockmap(sim))
fig

# %% [markdown]
# ## Step 4: ask for 2 GiB
#
# `DeviceCachingAllocator::malloc` tries, in order, until one step gives it a block:
#
# 1. `get_free_block`: a cached free block of at least 2 GiB on this stream? (The block map
#    answers that.)
# 2. `garbage_collect_cached_blocks`: only if `garbage_collection_threshold` is set (notebook 05).
#    It is not set here.
# 3. `alloc_block`: `cudaMalloc(2 GiB)`, which works if the driver has 2 GiB free (the cell under
#    `02.p1` printed what it has).
# 4. `release_available_cached_blocks`: only frees oversize cached blocks when `max_split_size` is
#    set (notebook 05). It is not set here.
# 5. `release_cached_blocks` (what `empty_cache()` does): returns every *wholly free* segment to
#    the driver, then tries `alloc_block` once more.
# 6. If every step came back empty-handed, the allocator gives up and raises an error.
#
# Five GiB are free in total, and the request is for two. Walk the six steps on this card, then
# make your call:

# %% tags=["predict"]
gml.predict("02.p2", "Does the 2 GiB request succeed?",
            choices=["yes, from the cache", "yes, with a new cudaMalloc", "no: out of memory"])

# %%
sim = warm_card()                                 # steps 1 to 3 again: the cards below read this one
blocks = [sim.empty(GiB) for _ in range(7)]
for i in (0, 2, 4, 6):
    blocks[i] = None
before = sim.memory_stats()["num_device_alloc"]
try:
    x = sim.empty(2 * GiB)
    outcome = "yes, from the cache" if sim.memory_stats()["num_device_alloc"] == before \
        else "yes, with a new cudaMalloc"
except gml.OutOfMemoryError as err:
    outcome, message = "no: out of memory", str(err)
    print(message)
stats = sim.memory_stats()
print(f"\nnum_alloc_retries = {stats['num_alloc_retries']}, num_ooms = {stats['num_ooms']}")
gml.reveal("02.p2", outcome)

# %% [markdown]
# Step by step: no cached block holds 2 GiB (step 1), the driver has less than 2 GiB free, so
# `cudaMalloc` fails (step 3), and `release_cached_blocks` finds no wholly free segment to return
# (our only segment holds live tensors), so the retry fails too (step 5). Passing `request=2 GiB`
# to the block map asks the view where `get_free_block` would put the tensor:

# %%
fig = gml.show(sim, request=2 * GiB, title="8 GiB card: where would 2 GiB go?")
print(fig.gml_blockmap["request_text"])
fig

# %% tags=["check"] jupyter={"source_hidden": true}
assert outcome == "no: out of memory"
assert "Tried to allocate 2.00 GiB" in message
assert stats["num_ooms"] == 1 and stats["num_alloc_retries"] == 1

# %% [markdown]
# Passing `request=2 GiB` asks the block map what c10's malloc would do with a 2 GiB tensor:
# where `get_free_block` would put it, or, when no cached block fits, what the driver, the
# release of the cache and the retry would give. Its caption walks the path you just saw fail.

# %%
fig = gml.show(sim, request=2 * GiB, title="8 GiB card, asked for 2 GiB")
asked_2gib = fig.gml_blockmap["request_text"]
print(asked_2gib)
fig

# %% tags=["check"] jupyter={"source_hidden": true}
_verdict = asked_2gib
assert "cudaMalloc(2.00 GiB) fails: the driver has 1024.00 MiB free" in _verdict
assert "none here: every segment holds a live block" in _verdict and _verdict.endswith("raises OutOfMemoryError")

# %% [markdown]
# Read the message as evidence: *"reserved by PyTorch but unallocated"* is the cached free memory.
# When that number is large while the request fails, the cache is **fragmented**. PyTorch's own
# hint, at the end, points at the fix of notebook 06.
#
# The trace shows the same: the last event is an `oom` entry carrying the request size and
# the driver's free memory at that moment. (Notation: `b = seg_0[1.00 GiB:1.00 GiB]` is tensor
# `b`, a block 1 GiB into `seg_0` and 1 GiB long; `del b` frees it.)

# %%
trace = sim.snapshot()["device_traces"][0]
oom = [e for e in trace if e["action"] == "oom"][-1]
print(f"oom entry: size {gml.format_size(oom['size'])}, device_free {gml.format_size(oom['device_free'])}")
print(gml.text_trace(sim))

# %% tags=["check"] jupyter={"source_hidden": true}
assert oom["size"] == 2 * GiB

# %% [markdown]
# ## The numbers that name the problem
#
# `gml.fragmentation` reads the snapshot and names the figures: free bytes against the
# **largest free block**, and *external fragmentation* = 1 − largest free block / free bytes
# (0 when all free memory is one block; close to 1 when it is dust).
# `non_releasable_bytes` is free memory inside split segments that `empty_cache()` cannot return
# (PyTorch's `inactive_split_bytes`).

# %%
m = gml.fragmentation(sim.snapshot(), total_memory=sim.total_memory)
print(m)

# %% tags=["check"] jupyter={"source_hidden": true}
assert m["free_bytes"] == 4 * GiB
assert m["largest_free_block_bytes"] == 1 * GiB
assert m["external_fragmentation"] == 0.75
assert m["non_releasable_bytes"] == 4 * GiB
assert m["largest_request_bytes"] < 2 * GiB

# %% [markdown]
# ## Why not just move the tensors?
#
# A live tensor's address is baked into everything that uses it: other tensors' views, kernels
# already queued on a stream, pointers held by libraries. The allocator cannot move it, so it can
# only merge **adjacent** free blocks. Free a neighbour, and the gap heals: freeing tensor 1
# lets `try_merge_blocks` join blocks 0, 1 and 2 into one free block, and the same 2 GiB
# request now succeeds from the cache, without any driver call.

# %%
healed = warm_card()           # step 3's card again, on its own: `sim` keeps the failed request
kept = [healed.empty(GiB) for _ in range(7)]
for i in (0, 2, 4, 6):
    kept[i] = None
kept[1] = None                 # and now tensor 1, between the free 0 and 2
seg = healed.memory_snapshot()[0]
print("blocks now:", [f"{gml.format_size(b['size'])} {'used' if b['state'] == 'active_allocated' else 'free'}"
                      for b in seg["blocks"]])
device_allocs = healed.memory_stats()["num_device_alloc"]
x = healed.empty(2 * GiB)
healed_new_segments = healed.memory_stats()["num_device_alloc"] - device_allocs
print(f"2 GiB tensor at offset {gml.format_size(x.address - seg['address'])} of the segment; "
      f"new cudaMalloc calls: {healed_new_segments}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert healed_new_segments == 0

# %% [markdown]
# ## Memory over time
#
# `gml.timeline` plots allocated, reserved and requested bytes after every event of the
# recorded history.

# %%
fig = gml.timeline(sim)
fig

# %% [markdown]
# The timeline shows the signature of fragmentation: the **reserved** curve stays high while
# **allocated** drops, and the gap between them (the cache) cannot serve the request.
#
# ## Replay it step by step
#
# The player steps through the recorded history and redraws the block map after each event.
# In JupyterLab, press Play or drag the slider; from code, `goto(k)` moves it, so the lesson
# can check what it shows. Here we jump to the last free before the failed request.

# %%
p = gml.player(sim, request=2 * GiB)
events = [e["action"] for e in p.history.events]
k = max(i for i, a in enumerate(events[:events.index("oom")]) if a == "free_completed")
p.goto(k)
print(f"{p.description()}  (the trace has events 0 to {len(p) - 1})")
at_k = p.metrics()
from gpumemlab.viz.words import count   # count(1, "block") -> "1 block"
print(f"free {at_k.formatted('free_bytes')} in {count(at_k['free_blocks'], 'block')}, largest {at_k.formatted('largest_free_block_bytes')}")
p

# %% tags=["check"] jupyter={"source_hidden": true}
assert at_k["largest_free_block_bytes"] == 1 * GiB and at_k["free_blocks"] == 4

# %% [markdown]
# ## What helps
#
# * **Change the order or the sizes**: allocate the biggest, longest-lived tensors first, keep
#   sizes uniform (notebook 07: batch size, checkpointing).
# * **Don't let big cached blocks be split** by small requests: `max_split_size_mb` (notebook 05).
# * **Let the segment's physical pages be returned and remapped**: `expandable_segments:True`
#   (notebook 06 runs the very workload above with it).
# * `empty_cache()` does **not** help here: it only returns whole free segments (notebook 04).
#
# ## A seeded, less tidy version
#
# Real fragmentation is not alternating gigabytes. `gml.scenarios.fragmentation_oom` builds the
# same failure from many pieces of seeded sizes, scaled to the card. Its record keeps the OOM
# message and the free memory at the moment of failure.

# %%
card = gml.SimulatedGPU("8GiB", alloc_conf="")
rec = gml.scenarios.fragmentation_oom(card)
print(rec)
print(rec.oom)
print(f"free at the OOM: {gml.format_size(rec.free_at_oom)}, request: {gml.format_size(rec.oom_request)}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert rec.oom is not None and rec.free_at_oom > rec.oom_request

# %% [markdown]
# ## Exercise: free four, fit three
#
# Back to the seven 1 GiB tensors of steps 1-3. Choose which **four** of them to free so that a
# **3 GiB** tensor then fits in the cache, with no new `cudaMalloc`. The check rebuilds the card,
# frees your four and asks for 3 GiB.

# %% tags=["exercise"]
gml.exercise("02.ex")
my_frees = [0, 2, 4, 6]        # change these: four of the tensor numbers 0..6
gml.exercise.check("02.ex", my_frees)

# %% [markdown]
# ## On your GPU: the fragmentation OOM
#
# `gml.experiment` runs this lesson's experiment as a seeded scenario on a simulated card of
# `gpu`'s size (the model's prediction) and, when `gpu` (the first cell's `gml.device()`) is a
# real CUDA card, measures it there too, within `gpu`'s memory budget, step by step. Without
# CUDA it says so in one line and shows the prediction alone.

# %%
print(gml.experiment("fragmentation_oom", gpu))

# %%
gml.quiz("02")
