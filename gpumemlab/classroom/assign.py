"""``gpumemlab assign``: make the student version of a source notebook and prove it is gradeable.

The student version replaces solutions by stubs, drops hidden tests and locks every cell that is
not an answer (``build.student_version``). Then both notebooks go through the real grader: the
source must pass every test (otherwise the tests or solutions are wrong) and the student version
must fail every test (a test that passes on the stub gives free points), as ``nbgrader validate``
and ``--invert`` check.
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

    @property
    def ok(self) -> bool:
        return not self.source_failures and not self.student_passes and not self.unchecked

    def text(self) -> str:
        lines = [f"wrote {self.out}"]
        if self.source_failures:
            lines.append("source FAILS its own tests: " + ", ".join(self.source_failures))
        if self.student_passes:
            lines.append("student version PASSES tests without answers (free points): "
                         + ", ".join(self.student_passes))
        if self.unchecked:
            lines.append("could not check (the test cell timed out or its kernel died; rerun, or "
                         "raise --cell-timeout): " + ", ".join(self.unchecked))
        if self.ok:
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


def assign(source, out, *, check=True, cell_timeout=60, timeout=600) -> AssignReport:
    source, out = Path(source), Path(out)
    if not source.is_file():
        raise FileNotFoundError(f"source notebook {source} does not exist")
    target = write_student_version(source, out)
    if not check:
        return AssignReport(target, [], [])
    from . import isolation
    from .grade import grade_one, open_run, read_notebook

    source_nb = read_notebook(source)
    # The teacher's own notebooks: sandboxed where bwrap runs, else run as they are.
    grading = open_run(source_nb, sandbox=isolation.unavailable_reason() is None)
    work = Path(tempfile.mkdtemp(prefix="gml-assign-"))
    try:
        from concurrent.futures import ThreadPoolExecutor

        def run(name, nb_path):
            folder = work / name
            folder.mkdir()
            shutil.copy(nb_path, folder / source.name)
            return grade_one(grading, name, folder, folder / source.name,
                             cell_timeout=cell_timeout, timeout=timeout)

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
    return AssignReport(target, src_fail, stu_pass, unchecked)
