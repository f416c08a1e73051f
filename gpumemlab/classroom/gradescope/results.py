"""The ``results.json`` Gradescope reads after ``run_autograder``: scores, visibility, formats.

It starts from ``reports.gradescope`` (score after the late penalty, per-test rows, notes) and
adds what only Gradescope uses:

* each test's ``visibility`` from the autograder's settings (``config``); notes that
  name a test not visible yet (``hidden``, ``after_due_date``, ``after_published``) name it
  "a test not shown yet" instead, so its id does not leak through the overall output;
* ``output_format`` ``"text"`` everywhere (the whole output, each test's, each test's name).
  Gradescope shows ``text`` verbatim in a preformatted block; ``md``, ``html`` and
  ``simple_format`` would render markup, and these outputs carry a student's own text
  (exception messages, printed values): as markdown a submission could add links or images to
  its own feedback, or reflow a traceback into something that reads like a verdict. Tracebacks
  and aligned values also need the fixed-width block that ``text`` gives;
* ``extra_data`` (stored by Gradescope, shown to no one): the raw score, the late penalty and
  whether the notebook ran in the sandbox;
* a top-level banner when the notebook ran without the OS sandbox, and the score line with the
  late penalty.

``failure`` is the results file for a submission that could not be graded at all: score 0 and
the reason, so Gradescope always has a file to read.
"""
from __future__ import annotations

from gpumemlab.cleantext import clean_text

OUTPUT_FORMAT = "text"
OUTPUT_LIMIT = 64 << 10
NOT_SHOWN = "a test not shown yet"
NOT_YOUR_FAULT = ("This is not a problem with your submission: tell your teacher, who can read "
                  "the autograder's log on Gradescope.")


def not_isolated_banner(reason, runs_as: str = "root", why_root: str = "") -> str:
    """The first line of the results of a notebook run without the sandbox: why (``reason``
    None: the settings said ``sandbox: off``) and as whom (``grade.GradingRun.runs_as``)."""
    if reason is None:
        head = ("NOT ISOLATED: this autograder is set to run notebooks without the OS sandbox "
                "(sandbox: off)")
    else:
        head = ("NOT ISOLATED: the OS sandbox (bubblewrap) could not run in this autograder "
                f"container ({reason}), so this notebook ran WITHOUT it")
    if runs_as == "nobody":
        tail = (", as an unprivileged user of its own: its code could reach the network and read "
                "what any user of the container can, but not the teacher's files or these "
                "results.")
    elif runs_as == "root":
        why = f"; it could not run as an unprivileged user: {why_root}" if why_root else ""
        tail = (f" and AS ROOT (the autograder allows it: --allow-root-runs{why}): its code "
                f"could read and change anything the autograder can, including these results.")
    else:
        tail = (": its code could read and change anything the autograder's user can, "
                "including these results.")
    return clean_text(head + tail + " Your teacher has been told the same.", limit=2000)


def _formats(data: dict) -> dict:
    data["output_format"] = OUTPUT_FORMAT
    data["test_output_format"] = OUTPUT_FORMAT
    data["test_name_format"] = OUTPUT_FORMAT
    return data


def results(result, visibility: dict, *, banner: str = "", notes=()) -> dict:
    """Gradescope's results for a graded ``grade.StudentResult``; ``banner`` and ``notes`` go
    first in the overall output."""
    from ..reports import gradescope

    shown_later = [gid for gid, vis in visibility.items() if vis != "visible"]
    result.notes = [_hide(n, shown_later) for n in result.notes   # the banner says it
                    if not n.startswith("NOT ISOLATED")]
    data = gradescope(result)
    head = [banner] if banner else []
    head.append(f"score: {data['score']:g} / {result.max_score:g}"
                + (f" (tests {result.score:g}, late penalty -{result.penalty:g})"
                   if result.penalty else ""))
    head += [clean_text(n, limit=2000) for n in notes]
    data["output"] = clean_text("\n".join(head + ([data["output"]] if data["output"] else [])),
                                limit=OUTPUT_LIMIT)
    data["extra_data"] = {"raw_score": result.score, "late_penalty": result.penalty,
                          "isolated": result.isolated}
    for test in data["tests"]:
        test["visibility"] = visibility.get(test["name"], "visible")
        test["output_format"] = OUTPUT_FORMAT
    return _formats(data)


def _hide(note: str, ids) -> str:
    for gid in sorted(ids, key=len, reverse=True):
        note = note.replace(gid, NOT_SHOWN)
    return note


def failure(reason: str, seconds: float = 0.0) -> dict:
    """Score 0 and why, for a submission the autograder could not grade."""
    return _formats({"score": 0.0, "execution_time": round(seconds, 2),
                     "output": clean_text(reason, limit=OUTPUT_LIMIT), "visibility": "visible",
                     "tests": []})
