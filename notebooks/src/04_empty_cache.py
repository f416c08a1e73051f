# %% [markdown]
# # 04 · `empty_cache()`: what it gives back, and what it cannot fix
#
# `torch.cuda.empty_cache()` is the first thing people try after an OOM. It calls the
# allocator's `emptyCache`, which runs `release_cached_blocks`:
#
# 1. `synchronize_and_free_events`: wait for every stream that still uses a freed block;
# 2. `release_blocks` on the large pool, then the small pool: every free block that is a
#    **whole segment** (no neighbour on either side, `block->prev == nullptr && block->next == nullptr`)
#    goes to `release_block`, which calls `cudaFree`.
#
# So it returns **whole free segments only**. Free blocks inside a segment that still holds a
# live tensor stay cached. And live tensors are never touched. This notebook measures each
# consequence.

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
# ## Whole free segments go back
#
# Four tensors in four segments (three in the large pool, one in the small pool), all freed:
# the memory stays reserved until `empty_cache()`. Afterwards reserved is zero, and the driver's
# free memory (what other processes, and `nvidia-smi`, see) is back to the full card.

# %%
GiB, MiB, KiB = gml.GiB, gml.MiB, gml.KiB
sim = gml.SimulatedGPU("8GiB", alloc_conf="")
ts = [sim.empty(n) for n in (3 * GiB, 500 * MiB, 4 * MiB, 4 * KiB)]
pool_of = {seg["address"]: seg["segment_type"] for seg in sim.memory_snapshot()}
ts.clear()
print(f"after del:         allocated {gml.format_size(sim.memory_allocated())}, "
      f"reserved {gml.format_size(sim.memory_reserved())}, driver free {gml.format_size(sim.mem_get_info()[0])}")
syncs = sim.memory_stats()["num_sync_all_streams"]
sim.empty_cache()
released = sim.memory_stats()                  # kept: later cells make cards of their own
released_reserved = sim.memory_reserved()
print(f"after empty_cache: allocated {gml.format_size(sim.memory_allocated())}, "
      f"reserved {gml.format_size(released_reserved)}, driver free {gml.format_size(sim.mem_get_info()[0])}")
print(f"cudaFree calls: {released['num_device_free']}, device-wide syncs: {released['num_sync_all_streams'] - syncs}")
frees = [e for e in sim.snapshot()["device_traces"][0] if e["action"] == "segment_free"]
print("segment_free order:", ", ".join(f"{gml.format_size(e['size'])} ({pool_of[e['addr']]})" for e in frees))

# %% tags=["check"] jupyter={"source_hidden": true}
assert released_reserved == 0 and released["num_device_free"] == 4
assert released["num_sync_all_streams"] == syncs + 1
assert [pool_of[e["addr"]] for e in frees] == ["large", "large", "large", "small"]

# %% [markdown]
# The order is c10's: `release_cached_blocks` empties the large pool first, then the small pool,
# and each pool is kept sorted by size, so the smallest large segment goes first.
#
# ## A single live tensor
#
# One 1-byte tensor lives in a small-pool segment; the rest of that segment is free. What does
# `empty_cache()` leave reserved?

# %% tags=["predict"]
gml.predict("04.p1", "One live 1-byte tensor, then empty_cache(): how much stays reserved?")

# %%
sim = gml.SimulatedGPU("8GiB", alloc_conf="")   # an empty card, as the cell above left its own
tiny = sim.empty(1)
sim.empty_cache()
print(f"with one live byte:  reserved {gml.format_size(sim.memory_reserved())}")
gml.reveal("04.p1", sim.memory_reserved())
pinned = sim.memory_reserved()
del tiny
sim.empty_cache()
left = sim.memory_reserved()
print(f"after del + empty_cache: {'nothing' if left == 0 else gml.format_size(left)} reserved")

# %% tags=["check"] jupyter={"source_hidden": true}
assert pinned == 2 * MiB
assert left == 0

# %% [markdown]
# A single live tensor pins its segment: `release_blocks` frees only a block that is a whole
# segment (no neighbour). The 2 MiB segment was split, its free part had the live byte as
# neighbour, so it stayed.

# %% [markdown]
# ## It cannot fix fragmentation
#
# Rebuild the fragmented card of notebook 02: one 7 GiB segment, alternating free and live
# 1 GiB blocks, 4 GiB of them free and cached. Apply the rule you just saw (what
# `release_blocks` frees) to this card before you run it.

# %% tags=["predict"]
gml.predict("04.p2", "On the fragmented card (4 GiB cached free), how much will empty_cache() return to the driver?")


# %%
def fragmented_card():
    card = gml.SimulatedGPU("8GiB", alloc_conf="")
    warm = card.empty(7 * GiB)
    del warm
    blocks = [card.empty(GiB) for _ in range(7)]
    keep = [b for i, b in enumerate(blocks) if i % 2 == 1]   # tensors 1, 3, 5 stay alive
    return card, keep

card, keep = fragmented_card()
m = gml.fragmentation(card.snapshot(), total_memory=card.total_memory)
print(f"free cache {m.formatted('free_bytes')}, of which non-releasable {m.formatted('non_releasable_bytes')}")
print(f"inactive_split_bytes stat: {gml.format_size(card.memory_stats()['inactive_split_bytes.all.current'])}")
reserved_before = card.memory_reserved()
card.empty_cache()
print(f"reserved before {gml.format_size(reserved_before)}, after empty_cache {gml.format_size(card.memory_reserved())}")
gml.reveal("04.p2", reserved_before - card.memory_reserved())
try:
    x = card.empty(2 * GiB)
    failed = False
except gml.OutOfMemoryError as err:
    failed = True
    print("still:", str(err).split(". If")[0])

# %% [markdown]
# All of the free cache sits inside the one 7 GiB segment, which still holds live tensors, so
# `empty_cache()` has no whole free segment to return, and the 2 GiB request fails exactly as
# before. The fragmentation metrics predicted it: `non_releasable_bytes` (PyTorch's
# `inactive_split_bytes`, the *Non-releasable memory* row of `memory_summary`) is all of the free
# cache.

# %% tags=["check"] jupyter={"source_hidden": true}
assert card.memory_reserved() == reserved_before and failed
assert m["non_releasable_bytes"] == m["free_bytes"] == 4 * GiB

# %% [markdown]
# The block map after `empty_cache()`: every free (grey) block sits between live ones in the
# one segment, so nothing was whole and free, and no grey block holds the 2 GiB request.

# %%
fig = gml.show(card, request=2 * GiB, title="fragmented card after empty_cache()")
after_release_text = fig.gml_blockmap["request_text"]
fig

# %% tags=["check"] jupyter={"source_hidden": true}
_verdict = after_release_text
assert "cudaMalloc(2.00 GiB) fails" in _verdict and _verdict.endswith("raises OutOfMemoryError")
assert "none here: every segment holds a live block" in _verdict

# %%
print(card.memory_summary(abbreviated=True))

# %% [markdown]
# ## The OOM path already calls it for you
#
# Before it raises, `malloc` runs `release_cached_blocks` itself and retries `cudaMalloc`
# (it counts the retry in `num_alloc_retries`). So calling `empty_cache()` right before a big
# allocation, in the same process, changes nothing that the allocator would not do anyway;
# it only costs a device synchronization every time.
#
# Two 3 GiB tensors die and stay cached as two segments. A 5 GiB request fits neither cached
# block and the driver has too little left, so the first `cudaMalloc` fails; the automatic
# release frees both whole segments and the retry succeeds.

# %%
sim = gml.SimulatedGPU("8GiB", alloc_conf="")
a, b = sim.empty(3 * GiB), sim.empty(3 * GiB)
del a, b
big = sim.empty(5 * GiB)       # no manual empty_cache()
retried = sim.memory_stats()
print(f"5 GiB allocated; num_alloc_retries = {retried['num_alloc_retries']}, "
      f"segments freed by the retry path = {retried['num_device_free']}, OOMs = {retried['num_ooms']}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert retried["num_alloc_retries"] == 1 and retried["num_device_free"] == 2 and retried["num_ooms"] == 0


# %% [markdown]
# ## The cost of calling it every step
#
# Notebook 01 measured it: with `empty_cache()` after every step the allocator loses its cache
# and pays `cudaMalloc`/`cudaFree` again each step, plus a device-wide synchronization each time.
# Here is the count for a loop of 20 steps with one 512 MiB activation and a few temporaries.

# %%
def loop(call_empty_cache, steps=20):
    card = gml.SimulatedGPU("8GiB", alloc_conf="")
    for step in range(steps):
        card.set_memory_metadata(f"step {step}")     # marks the steps in the trace (the timeline's x)
        act = card.empty(512 * MiB)
        tmps = [card.empty(n * MiB) for n in (3, 40, 96)]
        del act, tmps
        if call_empty_cache:
            card.empty_cache()
    return card

loops = {flag: loop(flag) for flag in (False, True)}
for flag, looped in loops.items():
    s = looped.memory_stats()
    print(f"empty_cache each step = {flag!s:5}: cudaMalloc {s['num_device_alloc']:3}, "
          f"cudaFree {s['num_device_free']:3}, device syncs {s['num_sync_all_streams']:3}")
loops_fig = gml.timeline([loops[False], loops[True]], labels=["cache kept", "empty_cache() every step"])
loops_fig

# %% tags=["check"] jupyter={"source_hidden": true}
assert [d.get("x_unit") for d in loops_fig.gml_timeline] == ["step", "step"]   # one x-axis in steps
assert loops_fig.axes[0].get_xlim() == loops_fig.axes[1].get_xlim()

# %% tags=["check"] jupyter={"source_hidden": true}
assert loops[True].memory_stats()["num_device_alloc"] > 10 * loops[False].memory_stats()["num_device_alloc"]

# %% [markdown]
# In the lower panel reserved memory falls to zero at every grey rule (an `empty_cache()`
# releasing segments) and climbs again with new `cudaMalloc` calls; in the upper panel the
# segments are made once and reused.

# %% [markdown]
# ## When it does help: sharing the card
#
# The cache is private to PyTorch's allocator. Anything else on the GPU allocates from the
# driver: another process, another framework in the same process, a library that calls
# `cudaMalloc` directly (NCCL buffers, some cuDNN/cuBLAS workspaces). Memory that PyTorch holds
# but does not use is invisible to them. After a phase that left big whole segments cached (an
# evaluation pass, a one-off peak), `empty_cache()` hands them back to the driver where those
# others can get it.
#
# Below, `driver.cuda_malloc` stands in for another process asking the driver for 5 GiB.

# %%
sim = gml.SimulatedGPU("8GiB", alloc_conf="")
peak = sim.empty(6 * GiB)          # an evaluation pass with a big batch
del peak                           # over: 6 GiB cached, unused
other = sim.allocator.driver.cuda_malloc(5 * GiB)
print(f"other process, before empty_cache: {'got 5 GiB' if other else 'cudaMalloc failed'} "
      f"(driver free {gml.format_size(sim.mem_get_info()[0])})")
sim.empty_cache()
other = sim.allocator.driver.cuda_malloc(5 * GiB)
print(f"other process, after empty_cache:  {'got 5 GiB' if other else 'cudaMalloc failed'} "
      f"(driver free {gml.format_size(sim.mem_get_info()[0])})")

# %% tags=["check"] jupyter={"source_hidden": true}
assert other is not None

# %% [markdown]
# ## Recovering from an OOM: where the retry runs
#
# A common pattern catches the OOM exception and retries with a smaller batch. Where the retry
# runs matters. While Python is inside `except ... as err:`, `err.__traceback__` holds the frames
# the error passed through, and every frame holds its local variables: the activations the failed
# step had already made are still alive, and neither the allocator nor `empty_cache()` can touch
# live tensors. Only when the `except` block ends does Python drop `err`, and with it the frames.
#
# The step below makes three activations of 256 MiB per sample and then an output of 512 MiB per
# sample. Batch 8 needs 10 GiB on an 8 GiB card and fails at the output, with its 6 GiB of
# activations made. Batch 4 alone needs 5 GiB.

# %% tags=["predict"]
gml.predict("04.p3", "Batch 8 failed; the retry with batch 4 runs INSIDE the except block. Does it fit?",
            choices=["yes", "no: out of memory"])


# %%
def train_step(card, batch):
    acts = [card.empty(batch * 256 * MiB) for _ in range(3)]
    out = card.empty(batch * 512 * MiB)          # batch 8: OOM here, with `acts` alive
    return out

def retry_inside(card):
    try:
        return train_step(card, 8), "batch 8"
    except gml.OutOfMemoryError:
        held = card.memory_allocated()           # what the traceback's frames keep alive
        try:
            return train_step(card, 4), f"batch 4 inside except (held {gml.format_size(held)})"
        except gml.OutOfMemoryError:
            return None, f"batch 4 inside except: OOM again (held {gml.format_size(held)})"

def retry_after(card):
    try:
        return train_step(card, 8), "batch 8"
    except gml.OutOfMemoryError:
        pass                                     # leave the block: Python drops the error here
    held = card.memory_allocated()               # the frames are gone with `err`
    return train_step(card, 4), f"batch 4 after the except block (held {gml.format_size(held)})"

recovery = {}
for name, attempt in (("inside", retry_inside), ("after", retry_after)):
    card_r = gml.SimulatedGPU("8GiB", alloc_conf="")
    out, story = attempt(card_r)
    st = card_r.memory_stats()
    recovery[name] = (out is not None, card_r)
    print(f"retry {name:6}: {story}: {'fits' if out is not None else 'fails'}; "
          f"allocated {gml.format_size(card_r.memory_allocated())}, "
          f"reserved {gml.format_size(card_r.memory_reserved())}, OOMs {st['num_ooms']}")
    del out
gml.reveal("04.p3", "yes" if recovery["inside"][0] else "no: out of memory")

# %% tags=["check"] jupyter={"source_hidden": true}
assert not recovery["inside"][0] and recovery["after"][0]
assert recovery["inside"][1].memory_stats()["num_ooms"] == 2
assert recovery["after"][1].memory_stats()["num_ooms"] == 1

# %% [markdown]
# Inside the block, batch 4's 5 GiB had to fit beside the 6 GiB the failed step still held, and
# the allocator's own flush (the retry path above) could not free live tensors. After the block
# the same request fits, served partly from the segments the dead activations left in the cache.
# The recipe: in the `except`, only record that it failed (and perhaps dump a snapshot); leave
# the block; then retry smaller. In a notebook an uncaught OOM keeps its frames too, in
# `sys.last_traceback`, until the next error replaces it.

# %% [markdown]
# ## Summary
#
# | `empty_cache()` ... | |
# |---|---|
# | returns | whole free segments (`release_blocks` → `release_block` → `cudaFree`) |
# | keeps | free blocks inside segments with a live tensor (`inactive_split_bytes`) |
# | never touches | live tensors |
# | costs | a device-wide sync, and `cudaMalloc` again on the next allocations |
# | helps | other processes/libraries on the same GPU; `nvidia-smi` readings |
# | does not help | fragmentation OOMs (the OOM path already released what it could) |
#
# For fragmentation itself, see notebooks 05 and 06.
#
# ## Exercise: when to call `empty_cache()`
#
# Six phases on an 8 GiB card: phase 0 an evaluation pass with a 6 GiB tensor, phases 1 to 5
# training with a 1.5 GiB tensor, each tensor dying at the end of its phase. After phase 2 another
# process asks the driver for 5 GiB. After which phases should the program call `empty_cache()`,
# so that the other process gets its memory with as few `cudaMalloc` calls as possible? The check
# runs your choice and every other choice on the simulated GPU.

# %% tags=["exercise"]
gml.exercise("04.ex")
my_calls = []            # change this: the phases (0..5) after which to call empty_cache()
gml.exercise.check("04.ex", my_calls)

# %% [markdown]
# ## On your GPU: what `empty_cache()` returns
#
# `gml.experiment` runs this lesson's experiment as a seeded scenario on a simulated card of
# `gpu`'s size (the model's prediction) and, when `gpu` (the first cell's `gml.device()`) is a
# real CUDA card, measures it there too, within `gpu`'s memory budget, step by step. Without
# CUDA it says so in one line and shows the prediction alone.

# %%
print(gml.experiment("empty_cache", gpu))

# %%
gml.quiz("04")
