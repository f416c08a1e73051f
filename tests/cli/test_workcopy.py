"""The Lab works on copies: ``./kit lab`` fills a git-ignored folder from notebooks/ on the first
run and refreshes, later, only the lessons the learner has not touched (cli/workcopy.py); the
tracked notebooks are never what Lab opens."""
import json
import pathlib
import subprocess

import pytest

from gpumemlab.cli import main
from gpumemlab.cli.workcopy import MANIFEST, WorkCopyError, lessons_source, sync

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _kit(tmp_path, n=3):
    src = tmp_path / "notebooks"
    src.mkdir()
    for i in range(n):
        (src / f"0{i}_lesson.ipynb").write_text(f'{{"lesson": {i}}}\n')
    (src / "notes.txt").write_text("not a lesson")
    return src


def test_first_run_fills_then_refreshes_only_untouched_lessons(tmp_path):
    src, work = _kit(tmp_path), tmp_path / "lab"
    r = sync(src, work)
    assert r.added == ["00_lesson.ipynb", "01_lesson.ipynb", "02_lesson.ipynb"] and not r.kept
    assert sorted(p.name for p in work.iterdir()) == [MANIFEST, *r.added]
    # the learner runs lesson 01 (Lab saves its outputs); the kit then changes 00 and 01
    (work / "01_lesson.ipynb").write_text('{"lesson": 1, "outputs": "mine"}\n')
    (src / "00_lesson.ipynb").write_text('{"lesson": 0, "fixed": true}\n')
    (src / "01_lesson.ipynb").write_text('{"lesson": 1, "fixed": true}\n')
    (work / "02_lesson.ipynb").unlink()                  # deleted: comes back
    r = sync(src, work)
    assert r.refreshed == ["00_lesson.ipynb"] and r.kept == ["01_lesson.ipynb"]
    assert r.added == ["02_lesson.ipynb"]
    assert (work / "00_lesson.ipynb").read_text() == '{"lesson": 0, "fixed": true}\n'
    assert (work / "01_lesson.ipynb").read_text() == '{"lesson": 1, "outputs": "mine"}\n'
    assert "kept (yours): 01_lesson.ipynb" in r.text()
    r = sync(src, work)                                  # stable: nothing more happens
    assert r.same == ["00_lesson.ipynb", "02_lesson.ipynb"] and r.kept == ["01_lesson.ipynb"]


def test_a_file_there_before_the_manifest_is_the_learners(tmp_path):
    src, work = _kit(tmp_path), tmp_path / "lab"
    work.mkdir()
    (work / "00_lesson.ipynb").write_text("my own notebook\n")
    (work / MANIFEST).write_text("not json")
    r = sync(src, work)
    assert r.kept == ["00_lesson.ipynb"] and (work / "00_lesson.ipynb").read_text() == "my own notebook\n"
    assert "00_lesson.ipynb" not in json.loads((work / MANIFEST).read_text())["files"]


def test_the_kits_own_folder_is_refused(tmp_path):
    src = _kit(tmp_path)
    with pytest.raises(WorkCopyError, match="the kit's own lesson folder"):
        sync(src, src)


def test_kit_lab_opens_the_working_folder_and_it_is_git_ignored():
    kit = (ROOT / "kit").read_text()
    assert 'work="${GPUMEMLAB_LAB_DIR:-$here/lab}"' in kit
    assert '-m gpumemlab.cli.workcopy "$here/notebooks" "$work"' in kit
    assert '--notebook-dir="$work"' in kit and '--notebook-dir="$here/notebooks"' not in kit
    ignored = subprocess.run(["git", "check-ignore", "-q", "lab/00_setup.ipynb"], cwd=ROOT)
    assert ignored.returncode == 0
    assert "working copies" in (ROOT / "README.md").read_text()


def test_gpumemlab_lessons_copies_every_lesson_and_says_how_to_open_them(tmp_path, capsys):
    dest = tmp_path / "my lessons"
    assert main(["lessons", str(dest)]) == 0
    out = capsys.readouterr().out
    names = sorted(p.name for p in lessons_source().glob("[0-9][0-9]_*.ipynb"))
    assert len(names) >= 15 and sorted(p.name for p in dest.glob("*.ipynb")) == names
    assert f"{len(names)} copied" in out and f"jupyter lab '{dest}'" in out
    assert main(["lessons", str(dest)]) == 0
    assert f"{len(names)} up to date" in capsys.readouterr().out
