# %% [markdown]
# # 13 · CUDA graphs and their pools
#
# A serving engine captures one CUDA graph per batch size and replays the one that fits each
# batch. Lesson 12 showed that the caching allocator sizes a segment by the request that opened
# it. A CUDA graph captures into a private pool of its own, and the engine shares **one pool**
# among all its graphs, so the order of the captures decides how much that pool reserves. Every byte the pool does not hold can become KV cache
# (lesson 15). This lesson captures graphs on the simulated card and measures:
#
# 1. a private pool (`torch.cuda.MemPool`) keeps its memory out of the global cache;
# 2. CUDA graphs capture into private pools, and share one; the order of the captures, with and
#    without expandable segments; what `reset()` gives back; all 24 orders of four captures.

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
# ## 1 · A private pool keeps its memory apart
#
# `torch.cuda.MemPool()` makes a **private pool**: a small and a large free list of its own,
# with id `(0, n)`. Inside `with torch.cuda.use_mem_pool(pool):` the current thread's allocations
# go there. The pool's cached blocks never serve requests outside it, and `empty_cache()` leaves
# them alone while the pool lives. (This is how NCCL-registered memory and vLLM's "sleep mode"
# keep their memory separate.) Here the simulated card's API is the same.

# %% tags=["predict"]
gml.predict("13.p1", "A 40 MiB tensor is made inside the pool and freed; then a 40 MiB tensor is made "
                     "outside it, and empty_cache() is called. How much is reserved?")

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
gml.reveal("13.p1", with_pool[0])

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
# ## 2 · CUDA graphs and their pools
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
    print(f"share={share!s:5}: {count(len(pools), 'pool')}, reserved {fmt(card_g.memory_reserved())} "
          f"for {fmt(card_g.memory_allocated())} of live outputs")

# %% [markdown]
# Sharing one pool lets each later (smaller) capture reuse what the earlier ones freed. The
# order still matters, the allocation-order story of lesson 12 inside a pool: a freed block can be
# split for a smaller request but never grows for a bigger one, so a capture fits in what an
# earlier, larger capture freed, and a larger capture after a smaller one needs new segments once
# its requests outgrow the blocks the smaller one freed.
# Largest first is one order that reaches the least any order can; whether it is the only one,
# all 24 orders will show.

# %% tags=["predict"]
gml.predict("13.p2", "Shared pool, batches captured smallest first (1, 2, 4, 8): how much is "
                     "reserved?")

# %%
by_order, reserved_by_order = {}, {}
for order in ([8, 4, 2, 1], [1, 2, 4, 8]):
    card_o, graphs_o, outs_o = capture_graphs(order, share=True)
    by_order[tuple(order)] = (card_o, graphs_o, outs_o)
    reserved_by_order[tuple(order)] = card_o.memory_reserved()
    print(f"capture order {order}: shared pool reserves {fmt(card_o.memory_reserved())}")

# %%
gml.reveal("13.p2", reserved_by_order[(1, 2, 4, 8)])

# %% tags=["check"] jupyter={"source_hidden": true}
assert reserved_by_order[(8, 4, 2, 1)] < reserved_by_order[(1, 2, 4, 8)]
import itertools as _it
assert reserved_by_order[(8, 4, 2, 1)] == min(
    capture_graphs(list(_o), share=True)[0].memory_reserved() for _o in _it.permutations((1, 2, 4, 8)))

# %%
from gpumemlab.lessons.pools_and_graphs import steps_13
steps_by_order = {}
for order in ([1, 2, 4, 8], [8, 4, 2, 1]):
    steps_by_order[tuple(order)] = steps_13(order)   # each prefix captured on a fresh card
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
          f"{count(len(card_e.memory_snapshot()), 'segment')}")

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
gml.exercise("13.ex")
my_orders = []      # change this: a list of orders, each a list of the four batch sizes
gml.exercise.check("13.ex", my_orders)

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
# * A private pool keeps its cached blocks from every request outside it (unless `use_on_oom`
#   lends them), and `empty_cache()` leaves them alone while the pool lives.
# * A CUDA graph's pool stays reserved while any graph sharing it lives. Largest first
#   reaches the least here, for both steps, since every later capture fits in what it freed;
#   which other orders do depends on the step's requests: for this lesson's step, those that
#   capture 8 before 4 (the 24 orders above); for the exercise's second model, a different set.
#   Ask which request of which capture finds no freed block big enough.

# %%
gml.quiz("13")
