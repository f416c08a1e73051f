# %% [markdown]
# # 09 · Diagnose your own run
#
# A training or serving job died with `CUDA out of memory`. Was the card too small for the work,
# or was memory free that the request could not use? This notebook is the workflow for that
# moment:
#
# 1. **record** the run's memory history and **dump** a snapshot when it fails;
# 2. **load** the snapshot and read the evidence (notebook 03) at the moment of the failure;
# 3. **find the culprit**: fragmentation or plain exhaustion? which tensors, which segments?
# 4. **replay** the recorded trace on the simulated allocator, first as recorded (does the model
#    reproduce the failure?), then under candidate fixes: `expandable_segments`,
#    `max_split_size_mb`, `garbage_collection_threshold`, a bigger card;
# 5. apply the fix that works, and record again.
#
# Replay is what makes step 4 cheap: no GPU, no re-running the training, seconds per what-if.

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
# ## 1. Recording a real run
#
# In the training script (PyTorch 2.1 or newer):
#
# ```python
# import torch
# torch.cuda.memory._record_memory_history(max_entries=200_000)
# try:
#     train()
# except torch.OutOfMemoryError:
#     torch.cuda.memory._dump_snapshot("oom_snapshot.pickle")
#     raise
# ```
#
# Put the path of such a file below. Without one, the notebook uses the recording the kit ships:
# a small transformer language model trained in torch **on the CPU** (AdamW, gradient clipping,
# batches padded to their longest document, an evaluation pass every few steps), every tensor
# storage recorded with `gml.capture`, and the recorded allocations run on a simulated card sized
# for it until one failed. `gpumemlab/lessons/data/README.md` says how it was made and how it
# differs from a recording made on a GPU; `python -m gpumemlab.lessons.training_run` makes it again.

# %%
import pathlib, tempfile
from gpumemlab.lessons.diagnose_your_run import RECORDING
SNAPSHOT = None            # e.g. "oom_snapshot.pickle" from your own run

from gpumemlab.viz.words import count   # count(1, "segment") -> "1 segment"
path = pathlib.Path(SNAPSHOT) if SNAPSHOT else RECORDING
snap = gml.load_snapshot(path)
trace = snap["device_traces"][0] if snap["device_traces"] else []
print(f"{path.name}: {count(len(snap['segments']), 'segment')}, {len(trace)} trace entries, "
      f"recorded with settings {snap['allocator_settings'].get('PYTORCH_CUDA_ALLOC_CONF') or 'defaults'!r}")

# %% [markdown]
# What a recording of real work looks like: thousands of allocations of many different sizes,
# made by many lines of code (the innermost frame outside torch names the line of the training
# script; where no frame was recorded, the tensor existed before recording began: the weights).
# `user_metadata` holds the marks the script set with `torch.cuda.memory._set_memory_metadata`.

# %%
from collections import Counter

def site(frames):
    # the innermost frame outside torch's own files: the line of the training script
    mine = [f for f in frames if "torch/" not in f["filename"].replace("\\", "/")]
    f = (mine or frames or [None])[0]
    return f"{pathlib.Path(f['filename']).name}:{f['line']} in {f['name']}" if f else "(no frames recorded)"

allocs = [e for e in trace if e["action"] == "alloc"]
by_site = Counter()
for e in allocs:
    by_site[site(e["frames"])] += e["size"]
marks = list(dict.fromkeys(e.get("user_metadata") or "(none)" for e in trace))
print(f"{count(len(allocs), 'allocation')} of {count(len({e['size'] for e in allocs}), 'distinct size')} "
      f"from {count(len(by_site), 'line')} of code; marks: {', '.join(marks)}")
for where, nbytes in by_site.most_common(6):
    print(f"  {gml.format_size(nbytes):>12} allocated in all by {where}")

# %% [markdown]
# ## 2. Read the evidence
#
# A small helper puts notebook 03's readings in one report. A snapshot dumped after the failure
# may show a later state (the program freed things on the way out), so the helper rebuilds the
# allocator state at the last `oom` event from the trace (`gpumemlab.viz.History`, the engine
# behind the player), takes the fragmentation figures there, and gives the verdict they point to. The test is the one
# PyTorch's own OOM message suggests: if memory that is *reserved but unallocated* plus what the
# driver still had would have held the request, but no single free block could, the cause is
# fragmentation; otherwise it is exhaustion: the run simply needed more memory than the card has.
# First the figures at the failure, without the verdict:

# %%
from gpumemlab.viz import History

def state_at_oom(snapshot):
    # the allocator state right after the last OOM event, rebuilt from the trace, and that event
    history = History(snapshot)
    ks = [i for i, e in enumerate(history.events) if e["action"] == "oom"]
    if not ks:
        return snapshot, None
    history.goto(ks[-1])
    return history.snapshot(), history.events[ks[-1]]

def evidence(snapshot, total_memory=None):
    # the figures at the last OOM, printed; None when the trace holds no OOM
    state, oom = state_at_oom(snapshot)
    m = gml.fragmentation(state, total_memory=total_memory)
    print(f"{'at the OOM' if oom else 'final state'}: reserved {m.formatted('reserved_bytes')}, allocated {m.formatted('allocated_bytes')}, "
          f"free cached {m.formatted('free_bytes')} in {count(m['free_blocks'], 'block')} "
          f"(largest {m.formatted('largest_free_block_bytes')}, non-releasable {m.formatted('non_releasable_bytes')})")
    if oom is None:
        print("no OOM in the recorded trace")
        return None
    request, driver_free = oom["size"], oom["device_free"]
    print(f"OOM: request {gml.format_size(request)}, driver free {gml.format_size(driver_free)}, "
          f"cached free {m.formatted('free_bytes')} -> {gml.format_size(m['free_bytes'] + driver_free)} free in total")
    return {"request": request, "driver_free": driver_free, "metrics": m}

seen = evidence(snap)

# %% [markdown]
# Apply the test to these figures: would the free memory in total hold the request, and would
# any single piece of it?

# %% tags=["predict"]
gml.predict("09.p1", "What will the diagnosis say caused this OOM?",
            choices=["FRAGMENTATION", "EXHAUSTION"])


# %%
def verdict(ev):
    m = ev["metrics"]
    free_total = m["free_bytes"] + ev["driver_free"]
    fragmented = free_total >= ev["request"] > max(m["largest_free_block_bytes"], ev["driver_free"])
    print("verdict:", "FRAGMENTATION: enough free memory in total, no piece large enough"
          if fragmented else "EXHAUSTION: the live tensors alone do not leave room")
    return {**ev, "fragmented": fragmented}

def diagnose(snapshot, total_memory=None):
    ev = evidence(snapshot, total_memory)
    return None if ev is None else verdict(ev)

found = None if seen is None else verdict(seen)
gml.reveal("09.p1", "FRAGMENTATION" if found and found["fragmented"] else "EXHAUSTION")

# %% tags=["check"] jupyter={"source_hidden": true}
assert found is not None and found["fragmented"]

# %%
fig = gml.show(snap, request=found["request"], title=f"{path.name}: final state")
print(fig.gml_blockmap["request_text"])
fig


# %% [markdown]
# ## 3. Find the culprit
#
# Which blocks pin the fragmented segments? For each segment: how much is free inside it, and
# which live blocks (with the code that allocated them, from `frames`) keep it from merging or
# being released. Then the last events before the failure, as text.

# %%
def culprits(snapshot, top=3):
    segs = sorted(snapshot["segments"], key=lambda s: -(s["total_size"] - s["allocated_size"]))
    for seg in segs[:top]:
        free = seg["total_size"] - seg["allocated_size"]
        live = [b for b in seg["blocks"] if b["state"] == "active_allocated"]
        print(f"segment at {seg['address']:#x}: {gml.format_size(seg['total_size'])}, "
              f"{gml.format_size(free)} free in {count(sum(b['state'] == 'inactive' for b in seg['blocks']), 'hole')}, "
              f"pinned by {count(len(live), 'live block')}")
        for b in live[:4]:
            where = site(b["frames"])
            print(f"    {gml.format_size(b['size']):>12} at +{gml.format_size(b['address'] - seg['address'])}  ({where})")

culprits(snap)
print()
print("\n".join(gml.text_trace(snap).splitlines()[-12:]))

# %% [markdown]
# ## 4. Replay: as recorded, then under fixes
#
# `gml.replay(path)` first runs the trace **faithfully**: every recorded `segment_alloc` dictates
# the address of the model's next `cudaMalloc`, and every allocation is checked against the
# recorded address. Zero mismatches and the same OOM mean the model reproduced the run, so its
# what-ifs are worth trusting. The card's capacity is taken from the moment of the OOM
# (reserved + driver free).

# %%
faithful = gml.replay(path)
print(faithful)
print(f"reproduced: {faithful.reproduced}; capacity {gml.format_size(faithful.total_memory)}; "
      f"OOM at entry {faithful.oom['index'] if faithful.oom else None}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert faithful.reproduced and faithful.oom is not None

# %% [markdown]
# Now the same allocations and frees under other settings, on the same card. (Each what-if starts
# from the tensors that were live when recording began; the cache is rebuilt by the new rules.)
# These settings are tried, the defaults among them:

# %%
fixes = ["", "expandable_segments:True", "max_split_size_mb:128", "max_split_size_mb:32",
         "garbage_collection_threshold:0.8", "roundup_power2_divisions:4"]
for i, conf in enumerate(fixes, 1):
    print(f"{i}. {conf or '(defaults)'}")

# %% tags=["predict"]
gml.predict("09.p2", "Of the six settings above (defaults included), how many avoid the OOM on the same card?",
            kind="number", unit="settings")

# %%
whatif = {}
print(f"{'PYTORCH_CUDA_ALLOC_CONF':36}{'outcome':>10}{'peak reserved':>16}{'peak allocated':>16}")
for conf in fixes:
    r = whatif[conf] = gml.replay(path, alloc_conf=conf, total_memory=faithful.total_memory)
    outcome = "OOM" if r.oom else "ok"
    print(f"{conf or '(defaults)':36}{outcome:>10}{gml.format_size(r.peak_reserved):>16}{gml.format_size(r.peak_allocated):>16}")
gml.reveal("09.p2", sum(r.oom is None for r in whatif.values()))

# %% tags=["check"] jupyter={"source_hidden": true}
assert whatif[""].oom is not None
assert whatif["expandable_segments:True"].oom is None

# %% [markdown]
# `garbage_collection_threshold` alone changes nothing here: it only acts under a per-process
# memory fraction (notebook 05), which the recording did not use, so its row is the defaults'
# row (with a fraction set too it is another run, replayed below).
# `max_split_size_mb:128` changes nothing either: no segment of this run is that big, so no block
# counts as oversize. The three that work attack the cause the diagnosis named, each its own way:
# `expandable_segments` maps the memory as pages of one growing segment, so free pages anywhere
# serve the next request; `max_split_size_mb:32` keeps cached blocks of 32 MiB and more whole
# for big requests (and releases them whole when memory runs short); `roundup_power2_divisions:4`
# rounds the many sequence-length-dependent sizes to fewer, so freed blocks fit later requests,
# at the price of rounding waste (its higher peak allocated).

# %% tags=["check"] jupyter={"source_hidden": true}
same = lambda a, b: (a.peak_reserved, a.oom and a.oom["index"]) == (b.peak_reserved, b.oom and b.oom["index"])
assert same(whatif["garbage_collection_threshold:0.8"], whatif[""])
assert same(whatif["max_split_size_mb:128"], whatif[""])
assert max(seg["total_size"] for seg in snap["segments"]) < 128 * gml.MiB
assert whatif["max_split_size_mb:32"].oom is None and whatif["roundup_power2_divisions:4"].oom is None
assert whatif["roundup_power2_divisions:4"].peak_allocated > whatif[""].peak_allocated

# %%
from gpumemlab.doctor.search import FRACTION   # the fraction the doctor (section 6) adds for GC
with_fraction = {}
for conf in (f"per_process_memory_fraction:{FRACTION}",
             f"garbage_collection_threshold:0.8,per_process_memory_fraction:{FRACTION}"):
    r = with_fraction[conf] = gml.replay(path, alloc_conf=conf, total_memory=faithful.total_memory)
    print(f"{conf:62}: {'OOM' if r.oom else 'ok'}, peak reserved {gml.format_size(r.peak_reserved)}")

# %% tags=["check"] jupyter={"source_hidden": true}
assert [r.oom is None for r in with_fraction.values()] == [False, True]

# %% [markdown]
# The fraction alone gives up a share of the card and still runs out; with it, garbage collection
# acts and the run fits (the doctor's garbage collection rows in section 6 are these runs).
# And a bigger card?

# %%
bigger = gml.replay(path, alloc_conf="", total_memory=faithful.total_memory * 2)
print(f"defaults on a card of {gml.format_size(bigger.total_memory)}: {'OOM' if bigger.oom else 'ok'}, "
      f"peak reserved {gml.format_size(bigger.peak_reserved)}")

# %%
shown = ["", "expandable_segments:True", "max_split_size_mb:32"]
for conf in shown:
    st = whatif[conf].allocator.memory_stats()
    print(f"{conf or '(defaults)':26}: cudaMalloc {st['num_device_alloc']:3}, cudaFree {st['num_device_free']:3}, "
          f"retries after a failed cudaMalloc {st['num_alloc_retries']}")
fig = gml.timeline([whatif[c] for c in shown], labels=[c or "defaults" for c in shown])
fig

# %% [markdown]
# One panel per setting, on one scale, one point per trace entry. Defaults: reserved memory
# reaches its peak in the first step (its activations, then AdamW's state, made at the first
# `optimizer.step()`) and the cache keeps it. In the evaluation pass a `cudaMalloc` fails: the
# allocator frees its wholly free cached segments and retries (the drop). In step 3 it fails
# again and retries with nothing whole left to free (the second retry counted above): the run
# ends (the cross). `expandable_segments`: reserved memory climbs to about the same height and
# never drops, with no retry: the pages of one segment serve every request, the last one
# included. `max_split_size_mb:32`: more `cudaMalloc` and `cudaFree` calls, and drops where
# whole oversize blocks are released for a request that needs the room; the run gets through.

# %% tags=["check"] jupyter={"source_hidden": true}
phase = lambda i: trace[i].get("user_metadata") or ""
res = whatif[""].timeline.reserved
assert phase(res.index(max(res))) == "step 0"
drops = [i for i in range(1, len(res)) if res[i] < res[i - 1]]
assert [phase(i) for i in drops] == ["eval after step 2"]
assert phase(whatif[""].oom["index"]) == "step 3"
stats = {c: whatif[c].allocator.memory_stats() for c in shown}
assert stats[""]["num_alloc_retries"] == 2
es = whatif["expandable_segments:True"].timeline.reserved
assert stats["expandable_segments:True"]["num_alloc_retries"] == 0 and all(b >= a for a, b in zip(es, es[1:]))
ms = stats["max_split_size_mb:32"]
assert ms["num_device_alloc"] > stats[""]["num_device_alloc"] and ms["num_device_free"] > stats[""]["num_device_free"]

# %% [markdown]
# ## Try it: every setting, every card
#
# The controls replay the recording under the setting and the card size you pick, and redraw the
# block map at the end of the replay (the OOM, if there is one) and the timeline.

# %%
cap = faithful.total_memory
controls = gml.whatif(path, at="end", alloc_conf=fixes,
                      total_memory=[cap, cap * 7 // 8 // gml.MiB * gml.MiB, cap * 3 // 4 // gml.MiB * gml.MiB, 2 * cap],
                      title=path.name)
controls

# %% [markdown]
# Step through the recorded run to the failure with the player (drag the slider in JupyterLab;
# here the code jumps to the OOM event):

# %%
p = gml.player(snap, request=found["request"])
k = max(i for i, e in enumerate(p.history.events) if e["action"] == "oom")
p.goto(k)
print(p.description())
p

# %% [markdown]
# ## 5. Your own run on this notebook's device
#
# The same workflow on `gpu`, the device of the first cell (a real GPU inside its budget, or the
# simulated card): run a seeded training-like workload that grows its batch until it fails, dump
# the snapshot, and diagnose it with the functions above. On a real GPU this is a real
# recording of PyTorch's allocator.

# %%
rec = gml.scenarios.batch_growth(gpu, release=False)
print(rec)
own = gml.dump_snapshot(rec.snapshot, pathlib.Path(tempfile.mkdtemp()) / "my_run.pickle")
mine = diagnose(gml.load_snapshot(own))
if mine is not None:
    for conf in ("", "expandable_segments:True"):
        r = gml.replay(own, alloc_conf=conf)
        print(f"replay {conf or '(defaults)':26}: {'OOM' if r.oom else 'ok'}, peak reserved {gml.format_size(r.peak_reserved)}")
rec.held.clear()

# %% [markdown]
# ## 6. The doctor: the same workflow in one call
#
# `gml.doctor` does sections 2 to 5 for you: it replays the recording faithfully to the OOM,
# classifies it from the allocator state there (fragmentation when allocated + request would fit
# as one piece), names the live blocks that pin the gaps and the code that allocated them, then
# **replays the run under each candidate setting** (expandable segments, a range of
# `max_split_size_mb`, garbage collection with a memory fraction, `roundup_power2_divisions`,
# combinations) and searches the smallest card. It lists the fixes that fit first, those that set
# the fewest settings first among them (a memory fraction added for garbage collection is not
# counted as a setting), ties broken by the lower peak reserved; its recommendation, "the
# smallest change", is the first of that list. From a terminal:
# `gpumemlab doctor FILE [--html report.html]` (docs/DOCTOR.md).

# %%
d = gml.doctor(path)
print(d)

# %%
# what each fix sets: the garbage collection rows carry the memory fraction that switches it on
for f in d.fixes:
    if f.alloc_conf:
        print(f"{f.name:44} sets {f.alloc_conf:62} {'fits' if f.fits else 'runs out'}, "
              f"peak reserved {gml.format_size(f.peak_reserved_bytes or 0)}")

# %% [markdown]
# Check the doctor against your own reading, and its recommendation against an independent
# replay: the same allocation sequence, the recommended setting, the same card.

# %%
print(f"your verdict: {'fragmentation' if found['fragmented'] else 'exhaustion'}; the doctor's: {d.kind}")
fix = d.recommended
check = gml.replay(path, alloc_conf=fix.alloc_conf, total_memory=fix.total_memory_bytes)
print(f"{fix.name}: replay {'runs out' if check.oom else 'fits'} on "
      f"{gml.format_size(check.total_memory)}, peak reserved {gml.format_size(check.peak_reserved)} "
      f"(the doctor said {gml.format_size(fix.peak_reserved_bytes)})")

# %% tags=["check"] jupyter={"source_hidden": true}
assert d.kind == ("fragmentation" if found["fragmented"] else "exhaustion")
assert check.oom is None and check.peak_reserved == fix.peak_reserved_bytes

# %% [markdown]
# The doctor also reads the run of section 5 (your device's own recording) and a pasted
# message. A message says far less than a snapshot: it gives the figures at the moment of the
# failure, not which settings were on or how the free memory is split, so its fixes are not
# verified and it lists what it cannot tell. Paste your own "CUDA out of memory" message into
# `MESSAGE` (the whole traceback is fine); without one, the message of the simulated OOM above
# is used.

# %%
print(gml.doctor(own).summary)
MESSAGE = None             # e.g. the last lines of your failing run's traceback
text = MESSAGE or rec.oom
from_message = gml.doctor(message=text)
print(from_message)

# %% [markdown]
# In a notebook the diagnosis shows itself as a report (block map at the OOM, timeline, fixes
# table); `d.html()` is the same page as one self-contained file to attach to a bug report.

# %%
d

# %% [markdown]
# The growing-batch run typically ends in **exhaustion**, not fragmentation: the live
# activations of the last batch do not fit, and no allocator setting changes that. Its fixes are
# the ones of notebook 07: a smaller batch, activation checkpointing, offloading. Telling the two
# cases apart before changing settings is the point of the diagnosis.
#
# ## Checklist
#
# * Message says a lot is *reserved but unallocated*? Fragmentation: try
#   `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` first, then `max_split_size_mb`.
# * Allocated close to capacity? Exhaustion: batch size, checkpointing, mixed precision,
#   offload; for inference KV caches, paging (notebook 08).
# * Other processes on the card (`nvidia-smi`)? `empty_cache()` in the *other* process, or a
#   memory fraction for each.
# * Always verify with a replay (`gml.replay`, or `gpumemlab replay FILE --alloc-conf ...` from
#   a terminal) before paying for another run.
#
# ## Exercise: the fewest bytes to free at the OOM
#
# Back to the moment the recorded run failed: same card, same settings. Which live tensors
# would you free first (the addresses of their blocks in `recording_09()["segments"]`, the state
# at the OOM) so that the failed request succeeds, freeing at most `FREE_AT_MOST_09()` bytes?
# Read the OOM message and the block map together, as the diagnosis did. The check frees your
# tensors on the model of the card at that moment and makes the request again
# (`request_fits_09(addresses)`).

# %% tags=["exercise"]
from gpumemlab.lessons.diagnose_your_run import FREE_AT_MOST_09, recording_09
gml.exercise("09.ex")
at_oom = recording_09()
print(f"{len(at_oom['segments'])} segments at the OOM; free at most {gml.format_size(FREE_AT_MOST_09())}")
my_addresses = []          # change this: addresses of live blocks (state 'active_allocated')
gml.exercise.check("09.ex", my_addresses)

# %% [markdown]
# ## On your GPU: a batch that grows until it fails
#
# `gml.experiment` runs this lesson's experiment as a seeded scenario on a simulated card of
# `gpu`'s size (the model's prediction) and, when `gpu` (the first cell's `gml.device()`) is a
# real CUDA card, measures it there too, within `gpu`'s memory budget, step by step. Without
# CUDA it says so in one line and shows the prediction alone.

# %%
print(gml.experiment("batch_growth", gpu))

# %%
gml.quiz("09")
