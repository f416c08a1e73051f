# %% [markdown]
# # 17 · Memory beyond the GPU: pinned host memory and offload
#
# A GPU copies to and from the host fastest, and without blocking the CPU, when the host memory
# is **pinned** (page-locked: the operating system may not move or swap it, so the card's copy
# engine can read it directly). `torch.empty(..., pin_memory=True)`, a `DataLoader` with
# `pin_memory=True`, `tensor.pin_memory()` and `torch.autograd.graph.save_on_cpu(pin_memory=True)`
# all get it from one place: PyTorch's **caching host allocator** (`CachingHostAllocator`), which
# pins with `cudaHostAlloc` and, like the device allocator, keeps freed blocks cached for reuse.
#
# Pinned memory is memory the rest of the machine cannot have. In 2026 a serving engine pinned a
# staging buffer per GPU and found much more of the host gone than it asked for
# (sgl-project/sglang#36562). This lesson runs the kit's model of that allocator (torch 2.13's
# rules, `docs/ALLOCATOR.md`, "Pinned host memory") on the simulated card:
#
# 1. How much does one big pinned request really pin?
# 2. When a pinned buffer is freed while a non-blocking copy from it is still queued, where does
#    the next pinned buffer go?
# 3. Which requests does the rounding setting leave unrounded?
# 4. Offloading activations to the host, or checkpointing them: what does each cost on a card
#    that is too small?

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
from gpumemlab.lessons import memory_beyond_the_gpu as lesson
GiB, MiB, fmt = gml.GiB, gml.MiB, gml.format_size

# %% [markdown]
# ## 1 · One big pinned buffer
#
# The engine asks for one pinned buffer of 20.4 GiB (its byte count is printed below), with the
# default settings. How many bytes of host memory does the caching host allocator pin for it?

# %%
print(f"request: {lesson.REQUEST_17:,} bytes ({fmt(lesson.REQUEST_17)})")

# %% tags=["predict"]
gml.predict("17.p1", "How much host memory is pinned for the 20.4 GiB request?")

# %%
sim = gml.SimulatedGPU("80GiB", alloc_conf="")
buf = sim.pin(lesson.REQUEST_17)          # torch.empty(n, dtype=torch.uint8, pin_memory=True)
pinned = sim.host_pinned_bytes()
stats = sim.host_memory_stats()
print(f"pinned: {pinned:,} bytes ({fmt(pinned)}); cudaHostAlloc calls: {stats['num_host_alloc']}")
print(f"unused by the request: {fmt(pinned - lesson.REQUEST_17)} "
      f"({100 * (pinned - lesson.REQUEST_17) / pinned:.2f}% of the block)")
print(f"on a node of 4 GPUs, one such buffer each: {fmt(4 * (pinned - lesson.REQUEST_17))} "
      "pinned and never used")
gml.reveal("17.p1", pinned)
buf.free()

# %% tags=["check"] jupyter={"source_hidden": true}
assert pinned == 32 * GiB and stats["num_host_alloc"] == 1

# %% [markdown]
# The block is the request rounded **up to the next power of two** (`roundSize` in c10's
# `CachingHostAllocator.h`, `c10::llvm::PowerOf2Ceil`). The reason is reuse: freed blocks are
# kept in one free list per power of two, and a rounded block can serve any later request of its
# bucket. For small staging buffers that is cheap; for one buffer of tens of GiB it is not, and
# no other process can have what the rounding adds. The worst case is a request just above a
# power of two:

# %%
for over in (16 * GiB + 1, 16 * GiB + 512 * MiB):
    block = gml.SimulatedGPU("80GiB", alloc_conf="").pin(over).size
    print(f"request {over:,} bytes ({fmt(over)}): pins {block:,} bytes ({fmt(block)}), "
          f"{block / over:.12f} times the request, twice the request less "
          f"{2 * over - block:,} bytes; never used: {block - over:,} bytes "
          f"({100 * (block - over) / block:.10f}% of the block)")

# %% [markdown]
# One byte above 16 GiB pins twice the request less two bytes: the unused part of a block is
# always under half of it, and the block always under twice the request.
#
# ## 2 · A pinned buffer freed before its copy has run
#
# A 6 MiB pinned staging buffer is copied to the card with `non_blocking=True`; the CPU runs on
# while the copy is queued on the stream. Then the staging buffer is freed, and the next batch
# asks for a 6 MiB pinned buffer at once, before the stream has run its copy. Where does the
# second buffer go: into the block just freed, or a block pinned for it?

# %% tags=["predict"]
gml.predict("17.p2", "The copy is still queued: where does the second staging buffer go?",
            choices=["the freed block", "a new block"])


# %%
def queued_copy():
    """A staging buffer freed while its copy to the card is still queued, then a second one
    pinned: (card, the first buffer's address, the second buffer, the card's tensor)."""
    card = gml.SimulatedGPU("8GiB", alloc_conf="", record_pinned_host_memory=True)
    staging = card.pin(6 * MiB)
    on_card = card.empty(6 * MiB)
    card.copy_(on_card, staging, non_blocking=True)    # on_card.copy_(staging, non_blocking=True)
    first = staging.address
    staging.free()                                     # freed, but the copy has not run yet
    second = card.pin(6 * MiB)
    return card, first, second, on_card

copying, first, second, on_card = queued_copy()
reused = second.address == first
copy_allocs = copying.host_memory_stats()["num_host_alloc"]
queued_snapshot = copying.snapshot()               # kept for the map: the cells below move on
print(f"first staging block at {first:#x}; the second at {second.address:#x}: "
      f"{'the freed block' if reused else 'a new block'}")
print(f"pinned now: {fmt(copying.host_pinned_bytes())}; cudaHostAlloc calls: {copy_allocs}")
gml.reveal("17.p2", "the freed block" if reused else "a new block")

# %% tags=["check"] jupyter={"source_hidden": true}
assert not reused and copy_allocs == 2

# %% [markdown]
# The copy recorded an **event** on the stream against the host block
# (`CachingHostAllocator_recordEvent`, called by `copy_` for a non-blocking copy from pinned
# memory). A freed block with events outstanding is not put on its free list until
# `process_events` sees them complete, so the second request pinned another block. The host map
# draws one row per free list (here the 8 MiB list: 6 MiB rounds up to 8 MiB) and splits its
# bytes into what was asked for, rounding, blocks waiting for an event, and cached free blocks.

# %%
fig = gml.show(queued_snapshot, host=True, title="before synchronize(): the first block awaits the copy")
before = fig.gml_host
fig

# %%
print(f"before synchronize(): awaiting an event {fmt(before['awaiting_event_bytes'])}, "
      f"cached free {fmt(before['cached_free_bytes'])}, "
      f"rounding {fmt(before['rounding_waste_bytes'])} of {fmt(before['pinned_bytes'])} pinned")

# %% [markdown]
# Once the stream has run its work (`synchronize()` here), the event is complete. The next
# pinned request runs `process_events` first, finds the block on its free list and takes it.

# %%
copying, first, second, on_card = queued_copy()    # 17.p2's card again, so this cell can run twice
copying.synchronize()
third = copying.pin(6 * MiB)
third_reuses = (third.address == first, copying.host_memory_stats()["num_host_alloc"])
print(f"after synchronize(): the third buffer at {third.address:#x} "
      f"({'the first block' if third_reuses[0] else 'another block'}); cudaHostAlloc "
      f"calls still {third_reuses[1]}")
second.free()
fig = gml.show(copying, host=True, title="after synchronize(): nothing awaits an event")
after = fig.gml_host
fig

# %%
print(f"after synchronize() and freeing the second: awaiting an event "
      f"{fmt(after['awaiting_event_bytes'])}, cached free {fmt(after['cached_free_bytes'])}, "
      f"still pinned {fmt(after['pinned_bytes'])}")
copying.host_empty_cache()                         # torch.accelerator.empty_host_cache()
pinned_left = copying.host_pinned_bytes()
print(f"after host_empty_cache(): pinned {fmt(pinned_left)} (the third buffer is live)")

# %% tags=["check"] jupyter={"source_hidden": true}
assert third_reuses == (True, 2)
assert before["awaiting_event_bytes"] == 8 * MiB and after["awaiting_event_bytes"] == 0
assert after["cached_free_bytes"] == 8 * MiB and pinned_left == 8 * MiB

# %% [markdown]
# Cached pinned blocks stay pinned: the host allocator never gives them back on its own, not even
# when a later `cudaHostAlloc` fails. On a host that can pin 80 MiB, a 32 MiB buffer is pinned and
# freed (its block stays cached), then a 48 MiB one is asked for:

# %%
from gpumemlab.devices.host_api import HostOutOfMemoryError
sim = gml.SimulatedGPU("8GiB", alloc_conf="", host_memory="80MiB")
sim.pin(32 * MiB).free()
try:
    sim.pin(48 * MiB)
    failed = None
except HostOutOfMemoryError as exc:
    failed = exc
print(f"the 48 MiB pin: {failed or 'fitted'}")
print(f"still pinned after the failure: {fmt(sim.host_pinned_bytes())} (the cached block)")
sim.host_empty_cache()                             # torch.accelerator.empty_host_cache()
retry = sim.pin(48 * MiB)
retried_pinned = sim.host_pinned_bytes()
print(f"after host_empty_cache(), the same pin: {fmt(retry.size)} pinned, "
      f"{fmt(retried_pinned)} in all")

# %% tags=["check"] jupyter={"source_hidden": true}
assert failed is not None and retry.size == 64 * MiB and retried_pinned == 64 * MiB

# %% [markdown]
#
# ## 3 · Capping the rounding: `pinned_max_round_threshold_mb`
#
# PyTorch 2.13 added a setting, `PYTORCH_ALLOC_CONF=pinned_max_round_threshold_mb:64`. With it set
# to 64, a program pins two buffers, one of 40 MiB and one of 100 MiB. How much host memory do
# the two pin together?

# %% tags=["predict"]
gml.predict("17.p3", "With the threshold at 64 MiB: pinned for the 40 MiB and 100 MiB buffers?")

# %%
conf = f"pinned_max_round_threshold_mb:{lesson.THRESHOLD_17}"
sim = gml.SimulatedGPU("8GiB", alloc_conf=conf)
bufs = [sim.pin(n) for n in lesson.SWEEP_17]
for b in bufs:
    print(f"{fmt(b.nbytes):>10} requested -> {fmt(b.size):>10} pinned")
together = sim.host_pinned_bytes()
print(f"together: {fmt(together)}")
gml.reveal("17.p3", together)

# %% tags=["check"] jupyter={"source_hidden": true}
assert together == 64 * MiB + 100 * MiB


# %% [markdown]
# Derive the rule from the model: requests on both sides of the threshold, pinned with and
# without it.

# %%
def pinned_for(nbytes, alloc_conf):
    s = gml.SimulatedGPU("8GiB", alloc_conf=alloc_conf, record_history=False)
    return s.pin(nbytes).size

around = [63 * MiB, 64 * MiB, 64 * MiB + 1, 65 * MiB, 100 * MiB]
print(f"{'request (bytes)':>16} {'pinned, default':>16} {'pinned, ' + conf:>42}")
for n in around + [lesson.REQUEST_17]:
    print(f"{n:>16,} {pinned_for(n, ''):>16,} {pinned_for(n, conf):>42,}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert pinned_for(64 * MiB, conf) == 64 * MiB and pinned_for(64 * MiB + 1, conf) == 64 * MiB + 1
assert pinned_for(63 * MiB, conf) == 64 * MiB and pinned_for(65 * MiB, "") == 128 * MiB
assert pinned_for(lesson.REQUEST_17, conf) == lesson.REQUEST_17

# %% [markdown]
# The rule, as the table shows it: a request **at most** the threshold is still rounded up to a
# power of two; a request **above** it is pinned at its exact size (the third row: 64 MiB and
# one byte).
# So the threshold caps the waste of big buffers and keeps small ones in their reusable buckets.
# Over many request sizes (every size from 1 MiB to 120 MiB, in steps of 7 MiB):

# %%
sizes = range(1 * MiB, 121 * MiB, 7 * MiB)
for name, c in (("default", ""), (conf, conf)):
    pinned_total = sum(pinned_for(n, c) for n in sizes)
    waste = pinned_total - sum(sizes)
    print(f"{name:>32}: pinned {fmt(pinned_total)} for {fmt(sum(sizes))} requested, "
          f"rounding waste {fmt(waste)} ({100 * waste / pinned_total:.1f}%)")
worst, worst_at = max((pinned_for(n, conf) - n, n) for n in sizes)
print(f"with the threshold, the largest waste of one request: {fmt(worst)} "
      f"(a request of {fmt(worst_at)} pinned as {fmt(pinned_for(worst_at, conf))})")
print(f"only requests of at most {lesson.THRESHOLD_17} MiB are rounded, and a rounded request "
      f"wastes less than half its block, so with the threshold no request wastes "
      f"{fmt(lesson.THRESHOLD_17 * MiB // 2)} or more")

# %% tags=["check"] jupyter={"source_hidden": true}
assert sum(pinned_for(n, conf) for n in sizes) < sum(pinned_for(n, "") for n in sizes)
assert worst < lesson.THRESHOLD_17 * MiB // 2

# %% [markdown]
# `pinned_max_cached_size_mb` is the other cap: a block above it is neither rounded nor cached,
# so freeing it unpins it at once, and the next pin pays a `cudaHostAlloc` again. Four buffers of
# 70 to 73 MiB, each pinned and freed in turn:

# %%
from gpumemlab.viz.words import count   # count(1, "cudaHostAlloc call") -> "1 cudaHostAlloc call"

def pin_and_free(sizes, alloc_conf):
    s = gml.SimulatedGPU("8GiB", alloc_conf=alloc_conf, record_history=False)
    for n in sizes:
        s.pin(n).free()
    return s.host_memory_stats()["num_host_alloc"], s.host_pinned_bytes()

growing = [70 * MiB, 71 * MiB, 72 * MiB, 73 * MiB]
for c in ("", "pinned_max_cached_size_mb:64"):
    calls, left = pin_and_free(growing, c)
    print(f"{c or 'default':>28}: {count(calls, 'cudaHostAlloc call')}, {fmt(left)} still pinned after "
          "the last free")

# %% tags=["check"] jupyter={"source_hidden": true}
assert pin_and_free(growing, "") == (1, 128 * MiB)
assert pin_and_free(growing, "pinned_max_cached_size_mb:64") == (len(growing), 0)

# %% [markdown]
# The doctor reads a failed pin as a host failure, with the rounding and a threshold below the
# request (the 48 MiB pin of section 2's end, under the default settings: no threshold, so that
# pin was rounded):

# %%
diagnosis = gml.doctor(failed)
print(diagnosis.summary)
threshold_fix = next(f for f in diagnosis.fixes if f.name == "pinned_max_round_threshold_mb")
print(f"its first fix: {threshold_fix.how}; under it the 48 MiB request pins "
      f"{fmt(pinned_for(48 * MiB, threshold_fix.alloc_conf))}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert pinned_for(48 * MiB, threshold_fix.alloc_conf) == 48 * MiB

# %% [markdown]
# ## 4 · Offload or recompute, on a card that is too small
#
# A step of the kit's model: weights of 512 MiB, 8 layers, each saving a 24 MiB activation for
# backward and passing a 3 MiB input on; the card has 640 MiB. Three ways to run it:
# **keep** the activations on the card; **checkpoint** (keep only each layer's input and run the
# layer again in backward); **offload** (`save_on_cpu(pin_memory=True)`: copy each activation to
# a pinned host buffer in forward, and back in backward). At the peak of the offloaded step, how
# much host memory is pinned?

# %%
step = lesson.STEP_17
print(f"weights {fmt(step['weights'])}, {step['layers']} layers, activation "
      f"{fmt(step['act_bytes'])} a layer, input {fmt(step['input_bytes'])} a layer; card "
      f"{fmt(gml.parse_size(lesson.CARD_17))}")

# %% tags=["predict"]
gml.predict("17.p4", "Offloaded step: pinned host memory at its peak?")

# %%
runs = lesson.compare_17()
print(f"{'mode':>10} {'device peak':>12} {'host pinned':>12} {'extra FLOPs':>12} "
      f"{'moved':>10}  result")
for mode, r in runs.items():
    print(f"{mode:>10} {fmt(r['device_peak_reserved_bytes']):>12} {fmt(r['host_peak_bytes']):>12} "
          f"{r['extra_compute']:>12.0%} {fmt(r['moved_bytes']):>10}  "
          f"{'OOM' if r['oom'] else 'fits'}")
off = runs["offload"]
print("offload's copies at nominal bandwidth: " + ", ".join(
    f"{ms:.1f} ms a step over {name}" for name, ms in off["copy_ms"].items()))
gml.reveal("17.p4", off["host_peak_bytes"])
keep = runs["keep"]
print(f"keep fails: {keep['oom'].split(' Of the allocated')[0]}")
print(f"kept on the card, the weights and all {step['layers']} activations need "
      f"{fmt(step['weights'] + step['layers'] * step['act_bytes'])}, more than the card's "
      f"{fmt(gml.parse_size(lesson.CARD_17))}; the peak it reached first: "
      f"{fmt(keep['device_peak_reserved_bytes'])}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert runs["keep"]["oom"] and not runs["checkpoint"]["oom"] and not off["oom"]
assert off["host_peak_bytes"] == 8 * 32 * MiB
assert off["device_peak_reserved_bytes"] < runs["checkpoint"]["device_peak_reserved_bytes"]

# %% [markdown]
# Both fit the card. Checkpointing pays in arithmetic (each layer's forward again: a third of
# the layer work, with backward at twice a forward as the kit's model counts it) and keeps each
# layer's input on the card. Offload pays in copies over the link and in pinned host memory,
# rounded like any pinned request (one activation's block below). With the threshold below the
# activation size the same step pins only what it offloads, each activation at its exact size
# (the table's "moved" is twice that: every activation goes out in forward and back in
# backward):

# %%
print(f"one activation: {fmt(lesson.STEP_17['act_bytes'])} requested, "
      f"{fmt(pinned_for(lesson.STEP_17['act_bytes'], ''))} pinned")
capped = lesson.compare_17(alloc_conf="pinned_max_round_threshold_mb:16")["offload"]
print(f"offload with pinned_max_round_threshold_mb:16: host pinned {fmt(capped['host_peak_bytes'])}"
      f" (default rounding: {fmt(off['host_peak_bytes'])})")

# %% tags=["check"] jupyter={"source_hidden": true}
assert capped["host_peak_bytes"] == lesson.STEP_17["layers"] * lesson.STEP_17["act_bytes"]
assert 2 * capped["host_peak_bytes"] == off["moved_bytes"] == capped["moved_bytes"]

# %% [markdown]
# ## Exercise: which activations to offload to a small host
#
# A larger step saves activations of twenty different sizes (`EX_ACTS_17`), and the host can pin
# only part of them (`EX_HOST_17`, under section 3's threshold of 64 MiB). Each layer either
# offloads its activation or is checkpointed and recomputed. Which layers should offload, so
# that the step runs and recomputes at most `RECOMPUTE_AT_MOST_17()` bytes of activations?
# Reason from what each activation pins, not from its size. The check runs your plan on the
# simulated card and host (`planned_step_17(layers)`).

# %% tags=["exercise"]
from gpumemlab.lessons.memory_beyond_the_gpu import EX_ACTS_17, EX_HOST_17, RECOMPUTE_AT_MOST_17
gml.exercise("17.ex")
print(f"{len(EX_ACTS_17)} activations (MiB): {[round(a / MiB, 2) for a in EX_ACTS_17]}")
print(f"host pins at most {fmt(EX_HOST_17)}; recompute at most {fmt(RECOMPUTE_AT_MOST_17())}")
my_offloaded = []            # change this: the numbers of the layers that offload (0 is the first)
gml.exercise.check("17.ex", my_offloaded)

# %% [markdown]
# ## On your GPU: offloaded activations leave one on the card
#
# `gml.experiment` runs this lesson's experiment as a seeded scenario on a simulated card of
# `gpu`'s size (the model's prediction) and, when `gpu` is a real CUDA card, measures the device
# side there too (the activations made, offloaded and brought back one at a time), within
# `gpu`'s memory budget. Without CUDA it says so in one line and shows the prediction alone.

# %%
print(gml.experiment("offload_activations", gpu))
from gpumemlab.devices.scenarios import device_chunk
print(f"each activation of the scenario: {fmt(device_chunk(gpu, 16))} (the card's "
      f"{fmt(gpu.total_memory)} / 16, rounded down to 2 MiB), so the peak is one activation; a "
      "step is one allocation or one free (four activations made and freed in forward, four "
      "brought back and freed in backward) or the final synchronize()")

# %% [markdown]
# ## What to take away
#
# * The caching host allocator rounds every pinned request up to a power of two by default: one
#   big buffer can pin nearly twice its size (16 GiB and one byte pins 32 GiB).
# * `pinned_max_round_threshold_mb` (PyTorch 2.13+) pins requests above it at their exact size;
#   requests at or below it are still rounded.
# * A pinned block used by a non-blocking copy is not reused until the copy's event completes;
#   cached pinned blocks stay pinned until `torch.accelerator.empty_host_cache()`.
# * Offload trades device memory for copies and pinned host memory; checkpointing trades it for
#   arithmetic. Count the host side with the rounding.

# %%
gml.quiz("17")
