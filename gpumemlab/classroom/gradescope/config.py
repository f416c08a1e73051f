"""The Gradescope autograder's settings: one small JSON file the teacher's zip carries.

``gpumemlab gradescope`` writes it (``pack``) and ``run_autograder`` reads it back in
the container (``run``); both go through ``check_config``, so a hand-edited file that
makes no sense stops with a one-line reason instead of grading wrongly. Its fields::

    {"format": "gpumemlab-gradescope/1", "assignment": "lab", "notebook": "lab.ipynb",
     "cell_timeout": 30, "timeout": 300, "memory_mb": null, "sandbox": "auto",
     "late": {"per_day": 0.1, "cap": 0.5, "grace_s": 3600} or null,
     "visibility": {"<test grade_id>": "visible" | "hidden" | "after_due_date" |
                    "after_published", ...},
     "variants": null or {"student_key": "email" | "sid" | "id", "roster": ["<id>", ...]},
     "allow_root_runs": false}

Per-test visibility is Gradescope's own word for who sees a test's row: ``visible`` (default),
``hidden`` (only the teacher), ``after_due_date``, ``after_published``. A test cell of the source
notebook chooses it with ``metadata.gpumemlab.visibility``; the command line can override it per
test (``GRADE_ID=VISIBILITY``). ``sandbox``: ``auto`` grades in the bubblewrap sandbox when it
runs in the container and without it otherwise (the results say so loudly), ``require`` gives 0
with the reason when it cannot run, ``off`` never tries. Without it, ``run_autograder`` (root)
runs the notebook as an unprivileged user of its own; where that cannot be done the submission
is not graded (score 0 and the reason), unless ``allow_root_runs`` is true (``gpumemlab
gradescope --allow-root-runs``; absent: false): then it runs as root and the results say so.

``variants`` (a source with per-student variant questions only): which field of Gradescope's
``users[]`` entries in ``submission_metadata.json`` is the student's id, and the ids of the
roster ``gpumemlab assign --roster`` made the variants for. The course secret itself is a file
of its own in the zip, ``SECRET_PATH``: the zip is the teacher's alone.
"""
from __future__ import annotations

import json
import math
import re

FORMAT = "gpumemlab-gradescope/1"
CONFIG_NAME = "gpumemlab-autograder.json"
TEACHER_DIR = "teacher"          # the source notebook's folder in the zip
SECRET_PATH = f"{TEACHER_DIR}/course.secret"   # a variant source's course secret in the zip
STUDENT_KEYS = ("email", "sid", "id")   # fields of Gradescope's users[] entries
ROSTER_LIMIT = 20000
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
SANDBOX_MODES = ("auto", "require", "off")
CONFIG_LIMIT = 1 << 20


class ConfigError(ValueError):
    """A setting that cannot be used; the message says which and why."""


def visibility_of_tests(source_nb, overrides=()) -> dict:
    """{test grade_id: visibility} from the test cells' ``metadata.gpumemlab.visibility``, then
    ``overrides`` (``["GRADE_ID=VISIBILITY", ...]``); ConfigError on a wrong value or id."""
    from .. import cells as C

    found = {}
    for i, cell in enumerate(source_nb.cells):
        ours = cell.get("metadata", {}).get("gpumemlab", {})
        if not isinstance(ours, dict):
            raise ConfigError(f"cell {i}: metadata.gpumemlab must be an object")
        vis = ours.get("visibility")
        if not C.is_test(cell):
            if vis is not None:
                raise ConfigError(f"cell {i} ({C.grade_id(cell) or 'no grade_id'}): "
                                  f"metadata.gpumemlab.visibility is only read on test cells")
            continue
        found[C.grade_id(cell)] = _visibility(vis if vis is not None else "visible",
                                              f"cell {i} ({C.grade_id(cell)})")
    for item in overrides:
        gid, sep, vis = str(item).partition("=")
        if not sep or gid not in found:
            raise ConfigError(f"--visibility {item!r}: expected GRADE_ID=VISIBILITY with one of "
                              f"the test ids {', '.join(found)}")
        found[gid] = _visibility(vis, f"--visibility {gid}")
    return found


def _visibility(value, where) -> str:
    if value not in VISIBILITIES:
        raise ConfigError(f"{where}: visibility {value!r} is not one of {', '.join(VISIBILITIES)}")
    return value


def _number(config, key, *, low, high=math.inf, allow_none=False):
    value = config.get(key)
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise ConfigError(f"{key} must be a number from {low:g} to {high:g}, not {value!r}")
    return value


def check_config(config) -> dict:
    """The config, checked field by field (ConfigError names the first wrong one)."""
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise ConfigError(f"not a {FORMAT} settings file")
    for key in ("assignment", "notebook"):
        if not isinstance(config.get(key), str) or not config[key]:
            raise ConfigError(f"{key} must be a non-empty string")
    if not re.fullmatch(r"[\w. -]+\.ipynb", config["notebook"]) or config["notebook"][0] == ".":
        raise ConfigError(f"notebook must be a plain .ipynb file name, not "
                          f"{config['notebook']!r}")
    _number(config, "cell_timeout", low=1, high=3600)
    _number(config, "timeout", low=1, high=24 * 3600)
    _number(config, "memory_mb", low=64, high=1 << 20, allow_none=True)
    if config.get("sandbox") not in SANDBOX_MODES:
        raise ConfigError(f"sandbox must be one of {', '.join(SANDBOX_MODES)}")
    late = config.get("late")
    if late is not None:
        if not isinstance(late, dict):
            raise ConfigError("late must be null or an object")
        _number(late, "per_day", low=0, high=1)
        _number(late, "cap", low=0, high=1)
        _number(late, "grace_s", low=0, high=365 * 86400)
    vis = config.get("visibility")
    if not isinstance(vis, dict) or not vis:
        raise ConfigError("visibility must map every test id to a visibility")
    for gid, value in vis.items():
        _visibility(value, f"visibility of {gid}")
    _check_variants(config.get("variants"))
    if not isinstance(config.get("allow_root_runs", False), bool):
        raise ConfigError("allow_root_runs must be true or false")
    return config


def _check_variants(variants) -> None:
    if variants is None:
        return
    if not isinstance(variants, dict) or set(variants) != {"student_key", "roster"}:
        raise ConfigError("variants must be null or an object with student_key and roster")
    if variants["student_key"] not in STUDENT_KEYS:
        raise ConfigError(f"variants.student_key must be one of {', '.join(STUDENT_KEYS)}")
    roster = variants["roster"]
    if not isinstance(roster, list) or not 0 < len(roster) <= ROSTER_LIMIT \
            or not all(isinstance(i, str) and i for i in roster) or len(set(roster)) < len(roster):
        raise ConfigError(f"variants.roster must list from 1 to {ROSTER_LIMIT} different, "
                          f"non-empty student ids")


def read_config(path) -> dict:
    """The settings file at ``path``, checked; ConfigError (or OSError) otherwise."""
    with open(path, "rb") as f:
        data = f.read(CONFIG_LIMIT + 1)
    if len(data) > CONFIG_LIMIT:
        raise ConfigError(f"{CONFIG_NAME} is larger than {CONFIG_LIMIT >> 10} KiB")
    try:
        config = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{CONFIG_NAME} is not JSON: {exc}") from None
    return check_config(config)
