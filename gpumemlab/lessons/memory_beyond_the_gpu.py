"""Lesson 17, memory beyond the GPU: pinned host memory as PyTorch's ``CachingHostAllocator``
pins it (power-of-two ``roundSize``, ``pinned_max_round_threshold_mb``, a block held by a
non-blocking copy's event until ``process_events`` sees it complete), and activation offload
(``torch.autograd.graph.save_on_cpu(pin_memory=True)``) against checkpointing on a card that is
short. Its exercise (the largest ``pinned_max_round_threshold_mb`` under which an offloaded step
fits a host budget) and its selftest workload ``offload_activations`` (each layer's activation
copied to pinned host memory and freed on the device; on a card without the kit's pinned model,
only the device side runs).

The step is the kit's own model, not a traced network: ``layers`` layers each save
``act_bytes`` for backward and pass ``input_bytes`` on; backward costs twice a forward (the
usual rule of thumb, so a recomputed forward is one third of a step's layer work).
"""
from __future__ import annotations

from gpumemlab.planner.offload import copy_ms
from gpumemlab.quizkit.exercise_base import exercise, whole_mib_answer
from gpumemlab.quizkit.predict_rules import Misconception, question
from gpumemlab.allocator.host.rounding import power_of_2_ceil
from gpumemlab.units import GiB, MiB, format_size

REQUEST_17 = int(20.4 * GiB)          # sgl-project/sglang#36562's pinned buffer
THRESHOLD_17 = 64                      # pinned_max_round_threshold_mb of section 3
SWEEP_17 = (40 * MiB, 100 * MiB)       # section 3's two requests

# section 4's step and card: weights, eight layers of 24 MiB saved activations
STEP_17 = dict(weights=512 * MiB, layers=8, act_bytes=24 * MiB, input_bytes=3 * MiB)
CARD_17 = "640MiB"
MODES_17 = ("keep", "checkpoint", "offload")

# the exercise: a step and a host budget the lesson does not run
EX_STEP_17 = dict(weights=256 * MiB, layers=12, act_bytes=45 * MiB + 512 * 1024,
                  input_bytes=4 * MiB)
EX_CARD_17, EX_HOST_17 = "1GiB", "600MiB"


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


def offload_fits_host(threshold_mb) -> dict:
    """The exercise's step offloaded under ``pinned_max_round_threshold_mb:threshold_mb`` with
    a host that can pin ``EX_HOST_17``."""
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU(EX_CARD_17, alloc_conf=f"pinned_max_round_threshold_mb:{threshold_mb}",
                       host_memory=EX_HOST_17, record_frames=False)
    return layered_step(gpu, "offload", **EX_STEP_17)


@exercise("17.ex", "the largest rounding threshold that still fits the host",
          f"A step of {EX_STEP_17['layers']} layers offloads each layer's "
          f"{format_size(EX_STEP_17['act_bytes'])} activation ({EX_STEP_17['act_bytes']:,} bytes) "
          f"to pinned host memory with save_on_cpu(pin_memory=True). The host can pin "
          f"{EX_HOST_17[:-3]} MiB. Give the largest pinned_max_round_threshold_mb (a whole number "
          "of MiB) under which the step runs without a host OOM: a smaller threshold also "
          "fits, but would stop rounding small buffers the cache reuses well.",
          "a whole number of MiB (N, N.0, 'N' or 'N MiB')",
          hints=("Which requests does the host allocator round: those at most the threshold, or "
                 "those above it? Section 3's table shows the rule at its edge.",
                 "Rounded, each activation takes the next power of two. Compare the layer count "
                 "times that block with the host's budget; then the layer count times the "
                 "activation's exact size.",
                 "A request equal to the threshold is still rounded; one byte above it is not. "
                 "The threshold is a whole number of MiB and the activation is not: on which "
                 "side of the threshold must the activation fall, and how close can it be?"),
          stub=None)
def _judge_17(answer):
    answer = whole_mib_answer(answer)    # N, N.0, "N" and "N MiB" are one threshold
    run = offload_fits_host(answer)
    above = offload_fits_host(answer + 1)
    figures = {"host_peak_bytes": run["host_peak_bytes"], "oom": run["oom"],
               "next_threshold_oom": above["oom"]}
    act, layers = EX_STEP_17["act_bytes"], EX_STEP_17["layers"]
    if run["oom"] is not None:
        if act <= answer * MiB:   # the mistake the judge can see: the activation is rounded
            block = power_of_2_ceil(act)
            why = (f"the {format_size(act)} activation is at most {answer} MiB, so each is "
                   f"rounded up to {format_size(block)}: {layers} of them would pin "
                   f"{format_size(layers * block)} against the host's {EX_HOST_17[:-3]} MiB")
        else:
            why = run["oom"]
        return False, f"with {answer} MiB the host runs out: {why}", figures
    if above["oom"] is None:
        return False, (f"{answer} MiB fits: each activation is above it and pinned at its exact "
                       f"size; {answer + 1} MiB fits too, so {answer} is not the largest"), figures
    return True, (f"{answer} MiB: the step pins {format_size(run['host_peak_bytes'])} at its "
                  f"peak; at {answer + 1} MiB the activations are rounded and the host runs "
                  "out"), figures


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
