"""Lesson 17, memory beyond the GPU: pinned host memory as PyTorch's ``CachingHostAllocator``
pins it (power-of-two ``roundSize``, ``pinned_max_round_threshold_mb``, a block held by a
non-blocking copy's event until ``process_events`` sees it complete), and activation offload
(``torch.autograd.graph.save_on_cpu(pin_memory=True)``) against checkpointing on a card that is
short. Its exercise (which layers of a step with activations of
many sizes to offload, the others checkpointed, so that the host's pinned budget holds and the
least is recomputed) and its selftest workload ``offload_activations`` (each layer's activation
copied to pinned host memory and freed on the device; on a card without the kit's pinned model,
only the device side runs).

The step is the kit's own model, not a traced network: ``layers`` layers each save
``act_bytes`` for backward and pass ``input_bytes`` on; backward costs twice a forward (the
usual rule of thumb, so a recomputed forward is one third of a step's layer work).
"""
from __future__ import annotations

from gpumemlab.planner.offload import copy_ms
from gpumemlab.quizkit.exercise_base import exercise, numbered_answer
from gpumemlab.quizkit.predict_rules import Misconception, question
from gpumemlab.units import GiB, MiB, format_size

REQUEST_17 = int(20.4 * GiB)          # sgl-project/sglang#36562's pinned buffer
THRESHOLD_17 = 64                      # pinned_max_round_threshold_mb of section 3
SWEEP_17 = (40 * MiB, 100 * MiB)       # section 3's two requests

# section 4's step and card: weights, eight layers of 24 MiB saved activations
STEP_17 = dict(weights=512 * MiB, layers=8, act_bytes=24 * MiB, input_bytes=3 * MiB)
CARD_17 = "640MiB"
MODES_17 = ("keep", "checkpoint", "offload")




def layered_step(gpu, mode: str, *, weights: int, layers: int, act_bytes: int,
                 input_bytes: int) -> dict:
    """One training step of the lesson's model on ``gpu`` (a SimulatedGPU), with saved
    activations kept on the device (``keep``), recomputed (``checkpoint``: only each layer's
    input is kept, the layer runs again in backward) or offloaded (``offload``: copied to a
    pinned host block in forward, as save_on_cpu's blocking ``copy_``, and back with a
    non-blocking copy in backward). Returns the figures; an OOM (device or host) ends the step
    and is named in ``oom``."""
    if mode not in MODES_17:
        raise ValueError(f"mode is one of {', '.join(MODES_17)}, not {mode!r}")
    live, host = [], []
    out = {"mode": mode, "oom": None, "recomputed_layers": 0, "moved_bytes": 0,
           "host_peak_bytes": 0}
    try:
        live.append(gpu.empty(weights))
        saved = []
        for _ in range(layers):                         # forward
            act = gpu.empty(act_bytes)
            if mode == "checkpoint":                    # run without saving; keep the input
                saved.append(gpu.empty(input_bytes))
                act.free()
            elif mode == "offload":
                pinned = gpu.pin(act_bytes)
                gpu.copy_(pinned, act)                  # save_on_cpu's pack: a blocking copy
                out["moved_bytes"] += act_bytes
                host.append(pinned)
                act.free()
            else:
                saved.append(act)
            out["host_peak_bytes"] = max(out["host_peak_bytes"], gpu.host_pinned_bytes())
        for i in reversed(range(layers)):               # backward
            if mode == "checkpoint":
                act = gpu.empty(act_bytes)              # the forward again
                out["recomputed_layers"] += 1
            elif mode == "offload":
                act = gpu.empty(act_bytes)
                gpu.copy_(act, host[i], non_blocking=True)   # unpack: .to(device, non_blocking)
                out["moved_bytes"] += act_bytes
                host.pop(i).free()                      # its block waits for the copy's event
            else:
                act = saved[i]
            grad = gpu.empty(input_bytes)
            act.free()
            if mode == "checkpoint":
                saved[i].free()
            grad.free()
        gpu.synchronize()
    except Exception as exc:  # noqa: BLE001 - only the two OOMs are expected; others re-raise
        if "out of memory" not in str(exc):
            raise
        out["oom"] = str(exc).splitlines()[0]
    finally:
        for a in live + host:
            if not a.freed:
                a.free()
    stats = gpu.memory_stats()
    out["device_peak_reserved_bytes"] = stats["reserved_bytes.all.peak"]
    out["extra_compute"] = out["recomputed_layers"] / (3 * layers)
    out["copy_ms"] = copy_ms(out["moved_bytes"])       # the planner's link table, one way each
    return out


def compare_17(card=CARD_17, alloc_conf="", host_memory=None, step=None) -> dict:
    """``layered_step`` in each mode on a fresh SimulatedGPU of ``card``: {mode: figures}."""
    from gpumemlab.devices.simulated import SimulatedGPU

    step = STEP_17 if step is None else step
    return {m: layered_step(SimulatedGPU(card, alloc_conf=alloc_conf, host_memory=host_memory,
                                         record_frames=False), m, **step)
            for m in MODES_17}


# the exercise: a step whose layers save activations of different sizes, a host that can pin
# only part of them (the others are recomputed), under section 3's threshold
EX_ACTS_17 = tuple(m * MiB + k * 1024 for m, k in (
    (40, 512), (66, 0), (23, 256), (61, 0), (97, 512), (34, 0), (70, 768), (18, 0), (120, 0),
    (44, 256), (63, 512), (29, 0), (81, 0), (36, 768), (58, 0), (17, 512), (110, 256), (49, 0),
    (65, 512), (31, 0)))
EX_CARD_17, EX_HOST_17 = "3GiB", 640 * MiB
EX_CONF_17 = f"pinned_max_round_threshold_mb:{THRESHOLD_17}"
EX_WEIGHTS_17, EX_INPUT_17 = 256 * MiB, 4 * MiB


def planned_step_17(offloaded) -> dict:
    """The exercise's step on a fresh card under ``EX_CONF_17`` with a host that can pin
    ``EX_HOST_17``: layer i saves ``EX_ACTS_17[i]``; the layers numbered in ``offloaded`` copy it
    to pinned host memory (save_on_cpu's pack), the others are checkpointed (their input kept,
    the layer run again in backward). Returns the figures; an OOM is named in ``oom``."""
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU(EX_CARD_17, alloc_conf=EX_CONF_17, host_memory=EX_HOST_17,
                       record_frames=False, record_history=False)
    out = {"oom": None, "recomputed_bytes": 0, "host_peak_bytes": 0}
    chosen, held = set(offloaded), []
    try:
        held.append(gpu.empty(EX_WEIGHTS_17))
        host, kept = {}, {}
        for i, size in enumerate(EX_ACTS_17):                 # forward
            act = gpu.empty(size)
            if i in chosen:
                host[i] = gpu.pin(size)
                gpu.copy_(host[i], act)
            else:
                kept[i] = gpu.empty(EX_INPUT_17)
            act.free()
            out["host_peak_bytes"] = max(out["host_peak_bytes"], gpu.host_pinned_bytes())
        for i in reversed(range(len(EX_ACTS_17))):           # backward
            act = gpu.empty(EX_ACTS_17[i])
            if i in chosen:
                gpu.copy_(act, host[i], non_blocking=True)
                host.pop(i).free()
            else:
                out["recomputed_bytes"] += EX_ACTS_17[i]
                kept.pop(i).free()
            grad = gpu.empty(EX_INPUT_17)
            act.free()
            grad.free()
        gpu.synchronize()
    except Exception as exc:  # noqa: BLE001 - only the two OOMs are expected; others re-raise
        if "out of memory" not in str(exc):
            raise
        out["oom"] = str(exc).splitlines()[0]
    return out


_BEST_17 = []


def RECOMPUTE_AT_MOST_17() -> int:
    """The fewest activation bytes a plan must recompute: what the best set of offloaded layers
    leaves (a knapsack over each activation's pinned block, as ``host_round_size`` rounds it,
    against the host), checked on the simulated step."""
    if not _BEST_17:
        from gpumemlab.allocator.host.rounding import host_round_size
        plans = {0: (0, ())}                     # pinned bytes -> (offloaded bytes, layers)
        for i, size in enumerate(EX_ACTS_17):
            block = host_round_size(size, THRESHOLD_17 * MiB)
            for pinned, (moved, layers) in list(plans.items()):
                if pinned + block <= EX_HOST_17 and plans.get(pinned + block, (-1,))[0] < moved + size:
                    plans[pinned + block] = (moved + size, layers + (i,))
        run = planned_step_17(max(plans.values())[1])
        assert run["oom"] is None, run["oom"]
        _BEST_17.append(run["recomputed_bytes"])
    return _BEST_17[0]


def _layer_numbers(answer) -> list:
    return numbered_answer(answer, len(EX_ACTS_17), "layer")


@exercise("17.ex", "which activations to offload to a small host",
          f"A step of {len(EX_ACTS_17)} layers saves activations of EX_ACTS_17 bytes, one a "
          "layer (gpumemlab.lessons.memory_beyond_the_gpu). Each layer either offloads its "
          "activation with save_on_cpu(pin_memory=True) or is checkpointed and recomputed in "
          f"backward. The host can pin {format_size(EX_HOST_17)}, under {EX_CONF_17} (section "
          "3's threshold). Which layers (their numbers) should offload, so that the step runs "
          "without an OOM and recomputes at most RECOMPUTE_AT_MOST_17() bytes of activations "
          "(the same module)? planned_step_17(layers) runs a plan on the simulated card.",
          "a list of layer numbers (indices into EX_ACTS_17)",
          hints=("In forward every offloaded activation is pinned at once, until backward: what "
                 "does each one pin, under the threshold?",
                 "At most the threshold, a request is rounded up to the next power of two; above "
                 "it, pinned at its exact size. Write each layer's pinned block beside its size: "
                 "which layers cost the host far more than they move?",
                 "Choose the layers that move the most activation bytes for the pinned bytes "
                 "they cost, within the host's budget: compare the sets that fill it."),
          stub=[])
def _judge_17(answer):
    from gpumemlab.allocator.host.rounding import host_round_size

    chosen = _layer_numbers(answer)
    run = planned_step_17(chosen)
    most = RECOMPUTE_AT_MOST_17()
    exact = sum(EX_ACTS_17[i] for i in chosen)
    blocks = sum(host_round_size(EX_ACTS_17[i], THRESHOLD_17 * MiB) for i in chosen)
    figures = {"offloaded": chosen, "host_peak_bytes": run["host_peak_bytes"],
               "recomputed_bytes": run["recomputed_bytes"], "oom": run["oom"]}
    if run["oom"] is not None:
        why = f"the step runs out of memory: {run['oom']}"
        if exact <= EX_HOST_17 < blocks:
            why = (f"the host runs out: those activations add up to {format_size(exact)}, "
                   f"within its {format_size(EX_HOST_17)}, but each one at most "
                   f"{THRESHOLD_17} MiB is pinned as the next power of two, "
                   f"{format_size(blocks)} in all")
        return False, why, figures
    if run["recomputed_bytes"] <= most:
        return True, (f"the host pins {format_size(run['host_peak_bytes'])} of its "
                      f"{format_size(EX_HOST_17)} and the step recomputes "
                      f"{format_size(run['recomputed_bytes'])} of activations"), figures
    return False, (f"it runs, but recomputes {format_size(run['recomputed_bytes'])} of "
                   f"activations, more than {format_size(most)}: the host's "
                   f"{format_size(EX_HOST_17)} can hold layers that move more for the pinned "
                   f"bytes they cost"), figures


# -- the selftest workload (run on the simulator and, with CUDA, on the real card)
def offload_activations(gpu, *, release: bool = True):
    """Four activations made one after another, each copied to pinned host memory and freed on
    the device (save_on_cpu's pack), so the device holds one at a time; then brought back one
    at a time (unpack). Where ``gpu`` has no pinned model (``pin``), only the device side runs.
    ``notes``: the host bytes pinned at the peak (None without a pinned model)."""
    from gpumemlab.devices.scenarios import device_chunk, ScenarioRun

    run = ScenarioRun(gpu, "offload_activations")
    size = device_chunk(gpu, 16)
    can_pin = hasattr(gpu, "pin")
    host, peak = [], 0
    for i in range(4):
        run.alloc(f"a{i}", size, f"activation {i}")
        if can_pin:
            host.append(gpu.pin(size))
            gpu.copy_(host[-1], run.live[f"a{i}"])
            peak = gpu.host_pinned_bytes()
        run.free(f"a{i}", f"activation {i} offloaded: freed on the device")
    for i in reversed(range(4)):
        run.alloc(f"b{i}", size, f"activation {i} back for backward")
        if can_pin:
            gpu.copy_(run.live[f"b{i}"], host[i], non_blocking=True)
            host.pop(i).free()
        run.free(f"b{i}", f"activation {i} used and freed")
    if can_pin:
        run.act("synchronize()", gpu.synchronize)
    run.rec.notes.update(host_peak_bytes=peak if can_pin else None)
    return run.finish(release)


# -- the lesson's predict questions (their words are in the lesson; these keep the unit after a
# kernel restart, and name the rule behind the usual wrong answers)
question("17.p1", "size", misconceptions=(
    Misconception(lambda a: REQUEST_17, "That is the request itself: the host allocator rounds "
                  "every pinned request up to the next power of two (roundSize), unless a "
                  "threshold says otherwise."),
))
question("17.p2", "choice", choices=("the freed block", "a new block"), misconceptions=(
    Misconception("the freed block", "The block was freed, but a non-blocking copy recorded an "
                  "event on it: process_events reuses it only once that event has completed."),
))
question("17.p3", "size", misconceptions=(
    Misconception(lambda a: 2 * 128 * MiB, "That rounds both: the threshold stops rounding for "
                  "requests above it, so the larger request is pinned at its exact size."),
    Misconception(lambda a: sum(SWEEP_17), "That rounds neither: a request at or below the "
                  "threshold is still rounded up to a power of two."),
))
question("17.p4", "size", misconceptions=(
    Misconception(lambda a: STEP_17["layers"] * STEP_17["act_bytes"], "That is the activations' "
                  "own size: each one is its own pinned request, rounded to a power of two."),
))
