# %% [markdown]
# # 01 · Why a caching allocator?
#
# A training step creates and destroys thousands of tensors: activations in the forward pass,
# gradients in the backward pass, temporaries everywhere. If every `torch.empty` called the CUDA
# driver's `cudaMalloc`, and every `del` called `cudaFree`, the GPU would spend its time waiting:
# `cudaMalloc` is a slow driver call, and `cudaFree` synchronizes the whole device.
#
# So PyTorch puts a **caching allocator** in between (`c10/cuda/CUDACachingAllocator.cpp`,
# class `DeviceCachingAllocator`). It takes large **segments** from the driver, hands out
# **blocks** carved from them, and when a tensor dies it keeps the block in a **pool** for the
# next request instead of giving it back. This notebook measures that, then walks through the
# rules that decide block and segment sizes. Open the C++ file beside it: every rule below is
# named after the c10 function that implements it.

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
# ## Count the driver calls, with and without the cache
#
# `step()` below allocates and frees what a small training step might: per layer an activation,
# a temporary and a few small buffers, freed in reverse order at the end. We run ten steps on a
# simulated 8 GiB card and read two counters from `memory_stats()`: `num_device_alloc`
# (`cudaMalloc` calls) and `num_device_free` (`cudaFree` calls).
#
# Two runs to compare it with. **No cache at all** is what `PYTORCH_NO_CUDA_MEMORY_CACHING=1`
# makes of PyTorch: every tensor is its own `cudaMalloc`, every free its own `cudaFree`
# (`gml.lessons.why_a_cache.UncachedGPU` counts them on the same driver model). And
# **`empty_cache()` after each step**: the cache still serves requests within a step, but every
# wholly free segment goes back at the end, so each step starts from nothing.
#
# Each step makes 36 tensors (12 layers × 3), so ten steps make 360. Before you run it: how many
# `cudaMalloc` calls will the caching allocator need for all ten steps?

# %% tags=["predict"]
gml.predict("01.p1", "Ten steps of 36 tensors each, with the cache: how many cudaMalloc calls?",
            kind="number", unit="cudaMalloc calls")

# %%
MiB, KiB = gml.MiB, gml.KiB
LAYERS = 12

def step(gpu):
    live = []
    for layer in range(LAYERS):
        live.append(gpu.empty(24 * MiB))          # an activation kept for backward
        tmp = gpu.empty(3 * MiB + 123)            # a temporary, dies at once
        live.append(gpu.empty(4 * KiB))           # a small buffer (bias grad, stats, ...)
        del tmp
    live.clear()                                  # backward done: everything dies

def run(steps, release_every_step=False, cache=True):
    from gpumemlab.lessons.why_a_cache import UncachedGPU
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="") if cache else UncachedGPU("8GiB")
    for _ in range(steps):
        step(gpu)
        if release_every_step:
            gpu.empty_cache()
    return gpu.memory_stats()

runs = {"caching allocator": run(10), "empty_cache() each step": run(10, release_every_step=True),
        "no cache at all": run(10, cache=False)}
for name, s in runs.items():
    print(f"{name:24}: {s['allocation.all.allocated']:4} tensor allocations -> "
          f"{s['num_device_alloc']:4} cudaMalloc, {s['num_device_free']:4} cudaFree")
cached = runs["caching allocator"]
gml.reveal("01.p1", cached["num_device_alloc"])

# %% tags=["check"] jupyter={"source_hidden": true}
assert len({s["allocation.all.allocated"] for s in runs.values()}) == 1
assert runs["no cache at all"]["num_device_alloc"] == 10 * 3 * LAYERS == runs["no cache at all"]["num_device_free"]
assert cached["num_device_alloc"] < runs["empty_cache() each step"]["num_device_alloc"] < 10 * 3 * LAYERS
assert runs["empty_cache() each step"]["num_device_alloc"] == 10 * cached["num_device_alloc"]
assert cached["num_device_free"] == 0

# %% [markdown]
# With the cache, the first step pays for the segments and the nine later steps reuse them:
# no driver call at all. The price is that the memory stays **reserved** by the process after the
# tensors are gone. That is the bargain behind every lesson in this kit: speed in exchange for
# memory the allocator holds, and has to lay out well.
#
# ### What those calls cost
#
# The simulator counts driver calls; it cannot time them. The time a `cudaMalloc` takes depends
# on the GPU, the driver and the size. One published measurement, not made here: M. Boyer,
# "Memory Allocation Overhead" (University of Virginia, about 2009,
# https://www.cs.virginia.edu/~mwb7w/cuda_support/memory_management_overhead.html), timed
# `cudaMalloc` on a CUDA GPU of that time at about 50 µs a call for sizes from 4 KB to 512 KB,
# and more above 512 KB: a lower bound for segments of megabytes like these. On a machine with
# CUDA the cell below measures a forced `cudaMalloc` instead (a `torch.empty` right after
# `torch.cuda.empty_cache()`, so the allocator's own few microseconds are in it).
#
# `cudaFree` costs more than its own time: it synchronises with the device, so the CPU waits
# until all the work queued on the GPU has finished, and can no longer run ahead queueing the
# next kernels. That cost is the queued work, not a fixed figure, so the right panel counts the
# synchronisations rather than timing them.

# %%
import statistics, time
import matplotlib.pyplot as plt

PUBLISHED_US = 50.0   # Boyer (above), published: µs per cudaMalloc from 4 KB to 512 KB, about 2009

def measured_cudamalloc_us(tries=15):
    """Median time of a torch.empty that must call cudaMalloc (CUDA only)."""
    import torch
    times = []
    for i in range(tries):
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        start = time.perf_counter()
        x = torch.empty(24 * MiB + 2 * MiB * i, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        del x
    return 1e6 * statistics.median(times)

if gpu.kind == "cuda":
    per_call_us, source = measured_cudamalloc_us(), f"measured here on {gpu.name}"
else:
    per_call_us, source = PUBLISHED_US, "published by Boyer, about 2009; not measured here"
cost_ms = {name: s["num_device_alloc"] * per_call_us / 1000 for name, s in runs.items()}
for name, ms in cost_ms.items():
    print(f"{name:24}: {runs[name]['num_device_alloc']:4} cudaMalloc x {per_call_us:.0f} µs = "
          f"{ms:6.2f} ms; {runs[name]['num_device_free']:4} cudaFree, each a device synchronisation")
fig, (ax, ax_free) = plt.subplots(1, 2, figsize=(10, 2.8), layout="constrained", sharey=True)
colours = ["#0072B2", "#E69F00", "#D55E00"]
bars = ax.barh(list(cost_ms), list(cost_ms.values()), color=colours)
ax.bar_label(bars, labels=[f"{runs[n]['num_device_alloc']} calls, {ms:.2f} ms" for n, ms in cost_ms.items()],
             padding=3, fontsize=8)
ax.set_xlabel("time in cudaMalloc over ten steps (ms)")
ax.set_xlim(0, 1.45 * max(cost_ms.values()))
ax.invert_yaxis()
ax.set_title(f"cudaMalloc at {per_call_us:.0f} µs a call\n({source})", fontsize=9, loc="left")
frees = [runs[n]["num_device_free"] for n in runs]
bars = ax_free.barh(list(runs), frees, color=colours)
ax_free.bar_label(bars, labels=[f"{n} cudaFree" for n in frees], padding=3, fontsize=8)
ax_free.set_xlabel("cudaFree calls over ten steps")
ax_free.set_xlim(0, 1.45 * max(max(frees), 1))
ax_free.set_title("cudaFree: each one waits until the GPU\nhas finished all queued work", fontsize=9, loc="left")
plt.close(fig)
fig

# %% tags=["check"] jupyter={"source_hidden": true}
assert [b.get_width() for b in ax_free.patches] == frees and frees[0] == 0
assert [round(b.get_width(), 6) for b in ax.patches] == [round(v, 6) for v in cost_ms.values()]

# %% [markdown]
# ## Rule 1: sizes are rounded (`round_size`)
#
# Every request is rounded up to a multiple of **512 bytes** (`kMinBlockSize`). Then the rounded
# size picks a **pool**: requests of at most 1 MiB (`kSmallSize`) go to the *small* pool, the
# rest to the *large* pool. When no cached block fits, `get_allocation_size` decides how much to
# `cudaMalloc`:
#
# * small requests get a **2 MiB** segment (`kSmallBuffer`), shared by many small tensors;
# * large requests *below* 10 MiB (`kMinLargeAlloc`) get a **20 MiB** segment (`kLargeBuffer`);
# * requests of 10 MiB and more get a segment of their own size, rounded up to **2 MiB**
#   (`kRoundLarge`): exactly 10 MiB gets a 10 MiB segment.
#
# The model exposes the same two functions; the table is computed by them.

# %%
from gpumemlab.allocator.rounding import get_allocation_size, is_small, round_size

def exact(n):
    """A size near a boundary in words: format_size's two decimals would hide "+ 1 byte"."""
    for unit, name in ((MiB, "MiB"), (KiB, "KiB")):
        whole, rest = divmod(n, unit)
        if whole and rest:
            return f"{whole} {name} + {rest} B"
    return gml.format_size(n)

requests = [1, 512, 513, 4 * KiB + 1, MiB, MiB + 1, 10 * MiB, 10 * MiB + 1, 100 * MiB + 1]
print(f"{'request':>16} {'round_size':>16}  pool   {'segment (cudaMalloc)':>20}")
for r in requests:
    rounded = round_size(r)
    pool = "small" if is_small(rounded) else "large"
    print(f"{exact(r):>16} {exact(rounded):>16}  {pool:5}  {gml.format_size(get_allocation_size(rounded)):>20}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert round_size(1) == 512 and round_size(MiB + 1) == 1049088
assert get_allocation_size(round_size(MiB)) == 2 * MiB             # still small
assert get_allocation_size(round_size(MiB + 1)) == 20 * MiB        # large, shared segment
assert get_allocation_size(round_size(10 * MiB + 1)) == 12 * MiB   # own segment, 2 MiB steps

# %% [markdown]
# ## The same rules on a device
#
# Three tensors, one from each size class, on a fresh card: 1 byte, 1 MiB + 1 byte and
# 60 MiB + 1 byte (a size the table does not list: apply its rules). Watch `memory_allocated()`
# (the rounded block sizes) against `memory_reserved()` (the segments), and predict the second.

# %% tags=["predict"]
gml.predict("01.p2", "After the three tensors, how much will memory_reserved() be?")

# %%
sim = gml.SimulatedGPU("8GiB", alloc_conf="")
a = sim.empty(1)                 # small pool: a 2 MiB segment
b = sim.empty(MiB + 1)           # large pool, below 10 MiB: a 20 MiB segment
c = sim.empty(60 * MiB + 1)      # large pool, > 10 MiB: its own 62 MiB segment
def shown(n):
    """Bytes where two decimals of MiB would hide the 512-byte rounding."""
    return gml.format_size(n) if n % KiB == 0 else f"{n:,} bytes"

for seg in sim.memory_snapshot():
    blocks = ", ".join(f"{shown(bl['size'])} {bl['state']}" for bl in seg["blocks"])
    print(f"{seg['segment_type']:5} segment {shown(seg['total_size']):>11}: {blocks}")
print(f"allocated {shown(sim.memory_allocated())}, reserved {shown(sim.memory_reserved())}")
reserved_three = sim.memory_reserved()   # kept: the cells below put more tensors on this card
gml.reveal("01.p2", reserved_three)

# %% tags=["check"] jupyter={"source_hidden": true}
assert reserved_three == 2 * MiB + 20 * MiB + 62 * MiB

# %% [markdown]
# ## Rule 2: split the block, keep the rest (`should_split`)
#
# The 20 MiB segment above holds one block and a free remainder. `alloc_found_block` split
# the segment because `should_split` said yes: in the small pool a remainder of at least 512 bytes
# is kept as a free block, in the large pool a remainder of more than 1 MiB (`kSmallSize`).
# The remainder serves the next requests of that pool, so more 1-10 MiB tensors need no new
# `cudaMalloc` until the 20 MiB are used up.

# %%
from gpumemlab.viz.words import count   # count(1, "block") -> "1 block", count(2, ...) -> "2 blocks"
before = sim.memory_stats()["num_device_alloc"]
more = [sim.empty(MiB + 1) for _ in range(10)]
after = sim.memory_stats()["num_device_alloc"]
seg20 = next(s for s in sim.memory_snapshot() if s["total_size"] == 20 * MiB)
print(f"10 more 1 MiB tensors: {count(after - before, 'new segment')}; the 20 MiB segment now has "
      f"{count(len(seg20['blocks']), 'block')}, {gml.format_size(seg20['allocated_size'])} allocated")
tail = next(s for s in sim.memory_snapshot() if s["total_size"] == get_allocation_size(round_size(60 * MiB + 1)))
print(f"and {len(tail['blocks']) - 1} of them went into the 2 MiB tail of the "
      f"{gml.format_size(tail['total_size'])} segment: "
      f"the smallest free block that fits wins (best fit, rule 3 below)")

# %% tags=["check"] jupyter={"source_hidden": true}
assert after == before

# %% [markdown]
# ## Rule 3: best fit, same stream (`get_free_block`)
#
# A request first looks in its pool for the **smallest free block that is large enough**, on the
# **same CUDA stream** (ties go to the lowest address). A tensor freed and requested again with
# the same size gets the very same address, and the trace shows no `segment_alloc`.

# %%
address = c.address
del c
c = sim.empty(60 * MiB + 1)      # the same size again (named c again, so this cell can run twice)
print(f"freed at {address:#x}, new tensor at {c.address:#x}: "
      f"{'same block' if c.address == address else 'different block'}")

other_stream = sim.empty(4 * KiB, stream=1)    # the free small-pool space belongs to stream 0
print(f"a small tensor on stream 1 gets its own segment: "
      f"{count(sim.memory_stats()['segment.all.current'], 'segment')} now")

# %% tags=["check"] jupyter={"source_hidden": true}
assert c.address == address
assert len([s for s in sim.memory_snapshot() if s["stream"] == 1]) == 1

# %% [markdown]
# Blocks are kept per stream because a block freed on one stream may still be read by kernels
# queued on that stream; handing it to another stream could overwrite data in use.
# (`tensor.record_stream(s)` tells the allocator about extra streams: the block then waits for
# an event before it becomes free.)
#
# ## Rule 4: free blocks merge with free neighbours (`free_block`, `try_merge_blocks`)
#
# When a block is freed, `free_block` tries to merge it with the blocks just before and after it
# *in the same segment*, if they are free. Free all eleven 1 MiB tensors and the 20 MiB segment
# becomes a single free block again.

# %%
b = None          # the last reference goes, as `del b` does (and this cell can run twice)
more.clear()
seg20 = next(s for s in sim.memory_snapshot() if s["total_size"] == 20 * MiB)
print(f"20 MiB segment after the frees: {[(gml.format_size(bl['size']), bl['state']) for bl in seg20['blocks']]}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert len(seg20["blocks"]) == 1 and seg20["blocks"][0]["state"] == "inactive"

# %% [markdown]
# Merging only ever joins **neighbours in one segment**. Two free blocks in different segments,
# or with a live tensor between them, stay apart; that is where fragmentation comes from
# (notebook 02).
#
# ## Reserved is not allocated
#
# Most tensors are freed by now, a few are still live (the counts below): what the freed ones
# used is still reserved, since the cache keeps it for the next step. This is why `nvidia-smi`
# shows a PyTorch process using far more memory than its live tensors.

# %%
print(f"live tensors: {sim.memory_stats()['allocation.all.current']} of "
      f"{sim.memory_stats()['allocation.all.allocated']} made")
print(f"allocated {gml.format_size(sim.memory_allocated()):>12}  (live tensors)")
print(f"reserved  {gml.format_size(sim.memory_reserved()):>12}  (held by the cache: what nvidia-smi sees)")
print(f"peak reserved {gml.format_size(sim.max_memory_reserved())}, "
      f"peak allocated {gml.format_size(sim.max_memory_allocated())}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert sim.memory_reserved() > sim.memory_allocated()

# %% [markdown]
# ## The trace tells the story
#
# The simulated card records a history like `torch.cuda.memory._record_memory_history()` does.
# `gml.text_trace` reads it as pseudo-Python: `seg_N = cudaMalloc(size)` is a new segment (named
# in the order segments appear), `x = seg_N[offset:size]` a tensor `x` placed `offset` into that
# segment, `del x` its free (the block goes back to the cache, not to the driver). The second
# cell reads a few of the printed lines back.

# %%
trace = gml.text_trace(sim, limit=20)
print(trace)
actions = [e["action"] for e in sim.snapshot()["device_traces"][0] if e["action"] != "snapshot"]
print({a: actions.count(a) for a in sorted(set(actions))})

# %%
import re
lines = trace.splitlines()
placed = [m for m in map(re.compile(r"(\w+) = (seg_\d+)\[(.+?):(.+)\]").fullmatch, lines) if m]
new_seg = next(l for l in lines if "cudaMalloc" in l)
at_start = next(m for m in placed if m[3] == "0")
inside = next(m for m in placed if m[3] != "0")
freed = next((l for l in lines if l.startswith("del ")), None)
print(f"{new_seg!r}: a new segment from the driver")
asked = next(e["size"] for e in sim.snapshot()["device_traces"][0] if e["action"] == "alloc")
print(f"{at_start[0]!r}: tensor {at_start[1]} at offset 0 of {at_start[2]}, {at_start[4]} long: "
      f"the size asked for ({asked:,} bytes), not its block's ({round_size(asked):,} bytes)")
print(f"{inside[0]!r}: tensor {inside[1]} starts {inside[3]} into {inside[2]}")
if freed:
    print(f"{freed!r}: its free; the block stays cached")

# %% tags=["check"] jupyter={"source_hidden": true}
assert actions.count("segment_alloc") == sim.memory_stats()["num_device_alloc"]

# %%
live = sim.memory_stats()["allocation.all.current"]
fig = gml.show(sim, title=f"after the frees: {count(live, 'tensor')} live, the rest cached")
fig

# %%
frag = gml.fragmentation(sim)
print(f"the footer's external fragmentation: 1 - largest free block / free cached = 1 - "
      f"{gml.format_size(frag['largest_free_block_bytes'])} / {gml.format_size(frag['free_bytes'])} = "
      f"{100 * frag['external_fragmentation']:.1f}%: the share of the cached free memory outside its "
      "largest block, which is the most one request can get without a new segment (lesson 02)")

# %% [markdown]
# The 1-byte tensor `a` is the thin blue mark at the start of the 2 MiB small segment: drawn to
# scale it would be 1/4096 of the band, so the map widens every block to a visible minimum.
#
# ## Exercise: three tensors that fill one segment
#
# Change `my_sizes` so that three tensors, all in the large pool, live in one 20 MiB segment of
# a fresh card and `memory_allocated()` reads the whole 20 MiB, although the sizes you ask for
# add up to less (the task says how much less). The check runs your sizes on the simulated GPU.

# %% tags=["exercise"]
gml.exercise("01.ex")
my_sizes = [MiB, MiB, MiB]          # change these
gml.exercise.check("01.ex", my_sizes)

# %% [markdown]
# ## On your GPU: the cache at work
#
# `gml.experiment` runs this lesson's experiment as a seeded scenario on a simulated card of
# `gpu`'s size (the model's prediction) and, when `gpu` (the first cell's `gml.device()`) is a
# real CUDA card, measures it there too, within `gpu`'s memory budget, step by step. Without
# CUDA it says so in one line and shows the prediction alone.

# %%
print(gml.experiment("cache_reuse", gpu))

# %%
gml.quiz("01")
