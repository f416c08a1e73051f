"""``gpumemlab assign``: make the student version of a source notebook and prove it is gradeable.

The student version replaces solutions by stubs, drops hidden tests and locks every cell that is
not an answer (``build.student_version``). Then both notebooks go through the real grader: the
source must pass every test (otherwise the tests or solutions are wrong) and the student version
must fail every test (a test that passes on the stub gives free points), as ``nbgrader validate``
and ``--invert`` check.

A source with variant cells (``variants``) gets one student version per roster student,
``OUT/<safe_name(id)>/<notebook>.ipynb``, each showing that student's own numbers; every
variant's answer is computed first, and the whole folder is written beside OUT and renamed, so
bad input leaves nothing behind. Its check grades the source against the teacher's preview
variant (``variants.PREVIEW_SEED``, no student's) and the first student's version against that
student's variants.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .build import student_version


@dataclass
class AssignReport:
    out: Path
    source_failures: list      # test ids the source fails
    student_passes: list       # test ids the stubbed student version passes
    unchecked: list = None     # student-version test ids that never ran (timeout, kernel died)
    students: int = 0          # per-student versions written (0: one version for everyone)
    previews: dict = None      # variant id -> the preview's expected answer, when the source fails
    checked: bool = True       # False: --no-check, nothing was run
    guessable: list = None     # one line per variant question a blind or copied answer often gets

    @property
    def ok(self) -> bool:
        return not self.source_failures and not self.student_passes and not self.unchecked

    def text(self) -> str:
        lines = [f"wrote {self.out}"]
        if self.students:
            lines[0] += (f": {self.students} student version{'s' * (self.students != 1)}, "
                         f"each with its own variants")
        lines += [f"  warning: {line}" for line in self.guessable or ()]
        if self.source_failures:
            lines.append("source FAILS its own tests: " + ", ".join(self.source_failures))
        for qid, answer in (self.previews or {}).items():
            lines.append(f"  variant {qid}: the source's solution must answer the teacher's "
                         f"preview variant, whose answer is {answer}")
        if self.student_passes:
            lines.append("student version PASSES tests without answers (free points): "
                         + ", ".join(self.student_passes))
        if self.unchecked:
            lines.append("could not check (the test cell timed out or its kernel died; rerun, or "
                         "raise --cell-timeout): " + ", ".join(self.unchecked))
        if not self.checked:
            lines.append("not checked (--no-check): nothing was run")
        elif self.ok and self.students:
            lines.append("checked: the source passes every test (variant questions against the "
                         "teacher's preview variant); the first student's version fails every "
                         "test; every student's variant answers were computed")
        elif self.ok:
            lines.append("checked: the source passes every test; the student version fails "
                         "every test")
        return "\n".join(lines)


def write_student_version(source: Path, out: Path) -> Path:
    import nbformat

    source = Path(source)
    nb = nbformat.read(str(source), as_version=4)
    student = student_version(nb)
    target = out if out.suffix == ".ipynb" else out / source.name
    if target.resolve() == source.resolve():
        raise ValueError("the student version would overwrite the source notebook")
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(student, str(target))
    return target


def check_variant_out(out: Path) -> None:
    """Per-student versions go into a new (or empty) folder: none is ever mixed with another
    run's."""
    if out.suffix == ".ipynb":
        raise ValueError("per-student variants need an output folder, not a .ipynb path")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} already exists and is not an empty folder; per-student "
                         f"versions go into a new folder")


def write_variant_versions(source: Path, out: Path, roster: dict, secret: bytes,
                           assignment: str) -> dict:
    """One student version per roster id under ``out`` (which must not exist, or be empty);
    -> {student id: notebook path}. Written into a sibling folder, then renamed."""
    import nbformat

    from .intake import safe_name
    from .variants import personalise, student_seed, variant_questions

    check_variant_out(out)
    names = {sid: safe_name(sid) for sid in roster}
    if len(set(names.values())) != len(names):
        raise ValueError("two roster ids give the same folder name; make the ids distinct")
    nb = nbformat.read(str(source), as_version=4)
    questions = variant_questions(nb)
    student = student_version(nb)
    versions = {sid: personalise(student, questions, student_seed(secret, assignment, sid))
                for sid in roster}   # every variant computed before anything is written
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        for sid, version in versions.items():
            (work / names[sid]).mkdir()
            nbformat.write(version, str(work / names[sid] / source.name))
        if out.exists():
            out.rmdir()
        work.rename(out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return {sid: out / names[sid] / source.name for sid in roster}


def assign(source, out, *, check=True, cell_timeout=60, timeout=600, roster=None, secret=None,
           assignment=None) -> AssignReport:
    """Write the student version(s) and check them. A source with variant cells needs
    ``roster`` ({id: row}, ``reports.read_roster``) and ``secret`` (``variants.read_secret``)."""
    from .variants import PREVIEW_SEED, VariantError, expected, student_seed, variant_questions

    source, out = Path(source), Path(out)
    if not source.is_file():
        raise FileNotFoundError(f"source notebook {source} does not exist")
    import nbformat

    questions = variant_questions(nbformat.read(str(source), as_version=4))
    seeds = {"source": None, "student": None}
    if questions:
        if not roster or secret is None:
            raise VariantError(f"the source has per-student variant questions "
                               f"({', '.join(questions)}): give --roster CSV and --secret FILE")
        assignment = assignment or source.stem
        versions = write_variant_versions(source, out, roster, secret, assignment)
        first = next(iter(versions))
        target, students = versions[first], len(versions)
        seeds = {"source": PREVIEW_SEED, "student": student_seed(secret, assignment, first)}
    else:
        target, students = write_student_version(source, out), 0
    from gpumemlab.quizkit.answer_space import answer_space

    guessable = [space.line(qid) for qid, (question, _template) in questions.items()
                 if not (space := answer_space(question)).guess_proof]
    if not check:
        return AssignReport(out if students else target, [], [], students=students,
                            checked=False, guessable=guessable)
    from . import isolation
    from .grade import grade_one, open_run, read_notebook

    source_nb = read_notebook(source)
    # The teacher's own notebooks: sandboxed where bwrap runs, else run as they are (as root
    # too, where no unprivileged user can run them: they are not a student's code).
    grading = open_run(source_nb, sandbox=isolation.unavailable_reason() is None,
                       allow_root=True)
    work = Path(tempfile.mkdtemp(prefix="gml-assign-"))
    try:
        from concurrent.futures import ThreadPoolExecutor

        def run(name, nb_path):
            folder = work / name
            folder.mkdir()
            shutil.copy(nb_path, folder / source.name)
            return grade_one(grading, name, folder, folder / source.name,
                             cell_timeout=cell_timeout, timeout=timeout,
                             variant_seed=seeds[name])

        with ThreadPoolExecutor(2) as pool:   # both versions at once: two kernels
            futures = {name: pool.submit(run, name, p)
                       for name, p in (("source", source), ("student", target))}
            results = {name: f.result() for name, f in futures.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)
        grading.close()
    src_fail = [t["name"] for t in results["source"].tests if t["status"] != "passed"]
    stu_pass = [t["name"] for t in results["student"].tests if t["status"] == "passed"]
    # A stub test that failed only because it never ran proves nothing about free points.
    unchecked = [t["name"] for t in results["student"].tests
                 if t["status"] != "passed" and t["output"].startswith(("test cell stopped",
                                                                        "test cell did not run"))]
    judged = {gid: {j.question for j in js} for gid, (_, js) in grading.parts.items()}
    previews = {qid: expected(q, PREVIEW_SEED) for qid, (q, _) in questions.items()
                if any(qid in judged.get(gid, ()) for gid in src_fail)}
    return AssignReport(out if students else target, src_fail, stu_pass, unchecked, students,
                        previews, guessable=guessable)
