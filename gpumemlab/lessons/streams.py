"""Lesson 14, streams: allocation is stream-ordered; memory used on another stream needs
``record_stream``, whose free waits on an event (c10 ``recordStream``, ``insert_events``,
``process_events``). Its exercise (what a loop of side-stream buffers reserves while the side
stream is busy) and its selftest workload ``record_stream_pending`` (a block freed after
``record_stream`` on a busy stream is not reused; after a synchronize it is).

The simulated card runs no kernels: ``gpu.launch(stream)`` marks a stream busy until
``gpu.synchronize()`` (a real card's ``launch`` queues a kernel that spins for a while).
"""
from __future__ import annotations

from gpumemlab.quizkit.exercise_base import exercise, size_answer
from gpumemlab.quizkit.predict_rules import Misconception, question
from gpumemlab.units import KiB, MiB, format_size

SIDE_STREAM = 1
STEPS_14, BUFFER_14 = 6, 7 * MiB + KiB


def side_stream_loop(gpu, steps: int, nbytes: int, *, record: bool = True):
    """Each step: a buffer on the default stream, used on the side stream (``record_stream``
    when ``record``), freed at the end of the step; the side stream is busy for the whole loop
    and synchronized after it. Returns (reserved after the loop, addresses of the buffers)."""
    gpu.launch(SIDE_STREAM)
    addresses = []
    for _ in range(steps):
        buf = gpu.empty(nbytes)
        if record:
            gpu.record_stream(buf, SIDE_STREAM)
        addresses.append(buf.address)
        buf.free()
    reserved = gpu.memory_reserved()
    gpu.synchronize()
    return reserved, addresses


@exercise("14.ex", "what a busy side stream keeps reserved",
          f"A data loader fills each batch on a side stream. Each of {STEPS_14} steps allocates "
          f"a {format_size(BUFFER_14)} buffer on the default stream ({BUFFER_14:,} bytes), "
          "calls record_stream(buffer, side) and frees it at the end of the step; the side "
          "stream stays busy for the whole loop. Starting from a fresh card with default "
          "settings, how much does the card reserve at the end of the loop, before anything "
          "synchronizes?",
          "a size: bytes, or a string with a unit (B, KiB, MiB, GiB)",
          hints=("A block freed after record_stream on a busy stream is pending, not free: "
                 "every step needs new room.",
                 "Requests between 1 MiB and 10 MiB get a 20 MiB segment (kLargeBuffer); how "
                 "many of these buffers fit in one?",
                 "Count the segments the loop needs, times 20 MiB."),
          stub=None)
def _judge_14(answer):
    from gpumemlab.devices.simulated import SimulatedGPU

    guess = size_answer(answer, name="the reserved size")
    gpu = SimulatedGPU("8GiB", alloc_conf="")
    reserved, addresses = side_stream_loop(gpu, STEPS_14, BUFFER_14)
    figures = {"reserved_bytes": reserved, "segments": len(gpu.memory_snapshot()),
               "distinct_addresses": len(set(addresses))}
    if guess == reserved:
        return True, (f"{format_size(reserved)}: none of the {STEPS_14} pending buffers could "
                      f"be reused, and they fill {figures['segments']} segments"), figures
    hint = ("too little: a pending block is not reused while its stream is busy"
            if guess < reserved else "too much: count how many buffers one segment holds")
    return False, f"{format_size(guess)} is {hint}", figures


# -- the selftest workload (run on the simulator and, with CUDA, on the real card)
def record_stream_pending(gpu, *, release: bool = True):
    """A tensor used on a busy side stream (``record_stream``) is freed: the next request of its
    size cannot reuse it and takes new memory; after a synchronize the block is free and the
    next request reuses it. ``notes``: whether each request reused the first block's address."""
    from gpumemlab.devices.scenarios import device_chunk, ScenarioRun

    run = ScenarioRun(gpu, "record_stream_pending")
    size = device_chunk(gpu, 16)
    run.alloc("x", size, "x on the default stream")
    first = run.live["x"].address
    run.act("record_stream(x, side)", gpu.record_stream, run.live["x"], SIDE_STREAM)
    run.act("work queued on the side stream", gpu.launch, SIDE_STREAM)
    run.free("x", "x freed: pending until the side stream's event completes")
    run.alloc("y", size, "y while the side stream is busy")
    reused_busy = run.live["y"].address == first
    run.act("synchronize()", gpu.synchronize)
    run.alloc("z", size, "z after the synchronize")
    reused_after = run.live["z"].address == first
    run.rec.notes.update(reused_while_busy=reused_busy, reused_after_sync=reused_after)
    return run.finish(release)


# -- the lesson's predict questions (their words are in the lesson; these keep the unit after a
# kernel restart, and name the rule behind the usual wrong answers)
question("14.p1", "choice", choices=("the freed tensor's address", "a new address"),
         misconceptions=(
    Misconception("a new address", "One stream runs its kernels in order, so a block freed on it "
                  "can go to the next tensor of that stream at once: no event, no wait."),
))
question("14.p2", "size", misconceptions=(
    Misconception(lambda a: a // 2, "That is one segment: x's block is pending free while the "
                  "side stream is busy, so get_free_block does not see it and y opens a second."),
))
