"""Learner progress, kept in one local JSON file: quiz attempts, what was answered right, the
seed, the predictions made in predict cells (``predictions``) and the exercise attempts
(``exercises``).

The file is ``$GPUMEMLAB_PROGRESS`` if set, else ``~/.gpumemlab/progress.json``. It is written
atomically (temp file + rename), and a damaged file is set aside as ``progress.json.bad`` instead of
stopping the quiz; so is a copy of a file with entries of the wrong types (``_well_formed``), whose
well-formed entries are kept and the others dropped, with one line saying so. The learner seed
picks the predict-the-allocator variants; ``$GPUMEMLAB_QUIZ_SEED`` overrides it (the classroom
grader and the notebook tests use that).
"""
from __future__ import annotations

import json
import math
import os
import secrets
import sys
from pathlib import Path

VERSION = 1
LIMIT_BYTES = 16 << 20   # a learner's record is kilobytes; more is not a progress file


def _count(x) -> bool:
    return type(x) is int and 0 <= x < 1 << 31


def _number(x) -> bool:
    return type(x) in (int, float) and math.isfinite(x) and abs(x) < 1e12


def _entry_ok(table: str, e) -> bool:
    if not isinstance(e, dict):
        return False
    if table == "questions":
        return _count(e.get("attempts")) and type(e.get("correct")) is bool \
            and _number(e.get("points")) and _number(e.get("max_points"))
    if table == "exercises":
        return _count(e.get("attempts", 0)) and type(e.get("passed", False)) is bool
    return _count(e.get("attempts", 0))


def _well_formed(data: dict) -> int:
    """Drop, in place, the entries whose types the quiz cannot use; -> how many were dropped."""
    dropped = 0
    if not (data.get("seed") is None or isinstance(data.get("seed"), str)):
        data["seed"], dropped = None, dropped + 1
    for table in ("questions", "predictions", "exercises"):
        entries = data.get(table, {})
        if not isinstance(entries, dict):
            data[table], dropped = {}, dropped + 1
            continue
        for key in [k for k, e in entries.items() if not _entry_ok(table, e)]:
            del entries[key]
            dropped += 1
    return dropped


def progress_path() -> Path:
    env = os.environ.get("GPUMEMLAB_PROGRESS")
    if env:
        return Path(env)
    return Path.home() / ".gpumemlab" / "progress.json"


class Progress:
    """A learner's record. Every change is saved at once: a notebook can die at any cell."""

    def __init__(self, path=None):
        self.path = Path(path) if path is not None else progress_path()
        self.data = self._load()

    def _load(self) -> dict:
        empty = {"version": VERSION, "seed": None, "questions": {}}
        try:
            if self.path.stat().st_size > LIMIT_BYTES:
                raise ValueError("too large")
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return empty
        except (OSError, ValueError, RecursionError):
            self._set_aside()
            return empty
        if not isinstance(data, dict) or not isinstance(data.get("questions"), dict):
            self._set_aside()
            return empty
        dropped = _well_formed(data)
        if dropped:
            self._set_aside(copy=True)
            print(f"gpumemlab: {dropped} entr{'ies' if dropped != 1 else 'y'} of {self.path} "
                  f"{'were' if dropped != 1 else 'was'} of the wrong types and left out (the "
                  f"file as it was: {self.path.name}.bad)", file=sys.stderr)
        return data

    def _set_aside(self, copy=False):
        bad = self.path.with_name(self.path.name + ".bad")
        try:
            if copy:
                bad.write_bytes(self.path.read_bytes())
            else:
                self.path.replace(bad)
        except OSError:
            pass

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(self.path)

    @property
    def seed(self) -> str:
        env = os.environ.get("GPUMEMLAB_QUIZ_SEED")
        if env:
            return env
        if not self.data.get("seed"):
            self.data["seed"] = secrets.token_hex(4)
            self.save()
        return self.data["seed"]

    def entry(self, question_id: str) -> dict:
        return self.data["questions"].get(question_id, {"attempts": 0, "correct": False,
                                                        "points": 0.0, "max_points": 0.0})

    def attempts(self, question_id: str) -> int:
        return self.entry(question_id)["attempts"]

    def record(self, question_id: str, correct: bool, points: float, max_points: float) -> dict:
        e = dict(self.entry(question_id))
        e["attempts"] += 1
        e["max_points"] = max_points
        if correct and not e["correct"]:
            e["correct"], e["points"], e["solved_at_attempt"] = True, points, e["attempts"]
        self.data["questions"][question_id] = e
        self.save()
        return e

    # -- predict cells (gml.predict) and exercise cells (gml.exercise) --
    def prediction(self, prediction_id: str):
        """The stored prediction entry (value, text, kind, ...), or None."""
        entry = self.data.get("predictions", {}).get(prediction_id)
        return entry if isinstance(entry, dict) else None

    def record_prediction(self, prediction_id: str, **fields) -> dict:
        """Merge ``fields`` into the entry of ``prediction_id`` and save."""
        table = self.data.setdefault("predictions", {})
        entry = dict(table.get(prediction_id) or {})
        entry.update(fields)
        table[prediction_id] = entry
        self.save()
        return entry

    def exercise(self, exercise_id: str) -> dict:
        entry = self.data.get("exercises", {}).get(exercise_id)
        return entry if isinstance(entry, dict) else {"attempts": 0, "passed": False}

    def record_exercise(self, exercise_id: str, passed: bool) -> dict:
        table = self.data.setdefault("exercises", {})
        entry = dict(self.exercise(exercise_id))
        entry["attempts"] = int(entry.get("attempts", 0)) + 1
        if passed and not entry.get("passed"):
            entry["passed"], entry["solved_at_attempt"] = True, entry["attempts"]
        table[exercise_id] = entry
        self.save()
        return entry

    def reset(self, prefix: str = "", tables=("questions",)) -> None:
        """Forget the entries whose id starts with ``prefix`` (all if empty) in ``tables``
        (quiz answers by default; also "predictions", "exercises")."""
        for key in tables:
            table = self.data.get(key, {})
            for qid in [q for q in table if q.startswith(prefix)]:
                del table[qid]
        self.save()
