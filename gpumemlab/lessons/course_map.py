"""The course map lesson 00 prints: the tracks (training, serving, teaching), each lesson's time
and the earlier lessons it builds on, all read from the lesson notebooks and quiz banks as they are.

No PyTorch symbol is modelled here. The time of a lesson is an estimate computed from what the
learner has to do in it, at the rates below; nothing about a lesson is typed in except the tracks.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

# Rates of a learner working through a lesson (minutes), each with its reason:
WORDS_PER_MINUTE = 120      # technical prose read closely, not skimmed (about half a novel's pace)
CODE_LINES_PER_MINUTE = 8   # a code cell is read before it runs, to know what it will measure
MINUTES_PER_PREDICTION = 3  # think, write the prediction down, then compare with the reveal
MINUTES_PER_EXERCISE = 10   # reason out an answer, check it, read a hint, try again
MINUTES_PER_QUIZ_QUESTION = 1
CLASS_MINUTES = 50          # one class period: the length a lesson should fit

# Which lessons each audience takes, in order, and why (the only content typed in here).
TRACKS = {
    "training": ("00 01 02 03 04 05 06 07 09 10 16 17",
                 "a training run that runs out of memory or grows: from the cache to will-it-fit and offload"),
    "serving": ("00 01 02 03 04 06 08 12 13 14 15",
                "an inference server: fragmentation, paged KV caches, graphs, streams, sleep/wake"),
    "teaching": ("00 01 02 03 04 05 06 07 08 09 10 12 13 14 15 16 17",
                 "every lesson, with the graded assignments of docs/COURSE.md"),
}

_REFERENCE = re.compile(r"\b(?:notebook|lesson)s?\s+((?:\d\d(?:,\s*|\s+and\s+|\s+or\s+)?)+)",
                        re.IGNORECASE)


def _source(cell) -> str:
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def lesson_work(path: Path) -> dict:
    """What one lesson notebook asks of its learner: words, code lines, predictions, exercises,
    and the earlier lessons its text refers to."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    number = Path(path).name[:2]
    words = code = predictions = exercises = 0
    needs = set()
    for cell in cells:
        text = _source(cell)
        tags = cell.get("metadata", {}).get("tags", [])
        if cell["cell_type"] == "markdown":
            words += len(text.split())
            for match in _REFERENCE.finditer(text):
                needs.update(n for n in re.findall(r"\d\d", match.group(1)) if n < number)
        elif "check" not in tags:         # hidden check cells are the lesson's, not the learner's
            code += sum(1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
            predictions += "predict" in tags
            exercises += "exercise" in tags
    return {"words": words, "code_lines": code, "predictions": predictions,
            "exercises": exercises, "needs": sorted(needs)}


def minutes(work: dict, quiz_questions: int) -> float:
    return (work["words"] / WORDS_PER_MINUTE + work["code_lines"] / CODE_LINES_PER_MINUTE
            + work["predictions"] * MINUTES_PER_PREDICTION + work["exercises"] * MINUTES_PER_EXERCISE
            + quiz_questions * MINUTES_PER_QUIZ_QUESTION)


def course_map(folder=None) -> dict:
    """{"NN": {"title", "minutes", "needs", "tracks", ...work}} for every lesson in `folder`."""
    from gpumemlab.quizkit.bank import load_bank, quizzes_dir

    lessons = {}
    for path in sorted(Path(folder or Path.cwd()).glob("[0-9][0-9]_*.ipynb")):
        number = path.name[:2]
        work = lesson_work(path)
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        heading = _source(next(c for c in cells if c["cell_type"] == "markdown")).splitlines()[0]
        bank = quizzes_dir() / f"{path.stem}.yaml"
        questions = len(load_bank(number).questions) if bank.exists() else 0
        lessons[number] = dict(work, title=heading.lstrip("# ").split(" · ", 1)[-1],
                               quiz_questions=questions, minutes=minutes(work, questions),
                               tracks=[t for t, (ns, _why) in TRACKS.items() if number in ns.split()])
    return lessons


def print_course_map(lessons: dict) -> None:
    print(f"{'':2}  {'lesson':44} {'min':>4}  needs          tracks")
    for number, lesson in lessons.items():
        title = lesson["title"] if len(lesson["title"]) <= 44 else lesson["title"][:43] + "…"
        over = "  over one class" if lesson["minutes"] > CLASS_MINUTES else ""
        print(f"{number}  {title:44} {lesson['minutes']:4.0f}  {' '.join(lesson['needs']) or '-':14} "
              f"{', '.join(lesson['tracks'])}{over}")
    for track, (numbers, why) in TRACKS.items():
        total = sum(lessons[n]["minutes"] for n in numbers.split() if n in lessons)
        print(f"{track:9} {total / 60:4.1f} h  {numbers}: {why}")
