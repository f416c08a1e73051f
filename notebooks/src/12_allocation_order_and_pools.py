# %% [markdown]
# # 12 · Allocation order and pools
#
# The simple picture of GPU memory is a counter: allocate and it goes down, free and it goes
# back up. The caching allocator keeps a richer state (segments, split blocks, pools), and with
# it the same tensors can cost different amounts of memory depending on **when** and **where**
# they were allocated. The PyTorch devlog *"When does fragmentation occur in the CUDA caching
# allocator?"* (Edward Yang, pytorch/devlogs, June 2026) walks through small laboratory cases of
# this; this lesson runs those situations on the simulated allocator and measures each one:
#
# 1. the same tensors allocated in two orders reserve different memory;
# 2. the 1 MiB line between the small and the large pool is a wall;
# 3. expandable segments map pages step by step, and a live block still pins its page.
#
# Lesson 13 takes these rules to private pools and to the CUDA graphs that capture into them.

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
GiB, MiB = gml.GiB, gml.MiB
fmt = gml.format_size
from gpumemlab.viz.words import count              # count(1, "segment") -> "1 segment"

# %% [markdown]
# ## 1 · The same tensors, two orders
#
# Three tensors stay alive together: one of 12 MiB and two of 4 MiB. Recall the segment rules
# (lesson 01): a request between 1 and 10 MiB gets a 20 MiB segment that it splits, and a request
# of 10 MiB or more gets a segment of its own size (rounded to 2 MiB). Before running it: which
# order reserves less, the big tensor first or last?

# %% tags=["predict"]
gml.predict("12.p1", "Allocating 12 MiB, 4 MiB, 4 MiB (big first): how much is reserved?")


# %%
def reserved_for(order_mib, conf=""):
    """Allocate tensors of these sizes (MiB) in this order, all kept alive; return the card."""
    card = gml.SimulatedGPU("8GiB", alloc_conf=conf)
    card.held = [card.empty(n * MiB) for n in order_mib]
    return card

orders = ([12, 4, 4], [4, 12, 4], [4, 4, 12])
cards = {tuple(o): reserved_for(o) for o in orders}
for o, card in cards.items():
    segs = card.memory_snapshot()
    print(f"order {str(list(o)):12} MiB: reserved {fmt(card.memory_reserved()):>9} in "
          f"{count(len(segs), 'segment')} ({', '.join(fmt(s['total_size']) for s in segs)})")

# %%
gml.reveal("12.p1", cards[(12, 4, 4)].memory_reserved())

# %% tags=["check"] jupyter={"source_hidden": true}
assert cards[(4, 4, 12)].memory_reserved() < cards[(12, 4, 4)].memory_reserved()
assert len(cards[(4, 4, 12)].memory_snapshot()) == 1

# %% [markdown]
# Big first: the 12 MiB tensor gets its own 12 MiB segment, and the two small ones open a 20 MiB
# segment between them. Small first: the two 4 MiB tensors split a 20 MiB segment and leave a
# 12 MiB tail that the big tensor fills exactly. Same live bytes, different reserved memory.
# Nothing is wrong here and nothing is freed: this is not fragmentation of free memory, it is the
# cost of the segment each request happened to find. The block maps side by side:

# %%
fig = gml.show(cards[(12, 4, 4)], title="12, 4, 4 MiB: two segments")
fig

# %%
fig = gml.show(cards[(4, 4, 12)], title="4, 4, 12 MiB: one segment, filled exactly")
fig

# %% [markdown]
# ## 2 · The 1 MiB wall between the pools
#
# Requests of at most 1 MiB go to the **small pool** (2 MiB segments); anything bigger goes to the
# **large pool**. Free memory of one pool never serves the other, and `get_free_block` never even
# looks there. Below, eight 1 MiB tensors come and go, then one tensor of 1 MiB + 1 byte arrives.

# %% tags=["predict"]
gml.predict("12.p2", "After the eight 1 MiB tensors are freed, a 1 MiB + 1 B tensor arrives. "
                     "How much is reserved then?")

# %%
wall = {}
for conf in ("", "expandable_segments:True"):
    card = gml.SimulatedGPU("8GiB", alloc_conf=conf)
    small = [card.empty(MiB) for _ in range(8)]
    cached_small = card.memory_reserved()
    del small
    big = card.empty(MiB + 1)
    wall[conf] = (card, cached_small, big)
    print(f"{conf or 'defaults':25}: eight 1 MiB tensors reserved {fmt(cached_small)}; after they "
          f"die and 1 MiB + 1 B arrives: reserved {fmt(card.memory_reserved())}")

# %%
gml.reveal("12.p2", wall[""][0].memory_reserved())

# %% tags=["check"] jupyter={"source_hidden": true}
for conf, (card, cached_small, big) in wall.items():
    assert card.memory_reserved() > cached_small      # the cached small memory did not help
    assert {s["segment_type"] for s in card.memory_snapshot()} == {"small", "large"}

# %% [markdown]
# Expandable segments do not remove the wall: each pool (and each stream) has its own expandable
# segment, 2 MiB pages for the small pool and 20 MiB pages for the large one. Only
# `empty_cache()` would return the small pool's memory to the driver.
#
# ## 3 · Expandable segments, page by page
#
# With `expandable_segments:True` a miss maps more pages at the end of the segment instead of
# calling `cudaMalloc`. Watch the mapped size after each 8 MiB tensor of the large pool.

# %%
es = gml.SimulatedGPU("8GiB", alloc_conf="expandable_segments:True")
es.record_memory_history("all")
steps = []
live = []
for i in range(6):
    live.append(es.empty(8 * MiB))
    steps.append(es.memory_reserved())
maps = [e for e in es.snapshot()["device_traces"][0] if e["action"] == "segment_map"]
for i, r in enumerate(steps):
    print(f"after tensor {i + 1} ({8 * (i + 1)} MiB live): reserved {fmt(r):>8} "
          f"= {count(r // (20 * MiB), 'page')} of 20 MiB")
print("segment_map calls:", [fmt(e["size"]) for e in maps])

# %% tags=["check"] jupyter={"source_hidden": true}
assert all(r % (20 * MiB) == 0 for r in steps)
assert len(es.memory_snapshot()) == 1   # one segment that grew

# %% [markdown]
# Now free every tensor except the third and call `empty_cache()`. Free **pages** go back to
# the driver, but a page that still holds part of a live block stays mapped: the live block
# *pins* it (the devlog's point that expandable segments fix free holes, not live neighbours).

# %% tags=["predict"]
gml.predict("12.p3", "With only the third 8 MiB tensor alive, how much stays reserved after "
                     "empty_cache()?")

# %%
pinned = gml.SimulatedGPU("8GiB", alloc_conf="expandable_segments:True")   # the same six again
six = [pinned.empty(8 * MiB) for _ in range(6)]
keep = six[2]
del six                       # every tensor but the third dies
pinned.empty_cache()
page = 20 * MiB
offset = keep.address - pinned.memory_snapshot()[0]["address"]
first, last = offset // page, (offset + keep.size - 1) // page
pinned_reserved, pinned_live = pinned.memory_reserved(), pinned.memory_allocated()
print(f"live {fmt(pinned_live)}, reserved after empty_cache {fmt(pinned_reserved)}")
print(f"the live block lies at {fmt(offset)} .. {fmt(offset + keep.size)} of the segment: "
      f"it touches pages {first} to {last} ({last - first + 1} pages of {fmt(page)})")

# %%
gml.reveal("12.p3", pinned_reserved)

# %% tags=["check"] jupyter={"source_hidden": true}
assert pinned_reserved > pinned_live
assert pinned_reserved == (last - first + 1) * page

# %% [markdown]
# The surviving tensor was the third: it sits across the boundary between the first and the
# second 20 MiB page, so both pages stay mapped, 32 MiB of them free, while the pages after it
# went back. Live blocks, not free ones, decide what an expandable segment can return.

# %%
fig = gml.show(pinned, title="expandable segment: one live 8 MiB block pins the pages it touches")
fig

# %% [markdown]
# ### Eight 16 MiB blocks, then four 32 MiB requests
#
# The case of the PyTorch developers' write-up on the allocator: a program makes eight 16 MiB
# tensors and frees them all, then asks for four of 32 MiB. 128 MiB of free cache, 128 MiB
# wanted. With the defaults, each 16 MiB request (10 MiB or more) got a `cudaMalloc` segment of
# its own size.

# %% tags=["predict"]
gml.predict("12.p4", "Defaults: eight 16 MiB tensors made and freed, then four 32 MiB tensors. "
                     "How much is reserved?")

# %%
devlog, devlog_reserved = {}, {}
for conf in ("", "expandable_segments:True"):
    card_d = gml.SimulatedGPU("8GiB", alloc_conf=conf)
    small = [card_d.empty(16 * MiB) for _ in range(8)]
    after_small = card_d.memory_reserved()
    small.clear()                                 # all eight freed: 128 MiB of free cache
    big = [card_d.empty(32 * MiB) for _ in range(4)]
    devlog[conf] = (card_d, big, after_small)
    devlog_reserved[conf] = card_d.memory_reserved()
    print(f"{conf or 'defaults':25}: reserved {fmt(after_small)} after the eight, "
          f"{fmt(card_d.memory_reserved())} after the four, for {fmt(card_d.memory_allocated())} live; "
          f"{count(len(card_d.memory_snapshot()), 'segment')}, {card_d.memory_stats()['num_device_alloc']} "
          f"cudaMalloc/map calls")
gml.reveal("12.p4", devlog_reserved[""])

# %% tags=["check"] jupyter={"source_hidden": true}
assert devlog[""][0].memory_reserved() == 256 * MiB == 2 * devlog[""][0].memory_allocated()
assert devlog["expandable_segments:True"][0].memory_reserved() == 7 * 20 * MiB   # 140 MiB
assert devlog["expandable_segments:True"][2] == devlog["expandable_segments:True"][0].memory_reserved()

# %% [markdown]
# With the defaults, none of the eight free 16 MiB segments can hold 32 MiB, and two segments
# are never joined into one, even when they happen to lie side by side in the address space. So
# each request calls `cudaMalloc` again: 256 MiB reserved, twice what is live, and the eight free segments
# stay cached until `empty_cache()`. With expandable segments the eight tensors were pages of one
# segment: 128 MiB rounded up to whole 20 MiB pages, 140 MiB. Freed, they became one free range,
# and the four 32 MiB tensors fit in it without mapping a single new page.

# %%
fig = gml.show(devlog[""][0], title="defaults: eight free 16 MiB segments beside four new 32 MiB ones")
fig

# %% [markdown]
# ## Exercise
#
# Five tensors stay alive together: one of 16 MiB, three of 6 MiB and one of 3 MiB. In which
# order should they be allocated, on a fresh card with the default settings, so that they
# reserve the least memory any order can? Largest first and smallest first both reserve more.
# Reason from the segment rules of part 1 (which request opens a segment, and of what size;
# which later request fits in what an open segment has left?); the check allocates your order
# and every other one.

# %% tags=["exercise"]
from gpumemlab.lessons.allocation_order import SIZES_12
print("sizes (MiB):", [n // MiB for n in SIZES_12])
gml.exercise("12.ex")
my_order = []      # change this: the five sizes in MiB, in the order they are allocated
gml.exercise.check("12.ex", my_order)

# %% [markdown]
# ## On your GPU: the same tensors, two orders
#
# `gml.experiment` runs part 1 as a seeded scenario (12, 4 and 4 MiB kept alive, big first and
# then big last, the cache emptied between the two) on a simulated card of `gpu`'s size (the
# model's prediction) and, when `gpu` (the first cell's `gml.device()`) is a real CUDA card,
# measures it there too, step by step. Without CUDA it says so in one line and shows the
# prediction alone.

# %%
print(gml.experiment("allocation_order", gpu))

# %% [markdown]
# ## What to take away
#
# * Reserved memory depends on the order of requests, not only on their sizes: a segment is sized
#   by the request that opened it.
# * The small and large pools (and each stream) are separate worlds; free memory in one never
#   serves another.
# * Expandable segments return free pages, but a live block pins the pages under it.

# %%
gml.quiz("12")
