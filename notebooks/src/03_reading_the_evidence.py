# %% [markdown]
# # 03 · Reading the evidence
#
# When memory runs out, PyTorch gives you four kinds of evidence:
#
# 1. **`torch.cuda.memory_summary()`**: a table of allocated, active, reserved and
#    non-releasable memory, current and peak;
# 2. **`torch.cuda.memory_stats()`**: the same counters as a flat dict, for code;
# 3. **memory snapshots** (`torch.cuda.memory._record_memory_history()` then
#    `torch.cuda.memory._snapshot()` / `_dump_snapshot("file.pickle")`): every segment and block,
#    with the Python stack that allocated it, plus a trace of events;
# 4. the **views** built on snapshots: a block map, a timeline, fragmentation figures.
#
# We produce all four for a small, training-like program on a simulated card, learn to read
# them, and find out who holds the memory.

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
# ## A program to investigate
#
# Named functions, so that the recorded stacks say who allocated what: weights, a forward pass
# that keeps activations and makes temporaries, a backward pass that makes gradients while it
# frees activations, and an Adam-like step that creates two state tensors per weight.

# %%
import random
MiB, KiB, GiB = gml.MiB, gml.KiB, gml.GiB
rng = random.Random(0)
LAYERS = 8
weight_sizes = [rng.randint(4, 48) * MiB + rng.randrange(0, 4096, 4) for _ in range(LAYERS)]
act_sizes = [rng.randint(8, 96) * MiB + rng.randrange(0, 4096, 4) for _ in range(LAYERS)]

def load_model(card):
    return [card.empty(n) for n in weight_sizes]

def forward(card):
    acts = []
    for n in act_sizes:
        acts.append(card.empty(n))           # kept for backward
        tmp = card.empty(n // 3 + 512)       # e.g. a GELU intermediate
        del tmp
    return acts

def backward(card, acts):
    grads = []
    for n in reversed(weight_sizes):
        grads.append(card.empty(n))
        acts.pop()                           # this layer's activation is no longer needed
    return grads

def optimizer_step(card, state):
    if not state:                            # Adam: exp_avg and exp_avg_sq, created on step 1
        state.extend(card.empty(n) for n in weight_sizes for _ in range(2))

card = gml.SimulatedGPU("8GiB", alloc_conf="")
weights, state = load_model(card), []
for step in range(3):
    card.set_memory_metadata(f"step {step}")   # marks the step on the trace (torch.cuda.memory._set_memory_metadata)
    acts = forward(card)
    grads = backward(card, acts)
    optimizer_step(card, state)
    grads = None                             # zero_grad(set_to_none=True)
card.set_memory_metadata("step 3")
acts = forward(card)                         # the next forward is in flight: look now
print(f"allocated {gml.format_size(card.memory_allocated())}, reserved {gml.format_size(card.memory_reserved())}")

# %% [markdown]
# Three training steps and a fourth forward pass ran. Before reading any evidence, two guesses:
# how many `cudaMalloc` calls did all that take, and which function holds the most memory now?

# %% tags=["predict"]
gml.predict("03.p1", "How many cudaMalloc calls did the three steps and the 4th forward take?",
            kind="number", unit="cudaMalloc calls")
gml.predict("03.p2", "Which function's tensors hold the most memory now?",
            choices=["load_model", "forward", "backward", "optimizer_step"])

# %% [markdown]
# ## 1. `memory_summary()`
#
# Read it row by row:
#
# * **Allocated memory**: bytes in live blocks (after rounding), = `memory_allocated()`.
# * **Active memory**: allocated plus blocks freed by Python but still in use by another stream
#   (`record_stream`); equal to allocated in a one-stream program.
# * **Requested memory**: what the program asked for before rounding.
# * **GPU reserved memory**: all segments, = `memory_reserved()`; what `nvidia-smi` sees
#   (plus the CUDA context).
# * **Non-releasable memory**: free bytes inside segments that still hold a live block;
#   `empty_cache()` cannot return them. Large here means fragmentation.
# * **Allocations / Active allocs / GPU reserved segments / Non-releasable allocs**: the same as counts.
# * **Oversize**: blocks at or above `max_split_size` (notebook 05).
#
# Columns: current, peak since the last `reset_peak_memory_stats()`, and the running totals of
# everything ever allocated and freed. The header counts OOMs and `cudaMalloc` retries.

# %%
print(card.memory_summary())

# %% [markdown]
# ## 2. `memory_stats()`
#
# Keys are `<metric>.<pool>.<stat>`: metrics `allocated_bytes`, `reserved_bytes`, `active_bytes`,
# `requested_bytes`, `inactive_split_bytes` and their counts `allocation`, `segment`, `active`,
# `inactive_split`; pools `all`, `large_pool`, `small_pool`; stats `current`, `peak`,
# `allocated`, `freed`. A few single counters tell how hard the allocator had to work:
# `num_device_alloc`/`num_device_free` (`cudaMalloc`/`cudaFree` calls), `num_alloc_retries`
# (failed `cudaMalloc` followed by a cache flush), `num_ooms`, `num_sync_all_streams`.

# %%
stats = card.memory_stats()
metrics = ["allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes", "inactive_split_bytes"]
print(f"{'metric':22}" + "".join(f"{p:>14}" for p in ("all", "large_pool", "small_pool")) + f"{'peak (all)':>14}")
for m in metrics:
    print(f"{m:22}" + "".join(f"{gml.format_size(stats[f'{m}.{p}.current']):>14}"
                              for p in ("all", "large_pool", "small_pool"))
          + f"{gml.format_size(stats[f'{m}.all.peak']):>14}")
for key in ("num_device_alloc", "num_device_free", "num_alloc_retries", "num_ooms", "num_sync_all_streams"):
    print(f"{key:22}{stats[key]:>14}")
print(f"\n{len(stats)} keys in all")
gml.reveal("03.p1", stats["num_device_alloc"])

# %% tags=["check"] jupyter={"source_hidden": true}
assert stats["allocated_bytes.all.current"] == card.memory_allocated()
assert stats["reserved_bytes.all.current"] == (stats["reserved_bytes.large_pool.current"]
                                              + stats["reserved_bytes.small_pool.current"])

# %% [markdown]
# ## 3. The snapshot
#
# `snapshot()` returns the same dict as `torch.cuda.memory._snapshot()`: `segments` (each with its
# `blocks`), `device_traces` (the recorded events), `allocator_settings`. Each block carries the
# Python `frames` of the code that allocated it. The numbers in the segments add up to the
# counters above.

# %%
snap = card.snapshot()
print("keys:", list(snap))
seg = snap["segments"][0]
print("a segment:", {k: v for k, v in seg.items() if k not in ("blocks", "frames")})
print("its first block:", {k: v for k, v in seg["blocks"][0].items() if k != "frames"})
frame = seg["blocks"][0]["frames"][0]
temporary = "ipykernel_" in frame["filename"]   # code typed in a cell: the kernel's temp file
print("allocated by:", {k: v for k, v in frame.items() if k != "filename" or not temporary},
      "in a notebook cell" if temporary else "")
total = sum(s["total_size"] for s in snap["segments"])
allocated = sum(b["size"] for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
print(f"segments add up to {gml.format_size(total)} reserved and {gml.format_size(allocated)} allocated")

# %% tags=["check"] jupyter={"source_hidden": true}
assert total == card.memory_reserved() and allocated == card.memory_allocated()

# %% [markdown]
# ### Who holds the memory?
#
# Group the live blocks by the function that allocated them (the innermost frame). On a real
# run this is how you find the culprit in an 80 GB snapshot: not "memory is full", but "the
# optimizer state holds this much, the activations of `forward` that much".

# %%
by_function = {}
for s in snap["segments"]:
    for b in s["blocks"]:
        if b["state"] == "active_allocated":
            # the innermost frame with a real function name (skip <listcomp>, <genexpr>)
            name = next((f["name"] for f in b["frames"] if not f["name"].startswith("<")), "?")
            count, size = by_function.get(name, (0, 0))
            by_function[name] = (count + 1, size + b["size"])
for name, (count, size) in sorted(by_function.items(), key=lambda kv: -kv[1][1]):
    print(f"{name:18} {count:3} blocks {gml.format_size(size):>12}")
gml.reveal("03.p2", max(by_function, key=lambda name: by_function[name][1]))

# %% tags=["check"] jupyter={"source_hidden": true}
assert set(by_function) == {"load_model", "forward", "optimizer_step"}

# %% [markdown]
# Frames are innermost first; comprehensions and generator expressions have frames of their own
# (`<listcomp>`, `<genexpr>`), so the code skips those to name the function. The gradients are
# gone (set to `None` after the step), and the backward pass freed the old activations: what is
# left is weights, optimizer state and the activations of the forward pass in flight.

# %% [markdown]
# ### The same question, over time
#
# The table is one moment. `gml.timeline(snap, by="frame")` draws the whole recorded history the
# way PyTorch's viewer draws its "Active Memory Timeline": every allocation is a band as tall as
# its request, stacked in the order they were made; when one is freed, the bands above it move
# down. Colours name the allocating function and its line (the innermost frame of the program;
# a comprehension's frame is named after the function that holds it). The vertical lines are the
# `set_memory_metadata` marks, the dashed line is what the allocator reserved.

# %%
timeline_fig = gml.timeline(snap, by="frame")
bands = timeline_fig.gml_timeline["bands"]
n_events = timeline_fig.gml_timeline["events"]
alive_at_end = {}
for band in bands:
    if band["end"] >= n_events:                      # still alive after the last event
        name = band["key"].split(" (")[0]
        alive_at_end[name] = alive_at_end.get(name, 0) + band["size"]
for name, size in sorted(alive_at_end.items(), key=lambda kv: -kv[1]):
    print(f"{name:16} {gml.format_size(size):>12} alive at the end (as requested)")
print(f"peak of the live bands: {gml.format_size(timeline_fig.gml_timeline['peak_allocated'])}, "
      f"reserved at the end: {gml.format_size(card.memory_reserved())}")
timeline_fig

# %% tags=["check"] jupyter={"source_hidden": true}
assert set(alive_at_end) == set(by_function)
assert max(alive_at_end, key=alive_at_end.get) == max(by_function, key=lambda n: by_function[n][1])
assert [m[1] for m in timeline_fig.gml_timeline["marks"]] == ["step 0", "step 1", "step 2", "step 3"]

# %% [markdown]
# Read it from the bottom: the weights of `load_model` are the first layer and never move; the
# optimizer state appears once, in step 0, and stays under everything after it. Each step then
# draws the same mountain: `forward`'s activations pile up (the thin bands on top are its
# temporaries, freed at once), `backward`'s gradients grow while the activations go, and the
# gradients vanish at `grads = None`. The gap between the top of the bands and the dashed line is
# the cache plus rounding: memory that is reserved but belongs to no tensor.

# %% [markdown]
# ## 4. The views
#
# The block map draws every segment and its blocks; the text version prints the same map in
# characters, one per page.

# %%
fig = gml.show(snap, title="training-like program, during the 4th forward pass")
print(gml.text_blockmap(snap))
fig

# %% [markdown]
# `gml.fragmentation` names the figures a reader needs, with a one-line definition each, and
# checks the bookkeeping: allocated + free cached + pending-free = reserved.

# %%
m = gml.fragmentation(snap, total_memory=card.total_memory)
m

# %%
for name in ("free_bytes", "largest_free_block_bytes", "external_fragmentation", "non_releasable_bytes", "utilization"):
    print(f"{name:26} {m.formatted(name):>12}   {m.definition(name)}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert m["allocated_bytes"] + m["free_bytes"] + m["pending_free_bytes"] == m["reserved_bytes"]
assert m["non_releasable_bytes"] == stats["inactive_split_bytes.all.current"]

# %% [markdown]
# The trace is the history: `text_trace` tells it as pseudo-Python (`seg_0 = cudaMalloc(...)`
# for a new segment; `b = seg_0[24.00 MiB:12.00 MiB]` for tensor `b`, a block 24 MiB into
# `seg_0` and 12 MiB long; `del b` for its free), and `timeline` plots the bytes after each
# event.

# %%
print(gml.text_trace(snap, limit=30))
actions = [e["action"] for e in snap["device_traces"][0] if e["action"] != "snapshot"]
print({a: actions.count(a) for a in sorted(set(actions))})

# %%
fig = gml.timeline(snap)
fig

# %% [markdown]
# ## Save it, load it, open it anywhere
#
# `gml.dump_snapshot` writes the pickle that `torch.cuda.memory._dump_snapshot` writes, so the file
# opens in PyTorch's own viewer (drag it onto https://pytorch.org/memory_viz, or run
# `python -m torch.cuda._memory_viz trace_plot file.pickle -o trace.html`). `gml.load_snapshot`
# reads such files safely (no arbitrary pickled objects) from a real GPU run or from the kit.

# %%
import pathlib, tempfile
folder = pathlib.Path(tempfile.mkdtemp(prefix="gpumemlab-"))
path = gml.dump_snapshot(snap, folder / "training_like.pickle")
loaded = gml.load_snapshot(path)
print(f"{path.name}: {gml.format_size(path.stat().st_size)}, {len(loaded['segments'])} segments, "
      f"{len(loaded['device_traces'][0])} trace entries")

# %% tags=["check"] jupyter={"source_hidden": true}
assert gml.fragmentation(loaded).as_dict() == gml.fragmentation(snap).as_dict()

# %% [markdown]
# ## On a real GPU
#
# On a CUDA machine, the recipe is:
#
# ```python
# torch.cuda.memory._record_memory_history(max_entries=100_000)   # before the run
# ...                                                              # train; OOM or not
# torch.cuda.memory._dump_snapshot("run.pickle")                  # in the except: block too
# torch.cuda.memory._record_memory_history(enabled=None)           # stop recording
# ```
#
# The cell below runs the kit's seeded training-like scenario on the device of the first cell
# (a real GPU inside its memory budget, or the 24 GiB simulated card) and prints the same
# evidence.

# %%
rec = gml.scenarios.train_step_like(gpu, release=False)
print(rec)
print(gpu.memory_summary(abbreviated=True))
print(gml.fragmentation(gpu.snapshot(), total_memory=gpu.total_memory))
rec.held.clear()      # free the scenario's tensors

# %% [markdown]
# ## Exercise: what to free so that `empty_cache()` gives back the most
#
# A different program this time, `accumulate_and_log`: it loads six weights, then accumulates
# gradients over 40 micro-batches, each making an activation and keeping one small tensor (its
# loss and logits, for logging); the activations go at the end, the kept tensors stay. The
# program may free some of its live tensors, adding up to a small budget, before it calls
# `empty_cache()`. Which segments (their numbers in `gml.text_blockmap`) should it free every
# live tensor of, so that `empty_cache()` then hands back as much as it can? The task below gives
# the budget. Reason from the evidence of the state as it is (the snapshot, the block map); the
# check rebuilds the state, frees the live tensors of your segments, calls `empty_cache()` and
# measures what came back.

# %% tags=["exercise"]
from gpumemlab.lessons.reading_the_evidence import accumulate_and_log
gml.exercise("03.ex")
case = gml.SimulatedGPU("8GiB", alloc_conf="")
case_held = accumulate_and_log(case)      # the state to investigate (the tensors it still holds)
my_segments = []          # change this: segment numbers, as gml.text_blockmap(case.snapshot()) shows
gml.exercise.check("03.ex", my_segments)

# %% [markdown]
# ## On your GPU: a training step's evidence
#
# `gml.experiment` runs this lesson's experiment as a seeded scenario on a simulated card of
# `gpu`'s size (the model's prediction) and, when `gpu` (the first cell's `gml.device()`) is a
# real CUDA card, measures it there too, within `gpu`'s memory budget, step by step. Without
# CUDA it says so in one line and shows the prediction alone.

# %%
print(gml.experiment("train_step_like", gpu))

# %%
gml.quiz("03")
