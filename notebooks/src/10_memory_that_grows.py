# %% [markdown]
# # 10 · Memory that grows
#
# The run starts fine, then memory climbs a little every step until, hours later, it dies with
# an OOM. Five different things cause that, and they need different fixes:
#
# | cause | what you see | fix |
# |---|---|---|
# | **leak** | allocated memory at the end of every step is higher than at the end of the last one | drop the reference |
# | **one-time state** | one step (usually the first) leaves memory behind, then it stays flat | nothing: budget for it |
# | **new shapes** | reserved grows when a batch of a new, bigger shape arrives; allocated does not | pad or bucket the shapes |
# | **higher peak** | reserved grows because more is live at once than ever before | free sooner, or a smaller batch |
# | **fragmentation** | reserved grows with no new shape and no higher peak: the cache is in the wrong pieces | `expandable_segments:True` |
#
# Every loop below is real PyTorch, run on the CPU under `gml.capture` (which records each
# tensor's allocation and free, with the Python frames that made it), then replayed on the
# simulated caching allocator. `gml.growth(recording)` names the cause of every iteration and
# shows the evidence: the allocating frames of the bytes that **stay** (still alive when the last
# iteration ends), and the allocations that made reserved memory grow.

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
# ## Marking the steps
#
# `gml.growth` needs to know where one iteration ends and the next begins. PyTorch has the hook
# for it: `torch.cuda.memory._set_memory_metadata(text)` stamps every trace entry recorded after
# it with `user_metadata = text`. Call it at the top of each step, and a recording made with
# `torch.cuda.memory._record_memory_history()` can be cut into steps. `gml.capture` has the same
# method, so the loops below read exactly like a GPU run:
#
# ```python
# with gml.capture(model, opt) as rec:              # on a GPU: _record_memory_history()
#     for i in range(steps):
#         rec.set_memory_metadata(f"step {i}")      # on a GPU: torch.cuda.memory._set_memory_metadata
#         ...
#     rec.set_memory_metadata("")                   # what follows belongs to no step
# report = gml.growth(rec)                          # on a GPU: gml.growth(torch.cuda.memory._snapshot())
# ```
#
# The loops live in `gpumemlab/lessons/growth_cases.py`; `show_loop` prints each one from its
# capture onwards, as it runs here: the lines that switch a loop to its fixed variant (which the
# hidden checks run) are left out of the print, so the fixes are yours to find.

# %%
import inspect
from gpumemlab.lessons import growth_cases as cases
from gpumemlab.lessons.memory_that_grows import leaky_loop

fmt = gml.format_size

def show_loop(fn):
    """Print a case's loop from its capture onwards, as it leaks."""
    print(leaky_loop(fn))

show_loop(cases.predictions_kept)

# %% [markdown]
# ## Leak 1: predictions kept in a list
#
# The loop above trains a two-layer perceptron (256 → 1024 → 256) on batches of 512 samples
# and appends each step's output to `preds`, to look at later. Each output is 512 × 256 float32
# values.

# %% tags=["predict"]
gml.predict("10.p1", "How many bytes does each step leave behind in `preds`?")

# %%
rec = cases.predictions_kept(steps=4)
kept_report = gml.growth(rec)
print(kept_report)
gml.reveal("10.p1", kept_report.iterations[1].kept_bytes)

# %% tags=["check"] jupyter={"source_hidden": true}
assert kept_report.causes == ["leak"] * 4
assert all(it.kept_bytes == 512 * 256 * 4 for it in kept_report.iterations)

# %% [markdown]
# Read the table row by row: allocated memory at each step's end rises by exactly what stays,
# and every step's bytes that stay were made at the same place (the last `Linear`, called from
# `_train`), so `gml.growth` calls it a leak. In the figure the allocated curve (blue) climbs
# from step to step, and the red part of each bar is what the steps so far left behind.

# %%
fig = kept_report.figure(title="predictions kept: allocated climbs by one output a step")
fig

# %% [markdown]
# `out.detach()` would not help: a detached tensor shares the output's storage. The exercise at
# the end asks for what does.
#
# ## Leak 2: a validation loss summed as a tensor
#
# A validation loop without `torch.no_grad()` sums its loss: `total = total + loss`. No
# `backward()` ever runs, so each step's graph, and every tensor autograd saved for that
# backward, stays reachable from `total`.

# %%
show_loop(cases.losses_summed)

# %% tags=["predict"]
gml.predict("10.p2", "Batches of 512: how many bytes stay per step? (what autograd saved: "
            "input, target, the 1024-wide ReLU output, the output)")

# %%
summed = gml.growth(cases.losses_summed(steps=3))
print(summed.text(evidence=False))
for site in summed.iterations[0].kept:
    print("  stays:", site.describe())
gml.reveal("10.p2", summed.iterations[0].kept_bytes)

# %% tags=["check"] jupyter={"source_hidden": true}
import torch
_model = cases.mlp()
_x, _y = cases._batch(0, 512, 256, 256)
_saved = {}
def _pack(t):
    _saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return t
with torch.autograd.graph.saved_tensors_hooks(_pack, lambda t: t):
    torch.nn.functional.mse_loss(_model(_x), _y)
_params = {p.untyped_storage().data_ptr() for p in _model.parameters()}
assert summed.causes == ["leak"] * 3
assert summed.iterations[0].kept_bytes == sum(v for k, v in _saved.items() if k not in _params)

# %% [markdown]
# The bytes that stay are exactly what `torch.autograd.graph.saved_tensors_hooks` reports as
# saved for backward (the hidden check cell above compares the two). The fix is a number, not a
# tensor: `total += loss.item()`, or the whole loop under `torch.no_grad()`.
#
# ## Leak 3: a reference cycle only the collector frees
#
# An object that refers to itself (a parent and child pointing at each other, a bound method
# stored on its own object) is not freed when its last name goes away: only Python's cyclic
# garbage collector frees it, when it next runs. The loop makes a `StepRecord` holding the
# step's output each step and drops it. To make the effect repeatable the case switches
# automatic collection off and calls `gc.collect()` once, after the loop.

# %%
import gc, linecache
print("class StepRecord:\n" + inspect.getsource(cases.StepRecord.__init__))
cycle = gml.growth(cases.reference_cycle(steps=3))
print(cycle.text(evidence=False))
site = cycle.iterations[0].kept[0]
print("stays:", site.describe())
freer = site.freed_by[0]
print(f"the freeing line, {freer['filename'].rsplit('/', 1)[-1]}:{freer['line']}: "
      f"{linecache.getline(freer['filename'], freer['line']).strip()}")
print(f"automatic collection back on afterwards: {gc.isenabled()}; its thresholds: {gc.get_threshold()}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert cycle.causes == ["leak"] * 3
assert all(f >= cycle.iterations[-1].end for it in cycle.iterations for s in it.kept for f in s.freed_at)
assert "gc.collect()" in inspect.getsource(cases.reference_cycle).splitlines()[
    site.freed_by[0]["line"] - inspect.getsourcelines(cases.reference_cycle)[1]]

# %% [markdown]
# The evidence names the frame that finally freed the bytes: the line that calls `gc.collect()`.
# In a real run the collector runs at its own times (the first threshold above: that many more
# container objects allocated than freed), so this kind of growth comes and goes in waves. The fix is to break the cycle
# (`weakref`, or clearing the back-reference), not to call `gc.collect()` every step.
#
# ### With the collector on
#
# Now the same loop for 24 steps with automatic collection on, as Python ships it. The collector
# runs when the count of new container objects passes its first threshold; a `gc.callbacks`
# hook records each pass (its generation, the objects it collected, where it falls in the
# trace) and marks the passes on the recording.

# %% tags=["predict"]
gml.predict("10.p5", "With automatic collection on, what does the memory between steps do over 24 steps?",
            choices=["grows every step until the loop ends", "grows, then drops back at each collector pass",
                     "stays flat: each record is freed when it is dropped"])

# %%
saw, passes = cases.reference_cycle_gc_on(steps=24)
fig = gml.timeline(saw, by="category")
tl = fig.gml_timeline

def live_at(event):
    return sum(b["size"] for b in tl["bands"] if b["start"] <= event < b["end"])

print(f"gc thresholds {gc.get_threshold()}; {len(passes)} collector passes during the loop")
drops = []
for n, p in enumerate(passes, 1):
    freed = sum(e["size"] for e in saw.trace[p["start"]:p["stop"]] if e["action"] == "free_completed")
    before, after = live_at(p["start"] - 1), live_at(p["stop"] - 1) if p["stop"] > p["start"] else None
    print(f"pass {n}: generation {p['generation']}, {p['collected']:3} objects collected, "
          f"trace events {p['start']}..{p['stop']}: {gml.format_size(freed)} of tensors freed"
          + (f", live {gml.format_size(before)} -> {gml.format_size(after)}" if freed else ""))
    if freed:
        drops.append((p["start"], freed))
print(f"memory drops {len(drops)} times, each at a collector pass")
gml.reveal("10.p5", "grows, then drops back at each collector pass" if drops
           else "grows every step until the loop ends")
fig

# %% tags=["check"] jupyter={"source_hidden": true}
assert len(drops) >= 2
for p in passes:                       # where a pass freed tensors, the live memory fell
    if any(e["action"] == "free_completed" for e in saw.trace[p["start"]:p["stop"]]):
        assert live_at(p["stop"] - 1) < live_at(p["start"] - 1)
assert [m[1] for m in tl["marks"]] == [f"gc pass {passes.index(p) + 1}" for p in passes
                                      if any(e["action"] == "free_completed"
                                             for e in saw.trace[p["start"]:p["stop"]])]

# %% [markdown]
# Each step leaves one output behind (the light blue floor rising step by step); at each marked
# pass the collector finds the unreachable `StepRecord`s and frees their tensors together, and
# the floor falls back. The period is not chosen by the program: it is the collector's threshold
# counted in Python container objects, so a change elsewhere in the program (more objects per
# step, a library that allocates more) moves the teeth. In a real run that is memory that
# depends on when the collector happens to run: the peak is set by the highest tooth.
#
# ### Finding the cycle: `torch.utils.viz._cycles.warn_tensor_cycles`
#
# PyTorch ships a watcher for this: `warn_tensor_cycles()` hooks `gc.callbacks`, keeps what each
# pass collects (`gc.DEBUG_SAVEALL`), and when that garbage holds a CUDA tensor it writes an HTML
# drawing of the cycle, each tensor linked to the stack that allocated it (from the memory
# history it switches on). Here it is run as is; on a machine without CUDA it stops at that
# memory history. Its garbage watcher (`observe_garbage`) needs no CUDA, so the cell then runs
# that part alone on one `StepRecord` of a CPU tensor.

# %%
import torch
from torch.utils.viz import _cycles
remove_watch = None
try:
    remove_watch = _cycles.warn_tensor_cycles()
    print("warn_tensor_cycles() installed: it will log a warning and an .html file per cycle")
except (AttributeError, RuntimeError) as exc:    # a build or machine without CUDA
    print(f"warn_tensor_cycles() cannot run here: {type(exc).__name__}: {str(exc).splitlines()[0]}")
seen = []

def observer(garbage):
    """what one collector pass found: the types of the objects, and the tensors among them"""
    seen.append([type(o).__name__ for o in garbage if isinstance(o, (torch.Tensor, cases.StepRecord))])

remove = _cycles.observe_garbage(observer)
try:
    cases.StepRecord(torch.zeros(256, 256))
    gc.collect()
finally:
    remove()
    if remove_watch is not None:       # the lesson goes on without the watcher
        remove_watch()
print("the collector's garbage held:", seen)

# %% tags=["check"] jupyter={"source_hidden": true}
assert any("StepRecord" in found and "Tensor" in found for found in seen)

# %% [markdown]
# On a CUDA machine, call `warn_tensor_cycles()` once at the top of the training script; each
# warning names an .html file that draws the cycle and the allocating stack of its tensor.
#
# ## Leak 4: Jupyter's `Out[n]` and `_`
#
# This notebook itself can leak. A cell whose last line is an expression shows its value, and
# IPython keeps that value in `Out[n]` and in `_`, `__`, `___`. The case runs three cells
# `model(x).relu()` in a real IPython shell (its own, not this notebook's) under `gml.capture`.

# %%
jupyter = gml.growth(cases.jupyter_out(steps=3))
print(jupyter)
quiet = gml.growth(cases.jupyter_out(steps=3, fixed=True))
print(f"\nthe same cells ending in ';': causes {quiet.causes}, "
      f"bytes that stay {[fmt(it.kept_bytes) for it in quiet.iterations]}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert jupyter.causes == ["leak"] * 3 and "leak" not in quiet.causes
assert all(it.kept_bytes == 512 * 1024 * 4 + 512 * 256 * 4 for it in jupyter.iterations)

# %% [markdown]
# Each cell keeps more than its 512 KiB result: the result still has its `grad_fn`, so the
# graph's saved tensors (the 2 MiB ReLU output of the hidden layer) stay with it. The evidence
# names the cell (`cell In[1]`, `In[2]`, ...). The fixes: end such cells with `;`, wrap the
# value in `print()`, or free what is held with `Out.clear()` and `del _`.
#
# ## Leak 5: a kept exception
#
# Every batch has a NaN; the loop catches the error and keeps it to report later. An exception
# carries its `__traceback__`, the traceback holds the frame that raised, and the frame holds
# its local tensors. (Jupyter does the same with `sys.last_traceback`, for the last error.)

# %%
print(inspect.getsource(cases._checked_forward))
show_loop(cases.stored_traceback)
kept_errors = gml.growth(cases.stored_traceback(steps=3))
print(kept_errors)

# %% tags=["check"] jupyter={"source_hidden": true}
assert kept_errors.causes == ["leak"] * 3
assert all(it.kept_bytes == 512 * (256 + 2 * 1024 + 256) * 4 for it in kept_errors.iterations)

# %% [markdown]
# What stays is every tensor of `_checked_forward`'s frame: its argument `x` and the locals `h`,
# `a`, `out`. Keep `str(err)` (or `traceback.format_exception(err)`) instead of the exception.
#
# ## Adam's state
#
# Adam keeps two moments per parameter (`exp_avg`, `exp_avg_sq`), each the size of its parameter.
# The loop below runs a few steps with it and measures what each step leaves behind.

# %% tags=["predict"]
gml.predict("10.p3", "Which step leaves memory behind?", choices=["step 0", "step 1", "every step", "none"])

# %%
adam = gml.growth(cases.optimizer_state(steps=3))
print(adam)
param_bytes = sum(p.numel() * p.element_size() for p in cases.mlp().parameters())
print(f"\nparameters {param_bytes:,} bytes; bytes that stay at step 0 "
      f"{adam.iterations[0].kept_bytes:,} = {adam.iterations[0].kept_bytes / param_bytes:g} x the parameters")
first = adam.by_cause()["one-time state"]
gml.reveal("10.p3", first[0] if first else "none")

# %% tags=["check"] jupyter={"source_hidden": true}
assert adam.causes == ["one-time state", "steady", "steady"]
assert adam.iterations[0].kept_bytes == 2 * param_bytes
import torch as _torch
_model = cases.mlp()
_opt = _torch.optim.Adam(_model.parameters())
_model(_torch.ones(2, 256)).sum().backward()
_opt.step()
_steps = [_opt.state[_p]["step"] for _p in _model.parameters()]
assert all(_s.device.type == "cpu" and _s.numel() == 1 for _s in _steps)   # host, unless capturable/fused
assert not _opt.defaults["capturable"] and not _opt.defaults["fused"]

# %% [markdown]
# The state is exactly two copies of the parameters. Adam also keeps a `step` counter per
# parameter, but on the CPU: a one-element `torch.tensor` in host memory (kernel launches for a
# counter would cost more than they save), unless `capturable=True` or `fused=True`, which put it
# on the parameters' device. On a GPU it takes no device memory, and the capture does not count
# it either. The allocating frames sit in
# `torch/optim/adam.py`, and no later step keeps bytes there, so this is **one-time state**: budget
# for it, it does not grow.
#
# ## New shapes: sequences of varying length
#
# A small transformer language model trained on batches of 8 sequences whose length changes
# from step to step. Longer sequences ask for bigger tensors.

# %%
lengths = (32, 64, 32, 96, 64)
shapes = gml.growth(cases.new_shapes(lengths=lengths))
print(shapes.text(evidence=False))
padded = gml.growth(cases.new_shapes(lengths=lengths, fixed=True))
print(f"\npadded to {max(lengths)} tokens: causes {padded.causes}; reserved "
      f"{fmt(padded.iterations[-1].reserved_bytes)} from step 0 on")

# %% tags=["check"] jupyter={"source_hidden": true}
_seen = set()
for _it, _n in zip(shapes.iterations, lengths):
    assert (_it.cause == "new shapes") == (_n not in _seen and _n > max(_seen, default=0))
    _seen.add(_n)
assert padded.causes[1:] == ["steady"] * (len(lengths) - 1)
assert all(it.kept_bytes == 0 for it in shapes.iterations)

# %% [markdown]
# Reserved memory grows only at a step whose length is longer than any before it; a repeated
# length is served from the cache (steady), and nothing stays (allocated at each end depends only
# on that step's length). Padding every batch to the longest length pays the largest
# reservation at step 0 and never grows again. (Bucketing lengths into a few sizes is the usual
# compromise between the two: fewer new shapes, less padding.)

# %%
fig = shapes.figure(title="varying lengths: reserved steps up at each new longest length")
fig

# %% [markdown]
# ## A healthy loop, a wider model
#
# Now a healthy loop: a wider perceptron (256 → 768 → 1536 → 256), the same batch of 2,048
# every step, the step written as a function so its tensors die when it returns. Step 1 asks
# for exactly the sizes step 0 asked for.

# %% tags=["predict"]
gml.predict("10.p4", "What will gml.growth call step 1?",
            choices=["steady", "leak", "new shapes", "fragmentation"])

# %%
frag_rec = cases.fragmentation(steps=3)
frag = gml.growth(frag_rec)
print(frag)
gml.reveal("10.p4", frag.iterations[1].cause)

# %% tags=["check"] jupyter={"source_hidden": true}
assert frag.causes == ["new shapes", "fragmentation", "steady"]
assert frag.iterations[1].peak_allocated_bytes == frag.iterations[0].peak_allocated_bytes

# %% [markdown]
# Step 1 never had more allocated at once than step 0, and every request that grew the cache had
# a size step 0 had already allocated. So where did step 1's requests go? Replay the capture
# with the model's own history on, and look up, for each request of 2 MiB or more, the segment
# its block was cut from.

# %%
replayed = gml.replay(frag_rec, history=True)
model_trace = replayed.snapshot["device_traces"][0]
segments, landed = [], []           # (address, size) of each cudaMalloc; per request: segment size
for e in model_trace:
    if e["action"] == "segment_alloc":
        segments.append((e["addr"], e["size"]))
    elif e["action"] == "alloc":
        landed.append(next((size for addr, size in segments if addr <= e["addr"] < addr + size), 0))
recorded_allocs = [j for j, e in enumerate(frag_rec.trace) if e["action"] == "alloc"]
landing = {}
for it in frag.iterations[:2]:
    landing[it.name] = [(frag_rec.trace[j]["size"], landed[k]) for k, j in enumerate(recorded_allocs)
                        if it.start <= j < it.end and frag_rec.trace[j]["size"] >= 2 * gml.MiB]
    print(f"{it.name}: " + ", ".join(f"{fmt(req)} in a {fmt(seg)} segment"
                                     for req, seg in landing[it.name]))

# %% tags=["check"] jupyter={"source_hidden": true}
_small_in_12 = {name: sum(1 for req, seg in rows if req < 10 * gml.MiB and seg == 12 * gml.MiB)
                for name, rows in landing.items()}
assert _small_in_12["step 0"] == 0 and _small_in_12["step 1"] >= 4

# %% [markdown]
# In step 0 the requests under 10 MiB (2, 4.5 and 6 MiB) all land in 20 MiB segments, the size
# c10 makes for such requests, and the 12 MiB segments exist because 12 MiB requests found no
# room. In step 1 the same requests meet whole free segments, and best fit gives each the
# *smallest* free block that holds it: a free 12 MiB segment beats a 20 MiB one. The small
# requests fill the 12 MiB segments, so when the next 12 MiB request comes no free block fits it,
# and the allocator reserves another segment. The memory was there, in the wrong pieces. Expandable segments map pages into one growing segment instead of needing a fitting
# free block; replaying the same capture with them:

# %%
expandable = gml.growth(frag_rec, alloc_conf="expandable_segments:True")
for name, rep in (("default settings", frag), ("expandable_segments:True", expandable)):
    print(f"{name:25} causes {rep.causes}, reserved at each end "
          f"{[fmt(it.reserved_bytes) for it in rep.iterations]}")
fig = frag.figure(title=f"fragmentation: step 1 repeats step 0 and reserves "
                        f"{fmt(frag.iterations[1].reserved_growth_bytes)} more")
fig

# %% tags=["check"] jupyter={"source_hidden": true}
assert expandable.causes == ["new shapes", "steady", "steady"]

# %% [markdown]
# ## How `gml.growth` decides
#
# For each iteration, in this order (`docs/GROWTH.md` has the details and the limits):
#
# 1. bytes it allocated **stay** (alive when the last iteration ends), from frames that leave
#    bytes that stay in more than one iteration: **leak**; from frames that do so only here:
#    **one-time state**. Loop variables freed when the next step rebinds them do not stay.
# 2. reserved grew, and an allocation that grew it asked for a size never allocated before:
#    **new shapes**;
# 3. reserved grew, every such size was seen before, but more was live at once than in any
#    earlier iteration: **higher peak**;
# 4. reserved grew with seen sizes and no higher peak: **fragmentation**;
# 5. otherwise **steady**.
#
# Its limits: it sees only the caching allocator (not the CUDA context or library workspaces), it
# cannot tell bytes that first stay in the last iteration from that iteration's loop variables,
# and a leak that is cleaned up before the last iteration ends (a list cleared each epoch) shows
# as bytes *carried*, not as a leak.
#
# ## Exercise: keep the predictions, not the memory
#
# Back to leak 1. You want each sample's predicted class, `out.argmax(1)`, for a confusion
# matrix after training. Write what the loop should append instead of `out`: an expression
# on `out` such as `"out.detach()"`. The check runs the training loop with your expression under
# `gml.capture`, checks the kept values are the predicted classes, and runs `gml.growth` on it.

# %% tags=["exercise"]
gml.exercise("10.ex")
my_keep = "out"          # change this: what to append each step, as an expression on out
gml.exercise.check("10.ex", my_keep)

# %% [markdown]
# ## On your GPU
#
# With CUDA, the same diagnosis runs on a real recording: turn on the history, stamp the steps,
# take the snapshot, and hand it to `gml.growth` (the replay is faithful: every address as
# recorded).
#
# ```python
# torch.cuda.memory._record_memory_history(max_entries=100_000)
# for i, (x, y) in enumerate(loader):
#     torch.cuda.memory._set_memory_metadata(f"step {i}")
#     train_step(x, y)
# torch.cuda.memory._set_memory_metadata("")
# print(gml.growth(torch.cuda.memory._snapshot()))
# ```
#
# `gml.experiment` runs this lesson's loop as a seeded scenario, outputs kept and outputs freed,
# on a simulated card of `gpu`'s size (the model's prediction) and, when `gpu` (the first cell's
# `gml.device()`) is a real CUDA card, measures it there too, within `gpu`'s memory budget, step
# by step. Without CUDA it says so in one line and shows the prediction alone.

# %%
print(gml.experiment(["growing_loop_kept", "growing_loop_fixed"], gpu))

# %%
gml.quiz("10")
