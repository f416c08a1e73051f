# %% [markdown]
# # 14 · Streams: when a freed block may be used again
#
# A GPU runs the kernels of one **stream** in the order they were queued, while the CPU runs
# ahead: when Python frees a tensor, the kernels that read it may not have run yet. The caching
# allocator keeps its free blocks **per stream**. What that order lets it do with a freed block,
# and what it must do when another stream used the tensor, is this lesson.
#
# A tensor used on *another* stream breaks that argument. `tensor.record_stream(side)` tells the
# allocator about that use; when the tensor is freed, c10 records an **event** on `side` and keeps
# the block *pending free* until the event completes (`insert_events`, then `process_events` at
# the next allocation). This lesson runs each case on the simulated allocator and measures what
# it costs.
#
# **The simulated card runs no kernels.** `sim.launch(stream)` marks a stream as having queued
# work until `sim.synchronize()`: until then its events are "not ready", as `cudaEventQuery` would
# say on a real card. On a real card, `gpu.launch(stream)` queues a kernel that spins for a while.

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
MiB, fmt = gml.MiB, gml.format_size

# %% [markdown]
# ## 1 · One stream: reuse at once
#
# A 12 MiB tensor is made and freed on the default stream, then another 12 MiB tensor is asked
# for on the same stream. Does the new tensor get the old tensor's memory, or new memory?

# %% tags=["predict"]
gml.predict("14.p1", "Same stream, freed then asked again: where does the new tensor go?",
            choices=["the freed tensor's address", "a new address"])

# %%
sim = gml.SimulatedGPU("1GiB", alloc_conf="")
x = sim.empty(12 * MiB)
first = x.address
x.free()
y = sim.empty(12 * MiB)
same = y.address == first
print(f"x at {first:#x}; y at {y.address:#x}: {'the same address' if same else 'a new address'}")
print(f"reserved {fmt(sim.memory_reserved())}, cudaMalloc calls {sim.memory_stats()['num_device_alloc']}")
gml.reveal("14.p1", "the freed tensor's address" if same else "a new address")
p1_mallocs = sim.memory_stats()["num_device_alloc"]   # kept: later cells name other cards `sim`
y.free()

# %% tags=["check"] jupyter={"source_hidden": true}
assert same and p1_mallocs == 1

# %% [markdown]
# The same block, at once, with no wait: the kernels that used `x` may not have run yet, but they
# were queued on the same stream before `y`'s, so they will have run by the time `y`'s kernels
# touch the memory. That is why c10 caches blocks per stream.
#
# ## 2 · Another stream, with `record_stream`
#
# Now `x` is also read by a copy on a side stream, and that stream still has work queued. `x` is
# freed after `record_stream(x, side)`. While the side stream is busy, another 12 MiB tensor is
# asked for on the default stream. What will the card reserve then?

# %% tags=["predict"]
gml.predict("14.p2", "The side stream is still busy: reserved after the second 12 MiB request?")

# %%
busy = gml.SimulatedGPU("1GiB", alloc_conf="")
side = busy.Stream()
x = busy.empty(12 * MiB)
x_at = x.address
busy.record_stream(x, side)
busy.launch(side)                    # work queued on the side stream: its events are not ready
x.free()
states = [b["state"] for seg in busy.memory_snapshot() for b in seg["blocks"]]
print("after x.free():", states)
y = busy.empty(12 * MiB)
y_moved = y.address != x_at
busy_reserved = busy.memory_reserved()
busy_snapshot = busy.snapshot()      # kept for the figure: the next cells move this card on
print(f"y at {y.address:#x} ({'not x' if y_moved else 'x'}'s address); "
      f"reserved {fmt(busy_reserved)}, cudaMalloc calls {busy.memory_stats()['num_device_alloc']}")
gml.reveal("14.p2", busy_reserved)

# %% tags=["check"] jupyter={"source_hidden": true}
assert states == ["active_pending_free"] and y_moved
assert busy_reserved == 2 * 12 * MiB

# %% [markdown]
# The block map draws the pending block in its own colour: it is neither allocated nor free, and
# `get_free_block` does not see it.

# %%
fig = gml.show(busy_snapshot, title="x pending free (the side stream is busy), y in a new segment")
fig

# %% [markdown]
# Once the side stream's work is done (`synchronize()` here), the next allocation's
# `process_events` completes the event and frees the block, and the request after that finds it.

# %%
busy.synchronize()
z = None                             # run again, this cell first frees the z it made before
z = busy.empty(12 * MiB)
synced = (z.address == x_at, busy.memory_reserved())
print(f"after synchronize(): z at {z.address:#x} ({'x' if synced[0] else 'not x'}'s "
      f"address); reserved {fmt(synced[1])}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert synced == (True, busy_reserved)

# %% [markdown]
# ## 3 · Another stream, without `record_stream`
#
# Forget `record_stream`, and the allocator knows only the allocation stream. The block is free
# the moment `x` is freed, and the next tensor of the default stream gets it, while the side
# stream may still be reading it. The simulator runs no kernels, so it cannot show the corrupted
# values; it shows what the allocator does, which is all it takes.

# %%
sim = gml.SimulatedGPU("1GiB", alloc_conf="")
side = sim.Stream()
x = sim.empty(12 * MiB)
first = x.address
sim.launch(side)                     # the side stream reads x ... but nobody told the allocator
x.free()
y = sim.empty(12 * MiB)
print(f"y at {y.address:#x}: {'the same memory the side stream may still read' if y.address == first else 'new memory'}")
print(f"side stream still busy: {side in sim.allocator.busy_streams}")
unsafe = (y.address == first, side in sim.allocator.busy_streams)

# %% tags=["check"] jupyter={"source_hidden": true}
assert unsafe == (True, True)

# %% [markdown]
# Writing `y` now overwrites what the side stream reads: a silent data race, with no error and no
# OOM. Two ways out: `x.record_stream(side)` before the free (the free then waits on an event, as
# in section 2), or keep `x` alive until the default stream has waited for the side stream
# (`torch.cuda.current_stream().wait_stream(side)`, then free). FSDP2 takes the second way: it
# avoids `record_stream` because a pending block's memory comes back only when the allocator next
# looks, which can be much later than the side stream's work ends.
#
# ## 4 · `empty_cache()` and the OOM path wait for every stream
#
# `release_cached_blocks` starts with `synchronize_and_free_events`: it waits for every
# outstanding event, so pending blocks become free and whole free segments go back.

# %%
sim = gml.SimulatedGPU("1GiB", alloc_conf="")
side = sim.Stream()
xs = [sim.empty(12 * MiB) for _ in range(3)]
for i in range(3):
    sim.record_stream(xs[i], side)
sim.launch(side)
xs.clear()                           # the last references: all three are freed, pending
before = sim.memory_stats()
print(f"three freed tensors pending: reserved {fmt(sim.memory_reserved())}, "
      f"allocated {fmt(sim.memory_allocated())}")
sim.empty_cache()
after = sim.memory_stats()
print(f"after empty_cache(): reserved {fmt(sim.memory_reserved())}; device-wide syncs "
      f"{after['num_sync_all_streams'] - before['num_sync_all_streams']}, cudaFree calls "
      f"{after['num_device_free'] - before['num_device_free']}")
released_reserved = sim.memory_reserved()

# %% tags=["check"] jupyter={"source_hidden": true}
assert released_reserved == 0
assert after["num_sync_all_streams"] - before["num_sync_all_streams"] == 1
assert after["num_device_free"] - before["num_device_free"] == 3

# %% [markdown]
# ## Exercise
#
# A loop that hands every batch's buffer to a busy side stream: how much does it keep reserved?
# Reason it out with the segment rules of lesson 01; the simulator checks your answer.

# %% tags=["exercise"]
gml.exercise("14.ex")
my_reserved = None       # change this: a size such as "8 MiB"
gml.exercise.check("14.ex", my_reserved)

# %% [markdown]
# ## On your GPU: a block pending on a busy stream
#
# `gml.experiment` runs this lesson's experiment as a seeded scenario on a simulated card of
# `gpu`'s size (the model's prediction) and, when `gpu` (the first cell's `gml.device()`) is a
# real CUDA card, measures it there too, with a spinning kernel keeping the side stream busy,
# within `gpu`'s memory budget, step by step. Without CUDA it says so in one line and shows the
# prediction alone.

# %%
print(gml.experiment("record_stream_pending", gpu))

# %% [markdown]
# ## What to take away
#
# * On one stream a freed block is reused at once: the stream's order keeps it safe.
# * Memory used on another stream needs `record_stream` (or an explicit wait before the free);
#   its block stays pending free, unusable, until that stream's event completes.
# * Pending blocks cost memory: new requests take new segments meanwhile.
# * `empty_cache()` and the OOM path synchronize first, so they also return pending blocks.

# %%
gml.quiz("14")
