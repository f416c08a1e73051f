# %% [markdown]
# # 11 · Allocation order, pools and graphs
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
# 3. expandable segments map pages step by step, and a live block still pins its page;
# 4. a private pool (`torch.cuda.MemPool`) keeps its memory out of the global cache;
# 5. CUDA graphs capture into private pools; two graphs can share one, and `reset()` gives it back
#    only when the last of them lets go.
#
# The devlog's motivation is LLM serving: every byte not held by weights or CUDA-graph buffers
# can become KV cache, and a serving engine captures one graph per batch size into **one shared
# pool**, so the order of the captures decides how much that pool reserves.

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
gml.predict("11.p1", "Allocating 12 MiB, 4 MiB, 4 MiB (big first): how much is reserved?")


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
gml.reveal("11.p1", cards[(12, 4, 4)].memory_reserved())

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
gml.predict("11.p2", "After the eight 1 MiB tensors are freed, a 1 MiB + 1 B tensor arrives. "
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
gml.reveal("11.p2", wall[""][0].memory_reserved())

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
gml.predict("11.p3", "With only the third 8 MiB tensor alive, how much stays reserved after "
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
gml.reveal("11.p3", pinned_reserved)

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
gml.predict("11.p5", "Defaults: eight 16 MiB tensors made and freed, then four 32 MiB tensors. "
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
gml.reveal("11.p5", devlog_reserved[""])

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
# ## 4 · A private pool keeps its memory apart
#
# `torch.cuda.MemPool()` makes a **private pool**: a small and a large free list of its own,
# with id `(0, n)`. Inside `with torch.cuda.use_mem_pool(pool):` the current thread's allocations
# go there. The pool's cached blocks never serve requests outside it, and `empty_cache()` leaves
# them alone while the pool lives. (This is how NCCL-registered memory and vLLM's "sleep mode"
# keep their memory separate.) Here the simulated card's API is the same.

# %%
card = gml.SimulatedGPU("8GiB", alloc_conf="")
pool = card.MemPool()
with card.use_mem_pool(pool):
    x = card.empty(40 * MiB)
del x
y = card.empty(40 * MiB)          # outside the pool: the pool's free 40 MiB does not count
card.empty_cache()
for seg in card.memory_snapshot():
    print(f"segment {fmt(seg['total_size']):>9}  pool {seg['segment_pool_id']}  "
          f"allocated {fmt(seg['allocated_size'])}")
print(f"reserved {fmt(card.memory_reserved())}, allocated {fmt(card.memory_allocated())}; "
      f"pool {pool.id} has use_count {pool.use_count()}")
stats = card.memory_stats()
print("reserved_bytes_by_private_pools:", fmt(stats[f"reserved_bytes_by_private_pools.0_{pool.id[1]}.all.current"]))
pool_card = card                  # this part's card, kept under its own name
with_pool = (card.memory_reserved(), card.memory_allocated())

# %% tags=["check"] jupyter={"source_hidden": true}
assert with_pool == (2 * 40 * MiB, 40 * MiB)

# %% [markdown]
# When the last reference to the pool goes, its destructor releases the pool and empties *its*
# cache: the free 40 MiB segment goes back to the driver at once.

# %%
pool = None                       # the last reference goes, as `del pool` does
after_pool = pool_card.memory_reserved()
print(f"after the pool's last reference went: reserved {fmt(after_pool)}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert after_pool == 40 * MiB


# %% [markdown]
# On a full card the separation can cause an out-of-memory error with memory sitting free in a
# pool. `MemPool(use_on_oom=True)` lets the default pool borrow a pool's **cached** blocks as a
# last resort before the cache is emptied (c10 `try_mempool_fallback`; it never allocates new
# memory for the pool). The OOM message counts what private pools hold.

# %%
def fill_then_ask(use_on_oom):
    card = gml.SimulatedGPU("64MiB", alloc_conf="")
    pool = card.MemPool(use_on_oom=use_on_oom)
    with card.use_mem_pool(pool):
        x = card.empty(40 * MiB)
    del x
    try:
        card.empty(30 * MiB)
        return "fits (borrowed from the pool)", pool, card
    except gml.OutOfMemoryError as exc:
        return str(exc).split(" If reserved")[0], pool, card

for flag in (False, True):
    outcome, pool_, card_ = fill_then_ask(flag)
    print(f"use_on_oom={flag}: {outcome}")

# %% [markdown]
# ## 5 · CUDA graphs and their pools
#
# A CUDA graph bakes the addresses its kernels used into the graph, so that memory must stay
# reserved for as long as the graph can be replayed. PyTorch therefore sends every allocation made
# on the capture stream during `torch.cuda.graph(g)` into a private pool: the graph's own
# `(n, 0)` pool, or one passed with `pool=`. Frees during the capture go back to that pool and
# are reused inside it; `g.replay()` makes no allocator call at all; `g.reset()` (or deleting
# the graph) drops the graph's reference to the pool, and only when nobody holds the pool does
# `empty_cache()` give its free segments back.
#
# A "captured step" here is a forward pass of a batch: a few temporaries that die and one output
# that lives. A serving engine captures one graph per batch size and shares one pool, which works
# because graphs are replayed one at a time.

# %%
from gpumemlab.lessons.pools_and_graphs import capture_graphs, captured_step
help(captured_step)

# %%
for share in (False, True):
    card_g, graphs, outs = capture_graphs([8, 4, 2, 1], share=share)
    pools = {g.pool() for g in graphs}
    print(f"share={share!s:5}: {len(pools)} pool(s), reserved {fmt(card_g.memory_reserved())} "
          f"for {fmt(card_g.memory_allocated())} of live outputs")

# %% [markdown]
# Sharing one pool lets each later (smaller) capture reuse what the earlier ones freed. The
# order still matters, the allocation-order story of part 1 inside a pool: a freed block can be
# split for a smaller request but never grows for a bigger one, so a capture fits in what an
# earlier, larger capture freed, and a larger capture after a smaller one needs new segments once
# its requests outgrow the blocks the smaller one freed.
# Largest first is one order that reaches the least any order can; whether it is the only one,
# all 24 orders will show.

# %% tags=["predict"]
gml.predict("11.p4", "Shared pool, batches captured smallest first (1, 2, 4, 8): how much is "
                     "reserved?")

# %%
by_order, reserved_by_order = {}, {}
for order in ([8, 4, 2, 1], [1, 2, 4, 8]):
    card_o, graphs_o, outs_o = capture_graphs(order, share=True)
    by_order[tuple(order)] = (card_o, graphs_o, outs_o)
    reserved_by_order[tuple(order)] = card_o.memory_reserved()
    print(f"capture order {order}: shared pool reserves {fmt(card_o.memory_reserved())}")

# %%
gml.reveal("11.p4", reserved_by_order[(1, 2, 4, 8)])

# %% tags=["check"] jupyter={"source_hidden": true}
assert reserved_by_order[(8, 4, 2, 1)] < reserved_by_order[(1, 2, 4, 8)]
import itertools as _it
assert reserved_by_order[(8, 4, 2, 1)] == min(
    capture_graphs(list(_o), share=True)[0].memory_reserved() for _o in _it.permutations((1, 2, 4, 8)))

# %%
from gpumemlab.lessons.pools_and_graphs import steps_11
steps_by_order = {}
for order in ([1, 2, 4, 8], [8, 4, 2, 1]):
    steps_by_order[tuple(order)] = steps_11(order)   # each prefix captured on a fresh card
    print(f"captured {order}: reserved after each capture "
          + ", ".join(fmt(r) for r in steps_by_order[tuple(order)]))

# %% tags=["check"] jupyter={"source_hidden": true}
_sf, _lf = steps_by_order[(1, 2, 4, 8)], steps_by_order[(8, 4, 2, 1)]
assert _sf[0] == _sf[1] < _sf[2] < _sf[3]
assert _lf[0] == _lf[1] == _lf[2] and _lf[3] - _lf[2] == 2 * 1024**2

# %% [markdown]
# Smallest first, batch 2 still fits in what batch 1 freed, but batches 4 and 8 find only
# blocks that are too small and reserved memory climbs at each of them; largest first, batch 8's
# capture reserves what 4 and 2 need, and batch 1 adds one 2 MiB small-pool segment for its
# requests under 1 MiB. The two captures over time, each step one allocator event:

# %%
fig = gml.timeline([by_order[(1, 2, 4, 8)][0], by_order[(8, 4, 2, 1)][0]],
                   labels=["captured 1, 2, 4, 8", "captured 8, 4, 2, 1"])
fig

# %% [markdown]
# ### The same captures with expandable segments
#
# A private pool can use expandable segments too: its segments grow page by page instead of
# one `cudaMalloc` per miss. Does that make the capture order irrelevant? The outputs of the
# earlier captures stay alive inside the pool, and live blocks pin their pages.

# %%
by_order_es = {}
for order in ([8, 4, 2, 1], [1, 2, 4, 8]):
    card_e, graphs_e, outs_e = capture_graphs(order, alloc_conf="expandable_segments:True")
    by_order_es[tuple(order)] = card_e.memory_reserved()
    print(f"capture order {order}: defaults {fmt(reserved_by_order[tuple(order)]):>10}, "
          f"expandable segments {fmt(card_e.memory_reserved()):>10}, "
          f"{len(card_e.memory_snapshot())} segment(s)")

# %% tags=["check"] jupyter={"source_hidden": true}
assert by_order_es[(8, 4, 2, 1)] < by_order_es[(1, 2, 4, 8)]
assert all(by_order_es[o] <= reserved_by_order[o] for o in by_order_es)

# %% [markdown]
# Expandable segments save memory in both orders (a pool's free range is one range, and pages
# are 20 MiB, not a segment per request), but the order still matters: captured smallest first,
# the outputs of the small captures stay alive at the front of the segment, and the temporaries
# of each larger capture need one run of free pages longer than any gap between them, so the
# segment is mapped further at its end (`gml.text_blockmap(card)` shows the live outputs at the
# front). Largest first, the biggest capture maps the run once and the later ones fit in it.
# Below, all 24 orders side by side.

# %% [markdown]
# ### What `reset()` gives back
#
# Take the shared pool captured largest first. Reset one graph: the pool still has users, so
# `empty_cache()` returns nothing. Reset all of them: the pool becomes freeable, and
# `empty_cache()` returns every free segment of it, but not the segments that still hold the
# graphs' outputs, which the program still references.

# %%
card_r, graphs_r, outs_r = capture_graphs([8, 4, 2, 1])     # captured again: this cell resets them
pid = graphs_r[0].pool()
history = [("captured", card_r.memory_reserved())]
graphs_r[0].reset()
card_r.empty_cache()
history.append(("reset one graph + empty_cache", card_r.memory_reserved()))
for g in graphs_r[1:]:
    g.reset()
card_r.empty_cache()
history.append(("reset all + empty_cache", card_r.memory_reserved()))
outs_r.clear()
card_r.empty_cache()
history.append(("outputs dropped + empty_cache", card_r.memory_reserved()))
for what, r in history:
    print(f"{what:32} reserved {fmt(r)}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert history[1][1] == history[0][1]
assert history[2][1] < history[1][1] and history[3][1] == 0

# %% [markdown]
# ### All 24 orders, with and without expandable segments
#
# Four batch sizes can be captured in 4! = 24 orders. Capture each one on a fresh card, with the
# defaults and with expandable segments, and compare the range of what the pool reserves.

# %%
import itertools
all_orders = {}
for conf in ("", "expandable_segments:True"):
    for order in itertools.permutations((1, 2, 4, 8)):
        card_p, _graphs, _outs = capture_graphs(list(order), alloc_conf=conf)
        all_orders[conf, order] = card_p.memory_reserved()
for conf in ("", "expandable_segments:True"):
    values = {o: r for (c, o), r in all_orders.items() if c == conf}
    lo, hi = min(values.values()), max(values.values())
    print(f"{conf or 'defaults':25}: {fmt(lo)} to {fmt(hi)} over {len(values)} orders; "
          f"{sum(r == lo for r in values.values())} orders reach the minimum")
default_orders = {o: r for (c, o), r in all_orders.items() if not c}
at_minimum = {o for o, r in default_orders.items() if r == min(default_orders.values())}
eight_before_four = {o for o in default_orders if o.index(8) < o.index(4)}
print(f"defaults: the {len(at_minimum)} orders at the minimum are "
      f"{'exactly' if at_minimum == eight_before_four else 'not'} the {len(eight_before_four)} "
      f"that capture 8 before 4; of these, {sum(o[0] == 8 for o in at_minimum)} capture 8 first")

# %% tags=["check"] jupyter={"source_hidden": true}
es_values = [r for (c, o), r in all_orders.items() if c]
def_values = [r for (c, o), r in all_orders.items() if not c]
assert len(es_values) == len(def_values) == 24
assert min(es_values) < min(def_values) and max(es_values) < max(def_values)
assert max(es_values) > min(es_values)          # the order still matters with expandable segments
assert at_minimum == eight_before_four and any(o[0] != 8 for o in at_minimum)

# %% [markdown]
# ## Exercise
#
# A second model is served the same way: graphs for batch sizes 8, 4, 2 and 1 captured into one
# shared pool. Its captured step differs from this lesson's in one point: batch b makes **one**
# temporary of 3 MiB × b that dies, not three, and the same output of 1 MiB × b that stays.
# List **every** order of the four captures in which the pool reserves **more** than with 8
# first. No function of this lesson captures that step, and the rule you found
# for three temporaries above need not carry over: work it out from the segment rules (which
# requests find a free block big enough?). The check captures every order of the second model
# and says only whether your list is the whole answer.

# %% tags=["exercise"]
gml.exercise("11.ex")
my_orders = []      # change this: a list of orders, each a list of the four batch sizes
gml.exercise.check("11.ex", my_orders)

# %% [markdown]
# ## On your GPU: graphs captured into one shared pool
#
# `gml.experiment` runs this lesson's captures as a seeded scenario (two capture orders into a
# shared pool, each released before the next) on a simulated card of `gpu`'s size (the model's
# prediction) and, when `gpu` (the first cell's `gml.device()`) is a real CUDA card, captures real
# CUDA graphs there too, within `gpu`'s memory budget, step by step. Without CUDA it says so in
# one line and shows the prediction alone.

# %%
print(gml.experiment("graph_capture_order", gpu))

# %% [markdown]
# ## What to take away
#
# * Reserved memory depends on the order of requests, not only on their sizes: a segment is sized
#   by the request that opened it.
# * The small and large pools, streams, and private pools are separate worlds; free memory in one
#   never serves another (except a `use_on_oom` pool lending its cache).
# * Expandable segments return free pages, but a live block pins the pages under it.
# * A CUDA graph's pool stays reserved while any graph sharing it lives. Largest first
#   reaches the least here, for both steps, since every later capture fits in what it freed;
#   which other orders do depends on the step's requests: for this lesson's step, those that
#   capture 8 before 4 (the 24 orders above); for the exercise's second model, a different set.
#   Ask which request of which capture finds no freed block big enough.

# %%
gml.quiz("11")
