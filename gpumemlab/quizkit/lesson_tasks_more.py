"""The exercises of lessons 05-09 (see ``lesson_exercises`` for the contract): each judge runs the
learner's plain answer on a fresh ``SimulatedGPU`` and returns (passed, message, figures).
"""
from __future__ import annotations

from gpumemlab.units import GiB, MiB, format_size
from .exercise_base import AnswerShapeError, exercise
from .lesson_tasks import size_answer


def settings_count(conf: str) -> int:
    """How many settings a ``PYTORCH_CUDA_ALLOC_CONF`` string holds (commas inside [] do not
    separate settings)."""
    depth, count, seen = 0, 0, False
    for ch in conf:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            count, seen = count + seen, False
        elif not ch.isspace():
            seen = True
    return count + seen


def alloc_conf_answer(answer) -> str:
    """``answer`` as a settings string c10 accepts, or AnswerShapeError with c10's complaint."""
    from gpumemlab.allocator.config import AllocatorConfig

    if not isinstance(answer, str):
        raise AnswerShapeError(f"the answer is a {type(answer).__name__}, not a settings string")
    try:
        AllocatorConfig.parse(answer)
    except (TypeError, ValueError) as exc:
        raise AnswerShapeError(f"c10 would refuse {answer!r}: {exc}") from None
    return answer


# -- 05: make a workload fit an 8 GiB card with one setting
CARD_05 = "8GiB"


def big_small_big(gpu):
    """Lesson 05's exercise workload: a 6 GiB tensor dies, four 200 MiB tensors arrive, then
    6 GiB is needed again. Returns the live allocations (keep them to keep the state)."""
    x = gpu.empty(6 * GiB)
    del x
    live = [gpu.empty(200 * MiB) for _ in range(4)]
    live.append(gpu.empty(6 * GiB))
    return live


def oom_line(exc) -> str:
    """The OOM message up to its advice: what was asked and what was free and cached."""
    text = str(exc).splitlines()[0]
    return text.split(" If reserved but unallocated")[0].strip()


def run_05(conf: str):
    """(gpu, error text or None) after lesson 05's workload under ``conf``."""
    from gpumemlab.devices.errors import OutOfMemoryError
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU(CARD_05, alloc_conf=conf)
    try:
        big_small_big(gpu)
    except OutOfMemoryError as exc:
        return gpu, oom_line(exc)
    return gpu, None


@exercise("05.ex", "one setting that makes it fit",
          "On an 8 GiB card a 6 GiB tensor dies, four 200 MiB tensors arrive, then 6 GiB is "
          "needed again (gpumemlab.quizkit.lesson_tasks_more.big_small_big). With the defaults "
          "the second 6 GiB runs out of memory. Find ONE PYTORCH_CUDA_ALLOC_CONF setting under "
          "which it fits.",
          "a settings string with one setting, like 'name:value'",
          hints=("Look at the block map after the four 200 MiB tensors: where did they go?",
                 "A setting that stops big cached blocks from being split for smaller requests.",
                 "max_split_size_mb:N marks blocks of N MiB or more as oversize: never split."),
          stub="")
def _judge_05(answer):
    conf = alloc_conf_answer(answer)
    n = settings_count(conf)
    gpu, oom = run_05(conf)
    figures = {"alloc_conf": conf, "settings": n, "oom": oom,
               "peak_reserved_bytes": gpu.max_memory_reserved()}
    shown = repr(conf) if conf else "the defaults ('')"
    if oom:
        return False, f"under {shown} the second 6 GiB tensor fails: {oom}", figures
    if n != 1:
        return False, (f"it fits, but {shown} holds {n} settings; the task asks for exactly one"), \
            figures
    return True, (f"under {shown} the workload fits: peak reserved "
                  f"{format_size(gpu.max_memory_reserved())} of {format_size(gpu.total_memory)}"), figures


# -- 06: with expandable segments, the largest tensor that fits after the frees of lesson 02
def fragmented_06(conf: str, total_memory="8GiB", request=None):
    """Lesson 02's workload under ``conf``: a 7 GiB tensor dies, seven 1 GiB tensors, every
    other one freed; then ``request`` bytes (if given). Returns (gpu, kept tensors, ok)."""
    from gpumemlab.devices.errors import OutOfMemoryError
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU(total_memory, alloc_conf=conf)
    warm = gpu.empty(7 * GiB)
    del warm
    blocks = [gpu.empty(GiB) for _ in range(7)]
    keep = [b for i, b in enumerate(blocks) if i % 2 == 1]
    del blocks
    ok = None
    if request is not None:
        try:
            keep.append(gpu.empty(request))
            ok = True
        except OutOfMemoryError:
            ok = False
    return gpu, keep, ok


PAGE_06 = 20 * MiB


@exercise("06.ex", "the largest tensor after the holes are unmapped",
          "Lesson 02's 8 GiB card under expandable_segments:True: a 7 GiB tensor dies, seven "
          "1 GiB tensors are made and tensors 0, 2, 4 and 6 are freed "
          "(gpumemlab.quizkit.lesson_tasks_more.fragmented_06). What is the largest single "
          "tensor that can then be allocated? Answer to within one 20 MiB page.",
          "a size, like '2 GiB' or '4700 MiB'",
          hints=("With expandable segments, free holes can be unmapped: their physical memory "
                 "goes back to the driver and can be mapped again elsewhere.",
                 "Count what stays: the live tensors, and the pages they only partly fill.",
                 "Try sizes on fragmented_06('expandable_segments:True', request=...) and bisect."),
          stub="2 GiB")
def _judge_06(answer):
    size = size_answer(answer, name="the size")
    conf = "expandable_segments:True"
    fits = size > 0 and fragmented_06(conf, request=size)[2]
    bigger = fragmented_06(conf, request=size + PAGE_06)[2] if fits else None
    figures = {"size": size, "fits": bool(fits), "one_page_more_fits": bigger}
    if not fits:
        return False, f"a {format_size(size)} tensor does not fit", figures
    if bigger:
        return False, (f"{format_size(size)} fits, and so does {format_size(size + PAGE_06)}: "
                       f"there is room for more"), figures
    return True, (f"{format_size(size)} fits and one page more ({format_size(size + PAGE_06)}) "
                  f"does not"), figures


# -- 07: the largest batch that fits a card, with checkpointing
def card_07() -> int:
    """Lesson 07's tight card: halfway between the batch-32 peaks reserved without and with
    checkpointing, in 2 MiB steps (computed from the replays, as the lesson does)."""
    from gpumemlab.recordings.replay import replay
    from gpumemlab.recordings.tiny_lm import record_step

    off, on = (replay(record_step(32, ckpt=c)).peak_reserved for c in (False, True))
    return (off + on) // 2 // (2 * MiB) * (2 * MiB)


def exercise_card_07() -> int:
    """The exercise's card: one and a half times the lesson's tight card, in 2 MiB steps."""
    return card_07() * 3 // 2 // (2 * MiB) * (2 * MiB)


def fits_07(batch: int, ckpt: bool, card: int) -> bool:
    from gpumemlab.recordings.replay import replay
    from gpumemlab.recordings.tiny_lm import record_step

    return replay(record_step(batch, ckpt=ckpt), total_memory=card).oom is None


@exercise("07.ex", "the largest batch with checkpointing",
          "Lesson 07's model (gpumemlab.recordings.tiny_lm), one training step with "
          "checkpointing, sequence 64, replayed on a card of "
          "gpumemlab.quizkit.lesson_tasks_more.exercise_card_07() bytes (one and a half times "
          "the lesson's tight card). What is the largest batch size whose step fits?",
          "a whole number (the batch size)",
          hints=("gml.replay(record_step(batch, ckpt=True), total_memory=card).oom is None means "
                 "it fits.",
                 "The peak grows with the batch: bisect between a batch that fits and one that "
                 "does not.",
                 "Answer the largest batch b that fits while b + 1 does not."),
          stub=32)
def _judge_07(answer):
    if isinstance(answer, bool) or not isinstance(answer, int) or not 1 <= answer <= 512:
        raise AnswerShapeError("the answer must be a whole batch size from 1 to 512")
    card = exercise_card_07()
    fits = fits_07(answer, True, card)
    more = fits_07(answer + 1, True, card) if fits else None
    figures = {"batch": answer, "card_bytes": card, "fits": fits, "next_fits": more}
    if not fits:
        return False, f"batch {answer} runs out of memory on the {format_size(card)} card", figures
    if more:
        return False, f"batch {answer} fits, and so does batch {answer + 1}", figures
    return True, (f"batch {answer} fits the {format_size(card)} card with checkpointing and "
                  f"batch {answer + 1} does not"), figures


# -- 08: size the KV cache blocks for a workload
WASTE_LIMIT_08 = 0.05


def waste_08(block_size: int) -> float:
    """Share of KV memory lost to reserved-but-empty and internally fragmented slots when
    lesson 08's workload (400 ShareGPT-like requests, seed 0, OPT-13B, 12 GiB) is served paged
    with ``block_size`` tokens per block."""
    from gpumemlab.kvcache.simulator import simulate
    from gpumemlab.kvcache.workloads import sharegpt_like

    shares = simulate("paged", sharegpt_like(400, seed=0), "12GiB", model="opt-13b",
                      block_size=block_size).shares
    return shares["reserved"] + shares["internal_fragmentation"]


@exercise("08.ex", "size the KV cache blocks",
          "Lesson 08's workload (400 ShareGPT-like requests, seed 0, OPT-13B, 12 GiB of KV memory) "
          "served by the paged strategy: choose the LARGEST block size, a power of two from 1 to "
          "256 tokens, for which the slots held but not filled (reserved + internal "
          "fragmentation) stay below 5 % of the KV memory. Larger blocks mean shorter block "
          "tables and more efficient attention kernels.",
          "a power of two from 1 to 256 (tokens per block)",
          hints=("A request wastes at most one partly filled block, its last one.",
                 "The waste grows with the block size: the sweep table of the lesson shows it.",
                 "Try kv.simulate('paged', workload, '12GiB', block_size=b).shares."),
          stub=256)
def _judge_08(answer):
    if isinstance(answer, bool) or not isinstance(answer, int) or answer < 1 or answer > 256 \
            or answer & (answer - 1):
        raise AnswerShapeError("the answer must be a power of two from 1 to 256")
    waste = waste_08(answer)
    bigger = waste_08(2 * answer) if waste < WASTE_LIMIT_08 and answer < 256 else None
    figures = {"block_size": answer, "waste_share": waste, "double_block_waste_share": bigger}
    if waste >= WASTE_LIMIT_08:
        return False, (f"with {answer}-token blocks {100 * waste:.1f} % of the KV memory is held "
                       f"but not filled: above 5 %"), figures
    if bigger is not None and bigger < WASTE_LIMIT_08:
        return False, (f"{answer}-token blocks waste {100 * waste:.1f} %, and {2 * answer}-token "
                       f"blocks still only {100 * bigger:.1f} %: a larger block size fits"), figures
    return True, (f"{answer}-token blocks waste {100 * waste:.1f} %" +
                  (f"; {2 * answer} would waste {100 * bigger:.1f} %" if bigger is not None
                   else "")), figures


# -- 09: the smallest card a recorded run fits on, with expandable segments
STEP_09 = 64 * MiB


def recording_09() -> dict:
    """Lesson 09's recording: the kit's seeded fragmentation OOM on a simulated 4 GiB card, as
    the lesson makes it when the shipped file is missing (a snapshot with its trace)."""
    from gpumemlab.devices.scenarios import fragmentation_oom
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU("4GiB", alloc_conf="")
    return fragmentation_oom(gpu, release=False).snapshot


def fits_09(total_memory: int, conf: str = "expandable_segments:True") -> bool:
    from gpumemlab.recordings.replay import replay

    return replay(recording_09(), alloc_conf=conf, total_memory=total_memory).oom is None


@exercise("09.ex", "the smallest card that runs it",
          "Replay lesson 09's recorded run (gpumemlab.quizkit.lesson_tasks_more.recording_09(), "
          "the same fragmentation OOM the lesson diagnoses) with expandable_segments:True on "
          "smaller and smaller cards. What is the smallest card size on which it runs without "
          "an OOM? Answer to within 64 MiB.",
          "a size, like '3.5 GiB' or '3600 MiB'",
          hints=("gml.replay(recording, alloc_conf='expandable_segments:True', "
                 "total_memory=size).oom is None means it fits.",
                 "It fits on the recorded 4 GiB card; bisect below that.",
                 "Your answer must fit, and 64 MiB less must not."),
          stub="4 GiB")
def _judge_09(answer):
    size = size_answer(answer, name="the card size")
    if size < STEP_09:
        return False, f"a {format_size(size)} card cannot hold the run's live tensors", {}
    fits = fits_09(size)
    smaller = fits_09(size - STEP_09) if fits else None
    figures = {"card_bytes": size, "fits": fits, "64MiB_less_fits": smaller}
    if not fits:
        return False, f"on a {format_size(size)} card the replay runs out of memory", figures
    if smaller:
        return False, (f"it fits on {format_size(size)}, and on "
                       f"{format_size(size - STEP_09)} too: a smaller card works"), figures
    return True, (f"it fits on {format_size(size)} and runs out of memory on "
                  f"{format_size(size - STEP_09)}"), figures
