"""``gpumemlab gradescope``: the autograder zip a teacher uploads to Gradescope.

Gradescope's autograder specification wants a zip with ``setup.sh`` and ``run_autograder`` at its
root; it unpacks the zip to ``/autograder/source``, runs ``setup.sh`` once as root while it builds
the image (Ubuntu), and runs ``run_autograder`` once per submission. The zip made here holds::

    setup.sh                    apt: python3, python3-venv, bubblewrap, util-linux; a venv in
                                /opt/gpumemlab-venv; CPU-only torch from PyTorch's CPU index;
                                the kit from dist/; then a check of the settings and the sandbox
    run_autograder              runs gradescope.run; writes a results.json even if that fails
    gpumemlab-autograder.json   the settings (gradescope.config)
    teacher/<notebook>.ipynb    the teacher's source notebook: solutions and hidden tests. It
                                lives in the autograder image only; students get the version
                                ``gpumemlab assign`` makes
    dist/gpumemlab-*.whl        the kit, built from this checkout now (or ``--dist FILE``)
    teacher/course.secret       a source with per-student variant questions only: the course
                                secret ``gpumemlab assign --secret`` used (the settings carry
                                the roster's ids and which Gradescope field matches them)

Like the teacher's notebook, the secret makes the zip the teacher's alone: whoever has it can
compute every student's answers.

The source is checked first (nbgrader markup, the questions its judges name, the visibility of
each test); the zip is written to a temporary name and renamed, so a failed pack leaves nothing.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from .config import CONFIG_NAME, FORMAT, SECRET_PATH, TEACHER_DIR, check_config, \
    visibility_of_tests

VENV = "/opt/gpumemlab-venv"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "gpumemlab", "quizzes")
_DIST_NAME = re.compile(r"gpumemlab-[\w.+!-]+(?:-py3-none-any\.whl|\.tar\.gz)")

SETUP_SH = """#!/usr/bin/env bash
# gpumemlab autograder for {assignment}: Gradescope runs this once, as root, while it builds
# the autograder image (Ubuntu). Written by `gpumemlab gradescope`; see docs/QUIZZES.md.
set -euo pipefail
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
export DEBIAN_FRONTEND=noninteractive
apt-get update
# python3-venv: the kit's own environment; bubblewrap and util-linux (unshare, setpriv): the
# sandbox each notebook runs in, where the container lets it run
apt-get install -y --no-install-recommends python3 python3-venv python3-pip bubblewrap \\
    util-linux ca-certificates
python3 -m venv {venv}
py={venv}/bin/python
"$py" -m pip install --upgrade pip
# torch from PyTorch's CPU-only index: the kit simulates the GPU; the container has none
"$py" -m pip install --index-url {cpu_index} '{torch}'
# the kit, built from the teacher's checkout by `gpumemlab gradescope` (its other
# dependencies from PyPI; the CPU torch above already satisfies its torch)
"$py" -m pip install "$here/{dist}"
chmod 0755 "$here/run_autograder"
GPUMEMLAB_AUTOGRADER_ROOT="$(dirname "$here")" "$py" -m gpumemlab.classroom.gradescope.run --check
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# gpumemlab autograder for {assignment}: Gradescope runs this once per submission.
# It grades $root/submission and writes $root/results/results.json; if that fails in any way
# the lines after it still write one (score 0 and the reason), so Gradescope always has one.
root="${{GPUMEMLAB_AUTOGRADER_ROOT:-/autograder}}"
py="${{GPUMEMLAB_AUTOGRADER_PYTHON:-{venv}/bin/python}}"
export GPUMEMLAB_AUTOGRADER_ROOT="$root"
mkdir -p "$root/results"
rm -f "$root/results/results.json"
"$py" -m gpumemlab.classroom.gradescope.run
status=$?
if [ ! -s "$root/results/results.json" ]; then
    cat > "$root/results/results.json" <<EOF
{{"score": 0, "output": "The autograder itself failed (exit status $status) before it could \
grade this submission. This is not a problem with your submission: tell your teacher, who can \
read the autograder's log on Gradescope.", "output_format": "text", "tests": []}}
EOF
fi
exit 0
"""


class PackError(ValueError):
    """The zip cannot be made; the message says why (one line)."""


@dataclass
class PackReport:
    out: Path
    config: dict
    dist: str
    max_score: float
    notes: list = field(default_factory=list)

    def text(self) -> str:
        from ..late import format_duration

        vis = self.config["visibility"]
        late = self.config["late"]
        lines = [f"wrote {self.out}: {self.config['assignment']}, {len(vis)} tests, "
                 f"{self.max_score:g} points, kit {self.dist}",
                 "visibility: " + ", ".join(f"{gid} {v}" for gid, v in vis.items()),
                 "late: " + (f"{late['per_day'] * 100:g}% of the maximum per started day "
                             f"after Gradescope's due date, at most {late['cap'] * 100:g}%, "
                             f"grace {format_duration(late['grace_s'])}"
                             if late and late["per_day"] else "reported, no penalty"),
                 f"sandbox: {self.config['sandbox']}"
                 + ("; without it, notebooks may run AS ROOT (--allow-root-runs)"
                    if self.config.get("allow_root_runs") else "")]
        return "\n".join(lines + self.notes)


def checkout_root() -> Path:
    """The source checkout gpumemlab is imported from; PackError when it is installed."""
    import gpumemlab

    root = Path(gpumemlab.__file__).resolve().parent.parent
    if not all((root / name).exists() for name in BUILD_INPUTS):
        raise PackError(f"gpumemlab is imported from {root}, not a source checkout: pass "
                        f"--dist with a wheel or sdist of it")
    return root


def build_wheel(dest: Path) -> Path:
    """A wheel of this checkout (copied first, so the build's files never land in it)."""
    root = checkout_root()
    with tempfile.TemporaryDirectory(prefix="gml-pack-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in BUILD_INPUTS + tuple(p.name for p in root.glob("LICEN[CS]E*")):
            if (root / name).is_dir():
                shutil.copytree(root / name, src / name, ignore=shutil.ignore_patterns(
                    "__pycache__", "*.pyc", "*.egg-info", ".ipynb_checkpoints"))
            else:
                shutil.copy2(root / name, src / name)
        out = Path(tmp) / "dist"
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index",
                               "--no-build-isolation", "-q", "-w", str(out), str(src)],
                              capture_output=True, text=True, timeout=600)
        wheels = sorted(out.glob("gpumemlab-*.whl")) if out.is_dir() else []
        if proc.returncode != 0 or len(wheels) != 1:
            why = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            raise PackError(f"building the kit's wheel failed: {why[-1] if why else 'no wheel'}"
                            f" (or pass --dist with a wheel or sdist)")
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy2(wheels[0], dest / wheels[0].name))


def torch_requirement(dist: Path) -> str:
    """The kit's torch requirement, from the dist's own metadata (``torch`` when none)."""
    text = ""
    if dist.name.endswith(".whl"):
        with zipfile.ZipFile(dist) as zf:
            name = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
            text = zf.read(name).decode("utf-8", "replace") if name else ""
    else:
        import tarfile

        with tarfile.open(dist) as tf:
            member = next((m for m in tf.getmembers() if m.name.count("/") == 1
                           and m.name.endswith("/PKG-INFO")), None)
            f = tf.extractfile(member) if member is not None else None
            text = f.read().decode("utf-8", "replace") if f is not None else ""
    m = re.search(r"^Requires-Dist: (torch\s*[<>=!~,.\d\s]*)$", text, re.MULTILINE)
    return re.sub(r"\s+", "", m.group(1)) if m else "torch"


def _variants(source_nb, secret, roster, student_key):
    """-> (the settings' ``variants`` or None, the course secret or None); PackError when the
    options do not fit the source: a variant source needs --secret and --roster, and a source
    without variants takes neither (the secret would sit in the zip for nothing)."""
    from .identity import roster_ids
    from ..reports import read_roster
    from ..variants import read_secret, variant_questions

    questions = variant_questions(source_nb)
    given = [opt for opt, value in (("--secret", secret), ("--roster", roster),
                                    ("--student-key", student_key)) if value is not None]
    if not questions:
        if given:
            raise PackError(f"the source has no per-student variant questions: leave out "
                            f"{', '.join(given)} (a course secret has no place in this zip)")
        return None, None
    if secret is None or roster is None:
        raise PackError(f"the source has per-student variant questions "
                        f"({', '.join(questions)}): give --secret FILE and --roster CSV (the "
                        f"ones gpumemlab assign used) and, unless the roster's ids are emails, "
                        f"--student-key")
    key = student_key or "email"
    try:
        return {"student_key": key, "roster": roster_ids(read_roster(roster), key)}, \
            read_secret(secret)
    except ValueError as exc:   # a VariantError, or read_roster's
        raise PackError(str(exc)) from None


def _config(source_nb, name, *, assignment, cell_timeout, timeout, memory_mb, sandbox, late,
            visibility, variants=None, allow_root_runs=False) -> dict:
    from ..late import policy_numbers

    late = dict(late or {})
    try:
        policy = policy_numbers(late.get("per_day") or 0, late.get("cap"), late.get("grace"))
        config = {"format": FORMAT, "assignment": assignment, "notebook": name,
                  "cell_timeout": cell_timeout, "timeout": timeout, "memory_mb": memory_mb,
                  "sandbox": sandbox, "late": policy,
                  "visibility": visibility_of_tests(source_nb, visibility),
                  "variants": variants, "allow_root_runs": bool(allow_root_runs)}
        return check_config(config)
    except ValueError as exc:
        raise PackError(str(exc)) from None


def pack(source, out, *, assignment=None, cell_timeout=30, timeout=300, memory_mb=None,
         sandbox="auto", late=None, visibility=(), dist=None, secret=None, roster=None,
         student_key=None, allow_root_runs=False) -> PackReport:
    """Write the autograder zip ``out`` for the source notebook ``source``.

    ``late``: ``{"per_day", "cap", "grace"}`` as ``gpumemlab grade`` takes them (the due date
    is Gradescope's); ``visibility``: ``["GRADE_ID=VISIBILITY"]`` overriding the notebook's;
    ``secret``, ``roster`` (paths) and ``student_key`` (a field of Gradescope's ``users[]``,
    default ``email``): a source with per-student variant questions; ``allow_root_runs``: run
    a notebook as root where neither the sandbox nor an unprivileged user can run it."""
    from ..build import tests_of
    from ..cells import NotebookFormatError, validate_source
    from ..grade import read_notebook
    from ..late import policy_from_metadata
    from ..variants import bank_judges

    source, out = Path(source), Path(out)
    try:
        source_nb = read_notebook(source)
        validate_source(source_nb)
        bank_judges(source_nb)
        from_nb = policy_from_metadata(source_nb.metadata)
    except (NotebookFormatError, ValueError, OSError) as exc:
        raise PackError(f"{source}: {exc}") from None
    variants, course_secret = _variants(source_nb, secret, roster, student_key)
    notes = []
    if variants is not None:
        notes += [f"variants: per student, judged against the variant of the roster id that "
                  f"Gradescope's users[].{variants['student_key']} names "
                  f"({len(variants['roster'])} roster ids); assignment name "
                  f"{assignment or source.stem!r} (gpumemlab assign must have used the same)",
                  "TEACHER ONLY: this zip holds the course secret (and the solutions): upload "
                  "it to Gradescope and never share it with students; whoever has it can "
                  "compute every student's answers"]
    if from_nb.pop("due", None):
        notes.append("note: the notebook's metadata.gpumemlab.late.due is not used; the due "
                     "date is the one set on Gradescope")
    from_nb.update({k: v for k, v in (late or {}).items() if v is not None})
    config = _config(source_nb, source.name, assignment=assignment or source.stem,
                     cell_timeout=cell_timeout, timeout=timeout, memory_mb=memory_mb,
                     sandbox=sandbox, late=from_nb, visibility=visibility, variants=variants,
                     allow_root_runs=allow_root_runs)
    with tempfile.TemporaryDirectory(prefix="gml-pack-") as tmp:
        if dist is None:
            kit = build_wheel(Path(tmp))
        else:
            kit = Path(dist)
            if not kit.is_file() or not _DIST_NAME.fullmatch(kit.name):
                raise PackError(f"--dist {kit}: expected a gpumemlab wheel (-py3-none-any.whl) "
                                f"or sdist (.tar.gz) file")
        try:
            torch = torch_requirement(kit)
        except Exception as exc:   # a broken archive
            raise PackError(f"{kit.name} cannot be read: {exc}") from None
        dist_rel = f"dist/{kit.name}"
        fill = {"assignment": json.dumps(config["assignment"])[1:-1].replace("\n", " "),
                "venv": VENV, "cpu_index": CPU_INDEX, "torch": torch, "dist": dist_rel}
        files = [("setup.sh", SETUP_SH.format(**fill).encode(), 0o755),
                 ("run_autograder", RUN_AUTOGRADER.format(**fill).encode(), 0o755),
                 (CONFIG_NAME, (json.dumps(config, indent=1) + "\n").encode(), 0o644),
                 (f"{TEACHER_DIR}/{source.name}", source.read_bytes(), 0o644),
                 (dist_rel, kit.read_bytes(), 0o644)]
        if course_secret is not None:
            files.append((SECRET_PATH, (course_secret.hex() + "\n").encode(), 0o600))
        _write_zip(out, files)
    max_score = sum(p for _, p in tests_of(source_nb))
    return PackReport(out, config, kit.name, max_score, notes)


def _write_zip(out: Path, files) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data, mode in files:
                info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
                info.external_attr = (0o100000 | mode) << 16   # a regular file, its mode
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, data)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
