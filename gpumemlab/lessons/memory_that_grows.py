"""The exercise of lesson 10 (see ``lesson_exercises`` for the contract): keep each step's
predictions without keeping its memory. The judge runs the lesson's training loop (real torch on
the CPU under ``gml.capture``) appending the learner's expression of ``out``, then
``gml.growth``: it passes when the kept values are each sample's predicted class and no bytes
stay.

The answer is plain text: ``out`` followed by method calls from a short list (``.detach()``,
``.argmax(1)``, ``.tolist()``, ...). It is parsed, never evaluated, so the grader can judge it
in its own process.

It is judged as on a GPU, where ``out`` lives in device memory. There ``.cpu()`` copies to host
memory, and the device copy is freed once nothing refers to it; on the CPU capture ``.cpu()``
would return the same storage. So ``.cpu()`` and every call after it run with the capture's
dispatch mode set aside: the host copy is made where the capture does not count it, as device
memory would not, and ``.numpy()`` of a device tensor is refused, as torch refuses it.
"""
from __future__ import annotations

import re

from gpumemlab.units import format_size
from gpumemlab.quizkit.exercise_base import AnswerShapeError, exercise
from gpumemlab.quizkit.predict_rules import Misconception, question

# method -> the arguments allowed, as written
_METHODS = {"detach": ("",), "argmax": ("1", "dim=1", "-1", "dim=-1"), "tolist": ("",),
            "cpu": ("",), "clone": ("",), "item": ("",), "numpy": ("",), "sum": ("",),
            "float": ("",), "int": ("",), "long": ("",), "contiguous": ("",)}
_CALL = re.compile(r"\.(\w+)\(([^()]*)\)")
STEPS_10, BATCH_10 = 4, 512
ANSWER_CHARS_10, CALLS_10 = 300, 8   # every useful answer is a few calls long


def parse_keep(answer) -> list:
    """``"out.argmax(1).tolist()"`` -> [("argmax", "1"), ("tolist", "")]."""
    if not isinstance(answer, str):
        raise AnswerShapeError(f"the answer is a {type(answer).__name__}, not an expression")
    if len(answer) > ANSWER_CHARS_10:   # judged by running it: its shape is bounded first
        raise AnswerShapeError(f"the answer has {len(answer):,} characters; a few method "
                               f"calls need fewer than {ANSWER_CHARS_10}")
    text = answer.replace(" ", "")
    if not text.startswith("out"):
        raise AnswerShapeError(f"{answer!r} does not start with out")
    calls, pos = [], 3
    for m in _CALL.finditer(text, 3):
        if m.start() != pos:
            break
        name, args = m.group(1), m.group(2)
        if name not in _METHODS or args not in _METHODS[name]:
            raise AnswerShapeError(f"{name}({args}) is not one of the methods this exercise "
                                   f"knows: {', '.join(sorted(_METHODS))}")
        calls.append((name, args))
        if len(calls) > CALLS_10:
            raise AnswerShapeError(f"more than {CALLS_10} method calls after out")
        pos = m.end()
    if pos != len(text):
        raise AnswerShapeError(f"cannot read {answer!r} after {text[:pos]!r}")
    return calls


def _apply(calls, out):
    """The calls on ``out``; from ``.cpu()`` on, off the capture (host memory). -> (value, host)."""
    from torch.utils._python_dispatch import _disable_current_modes
    value, host = out, False
    for name, args in calls:
        method = getattr(value, name, None)
        if method is None:
            raise AnswerShapeError(f".{name}() cannot follow a {type(value).__name__}")
        if name == "numpy" and not host:
            raise AnswerShapeError("on a GPU, .numpy() of a device tensor fails: it needs "
                                   ".cpu() first")
        host = host or name == "cpu"
        if host:
            with _disable_current_modes():
                value = method(dim=int(args.split("=")[-1])) if args else method()
                if name == "cpu":
                    value = value.clone()   # a new storage, as the copy to the host makes
        else:
            value = method(dim=int(args.split("=")[-1])) if args else method()
    return value, host


def _as_lists(value):
    import torch
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    elif hasattr(value, "tolist"):          # a numpy array
        value = value.tolist()
    return value


@exercise("10.ex", "keep the predictions, not the memory",
          "The training loop of this lesson keeps each step's predictions for a confusion matrix "
          f"later: {STEPS_10} steps of {BATCH_10} samples, preds.append(<your expression of out>). "
          "Write the expression so that the kept values are each sample's predicted class "
          "(out.argmax(1)) and gml.growth finds no bytes that stay.",
          "an expression on out, a chain of method calls (methods: " + ", ".join(sorted(_METHODS))
          + ")",
          hints=("out.detach() drops the graph, but the storage is the output's own: it stays.",
                 "A tensor of classes is smaller than the output, but it is still a tensor that "
                 "stays allocated every step.",
                 "Turn the classes into plain Python numbers: the tensor can then be freed."),
          stub="out")
def _judge_10(answer):
    import torch
    from gpumemlab.doctor.growth import growth
    from gpumemlab.lessons.growth_cases import predictions_kept

    calls = parse_keep(answer)
    truth, kept = [], []

    host = []

    def keep(out):
        truth.append(out.argmax(1).tolist())
        value, on_host = _apply(calls, out)
        host.append(on_host)
        return value

    try:
        rec = predictions_kept(steps=STEPS_10, batch=BATCH_10, keep=keep, sink=kept)
    except (RuntimeError, TypeError) as exc:
        raise AnswerShapeError(f"{answer} failed in the loop: {exc}") from None
    report = growth(rec)
    stays = [it.kept_bytes for it in report.iterations]
    figures = {"bytes_that_stay_per_step": stays, "causes": report.causes,
               "kept_type": type(kept[0]).__name__ if kept else None}
    right = [_as_lists(v) for v in kept] == truth
    grows = any(isinstance(v, torch.Tensor) and not h for v, h in zip(kept, host)) or any(stays)
    where = " on the host (.cpu(): the device copy is freed)" if any(host) else ""
    what = f"a {figures['kept_type']}{where} a step"
    if grows:
        growth_text = (f"{format_size(max(stays))} a step stays "
                       f"(gml.growth: {', '.join(sorted(set(report.causes)))})")
    if not right:
        return False, (f"you keep {what}, not each sample's predicted class"
                       + (f"; and {growth_text}" if grows else "")), figures
    if grows:
        return False, f"the classes are right, but memory grows: {growth_text}", figures
    if not any(host):
        what = f"a {figures['kept_type']} of Python ints a step"
    return True, (f"you keep {what} and no device bytes stay "
                  f"(gml.growth: {', '.join(sorted(set(report.causes)))})"), figures


# -- the lesson's predict questions (see why_a_cache)
question("10.p1", "size", misconceptions=(
    Misconception(lambda a: 0, "The list holds a reference to each step's output tensor, so "
                  "nothing that tensor keeps alive can be freed: each step leaves it behind."),
))
question("10.p2", "size", misconceptions=(
    Misconception(lambda a: 512, "The sum is a tensor with a grad_fn: it keeps every step's "
                  "autograd graph, and the tensors that graph saved, not only one 512-byte "
                  "block for the scalar."),
    Misconception(lambda a: 4, "The sum is a tensor with a grad_fn: it keeps every step's "
                  "autograd graph and its saved tensors, not only a 4-byte float."),
))
question("10.p3", "choice", choices=("step 0", "step 1", "every step", "none"), misconceptions=(
    Misconception("every step", "Adam makes exp_avg and exp_avg_sq in its first step() and updates "
                  "them in place after that: the memory comes once, then stays flat."),
    Misconception("none", "Adam's two moments are new memory, twice the parameters' bytes, and "
                  "they stay: its first step() makes them."),
))
question("10.p4", "choice", choices=("steady", "leak", "new shapes", "fragmentation"),
         misconceptions=(
             Misconception("steady", "Peak allocated is step 0's again, but reserved grows: the "
                           "same requests did not fit the blocks step 0 left cached, so new "
                           "segments came. gml.growth calls that fragmentation."),
             Misconception("leak", "Nothing stays alive after the step (its tensors die when the "
                           "function returns): the growth is in reserved, not allocated, memory."),
         ))
question("10.p5", "choice", choices=("grows every step until the loop ends",
                                     "grows, then drops back at each collector pass",
                                     "stays flat: each record is freed when it is dropped"),
         misconceptions=(
             Misconception("grows every step until the loop ends", "That is the loop with the "
                           "collector off. With it on, each pass frees the unreachable cycles and "
                           "the tensors they hold, so the memory falls back."),
             Misconception("stays flat: each record is freed when it is dropped", "A record in a "
                           "reference cycle keeps a reference to itself: dropping it does not "
                           "bring its count to zero, so only the cyclic collector frees it."),
         ))


# -- what the lesson prints of a loop: the leak as it runs, never its fix
def _drop_fixed_conditionals(line: str) -> str:
    """``a + (x.item() if fixed else x)`` -> ``a + x``; ``f(str(e) if fixed else e)`` -> ``f(e)``."""
    marker = " if fixed else "
    while marker in line:
        at = line.index(marker)
        start, depth = at, 0
        while start > 0:
            ch = line[start - 1]
            depth += ch == ")"
            depth -= ch == "("
            if depth < 0 or (depth == 0 and ch in ", =+"):
                break
            start -= 1
        end, depth = at + len(marker), 0
        while end < len(line):
            ch = line[end]
            depth += ch == "("
            depth -= ch == ")"
            if depth < 0 or (depth == 0 and ch in ", "):
                break
            end += 1
        chosen = line[at + len(marker):end]
        before, after = line[:start], line[end:]
        if before.endswith(" (") and after.startswith(")"):      # a parenthesised conditional
            before, after = before[:-1], after[1:]
        line = before + chosen + after
    return line


def leaky_loop(fn) -> str:
    """The loop of one of ``growth_cases``' loops as it runs by default (``fixed=False``, no
    exercise ``keep``): its code from the ``capture(`` line on, with the branches that pick the
    fixed variant or the exercise's expression left out, so that the lesson shows the leak
    without giving away its fix."""
    import inspect

    lines = inspect.getsource(fn).splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if "capture(" in line):]
    out, i, chain_dropped = [], 0, False
    while i < len(lines):
        line = _drop_fixed_conditionals(lines[i])
        indent = len(line) - len(line.lstrip())
        head = re.match(r"\s*(if|elif|else)\b(.*):", line)
        body_end = i + 1
        while body_end < len(lines) and (not lines[body_end].strip() or
                                         len(lines[body_end]) - len(lines[body_end].lstrip())
                                         > indent):
            body_end += 1
        if head and head[1] in ("if", "elif") and re.search(r"\b(fixed|keep)\b", head[2]):
            chain_dropped = head[1] == "if" or chain_dropped
            i = body_end                                          # drop the branch
            continue
        if head and head[1] == "elif" and chain_dropped:
            out.append(line.replace("elif", "if", 1))
            chain_dropped = False
        elif head and head[1] == "else" and chain_dropped:       # the only branch left: inline it
            out += [_drop_fixed_conditionals(b)[4:] for b in lines[i + 1:body_end]]
            chain_dropped = False
            i = body_end
            continue
        else:
            out.append(line)
            chain_dropped = False
        i += 1
    return "\n".join(line[4:] for line in out)


# -- the selftest workload (run on the simulator and, with CUDA, on the real card)
def growing_loop(gpu, *, steps: int = 6, keep_outputs: bool = True, release: bool = True):
    """Lesson 10's loop as plain allocations: each step makes three activations (1/64 of the
    device each) and an output of 1/256 of it plus 1,000 bytes, and frees the activations. With
    ``keep_outputs`` every step's output stays alive (``preds.append(out)``): allocated memory
    grows by one output, rounded to 512 bytes (c10 ``round_size``), every step, while the cached
    activations are reused. Without, the output dies too and the loop is steady after step 0.
    ``notes["allocated_after_step"]``: allocated bytes at the end of each step."""
    from gpumemlab.devices.scenarios import device_chunk, ScenarioRun

    run = ScenarioRun(gpu, "growing_loop")
    act, out = device_chunk(gpu, 64), gpu.total_memory // 256 + 1000
    after = []
    for step in range(steps):
        for i in range(3):
            run.alloc(("act", i), act, f"step {step}: activation {i}")
        run.alloc(("out", step), out, f"step {step}: output")
        for i in range(3):
            run.free(("act", i), f"step {step}: activation {i} freed")
        if not keep_outputs:
            run.free(("out", step), f"step {step}: output freed")
        after.append(gpu.memory_allocated())
    run.rec.notes.update(allocated_after_step=after, output_bytes=out, keep_outputs=keep_outputs)
    return run.finish(release)
