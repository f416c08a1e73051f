# %% [markdown]
# # 00 · Setup: which GPU is this, and what is the simulator?
#
# This kit teaches how AI frameworks **allocate, reuse and release GPU memory**, and why a run can
# die with `CUDA out of memory` while the numbers say plenty is free. Every lesson runs on one of
# two devices that speak the same API as `torch.cuda`:
#
# * **a real CUDA GPU** (`gml.CudaGPU`), when this machine has one: lessons then fragment real
#   GPU memory, inside a memory budget so that they do not need the whole card;
# * **`gml.SimulatedGPU`** everywhere else: PyTorch's CUDA caching allocator
#   (`c10/cuda/CUDACachingAllocator.cpp`) rewritten in plain Python. Same rounding, pools,
#   segment sizes, best fit, split and merge rules, `max_split_size`, garbage collection,
#   expandable segments, OOM retry and message, `memory_stats()` keys and snapshot format.
#
# The first code cell of every notebook says which of the two it runs on. Run it now.

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
# ## What is in this environment
#
# The versions below matter: allocator behaviour changes between PyTorch releases, and the
# simulator follows one named source revision (printed last).

# %%
import platform
import torch
from gpumemlab.allocator.constants import PYTORCH_REF

print(f"python        {platform.python_version()}")
print(f"torch         {torch.__version__}  (CUDA available: {torch.cuda.is_available()})")
print(f"gpumemlab     {gml.__version__}")
print(f"device kind   {gpu.kind}, total memory {gml.format_size(gpu.total_memory)}")
print(f"model follows {PYTORCH_REF}")

# %% [markdown]
# ## A simulated card with exact numbers
#
# Most lessons make their own `gml.SimulatedGPU("8GiB")`, even on a machine with a GPU. A real
# card's numbers depend on the CUDA context, the driver, other processes and the PyTorch build;
# the simulator's numbers are exact and the same on every laptop, so the lessons can `assert`
# them. Where a real GPU is present, cells that use `gpu` show the real thing beside it.
#
# `sim.empty(n)` plays the part of `torch.empty(n, dtype=torch.uint8, device="cuda")`: it returns
# an allocation that is freed when its last reference goes, like a tensor.

# %%
sim = gml.SimulatedGPU("8GiB", alloc_conf="")   # alloc_conf="": ignore PYTORCH_CUDA_ALLOC_CONF
one_byte = sim.empty(1)
print(f"asked for 1 byte -> allocated {gml.format_size(sim.memory_allocated())}, "
      f"reserved {gml.format_size(sim.memory_reserved())}")
assert sim.memory_allocated() == 512            # round_size: at least kMinBlockSize
assert sim.memory_reserved() == 2 * gml.MiB     # one small-pool segment (kSmallBuffer)

# %% [markdown]
# One byte cost far more than one byte, twice over, in two different counters. Notebook 01
# explains both numbers; for now notice the two words. **Allocated** is what live tensors occupy;
# **reserved** is what the allocator has taken from the driver (`cudaMalloc`) and holds on to.
# `nvidia-smi` sees reserved memory (plus the CUDA context), not allocated memory.
#
# ## The same API as `torch.cuda`
#
# | torch.cuda | gpumemlab device |
# |---|---|
# | `torch.cuda.memory_allocated()` | `gpu.memory_allocated()` |
# | `torch.cuda.memory_reserved()` | `gpu.memory_reserved()` |
# | `torch.cuda.memory_stats()` | `gpu.memory_stats()` |
# | `torch.cuda.memory_summary()` | `gpu.memory_summary()` |
# | `torch.cuda.empty_cache()` | `gpu.empty_cache()` |
# | `torch.cuda.memory._snapshot()` | `gpu.snapshot()` |
# | `torch.cuda.mem_get_info()` | `gpu.mem_get_info()` |
#
# The cell below runs the same queries on `gpu` (the device of the first cell) and on `sim`.

# %%
for name, dev in (("gpu", gpu), ("sim", sim)):
    free, total = dev.mem_get_info()
    stats = dev.memory_stats()
    print(f"{name}: {dev.kind:9} allocated {gml.format_size(dev.memory_allocated()):>12}  "
          f"reserved {gml.format_size(dev.memory_reserved()):>12}  "
          f"driver free {gml.format_size(free):>12} of {gml.format_size(total)}  "
          f"segments {stats.get('segment.all.current', 0)}")  # torch returns {} before first use

# %% [markdown]
# ## What the simulator is not
#
# It models the allocator's *bookkeeping*, nothing else:
#
# * no kernels run and no data is stored: an allocation is an address and a size;
# * no timing: `time_us` in its traces is a logical clock (one tick per event), and it cannot
#   tell you how slow a `cudaMalloc` is;
# * no CUDA context (a real process loses a few hundred MiB to it before the first tensor), no
#   other processes on the card, no driver-side fragmentation of physical memory;
# * nothing allocates behind your back. A real run has more: cuBLAS and cuDNN workspaces and
#   CUDA-graph RNG state come from PyTorch's allocator, so they show up in real snapshots as
#   ordinary allocations; NCCL and some other libraries call `cudaMalloc` directly, outside
#   PyTorch's allocator, so their buffers never appear in a snapshot: they are memory the driver
#   no longer has (lesson 04). Private pools and CUDA-graph captures are modelled when you make
#   them (lesson 13).
#
# Where it differs from the real allocator, that is a bug or a documented "not modelled" item.
#
# ## Pictures work without a browser
#
# Views draw with matplotlib inline, and widgets (the step-by-step player, the quizzes) can be
# driven from code, so every lesson also runs headless, e.g. under `pytest --nbval-lax`.
# Here is the block map of `sim` after a second, larger allocation:

# %%
big = None                           # run again, this cell first frees the tensor it made before
big = sim.empty(100 * gml.MiB)
fig = gml.show(sim, title="sim after 1 B and 100 MiB")
drawn = fig.gml_blockmap            # what was drawn, readable from code
print(gml.text_blockmap(sim))
assert len(sim.memory_snapshot()) == 2      # one small-pool and one large-pool segment
fig

# %% tags=["check"] jupyter={"source_hidden": true}
# a library's own cudaMalloc, outside PyTorch's allocator: gone from the driver, in no snapshot
_card = gml.SimulatedGPU("1GiB", alloc_conf="")
_free_before = _card.mem_get_info()[0]
_card.allocator.driver.cuda_malloc(64 * gml.MiB)
assert _card.mem_get_info()[0] == _free_before - 64 * gml.MiB
assert _card.memory_snapshot() == [] and _card.memory_reserved() == 0

# %%
import matplotlib
import ipywidgets
print(f"matplotlib backend: {matplotlib.get_backend()}, ipywidgets {ipywidgets.__version__}")

# %% [markdown]
# ## The course map: tracks, times, what each lesson builds on
#
# Take the lessons in order, or follow a track: **training** (a run that runs out of memory or
# whose memory grows), **serving** (an inference server) or **teaching** (every lesson, with the
# graded assignments of `docs/COURSE.md`). The cell below reads the notebooks in this folder and
# the quiz banks, so the map is always the one you have. A lesson's time is an estimate computed
# from what it asks of you, at the rates printed under the table; "needs" lists the earlier
# lessons its text refers to. A class period is 50 minutes: a lesson marked "over one class"
# takes two sittings (stop after a reveal, not before one).

# %%
from gpumemlab.lessons import course_map as cm

curriculum = cm.course_map()
cm.print_course_map(curriculum)
print(f"rates: {cm.WORDS_PER_MINUTE} words/min of text, {cm.CODE_LINES_PER_MINUTE} code lines/min, "
      f"{cm.MINUTES_PER_PREDICTION} min a prediction, {cm.MINUTES_PER_EXERCISE} min an exercise, "
      f"{cm.MINUTES_PER_QUIZ_QUESTION} min a quiz question")
if not curriculum:
    print("no lesson notebooks in this folder: open this notebook from the kit's notebooks/ folder")
else:
    print(f"next: {min(n for n in curriculum if n > '00')} {curriculum[min(n for n in curriculum if n > '00')]['title']}")

# %% tags=["check"] jupyter={"source_hidden": true}
from gpumemlab.quizkit.bank import quizzes_dir
assert list(curriculum) == sorted(p.name[:2] for p in quizzes_dir().glob("[0-9][0-9]_*.yaml"))
assert all(n in curriculum for numbers, _why in cm.TRACKS.values() for n in numbers.split())
assert all(lesson["minutes"] > 0 and lesson["tracks"] for lesson in curriculum.values())

# %% [markdown]
# Each notebook ends with a short quiz: widgets in JupyterLab, plain text when headless. Answer
# in code with `gml.quiz.check("00.1", answer)`.

# %%
gml.quiz("00")
