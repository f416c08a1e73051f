"""The student kit: the copy of gpumemlab a submission can import while it is graded.

It is the package without what would hand out points: the quiz layer (``quizkit``: banks'
``compute`` helpers, the exercises' reference answers, the checker), the grader itself except
its notebook executor (``classroom/runner.py``, which runs inside the sandbox), certificates and
the CLI, plus every module an exercise judged in this assignment names as computing its answer
(``Exercise.withholds``, e.g. ``allocator/rounding.py`` for ``round_size``). A withheld module is
replaced by one that raises ``ImportError`` saying why, so kit code that needs it fails clearly.
The question banks are not in the kit either.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

ALWAYS_WITHHELD = ("quizkit", "certificates", "cli", "classroom")
# paths, not names; the executor (runner) imports procfs for its clock
KEPT_IN_CLASSROOM = ("classroom/__init__.py", "classroom/runner.py", "classroom/procfs.py")

_STUB = ('"""Withheld while grading."""\n'
         'raise ImportError({message!r})\n')


def _message(rel: str) -> str:
    name = "gpumemlab." + rel.removesuffix(".py").replace("/", ".")
    if rel.startswith("quizkit"):
        return (f"{name} is not available while grading: the quizzes and their answer helpers "
                f"stay with the grader")
    return f"{name} is withheld while grading: this assignment asks you to write what it computes"


def prepare_kit(dest, withheld=()) -> Path:
    """Write the kit into ``dest`` (which becomes the folder holding ``gpumemlab/``)."""
    import gpumemlab

    src = Path(gpumemlab.__file__).resolve().parent
    dest = Path(dest)
    pkg = dest / "gpumemlab"
    withheld = {w.strip("/") for w in withheld}
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        rel_dir = Path(dirpath).relative_to(src).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        room = rel_dir.split("/")[0]
        if room in withheld or (room in ALWAYS_WITHHELD and room != "classroom"):
            continue
        if room == "classroom" and rel_dir != "classroom":    # its sub-packages: grader only
            dirnames[:] = []
            continue
        (pkg / rel_dir).mkdir(parents=True, exist_ok=True)
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if room == "classroom" and rel not in KEPT_IN_CLASSROOM:
                continue
            target = pkg / rel
            if rel in withheld:
                target.write_text(_STUB.format(message=_message(rel)), encoding="utf-8")
            else:
                shutil.copyfile(Path(dirpath) / name, target)
    for room in sorted((set(ALWAYS_WITHHELD) - {"classroom"}) | {w for w in withheld
                                                                 if "/" not in w
                                                                 and not w.endswith(".py")}):
        (pkg / room).mkdir(parents=True, exist_ok=True)
        (pkg / room / "__init__.py").write_text(_STUB.format(message=_message(room)),
                                               encoding="utf-8")
    for dirpath, dirnames, filenames in os.walk(dest):   # readable by the sandbox's nobody
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)
    return dest
