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

# method -> the arguments allowed, as written
_METHODS = {"detach": ("",), "argmax": ("1", "dim=1", "-1", "dim=-1"), "tolist": ("",),
            "cpu": ("",), "clone": ("",), "item": ("",), "numpy": ("",), "sum": ("",),
            "float": ("",), "int": ("",), "long": ("",), "contiguous": ("",)}
_CALL = re.compile(r"\.(\w+)\(([^()]*)\)")
STEPS_10, BATCH_10 = 4, 512


def parse_keep(answer) -> list:
    """``"out.argmax(1).tolist()"`` -> [("argmax", "1"), ("tolist", "")]."""
    if not isinstance(answer, str):
        raise AnswerShapeError(f"the answer is a {type(answer).__name__}, not an expression")
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
          "an expression on out, like \"out.detach()\" (methods: " + ", ".join(sorted(_METHODS))
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
