"""Learner progress, kept in one local JSON file: attempts, what was answered right, the seed.

The file is ``$GPUMEMLAB_PROGRESS`` if set, else ``~/.gpumemlab/progress.json``. It is written
atomically (temp file + rename), and a damaged file is set aside as ``progress.json.bad`` instead of
stopping the quiz. The learner seed picks the predict-the-allocator variants;
``$GPUMEMLAB_QUIZ_SEED`` overrides it (the classroom grader and the notebook tests use that).
"""
from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

VERSION = 1


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
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return empty
        except (OSError, ValueError):
            self._set_aside()
            return empty
        if not isinstance(data, dict) or not isinstance(data.get("questions"), dict):
            self._set_aside()
            return empty
        return data

    def _set_aside(self):
        try:
            self.path.replace(self.path.with_name(self.path.name + ".bad"))
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

    def reset(self, prefix: str = "") -> None:
        """Forget the answers of questions whose id starts with ``prefix`` (all if empty)."""
        qs = self.data["questions"]
        for qid in [q for q in qs if q.startswith(prefix)]:
            del qs[qid]
        self.save()
