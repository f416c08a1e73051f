# %% [markdown]
# # 07 · Activations: batch size, sequence length and checkpointing
#
# In training, the largest and most changeable part of GPU memory is usually not the weights but
# the **activations**: the intermediate results the forward pass keeps so that the backward pass
# can compute gradients. They grow with the batch size and the sequence length (attention
# scores with its square, where a sequence × sequence matrix is kept at all), and they come and
# go every step in many different sizes, which
# is exactly what fragments a cache.
#
# This notebook runs a real (small) transformer in torch **on the CPU**, records every tensor
# storage it creates and frees with `gml.capture`, and replays that recording on a simulated GPU
# through the caching-allocator model. So a laptop shows what the step would do to a GPU's
# memory. Then it measures the two standard remedies: a **smaller batch**, and **activation
# checkpointing** (`torch.utils.checkpoint`: keep only each block's input, recompute the rest
# during backward).

# %%
# Which device does this notebook run on?
try:
    import gpumemlab as gml
except ImportError:  # a clone without `pip install -e .`: use the package next to notebooks/
    import pathlib, sys
    sys.path.insert(0, str(pathlib.Path.cwd().parent))
    import gpumemlab as gml
# %matplotlib inline
import torch
torch.set_num_threads(1)   # small CPU ops run faster on one thread on a busy machine
gpu = gml.device()
print(gpu.describe())
print("real GPU" if gpu.kind == "cuda" else "simulated GPU (no CUDA device here, or GPUMEMLAB_DEVICE=sim)")

# %% [markdown]
# ## The model
#
# A decoder-style language model: embedding, four blocks of attention and MLP with layer norms,
# an output head. `ckpt=True` wraps each block in `torch.utils.checkpoint.checkpoint(...,
# use_reentrant=False)`. The weights are random and seeded: memory does not depend on what the
# model has learned. `record_step` records one training step with `gml.capture`. The code lives
# in the kit (`gpumemlab/lessons/tiny_lm.py`, printed here) so that this exercise's checker
# records the very same step.

# %%
import inspect
from gpumemlab.lessons import tiny_lm
from gpumemlab.lessons.tiny_lm import record_step

print(inspect.getsource(tiny_lm.Block))
print(inspect.getsource(tiny_lm.TinyLM))
print(inspect.getsource(tiny_lm.record_step))

# %%
rec = record_step(batch=8)
# (print(rec) would also show the peak: the question below asks for it)
print(f"captured: {rec.allocations} allocations, {len(rec.trace)} trace entries")
for category, nbytes in rec.bytes_by_category().items():
    print(f"  {category:16} {gml.format_size(nbytes):>12} allocated over the step")

# %% [markdown]
# The capture sorts every storage into the categories of PyTorch's memory profiler: parameters,
# gradients, optimizer state (Adam's two moments, created on the first step), activations (kept
# from forward for backward) and temporaries (dead within the phase that made them).
#
# ## Replay the step on a simulated GPU
#
# `gml.replay(rec)` runs the recorded allocations and frees, in order, through the allocator
# model: the same rounding, pools, segments and best-fit as on a real card. `peak_allocated` is
# what live tensors needed at most; `peak_reserved` is what the cache held from the driver.
# From the category table above, guess the peak first:

# %% tags=["predict"]
gml.predict("07.p1", "Batch 8: how much will peak allocated memory be during the step?")

# %%
result = gml.replay(rec)
print(result)
print(f"peak live storages (capture, no rounding): {gml.format_size(rec.peak_live_bytes())}")
print(f"peak allocated (replay, after round_size):  {gml.format_size(result.peak_allocated)}")
print(f"peak reserved (replay, segments):           {gml.format_size(result.peak_reserved)}")
gml.reveal("07.p1", result.peak_allocated)

# %% tags=["check"] jupyter={"source_hidden": true}
assert result.oom is None
assert result.peak_allocated >= rec.peak_live_bytes() and result.peak_reserved >= result.peak_allocated

# %% [markdown]
# ### Forward piles them up, backward takes them down
#
# `gml.timeline(rec, by="category")` draws every storage of the step as a band as tall as its
# size, stacked in the order they were made and coloured by category; when one is freed, the
# bands above it move down. The vertical lines are the phase marks `record_step` sets with
# `set_memory_metadata`. Before looking: when the backward pass ends (at the "optimizer step"
# mark), how much of the activation memory is still alive?

# %% tags=["predict"]
gml.predict("07.p4", "When backward ends, what share of the activations' peak is still alive?",
            choices=["none of it", "under a tenth", "about half", "all of it"])

# %%
fig = gml.timeline(rec, by="category")
timeline = fig.gml_timeline
marks = dict((name, i) for i, name in timeline["marks"])

def live_by_category(event):
    """bytes of each category alive at ``event`` (a band lives from its start to its end)"""
    out = {}
    for band in timeline["bands"]:
        if band["start"] <= event < band["end"]:
            out[band["key"]] = out.get(band["key"], 0) + band["size"]
    return out

activation = [live_by_category(i).get("activation", 0) for i in range(timeline["events"])]
act_peak = max(activation)
for name in ("forward", "backward", "optimizer step"):
    live = live_by_category(marks[name] - 1)
    print(f"just before the {name!r} mark: " + ", ".join(
        f"{k} {gml.format_size(v)}" for k, v in sorted(live.items(), key=lambda kv: -kv[1])))
print(f"activations: peak {gml.format_size(act_peak)} at event {activation.index(act_peak)} "
      f"(the backward mark is event {marks['backward']})")
left = live_by_category(marks["optimizer step"] - 1).get("activation", 0)
survivors = [b["size"] for b in timeline["bands"]
             if b["key"] == "activation" and b["start"] < marks["optimizer step"] <= b["end"]]
print(f"still alive when backward ends: {gml.format_size(left)} = {left / act_peak:.1%} of the peak, "
      f"{len(survivors)} storages: {', '.join(gml.format_size(n) for n in survivors)}")
share = left / act_peak
gml.reveal("07.p4", "none of it" if share == 0 else "under a tenth" if share < 0.1
           else "about half" if share < 0.75 else "all of it")
fig

# %% tags=["check"] jupyter={"source_hidden": true}
assert list(marks) == ["forward", "backward", "optimizer step"]
# activations rise through forward to their peak where backward starts, and fall through backward
assert marks["backward"] - 2 <= activation.index(act_peak) <= marks["backward"]
assert activation[marks["forward"] - 1] == 0 and 0 < left < act_peak / 10
assert max(survivors) == 8 * 64 * tiny_lm.VOCAB * 4           # the logits, float32

# %% [markdown]
# The blue floor is the parameters, there from the start. Forward stacks up the activations
# (green) with short-lived temporaries (yellow) on top; backward frees each layer's activations
# once its gradient is computed, so the green shrinks while the gradients (orange) grow.
# What is left of the activations when backward ends is the logits: the variable `logits` still
# names them until `del logits` after the step; autograd freed everything it alone held. Adam's
# two moments (pink) appear in the optimizer step, on the first step only, and
# `zero_grad(set_to_none=True)` frees the gradients at the end.

# %% [markdown]
# ## Batch size and checkpointing
#
# Now the same step for batches of 8, 16 and 32, with and without checkpointing.

# %% tags=["predict"]
gml.predict("07.p2", "Without checkpointing, how many times batch 8's peak allocated will batch 32 need?",
            kind="number", unit="times")

# %%
rows = {}
for batch in (8, 16, 32):
    for ckpt in (False, True):
        r = record_step(batch, ckpt=ckpt)
        res = gml.replay(r)
        rows[batch, ckpt] = (r, res)
        print(f"batch {batch:3}, checkpointing {'on ' if ckpt else 'off'}: activations kept "
              f"{gml.format_size(r.bytes_by_category()['activation']):>11}, peak allocated "
              f"{gml.format_size(res.peak_allocated):>11}, peak reserved {gml.format_size(res.peak_reserved):>11}")
peak = {k: v[1].peak_allocated for k, v in rows.items()}
print(f"batch 32 / batch 8 peak allocated, no checkpointing: {peak[32, False] / peak[8, False]:.2f} times")
gml.reveal("07.p2", round(peak[32, False] / peak[8, False], 2))

# %% tags=["check"] jupyter={"source_hidden": true}
assert peak[8, False] < peak[16, False] < peak[32, False]          # activations grow with the batch
assert all(peak[b, True] < peak[b, False] for b in (8, 16, 32))    # checkpointing keeps less
_act = {k: v[0].bytes_by_category()["activation"] for k, v in rows.items()}
assert abs(_act[32, False] / _act[8, False] - 4) < 0.01             # four times the batch, four times the bytes
assert peak[32, False] / peak[8, False] < 4                         # the peak grows less than that

# %% [markdown]
# Without checkpointing the activation memory grows in proportion to the batch (the
# activations column: four times the batch, four times the bytes), and the peak grows less than
# that because the weights, gradients and optimizer state do not depend on the batch. With
# checkpointing only each block's input is kept; the block's internals are recomputed in
# backward, one block at a time. The cost is compute: in backward each block's forward runs
# again, which the category table shows as far more *temporary* bytes; PyTorch's non-reentrant
# checkpointing stops each rerun early, once every tensor backward needs is back
# (`torch.utils.checkpoint.set_checkpoint_early_stop`), so less than a whole second forward. Below, the operations are
# counted (`torch.utils.flop_counter`: the same on every machine), and the step is timed on this
# CPU several times each way, with the spread: on a shared CPU one timing can come out either way.

# %%
for batch in (8, 32):
    off, on = rows[batch, False][0].bytes_by_category(), rows[batch, True][0].bytes_by_category()
    print(f"batch {batch}: temporaries {gml.format_size(off['temporary'])} -> {gml.format_size(on['temporary'])} "
          f"(recomputation), activations {gml.format_size(off['activation'])} -> {gml.format_size(on['activation'])}")

# %% tags=["check"] jupyter={"source_hidden": true}
for _b in (8, 32):
    _off, _on = rows[_b, False][0].bytes_by_category(), rows[_b, True][0].bytes_by_category()
    assert _on["temporary"] > _off["temporary"] and _on["activation"] < _off["activation"]

# %%
flops = {ckpt: tiny_lm.step_flops(8, ckpt=ckpt) for ckpt in (False, True)}
extra = flops[True]["step"] - flops[False]["step"]
print(f"batch 8, forward and backward: {flops[False]['step'] / 1e9:.2f} GFLOP without checkpointing, "
      f"{flops[True]['step'] / 1e9:.2f} GFLOP with it ({100 * extra / flops[False]['step']:+.1f}%)")
print(f"recomputed in backward: {extra / 1e9:.2f} GFLOP = {100 * extra / flops[False]['blocks_forward']:.0f}% "
      f"of the blocks' forward ({flops[False]['blocks_forward'] / 1e9:.2f} GFLOP)")
no_stop = tiny_lm.step_flops(8, ckpt=True, early_stop=False)["step"] - flops[False]["step"]
print(f"with early stop off: {no_stop / 1e9:.2f} GFLOP recomputed = "
      f"{100 * no_stop / flops[False]['blocks_forward']:.0f}% of the blocks' forward "
      f"({100 * no_stop / flops[False]['step']:+.1f}% on the step)")

# %% tags=["check"] jupyter={"source_hidden": true}
assert flops[True]["blocks_forward"] == flops[False]["blocks_forward"]
assert 0 < extra < no_stop == flops[False]["blocks_forward"]   # early stop: less than one more forward

# %%
import statistics, time
import torch.nn.functional as F

def step_times(ckpt, batch=8, seq=64, repeats=5):
    """Wall times of one training step on this CPU (no capture), after one warm-up step."""
    torch.manual_seed(0)
    model = tiny_lm.TinyLM(ckpt)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, tiny_lm.VOCAB, (batch, seq + 1))
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        loss = F.cross_entropy(model(tokens[:, :-1]).reshape(-1, tiny_lm.VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(1000 * (time.perf_counter() - start))
    return times[1:]

timed = {ckpt: step_times(ckpt) for ckpt in (False, True)}
for ckpt, ms in timed.items():
    print(f"{'with' if ckpt else 'without'} checkpointing: median {statistics.median(ms):6.1f} ms, "
          f"range {min(ms):6.1f} to {max(ms):6.1f} ms over {len(ms)} steps")
print("the ranges overlap: this CPU's clock cannot tell them apart; the count above can"
      if min(timed[True]) <= max(timed[False]) else "the ranges do not overlap")

# %% tags=["check"] jupyter={"source_hidden": true}
assert all(len(ms) == 5 and min(ms) > 0 for ms in timed.values())

# %%
fig = gml.timeline([rows[32, False][1], rows[32, True][1]], labels=["batch 32", "batch 32, checkpointing"])
fig

# %% tags=["check"] jupyter={"source_hidden": true}
assert [d.get("x_unit") for d in fig.gml_timeline] == ["step", "step"]   # one x-axis, in phases

# %% [markdown]
# ## Sequence length
#
# Most activations grow in proportion to the sequence length S. The attention scores, softmax(QKᵀ),
# are an S × S matrix per head, and grow with its square *if they are kept*. This model calls
# `nn.MultiheadAttention(..., need_weights=False)`, which lets PyTorch run fused attention
# (`scaled_dot_product_attention`): the scores are computed piece by piece and no S × S matrix is
# ever allocated. `need_weights=True` asks for the attention weights, so PyTorch computes
# softmax(QKᵀ) itself and keeps it for backward. The table records both for each doubling of S.

# %%
HEADS, LAYERS = tiny_lm.HEADS, tiny_lm.LAYERS
seq_rows = {}
for weights in (False, True):
    for seq in (32, 64, 128):
        r = record_step(8, seq=seq, need_weights=weights)
        seq_rows[weights, seq] = (r.bytes_by_category()["activation"], gml.replay(r).peak_allocated)
for weights in (False, True):
    print("need_weights=True (softmax(QK^T) kept)" if weights else "need_weights=False (fused attention)")
    previous = None
    for seq in (32, 64, 128):
        act, pk = seq_rows[weights, seq]
        growth = "" if previous is None else f"  (x{act / previous[0]:.2f} activations, x{pk / previous[1]:.2f} peak)"
        print(f"  batch 8, sequence {seq:4}: activations {gml.format_size(act):>11}, peak allocated {gml.format_size(pk):>11}{growth}")
        previous = (act, pk)
print("what need_weights=True adds, against one S x S matrix of 4-byte floats per head, batch row and layer:")
square = {}
for seq in (32, 64, 128):
    added = seq_rows[True, seq][0] - seq_rows[False, seq][0]
    square[seq] = LAYERS * 8 * HEADS * seq * seq * 4
    print(f"  S = {seq:4}: adds {gml.format_size(added):>11}; S x S matrices {gml.format_size(square[seq]):>11} "
          f"({100 * square[seq] / seq_rows[True, seq][0]:.0f}% of the activations); the rest {gml.format_size(added - square[seq]):>11}")

# %% tags=["check"] jupyter={"source_hidden": true}
for _s in (64, 128):
    assert abs(seq_rows[False, _s][0] / seq_rows[False, _s // 2][0] - 2) < 1e-3       # fused: linear in S
    assert seq_rows[True, _s][0] / seq_rows[True, _s // 2][0] > 2.05                   # kept scores: more than linear
    _rest, _half = (seq_rows[True, _s][0] - seq_rows[False, _s][0] - square[_s],
                    seq_rows[True, _s // 2][0] - seq_rows[False, _s // 2][0] - square[_s // 2])
    assert _rest == 2 * _half                    # beyond the S x S matrices, what is added is linear
    assert square[_s] / seq_rows[True, _s][0] > square[_s // 2] / seq_rows[True, _s // 2][0]   # their share grows

# %% [markdown]
# With fused attention the activations double exactly with the sequence: no term grows with its
# square. With `need_weights=True` they grow faster than the sequence, and what they add is exactly
# one S × S matrix per head, batch row and layer (the quadratic term) plus a part linear in S.
# Their share of the activations (printed) grows with S: they quadruple with each doubling while
# the rest doubles, so at long sequences they dominate, which is why fused attention matters. The peak
# grows by less than the activations, because the weights, gradients and Adam's state do not
# depend on the sequence at all.

# %% [markdown]
# ## A card that is too small
#
# Pick a simulated card between the two batch-32 peaks (computed from them, not chosen by hand)
# and replay both recordings on it. Without checkpointing the step runs out of memory; with it
# the step fits. Then find the largest batch that fits on that card each way.

# %%
off, on = rows[32, False][1], rows[32, True][1]
card = (off.peak_reserved + on.peak_reserved) // 2 // (2 * gml.MiB) * (2 * gml.MiB)
tight_off = gml.replay(rows[32, False][0], total_memory=card)
tight_on = gml.replay(rows[32, True][0], total_memory=card)
print(f"card of {gml.format_size(card)}:")
print(f"  batch 32, no checkpointing: {'OOM: ' + tight_off.oom['message'].split('. If')[0] if tight_off.oom else 'fits'}")
print(f"  batch 32, checkpointing:    {'OOM' if tight_on.oom else 'fits'}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert tight_off.oom is not None and tight_on.oom is None

# %% [markdown]
# How far does checkpointing stretch this card? The next cell tries batches 8, 16, 24, 32 and
# 64 each way, stopping at the first that runs out of memory.

# %% tags=["predict"]
gml.predict("07.p3", "On this card, with checkpointing, what is the largest of the batches 8, 16, 24, 32, 64 that fits?",
            kind="number", unit="samples per batch")


# %%
def largest_batch(ckpt, card, batches=(8, 16, 24, 32, 64)):
    best = None
    for b in batches:
        if gml.replay(record_step(b, ckpt=ckpt), total_memory=card).oom is None:
            best = b
        else:
            break
    return best

fit_off, fit_on = largest_batch(False, card), largest_batch(True, card)
print(f"largest batch on {gml.format_size(card)}: {fit_off} without checkpointing, {fit_on} with it")
gml.reveal("07.p3", fit_on)

# %% tags=["check"] jupyter={"source_hidden": true}
assert fit_on > fit_off


# %% [markdown]
# ## Try it: batch, checkpointing, card
#
# The controls replay the recorded step for the batch, the checkpointing choice and the card you
# pick, and redraw the block map at the peak and the timeline. (The recordings of these batches
# were made above with torch; an update replays one on the simulated GPU and draws it.)

# %%
def step_on_card(batch, checkpointing, card_size):
    limit = None if card_size == "no limit" else card_size
    # history=True: the replay keeps its own trace, so the map can show the peak, not the end
    return gml.replay(record_step(batch, ckpt=checkpointing == "on"), total_memory=limit, history=True)

controls = gml.whatif(step_on_card, batch=[8, 16, 24, 32], checkpointing=["off", "on"],
                      card_size=["no limit", card, 2 * card], title="one training step")
controls

# %% tags=["check"] jupyter={"source_hidden": true}
from gpumemlab.viz.history import History as _History
_h = _History(step_on_card(8, "off", "no limit"))
assert len(_h) > 0 and controls.at == "peak"       # a trace to find the peak in: the map is drawn there

# %% [markdown]
# ## Offload and recompute
#
# Checkpointing is one of two ways to stop keeping activations on the GPU:
#
# * **recompute** (checkpointing): throw them away, compute them again in backward;
#   costs FLOPs, saves memory, as measured above;
# * **offload**: copy them to CPU memory after forward and back before backward
#   (`torch.autograd.graph.save_on_cpu(pin_memory=True)`, or the offloading of optimizer
#   state and weights in DeepSpeed ZeRO-Offload / FSDP CPU offload); costs PCIe bandwidth,
#   saves GPU memory without extra compute.
#
# An upper bound on what offloading the saved activations could save is in the recording: the
# bytes the capture classed as activations. Frameworks increasingly couple these decisions with
# the allocator, choosing per tensor whether to keep, offload or recompute.

# %%
r32, res32 = rows[32, False]
act = r32.bytes_by_category()["activation"]
print(f"batch 32: activations kept for backward {gml.format_size(act)} "
      f"of a {gml.format_size(res32.peak_allocated)} peak ({100 * act / res32.peak_allocated:.0f}%)")

# %% [markdown]
# ## Exercise: which layers to checkpoint
#
# A deeper model than this lesson's: 24 layers, each saving internals of a different size for
# its backward (`EX_INTERNALS_07`) and passing an 8 MiB output on, beside 512 MiB of weights.
# Checkpointing a layer frees its internals in forward and makes them again in backward, just
# before its gradient. Which layers should be checkpointed so that the live tensors never add up
# to more than `EX_LIMIT_07`, while the internals made again add up to at most
# `RECOMPUTE_AT_MOST_07()`? Reason from what is live at each layer's backward. The check runs
# your plan on the simulated card (`selective_step_07(layers)`).

# %% tags=["exercise"]
from gpumemlab.lessons.activations import EX_INTERNALS_07, EX_LIMIT_07, RECOMPUTE_AT_MOST_07
gml.exercise("07.ex")
print(f"{len(EX_INTERNALS_07)} layers' internals (MiB, in order): "
      f"{[round(b / gml.MiB, 2) for b in EX_INTERNALS_07]}")
print(f"live tensors at most {gml.format_size(EX_LIMIT_07)}; made again at most "
      f"{gml.format_size(RECOMPUTE_AT_MOST_07())}")
my_checkpointed = []       # change this: the numbers of the layers to checkpoint (0 is the first)
gml.exercise.check("07.ex", my_checkpointed)

# %% [markdown]
# ## On a real GPU
#
# The recording above is device-independent. On a CUDA machine, run the model on the GPU inside
# `torch.cuda.memory._record_memory_history()` and compare `torch.cuda.max_memory_allocated()`
# with the replay's `peak_allocated`; the figures differ only by what the capture cannot see
# (kernel workspaces, cuBLAS handles) and by the CUDA kernels' own choices of intermediate
# tensors, which are not always the CPU kernels' choices.

# %% [markdown]
# ## On your GPU: activations kept or recomputed
#
# `gml.experiment` runs this lesson's experiment as a seeded scenario on a simulated card of
# `gpu`'s size (the model's prediction) and, when `gpu` (the first cell's `gml.device()`) is a
# real CUDA card, measures it there too, within `gpu`'s memory budget, step by step. Without
# CUDA it says so in one line and shows the prediction alone.

# %%
print(gml.experiment(["activations", "activations_checkpointed"], gpu))

# %%
gml.quiz("07")
