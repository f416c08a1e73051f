"""Grade N submissions of the fixture lab notebook and print how long it takes.

    python benchmarks/bench_grade.py [N] [WORKERS]     (defaults: 30 submissions, 2 workers)

The submissions mix right, wrong and half-right answers (no hostile ones: those measure
timeouts, not throughput). Prints the wall time, the time per submission and the score spread.
"""
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests" / "fixtures" / "classroom"))


def main(n=30, workers=2):
    import nbformat

    import make_submissions as M
    from gpumemlab.classroom.build import student_version
    from gpumemlab.classroom.grade import grade_all

    student = student_version(nbformat.read(str(M.SOURCE), as_version=4))
    work = Path(tempfile.mkdtemp(prefix="gml-bench-"))
    try:
        for i in range(n):
            answers = [M.RIGHT, M.WRONG, {**M.RIGHT, "reserved-answer": M.WRONG[
                "reserved-answer"]}][i % 3]
            folder = work / f"student{i:03d}"
            folder.mkdir()
            nbformat.write(M.answered(student, answers), str(folder / "lab.ipynb"))
        started = time.perf_counter()
        results = grade_all(M.SOURCE, work, workers=workers, progress=None)
        wall = time.perf_counter() - started
    finally:
        shutil.rmtree(work, ignore_errors=True)
    scores = sorted({r.score for r in results})
    print(f"graded {len(results)} submissions with {workers} workers in {wall:.1f} s "
          f"({wall / len(results):.2f} s per submission; target: 30 in < 300 s)")
    print(f"per-submission kernel time: mean {sum(r.seconds for r in results) / len(results):.1f}"
          f" s; scores seen: {scores}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
