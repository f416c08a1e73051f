# %% [markdown]
# # 05 · Allocator settings, measured
#
# PyTorch's allocator reads `PYTORCH_CUDA_ALLOC_CONF` (newer versions also `PYTORCH_ALLOC_CONF`)
# once, when CUDA memory is first used, e.g.
#
# ```bash
# PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:512,garbage_collection_threshold:0.6" python train.py
# ```
#
# or at run time with `torch.cuda.memory._set_allocator_settings("...")`. This notebook takes the
# three classic knobs one at a time, explains the c10 rule each one changes, and measures the
# effect on a workload built to show it. (`expandable_segments` gets notebook 06.)
#
# A `gml.SimulatedGPU(..., alloc_conf="...")` takes the same string.

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

# %%
GiB, MiB, KiB = gml.GiB, gml.MiB, gml.KiB
sim = gml.SimulatedGPU("8GiB", alloc_conf="max_split_size_mb:512,garbage_collection_threshold:0.6")
print(sim.describe())
settings = sim.snapshot()["allocator_settings"]
print(f"max_split_size {gml.format_size(settings['max_split_size'])}, "
      f"garbage_collection_threshold {settings['garbage_collection_threshold']}, "
      f"expandable_segments {settings['expandable_segments']}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert settings["max_split_size"] == 512 * MiB

# %% [markdown]
# ## 1. `max_split_size_mb`: don't carve up big cached blocks
#
# By default any cached block, however big, may be split for a smaller request
# (`should_split`). With `max_split_size_mb:N`, blocks of N MiB or more are **oversize**:
#
# * `should_split` never splits them (for requests below N, `size < max_split_size` is false);
# * `get_free_block` refuses to hand an oversize block to a request below N
#   (`p.size() < max_split_size && block->size >= max_split_size` → no), and hands one to a big
#   request only if it wastes less than `max_non_split_rounding_size` (20 MiB by default);
# * on a failed `cudaMalloc`, `release_available_cached_blocks` first frees oversize cached
#   blocks, before the full `release_cached_blocks`.
#
# The workload: a 1 GiB tensor dies, four 50 MiB tensors arrive, then 1 GiB is needed again,
# on a 1.5 GiB card. It runs twice, with the defaults and with `max_split_size_mb:512`.

# %% tags=["predict"]
gml.predict("05.p1", "Which run fails to allocate the second 1 GiB?",
            choices=["defaults only", "max_split_size_mb:512 only", "both", "neither"])


# %%
def big_then_small_then_big(conf):
    card = gml.SimulatedGPU("1536MiB", alloc_conf=conf)
    x = card.empty(GiB)
    del x                                        # 1 GiB cached
    smalls = [card.empty(50 * MiB) for _ in range(4)]
    try:
        y = card.empty(GiB)
        outcome, live = "ok", smalls + [y]
    except gml.OutOfMemoryError:
        outcome, live = "OOM", smalls
    return card, outcome, live                   # `live` keeps the tensors alive

results, split_runs = {}, {}
for conf in ("", "max_split_size_mb:512"):
    card, outcome, live = split_runs[conf] = big_then_small_then_big(conf)
    s = card.memory_stats()
    results[conf] = outcome
    print(f"{conf or 'defaults'}: second 1 GiB -> {outcome}; cudaMalloc calls {s['num_device_alloc']}, "
          f"oversize segments {s['oversize_segments.current']}, reserved {gml.format_size(card.memory_reserved())}")
failed = [c or "defaults" for c, o in results.items() if o == "OOM"]
gml.reveal("05.p1", {0: "neither", 2: "both"}.get(len(failed), f"{failed[0]} only" if failed else "neither"))

# %% tags=["check"] jupyter={"source_hidden": true}
assert results == {"": "OOM", "max_split_size_mb:512": "ok"}

# %% [markdown]
# The two cards at the end, one block map each. With the defaults the four 50 MiB tensors sit at
# the front of the 1 GiB segment and no free block holds 1 GiB; with `max_split_size_mb:512` they
# have segments of their own and the second 1 GiB tensor fills the big one.

# %%
import matplotlib.pyplot as plt
fig, split_axes = plt.subplots(2, 1, figsize=(10, 5.2), layout="constrained")
for ax, (conf, (card, outcome, live)) in zip(split_axes, split_runs.items()):
    gml.show(card, ax=ax, request=GiB if outcome == "OOM" else None,
             title=f"{conf or 'defaults'}: second 1 GiB {outcome}")
plt.close(fig)
fig

# %% tags=["check"] jupyter={"source_hidden": true}
_caption = " ".join(split_axes[0].get_xlabel().split())      # the verdict under the defaults' map
assert "cudaMalloc(1024.00 MiB) fails: the driver has" in _caption and "raises OutOfMemoryError" in _caption

# %% [markdown]
# With the defaults, the 50 MiB tensors were cut out of the cached 1 GiB block (no `cudaMalloc`
# at all), and the second 1 GiB request met a split segment that `empty_cache` cannot return.
# With `max_split_size_mb:512` the small tensors got segments of their own, and the big block
# waited, whole, for the big request. The price: more `cudaMalloc` calls and more reserved
# memory for small tensors. `memory_stats()` counts the oversize blocks
# (`oversize_allocations`, `oversize_segments`) so you can see the setting at work.
#
# Valid values: N is at least the large-pool segment of 20 MiB (`kLargeBuffer`, in MiB).
# Older c10 (`CUDAAllocatorConfig::parseMaxSplitSize`) checked `val > kLargeBuffer / MiB`, so 20
# itself was refused there; the newest (`AcceleratorAllocatorConfig::parseMaxSplitSize` in
# `c10/core/AllocatorConfig.cpp`) checks `>=`, and the model follows it:

# %%
from gpumemlab.allocator import AllocatorConfig, AllocatorConfigError
from gpumemlab.allocator.constants import K_LARGE_BUFFER

least = K_LARGE_BUFFER // MiB
for n in (least - 1, least):
    try:
        AllocatorConfig.parse(f"max_split_size_mb:{n}")
        print(f"max_split_size_mb:{n}: accepted")
    except AllocatorConfigError as exc:
        print(f"max_split_size_mb:{n}: {exc}")

# %% [markdown]
# ## 2. `garbage_collection_threshold` under a memory fraction
#
# When a process caps its memory with `torch.cuda.set_per_process_memory_fraction(f)`, reserved
# memory may not exceed `f × total`. When it would, `alloc_block` fails and the allocator falls
# back to `release_cached_blocks`: synchronize **every** stream and free **every** whole cached
# segment, then retry. That is slow, and it throws away blocks that were about to be reused.
#
# With `garbage_collection_threshold:t` (0 < t < 1), `garbage_collect_cached_blocks` runs before
# `alloc_block` once reserved memory passes `t × allowed`. It ages every whole cached large
# block (`gc_count`: the `get_free_block` calls since it was cached) and, pass after pass, frees
# **every** one at least as old as the average age, until it has freed at least what reserved
# memory is over `t × allowed` (it finishes the pass it is in, so that it does not run again
# at once). It skips the allocator's synchronize-every-stream step; each `cudaFree` it makes
# still waits for the device, as lesson 01 said of every `cudaFree`.
# In this model, as in the newest PyTorch, it only acts under a memory fraction below 1.0.
#
# The workload: a loop whose tensors grow every step (think of a growing sequence length), on
# an 8 GiB card limited to half. `num_alloc_retries` counts the times a request took the OOM
# path (a failed `alloc_block`, `release_cached_blocks`, a retry); the run counts them with the
# defaults and with the setting.

# %% tags=["predict"]
gml.predict("05.p2", "With garbage_collection_threshold:0.6, how many OOM-path retries (num_alloc_retries)?",
            kind="number", unit="retries")


# %%
def growing(conf, steps=30):
    card = gml.SimulatedGPU("8GiB", alloc_conf=conf)
    card.set_per_process_memory_fraction(0.5)
    for step in range(steps):
        card.set_memory_metadata(f"step {step}")   # marks the steps in the trace (the timeline's x)
        size = (200 + 60 * step) * MiB
        pair = [card.empty(size) for _ in range(2)]
        del pair
    return card

gc_runs, gc_cards = {}, {}
for conf in ("", "garbage_collection_threshold:0.6"):
    card = gc_cards[conf] = growing(conf)
    s = card.memory_stats()
    gc_runs[conf] = s
    print(f"{conf or 'defaults':34}: OOM-path retries {s['num_alloc_retries']:2}, device-wide syncs "
          f"{s['num_sync_all_streams']:2}, cudaFree {s['num_device_free']:2}, peak reserved "
          f"{gml.format_size(card.max_memory_reserved())} (limit {gml.format_size(card.total_memory // 2)})")
gml.reveal("05.p2", gc_runs["garbage_collection_threshold:0.6"]["num_alloc_retries"])

# %% tags=["check"] jupyter={"source_hidden": true}
assert gc_runs[""]["num_alloc_retries"] > 0
assert gc_runs["garbage_collection_threshold:0.6"]["num_alloc_retries"] == 0
assert gc_runs["garbage_collection_threshold:0.6"]["num_sync_all_streams"] == 0

# %%
gc_fig = gml.timeline([gc_cards[""], gc_cards["garbage_collection_threshold:0.6"]],
                   labels=["defaults", "garbage_collection_threshold:0.6"])
from gpumemlab.viz.memory_timeline import release_moments
from gpumemlab.viz.words import count   # count(1, "segment") -> "1 segment"
moments = {d["label"]: release_moments(d) for d in gc_fig.gml_timeline}
for label, (rules, freed) in moments.items():
    print(f"{label:34}: {count(len(freed), 'segment')} freed in {count(len(rules), 'release moment')} (grey rules)")
# the cap set_per_process_memory_fraction(0.5) puts on reserved memory, in each panel
from gpumemlab.viz.memory_timeline import data_top
from gpumemlab.viz.palette import unit_for
limit = int(gc_cards[""].get_per_process_memory_fraction() * gc_cards[""].total_memory)
unit, _ = unit_for(data_top(gc_fig.gml_timeline))
for panel in gc_fig.axes:
    panel.axhline(limit / unit, color="black", ls="--", lw=0.9, gid="fraction_limit",
                  label=f"limit: memory fraction {gc_cards[''].get_per_process_memory_fraction()} "
                        f"x {gml.format_size(gc_cards[''].total_memory)} = {gml.format_size(limit)}")
    panel.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
print(f"dashed line: the limit, {gml.format_size(limit)}")
gc_fig

# %% tags=["check"] jupyter={"source_hidden": true}
_freed = [len(f) for _, f in moments.values()]
assert _freed == [gc_runs[c]["num_device_free"] for c in ("", "garbage_collection_threshold:0.6")]
assert all(len(r) <= len(f) for r, f in moments.values())
assert [d.get("x_unit") for d in gc_fig.gml_timeline] == ["step", "step"]   # one x-axis in steps
assert limit == 4 * GiB and all(any(l.get_gid() == "fraction_limit" for l in a.lines) for a in gc_fig.axes)

# %% [markdown]
# Both runs free the same number of segments (the `cudaFree` count above). A grey rule is not a
# segment but a release moment: one rule for each burst of segments freed together (printed
# above: the counts of rules differ, the segments freed do not). The difference is *how* and
# *when*. Without GC every release came from the emergency path (a
# failed `cudaMalloc`, a synchronization of the whole device, then a retry: the retry and sync
# counts above), and reserved memory climbs to the 4 GiB limit before each release (the upper
# panel's peaks). With GC the old blocks leave before the limit is reached, with no retry and
# no synchronization of every stream (its `cudaFree` calls are the ones counted above), and the
# peak reserved printed above is lower.
#
# ## 3. `roundup_power2_divisions`: coarser size steps
#
# `round_size` normally rounds to 512 bytes, so a workload whose sizes vary a little every step
# (variable sequence lengths, dynamic shapes) produces blocks that almost, but not quite, fit
# the next request. With `roundup_power2_divisions:D` sizes above 512·D bytes are rounded up to
# one of D equal steps between two powers of two (`roundup_power2_next_division`). Fewer
# distinct sizes, so freed blocks fit later requests; the cost is rounding waste
# (allocated − requested). It can also be set per size range, e.g.
# `roundup_power2_divisions:[256:1,512:2,>:8]` (MiB bounds).

# %%
from gpumemlab.allocator.rounding import round_size, roundup_power2_next_division

confs = ["", "roundup_power2_divisions:2", "roundup_power2_divisions:4", "roundup_power2_divisions:8"]
sizes = [1200, 700 * KiB, 5 * MiB + 1, 300 * MiB + 7, 1100 * MiB]
print(f"{'request':>14} " + " ".join(f"{(c.split(':')[1] + ' div') if c else 'default':>12}" for c in confs))
for n in sizes:
    print(f"{n:>14,} " + " ".join(f"{gml.format_size(round_size(n, AllocatorConfig.parse(c))):>12}" for c in confs))

# %% tags=["check"] jupyter={"source_hidden": true}
cfg4 = AllocatorConfig.parse("roundup_power2_divisions:4")
assert round_size(MiB + 1, cfg4) == 1310720 and round_size(1200, cfg4) == 1536

# %% [markdown]
# Note the first row: `round_size` applies the power-of-2 steps only to sizes above 512·D bytes,
# so 1200 bytes keeps plain 512-byte rounding:

# %%
print(f"1200 bytes, 4 divisions: round_size gives "
      f"{round_size(1200, AllocatorConfig.parse('roundup_power2_divisions:4')):,}; the power-of-2 step "
      f"alone would give {roundup_power2_next_division(1200, 4):,} "
      f"(1200 is not above 512 x 4 = {512 * 4:,})")

# %% [markdown]
# Now a workload with variable sizes: 300 tensors whose size follows a random sequence length
# (seeded), with about six alive at any time.

# %% tags=["predict"]
gml.predict("05.p3", "With roundup_power2_divisions:4, is peak reserved memory lower or higher than with the defaults?",
            choices=["lower", "the same", "higher"])

# %%
import random

def variable_lengths(conf, total_memory="8GiB", seed=0):
    rng = random.Random(seed)
    card = gml.SimulatedGPU(total_memory, alloc_conf=conf)
    live = []
    for step in range(300):
        card.set_memory_metadata(f"step {step}")     # marks the steps in the trace (the timeline's x)
        seq_len = rng.randint(64, 2048)
        try:
            live.append(card.empty(seq_len * 64 * KiB + rng.randint(0, 4095)))
        except gml.OutOfMemoryError:
            break                                    # the trace keeps the OOM
        if len(live) > 6:
            live.pop(rng.randrange(len(live)))
    return card

cards = {}
for conf in ("", "roundup_power2_divisions:4"):
    card = cards[conf] = variable_lengths(conf)
    s = card.memory_stats()
    waste = s["allocated_bytes.all.peak"] - s["requested_bytes.all.peak"]
    print(f"{conf or 'defaults':28}: peak reserved {gml.format_size(card.max_memory_reserved()):>11}, "
          f"segments {s['segment.all.current']:3}, cudaMalloc {s['num_device_alloc']:3}, "
          f"peak allocated - peak requested {gml.format_size(max(waste, 0))}")
peaks = [cards[c].max_memory_reserved() for c in ("", "roundup_power2_divisions:4")]
gml.reveal("05.p3", "lower" if peaks[1] < peaks[0] else "the same" if peaks[1] == peaks[0] else "higher")

# %% tags=["check"] jupyter={"source_hidden": true}
assert cards["roundup_power2_divisions:4"].max_memory_reserved() < cards[""].max_memory_reserved()

# %%
round_fig = gml.timeline([cards[""], cards["roundup_power2_divisions:4"]],
                         labels=["defaults", "roundup_power2_divisions:4"])
round_fig

# %% tags=["check"] jupyter={"source_hidden": true}
assert [d.get("x_unit") for d in round_fig.gml_timeline] == ["step", "step"]   # one x-axis in steps

# %% [markdown]
# Rounding trades a little internal waste for less fragmentation here: the numbers above show
# the peak reserved memory and the rounding waste of both runs. It is not free: with few
# distinct sizes to begin with (a fixed batch shape) it only adds waste.
#
# ## Try it: every setting, every card
#
# The controls below re-run this variable-length workload under the setting and card size you
# pick, and redraw the block map at the moment of peak allocated memory and the memory timeline.
# On the 8 GiB card each setting reserves a different peak. What happens on a card smaller
# than that peak: does the run fail, or does the cache give memory back (the retry path) and
# carry on? Which setting runs on the smallest card? Try the cards in the controls, then read the
# table under them, which runs every pair. (Headless, the controls show the first choice.)

# %%
settings_05 = ["", "roundup_power2_divisions:4", "max_split_size_mb:64",
               "expandable_segments:True", "garbage_collection_threshold:0.6"]
cards_05 = ["8GiB", "1GiB", "880MiB", "820MiB", "780MiB"]
controls = gml.whatif(variable_lengths, conf=settings_05, total_memory=cards_05,
                      title="variable sequence lengths")
controls

# %%
grid = {(conf, size): variable_lengths(conf, size).memory_stats() for conf in settings_05 for size in cards_05}
print("each cell: peak reserved, OOM-path retries (r), ran or OOM")
print(f"{'setting':33}" + "".join(f"{size:>22}" for size in cards_05))
for conf in settings_05:
    cells = []
    for size in cards_05:
        s = grid[conf, size]
        cells.append(f"{gml.format_size(s['reserved_bytes.all.peak'])} {s['num_alloc_retries']:2}r "
                     f"{'OOM' if s['num_ooms'] else 'ran'}")
    print(f"{conf or 'defaults':33}" + "".join(f"{c:>22}" for c in cells))
smallest = {conf: min((gml.parse_size(size) for size in cards_05 if not grid[conf, size]["num_ooms"]),
                      default=None) for conf in settings_05}
for conf, size in smallest.items():
    print(f"{conf or 'defaults':33}: runs on cards down to {gml.format_size(size)} (of those above)")

# %% tags=["check"] jupyter={"source_hidden": true}
assert all(grid[c, "8GiB"]["num_ooms"] == 0 and grid[c, "8GiB"]["num_alloc_retries"] == 0 for c in settings_05)
assert all(grid[c, "1GiB"]["num_ooms"] == 0 and grid[c, "1GiB"]["num_alloc_retries"] > 0
           for c in settings_05 if c != "expandable_segments:True")
assert grid["roundup_power2_divisions:4", "880MiB"]["num_ooms"] and not grid["", "880MiB"]["num_ooms"]
assert grid["expandable_segments:True", "1GiB"]["num_alloc_retries"] == 0
assert [c for c in settings_05 if not grid[c, "780MiB"]["num_ooms"]] == ["max_split_size_mb:64"]

# %% [markdown]
# Below its 8 GiB peak a setting does not fail at once: when a `cudaMalloc` fails the allocator
# frees its cached segments and retries (the retries column), so the workload runs on a card
# not much larger than its live tensors. The small cards tell the settings apart: the coarser
# rounding that lowered the peak on 8 GiB wastes enough inside each block to run out of memory
# on 880 MiB, where the defaults still run; expandable segments, the smallest peak on 8 GiB, need
# no retry at all on 1 GiB; and the setting that reserved the most on 8 GiB,
# `max_split_size_mb:64`, is the only one that still runs on the smallest card, taking the
# retry path more often than any other there (the lines under the table name each setting's
# smallest card).

# %% [markdown]
# ## Choosing
#
# | symptom in `memory_stats()` / the block map | try |
# |---|---|
# | large *reserved but unallocated*, big cached blocks split by small tensors | `max_split_size_mb` |
# | many `num_alloc_retries` under a memory fraction | `garbage_collection_threshold` |
# | many segments of almost equal sizes (dynamic shapes) | `roundup_power2_divisions` |
# | fragmentation of any kind, recent PyTorch | `expandable_segments:True` (notebook 06) |
# | the native allocator's caching itself is in question; another CUDA library manages memory in the same process | `backend:cudaMallocAsync` |
# | a memory error to find with `compute-sanitizer`, or a test that must see every `cudaMalloc` | `PYTORCH_NO_CUDA_MEMORY_CACHING=1` (debugging only) |
#
# Settings interact; always measure on your own workload. Notebook 09 shows how to replay a
# recorded run under each setting instead of re-running the training.
#
# ### Two switches that replace the caching allocator
#
# The last two rows do not tune the allocator of this course: they take it out.
#
# * **`backend:cudaMallocAsync`** hands every allocation to CUDA's own stream-ordered pool
#   allocator (`cudaMallocAsync` / `cudaFreeAsync`, CUDA 11.4 or newer). The driver keeps the
#   pool and decides how to reuse and release it; the native settings of this lesson
#   (`max_split_size_mb`, `garbage_collection_threshold`, `roundup_power2_divisions`,
#   `expandable_segments`) have no meaning there, and the snapshots and statistics report less
#   (no blocks inside the driver's pool). Try it when fragmentation survives every native
#   setting, or when another library in the process uses CUDA's pools too, and measure.
# * **`PYTORCH_NO_CUDA_MEMORY_CACHING=1`** (an environment variable, not an alloc-conf key) turns
#   the cache off: every tensor is a `cudaMalloc`, every free a `cudaFree`, with the device-wide
#   synchronisation of lesson 01 each time. Much slower; it exists for debugging, so that a
#   memory checker sees each tensor's own allocation instead of a block inside a cached segment.
#
# The simulated GPU models the native caching allocator only. It refuses the other backend with
# one line, rather than pretending to model it:

# %%
try:
    gml.SimulatedGPU("8GiB", alloc_conf="backend:cudaMallocAsync")
except ValueError as exc:
    refusal = exc
    print(f"{type(exc).__name__}: {exc}")
native = gml.SimulatedGPU("8GiB", alloc_conf="backend:native")
print(f"backend:native is accepted: {native.describe()}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert "native caching allocator only" in str(refusal)

# %% [markdown]
# ## Exercise: the largest `max_split_size_mb` that makes it fit
#
# On an 8 GiB card a 6 GiB tensor dies, four 200 MiB tensors arrive, then 6 GiB is needed again.
# With the defaults the second 6 GiB tensor runs out of memory; with `max_split_size_mb:N` it
# fits for some N. What is the **largest** N? Work it out from the oversize rule; the check runs
# the workload under your setting, and under N + 1, on the simulated GPU.

# %% tags=["exercise"]
gml.exercise("05.ex")
my_setting = ""            # change this: "max_split_size_mb:N"
gml.exercise.check("05.ex", my_setting)

# %% [markdown]
# ## On your GPU: each setting off and on
#
# `gml.experiment` runs this lesson's experiment as a seeded scenario on a simulated card of
# `gpu`'s size (the model's prediction) and, when `gpu` (the first cell's `gml.device()`) is a
# real CUDA card, measures it there too, within `gpu`'s memory budget, step by step. Without
# CUDA it says so in one line and shows the prediction alone.

# %%
print(gml.experiment(["max_split_size_off", "max_split_size_on", "garbage_collection_off",
                      "garbage_collection_on", "roundup_power2_off", "roundup_power2_on"], gpu))

# %%
gml.quiz("05")
