# %% [markdown]
# # 06 · Expandable segments: borrowing the operating system's trick
#
# In notebook 02 the allocator held gigabytes of free memory and still failed a 2 GiB request:
# the free memory sat in 1 GiB holes inside one `cudaMalloc`'d segment, and a segment is one
# contiguous range of **physical** memory that cannot be rearranged.
#
# Operating systems solved this decades ago with **virtual memory**: a program sees contiguous
# *virtual* addresses, and the hardware maps each page to any free *physical* page. CUDA exposes
# the same machinery (`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`, `cuMemUnmap`), and
# PyTorch uses it when `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`:
#
# * each stream and pool gets one huge **virtual** range (about 1⅛ × the GPU's memory), reserved once;
# * physical memory is **mapped page by page** at the end of the used range when the segment
#   must grow, so one segment grows instead of many being allocated;
# * free pages can be **unmapped** from anywhere, including the middle, and their physical
#   memory reused for a mapping elsewhere.
#
# Pages are **2 MiB** in the small pool and **20 MiB** in the large pool (the newest PyTorch
# lets the large page size be tuned). Where the default allocator calls `cudaMalloc`
# (`alloc_block`), the expandable path calls `try_allocate_expandable_block`; the snapshot marks
# such segments `is_expandable` and the trace has `segment_map`/`segment_unmap` instead of
# `segment_alloc`/`segment_free`.

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
# ## Pages instead of segments
#
# The same three requests as in notebook 01 (1 B, 1 MiB + 1 B, 100 MiB + 1 B), with and without
# expandable segments. Count the segments and the reserved bytes. With the defaults they take
# three segments (2 MiB, 20 MiB and 102 MiB).

# %% tags=["predict"]
gml.predict("06.p1", "With expandable_segments:True, how many segments hold the three tensors?",
            kind="number", unit="segments")

# %%
GiB, MiB = gml.GiB, gml.MiB
from gpumemlab.viz.words import count   # count(1, "segment") -> "1 segment"
for conf in ("", "expandable_segments:True"):
    card = gml.SimulatedGPU("8GiB", alloc_conf=conf)
    held = [card.empty(n) for n in (1, MiB + 1, 100 * MiB + 1)]
    segs = card.memory_snapshot()
    print(f"{conf or 'defaults':25} reserved {gml.format_size(card.memory_reserved()):>11} in "
          f"{count(len(segs), 'segment')}: " + ", ".join(
              f"{s['segment_type']} {gml.format_size(s['total_size'])}{' (expandable)' if s['is_expandable'] else ''}"
              for s in segs))
es = card
gml.reveal("06.p1", len(es.memory_snapshot()))

# %% tags=["check"] jupyter={"source_hidden": true}
assert all(s["is_expandable"] for s in es.memory_snapshot())
assert len([s for s in es.memory_snapshot() if s["segment_type"] == "large"]) == 1
assert es.memory_reserved() % (2 * MiB) == 0

# %% [markdown]
# With expandable segments the two large tensors share **one** segment that grew page by page;
# the larger tensor started in the free tail of the first page. Reserved memory is always a
# whole number of pages: 20 MiB steps in the large pool, 2 MiB in the small one.

# %%
card = gml.SimulatedGPU("8GiB", alloc_conf="expandable_segments:True")
rows = []
for n in (MiB + 1, 20 * MiB, 21 * MiB, 100 * MiB, 101 * MiB):
    card.empty_cache()
    before = card.memory_reserved()
    t = card.empty(n)
    rows.append((n, card.memory_reserved() - before))
    del t
for n, grew in rows:
    print(f"request {gml.format_size(n):>11}: mapped {gml.format_size(grew):>11} = {grew // (20 * MiB)} x 20 MiB pages")

# %% tags=["check"] jupyter={"source_hidden": true}
assert all(grew % (20 * MiB) == 0 and grew >= n for n, grew in rows)

# %% [markdown]
# ## The workload of notebook 02, again
#
# Same 8 GiB card, same steps: a 7 GiB tensor dies, seven 1 GiB tensors, every other one freed,
# then a 2 GiB request. Only the setting differs. With the defaults it ran out of memory.

# %% tags=["predict"]
gml.predict("06.p2", "With expandable_segments:True, does the 2 GiB request succeed?",
            choices=["yes", "no: out of memory"])


# %%
def notebook_02_workload(conf, total_memory="8GiB", request=2 * GiB):
    card = gml.SimulatedGPU(total_memory, alloc_conf=conf)
    card.set_memory_metadata("7 GiB warm-up")        # phase marks for the timeline's x-axis
    warm = card.empty(7 * GiB)
    del warm
    card.set_memory_metadata("seven 1 GiB")
    blocks = [card.empty(GiB) for _ in range(7)]
    card.set_memory_metadata("every other freed")
    for i in (0, 2, 4, 6):
        blocks[i] = None
    keep = [b for b in blocks if b is not None]
    card.set_memory_metadata("the 2 GiB request")
    try:
        keep.append(card.empty(request))
        outcome = "ok"
    except gml.OutOfMemoryError:
        outcome = "OOM"
    return card, outcome, keep

cards = {}
for conf in ("", "expandable_segments:True"):
    card, outcome, keep = notebook_02_workload(conf)
    cards[conf] = (card, keep)
    s = card.memory_stats()
    print(f"{conf or 'defaults':25}: 2 GiB request -> {outcome:3}  (retries {s['num_alloc_retries']}, "
          f"OOMs {s['num_ooms']}, reserved {gml.format_size(card.memory_reserved())}, "
          f"allocated {gml.format_size(card.memory_allocated())})")
es_outcome = "yes" if cards["expandable_segments:True"][0].memory_stats()["num_ooms"] == 0 else "no: out of memory"
gml.reveal("06.p2", es_outcome)

# %% tags=["check"] jupyter={"source_hidden": true}
assert cards[""][0].memory_stats()["num_ooms"] == 1
assert cards["expandable_segments:True"][0].memory_stats()["num_ooms"] == 0

# %% [markdown]
# What happened in the expandable run: no cached block could hold 2 GiB, and mapping 2 GiB more
# at the end of the segment needed more physical memory than the driver had left. So the retry
# path (`release_cached_blocks`) **unmapped the free pages** in the holes (`unmap_block`), which
# returned their physical memory to the driver; then the allocator mapped fresh pages for the new
# tensor. The holes are still there in the *virtual* address space, but they cost nothing.
# The trace shows it. It names the expandable segment once (`seg_0`, its reserved virtual
# range), and offsets count from the start of that range: `seg_0.map(0:7.01 GiB)` maps pages at
# its start, `seg_0.unmap(0:1020.00 MiB)` unmaps the first hole (all but the page it shares with
# tensor 1), and `i = seg_0[6.00 GiB:2.00 GiB]` is the new tensor, 6 GiB into the range.

# %%
es_card = cards["expandable_segments:True"][0]
trace = es_card.snapshot()["device_traces"][0]
counts = {}
for e in trace:
    counts[e["action"]] = counts.get(e["action"], 0) + 1
print(counts)
print(gml.text_trace(es_card))

# %% tags=["check"] jupyter={"source_hidden": true}
assert counts.get("segment_unmap", 0) >= 1 and counts.get("segment_map", 0) >= 2

# %% [markdown]
# ### The virtual range, page by page
#
# `gml.page_map` draws the segment's reserved virtual range as its 20 MiB pages: hatched pages
# are unmapped (address space, no memory), grey pages are mapped (physical memory), blue bars are
# the tensors. Before the unmap the holes are mapped and free; after it, their pages are hatched,
# their memory went back to the driver, and new pages were mapped at the end for the 2 GiB tensor.

# %%
actions = [e["action"] for e in trace]
first_unmap = actions.index("segment_unmap")
fig = gml.page_map(es_card, [first_unmap - 1, len(actions) - 1],
                   labels=["before the unmap: the holes are mapped, free",
                           "after: the holes unmapped, 2 GiB mapped at the end"])
before, after = fig.gml_pages
print(f"mapped pages: {sum(before['mapped'])} before, {sum(after['mapped'])} after; "
      f"reserved now {gml.format_size(es_card.memory_reserved())}")
fig

# %% tags=["check"] jupyter={"source_hidden": true}
assert sum(after["mapped"]) * 20 * MiB == es_card.memory_reserved()

# %% [markdown]
# The block map shows the same state as PyTorch's snapshot reports it: each mapped run of the
# virtual range is a band of its own (three here), and the unmapped holes are simply not there.

# %%
fig = gml.show(es_card, title="expandable segments: the 2 GiB tensor fits after the holes were unmapped")
print(gml.text_blockmap(es_card))
fig

# %%
fig = gml.timeline([cards[""][0], es_card], labels=["defaults", "expandable_segments:True"])
fig

# %% tags=["check"] jupyter={"source_hidden": true}
assert [d.get("x_unit") for d in fig.gml_timeline] == ["step", "step"]   # one x-axis, in phases

# %% [markdown]
# Upper panel: with the defaults reserved memory stays at 7 GiB and the 2 GiB request ends in
# an OOM (the cross). Lower panel: with expandable segments reserved memory drops when the holes
# are unmapped and climbs again when the 2 GiB tensor is mapped.
#
# ## Try it: setting, card size, request size
#
# The controls re-run this workload with the setting, the card and the size of the last request
# you pick, and redraw the block map after that request and the timeline.

# %%
controls = gml.whatif(notebook_02_workload, at="end",
                      conf=["", "expandable_segments:True"],
                      total_memory=["8GiB", "10GiB", "12GiB"],
                      request=[2 * GiB, 3 * GiB, 4 * GiB, 5 * GiB],
                      title="notebook 02's workload")
controls

# %% [markdown]
# ## What it does not fix
#
# * **Live tensors still do not move.** Expandable segments remove the cost of free holes, not
#   the holes' neighbours. If live tensors alone exceed the card, nothing helps.
# * **Page granularity.** Memory is mapped in 20 MiB pages, so a partly used page at the edge of a
#   hole cannot be unmapped: a few MiB per hole can stay reserved (see the block map above).
# * **Mapping costs time.** `cuMemMap`/`cuMemUnmap` are driver calls too; the cache still avoids
#   most of them, but a workload that keeps growing and shrinking pays more than with big segments.
# * **Some features do not mix** with it on a real GPU (e.g. certain CUDA graph and IPC uses of
#   memory, older drivers); PyTorch falls back or refuses with a message.
#
# ## Turning it on for real
#
# ```bash
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py
# ```
#
# or, before the first CUDA allocation, `torch.cuda.memory._set_allocator_settings("expandable_segments:True")`.
# On the device of this notebook:

# %%
if gpu.kind == "cuda":
    print("real GPU: settings are read at start-up; set PYTORCH_CUDA_ALLOC_CONF and restart the kernel")
    print("current settings:", gpu.describe())
else:
    gpu.set_allocator_settings("expandable_segments:True")
    probe = gpu.empty(1 * GiB + 1)
    print(gpu.describe())
    print(f"1 GiB + 1 B -> reserved {gml.format_size(gpu.memory_reserved())} "
          f"(a whole number of 20 MiB pages: {gpu.memory_reserved() % (20 * MiB) == 0})")
    expandable_now = gpu.memory_snapshot()[0]["is_expandable"]
    del probe

# %% tags=["check"] jupyter={"source_hidden": true}
assert gpu.kind == "cuda" or expandable_now

# %% [markdown]
# The same idea, taken further, is how inference servers manage the KV cache: fixed-size pages
# and a table that maps a sequence's logical positions to physical pages (notebook 08,
# PagedAttention). Research allocators such as GMLake stitch non-contiguous physical chunks into
# one virtual range for training, with the same goal.

# %% [markdown]
# ## On your GPU: the workload of notebook 02, both ways
#
# `gml.experiment` runs this lesson's experiment as a seeded scenario on a simulated card of
# `gpu`'s size (the model's prediction) and, when `gpu` (the first cell's `gml.device()`) is a
# real CUDA card, measures it there too, within `gpu`'s memory budget, step by step. Without
# CUDA it says so in one line and shows the prediction alone.

# %%
print(gml.experiment(["fragmentation_oom", "expandable_segments"], gpu))

# %% [markdown]
# ## Exercise: free the tensors whose pages come back
#
# A 2 GiB card under `expandable_segments:True` holds 24 tensors made one after another
# (`SIZES_06`, in MiB; none is a whole number of 20 MiB pages). You may free tensors adding up
# to at most `FREE_AT_MOST_06`. Which ones should you free so that one tensor of `REQUEST_06()`
# bytes can then be allocated? Reason from the pages: draw the 20 MiB page boundaries under the
# tensors and ask which pages no live tensor touches after your frees. The check frees your
# tensors on the simulated card (`layout_06(freed, request)`) and makes the request.

# %% tags=["exercise"]
from gpumemlab.lessons.expandable_segments import FREE_AT_MOST_06, REQUEST_06, SIZES_06
gml.exercise("06.ex")
print(f"{len(SIZES_06)} tensors (MiB, in order): {list(SIZES_06)}")
print(f"free at most {gml.format_size(FREE_AT_MOST_06)}; then request {gml.format_size(REQUEST_06())}")
my_freed = []              # change this: the numbers of the tensors to free (0 is the first)
gml.exercise.check("06.ex", my_freed)

# %%
gml.quiz("06")
