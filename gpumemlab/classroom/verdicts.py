"""Answers judged outside the student's process: what the grader asks for, and its verdict.

A test cell statement ``gml.quiz.assert_correct('01.5', round_size)`` or
``gml.exercise.assert_passes('05.ex', my_setting)`` (top level, an id literal and an answer name)
is a *judge*: it never runs in the submission. Instead the sandboxed
kernel is asked for the value of ``round_size``: a plain value (JSON numbers, strings, lists,
dicts with string keys, booleans, None; subclasses and other objects refused), or, for a code
question, the function's outputs on inputs the grader picked (the exercise's edge and seeded
cases plus cases drawn from a fresh random generator each run; a lesson exercise's function of no
arguments is called once). The answers come back as JSON and
are compared here, with the bank's key, the simulator and the exercise's reference, none of which
the submission can import (``kit``). Every other statement of a test cell runs inside the
submission as nbgrader does; a cell with no judge is reported "checked inside the submission".
"""
from __future__ import annotations

import ast
import math
import random
from dataclasses import dataclass

from .cells import NotebookFormatError

# (object, method) -> kind: a quiz question, or a lesson exercise (``gml.exercise``)
_CALLS = {("quiz", "assert_correct"): "quiz", ("exercise", "assert_passes"): "exercise"}
MESSAGE_LIMIT = 600


@dataclass(frozen=True)
class Judge:
    question: str
    name: str
    kind: str = "quiz"


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _judge_kind(node):
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    owner = _dotted(node.func.value) or ""
    if owner.split(".")[0] not in ("gml", "gpumemlab") and "." in owner:
        return None
    return _CALLS.get((owner.split(".")[-1], node.func.attr))


def _is_judge_call(node) -> bool:
    return _judge_kind(node) is not None


def split_test(source: str, where: str):
    """-> (the source that runs inside, [Judge]). Raises NotebookFormatError for a judge call
    that is not a top-level ``assert_correct('ID', name)`` statement."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise NotebookFormatError(f"{where}: the test cell is not valid Python: {exc.msg}") \
            from None
    judges, drop = [], set()
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if call is not None and _is_judge_call(call):
            args = call.args
            method = call.func.attr
            if len(args) != 2 or call.keywords or not isinstance(args[0], ast.Constant) \
                    or not isinstance(args[0].value, str) or not isinstance(args[1], ast.Name):
                raise NotebookFormatError(f"{where}: write {method}('ID', answer_name) "
                                          f"with a question id and a plain answer name")
            judges.append(Judge(args[0].value, args[1].id, _judge_kind(call)))
            drop.update(range(stmt.lineno, stmt.end_lineno + 1))
    for node in ast.walk(tree):
        if _is_judge_call(node) and not any(node is s.value for s in tree.body
                                            if isinstance(s, ast.Expr)):
            raise NotebookFormatError(f"{where}: {node.func.attr} must be a statement of its "
                                      f"own at the top of the test cell, so it is judged "
                                      f"outside the submission")
    lines = source.splitlines()
    inside = "\n".join(line for i, line in enumerate(lines, 1) if i not in drop)
    return inside, judges


def question(qid: str):
    from gpumemlab.quizkit import quiz

    return quiz.question_obj(qid)


def template_question(template: dict):
    """The predict Question a notebook's template defines (``variants`` validates it)."""
    from gpumemlab.quizkit.bank import Question

    return Question(template["id"], "predict", template.get("prompt", "Predict the result."),
                    float(template.get("points", 1)),
                    data={"generator": template["generator"],
                          "params": dict(template.get("params", {}))})


def check_questions(judges, where: str) -> None:
    from gpumemlab.lessons import get

    for j in judges:
        try:
            (get if j.kind == "exercise" else question)(j.question)
        except (KeyError, ValueError) as exc:
            raise NotebookFormatError(f"{where}: unknown question {j.question!r}: {exc}") \
                from None


def withheld_modules(judges) -> set:
    from gpumemlab.quizkit.exercises import EXERCISES

    out = set()
    for j in judges:
        if j.kind == "exercise":   # judged by running the simulator: nothing to withhold
            continue
        q = question(j.question)
        if q.kind == "code":
            out.update(EXERCISES[q.data["exercise"]].withholds)
    return out


def plan(judge: Judge, rng: random.Random, variants=None) -> dict:
    """What the sandbox must send back for one judge (probes: argument lists, or None).
    ``variants``: {id: the notebook's own predict question (a template), or None}."""
    request = {"question": judge.question, "name": judge.name, "probes": None}
    if (variants or {}).get(judge.question) is not None:   # a template: a plain value
        return request
    if judge.kind == "exercise":   # plain data, or a function of no arguments returning it
        request["kind"], request["call_if_callable"] = "exercise", True
        return request
    q = question(judge.question)
    if q.kind == "code":
        from gpumemlab.quizkit.exercises import EXERCISES

        ex = EXERCISES[q.data["exercise"]]
        fresh = random.Random(rng.getrandbits(64))
        request["probes"] = [list(a) for a in ex.cases() + ex.cases(fresh)]
        request["signature"] = ex.signature
    return request


def _short(text: str) -> str:
    text = str(text)
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + " ... (cut)"


def verdict(request: dict, reply, seed: str):
    """-> (passed, message). ``reply`` is decoded JSON, as untrusted as anything the student
    writes: any unexpected shape fails with a message, never an exception. A request with a
    ``template`` (added by the grader, never sent to the sandbox) judges the notebook's own
    predict question."""
    qid, name = request["question"], request["name"]
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        return False, f"{qid}: no readable answer came back for {name!r}"
    if not reply["ok"]:
        return False, _short(f"{qid}: {reply.get('error', 'no answer')}")
    if request.get("kind") == "exercise":
        from gpumemlab.lessons import judge

        v = judge(qid, reply.get("value"))
        return v.passed, "" if v.passed else _short(f"{qid}: {v.message}")
    q = template_question(request["template"]) if request.get("template") else question(qid)
    if request["probes"] is None:
        from gpumemlab.quizkit.checker import AnswerError, evaluate

        try:
            result = evaluate(q, reply.get("value"), 0, seed)
        except AnswerError as exc:
            return False, _short(str(exc))
        return result.correct, "" if result.correct else _short(result.text)
    from gpumemlab.quizkit.exercises import EXERCISES, agrees, show_args

    ex = EXERCISES[q.data["exercise"]]
    calls = reply.get("calls")
    if not isinstance(calls, list):
        return False, f"{qid}: no outputs came back from {name!r}"
    for i, args in enumerate(request["probes"]):
        if i >= len(calls) or not isinstance(calls[i], dict):
            return False, f"{qid}: {ex.name} gave no output for case {i + 1}"
        call = calls[i]
        if "error" in call:
            return False, _short(f"{ex.name}({show_args(args)}) raised {call['error']}")
        if "value" not in call:
            return False, f"{qid}: {ex.name} gave no output for case {i + 1}"
        expected = ex.reference(*args)
        got = call["value"]
        if isinstance(got, float) and not math.isfinite(got):
            return False, f"{ex.name}({show_args(args)}) returned {got!r}"
        if not agrees(ex, got, expected):
            return False, _short(f"{ex.name}({show_args(args)}) returned {got!r}; the allocator "
                                 f"gives {expected!r}")
    return True, ""


def warm_up() -> None:
    """Import every judge and load every bank now, so that each forked judging child starts
    with them (``judge_pool``): a child then spends its limits on the answer, not on imports."""
    from gpumemlab.quizkit import exercises, quiz  # noqa: F401
    from gpumemlab.quizkit.lesson_exercises import all_exercises

    all_exercises()
    try:
        from gpumemlab.doctor import growth, growth_cases  # noqa: F401  (the 10.ex judge's)
        from gpumemlab.quizkit.bank import all_banks

        all_banks()
    except Exception:   # a missing bank is reported where it is used, not here
        pass
