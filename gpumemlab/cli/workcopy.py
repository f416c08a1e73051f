"""Working copies of the lessons: the folder a learner opens in JupyterLab, never the kit's own.

JupyterLab saves a notebook every few minutes (outputs included), so a Lab opened on the
checkout's ``notebooks/`` edits the tracked lessons: the committed-without-outputs check fails
and the next ``git pull`` conflicts. ``./kit lab`` and ``gpumemlab lessons DIR`` therefore open
copies. ``sync(source, dest)`` fills ``dest`` on the first run and, on later runs, refreshes
each lesson the learner has not touched since it was copied (its bytes still hash to what the
manifest recorded) when the kit's version changed; a lesson the learner changed, even by only
running it, is kept as it is and reported. The manifest, ``dest/.gpumemlab-lessons.json``,
holds the SHA-256 of each copy as written.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

MANIFEST = ".gpumemlab-lessons.json"
PATTERN = "[0-9][0-9]_*.ipynb"


class WorkCopyError(Exception):
    """A folder that cannot hold the copies (one line for the user)."""


@dataclass
class SyncReport:
    dest: Path
    added: list = field(default_factory=list)       # copied for the first time
    refreshed: list = field(default_factory=list)   # untouched copies replaced by a newer lesson
    kept: list = field(default_factory=list)        # changed by the learner: left alone
    same: list = field(default_factory=list)        # untouched and already the kit's version

    def text(self) -> str:
        parts = [f"{len(v)} {k}" for k, v in (("copied", self.added), ("refreshed", self.refreshed),
                                               ("up to date", self.same),
                                               ("kept as you changed them", self.kept)) if v]
        lines = [f"lessons in {self.dest}: {', '.join(parts) or 'none'}"]
        if self.kept:
            lines.append(f"  kept (yours): {', '.join(self.kept)}; delete one to get the kit's "
                         f"current version on the next run")
        return "\n".join(lines)


def lessons_source() -> Path:
    """The kit's lessons: ``notebooks/`` of the checkout this package runs from, else the copy a
    wheel installs (``gpumemlab/lessons/notebooks``)."""
    here = Path(__file__).resolve().parents[1]
    for candidate in (here.parent / "notebooks", here / "lessons" / "notebooks"):
        if candidate.is_dir() and any(candidate.glob(PATTERN)):
            return candidate
    raise WorkCopyError("no lesson notebooks found in this installation")


def _hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read_manifest(dest: Path) -> dict:
    try:
        data = json.loads((dest / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}      # none yet, or unreadable: every existing file counts as the learner's
    files = data.get("files") if isinstance(data, dict) else None
    return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(files, dict) else {}


def _copy(src: Path, target: Path) -> str:
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, target)
    return _hash(target)


def sync(source, dest) -> SyncReport:
    """Fill or refresh ``dest`` from the lessons in ``source``; never overwrite a changed one."""
    source, dest = Path(source), Path(dest)
    if source.resolve() == dest.resolve():
        raise WorkCopyError(f"{dest} is the kit's own lesson folder: choose another")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkCopyError(f"cannot make {dest}: {exc.strerror or exc}") from None
    if not dest.is_dir():
        raise WorkCopyError(f"{dest} is not a folder")
    manifest = _read_manifest(dest)
    report = SyncReport(dest)
    written = {}
    try:
        for src in sorted(source.glob(PATTERN)):
            name, target = src.name, dest / src.name
            if not target.exists():
                written[name] = _copy(src, target)
                report.added.append(name)
                continue
            now = _hash(target)
            if manifest.get(name) != now:         # edited, run, or not ours: the learner's
                report.kept.append(name)
                if name in manifest:
                    written[name] = manifest[name]
            elif _hash(src) != now:
                written[name] = _copy(src, target)
                report.refreshed.append(name)
            else:
                written[name] = now
                report.same.append(name)
        _write_manifest(dest, written)
    except OSError as exc:
        raise WorkCopyError(f"cannot write the lessons into {dest}: {exc.strerror or exc}") from None
    return report


def _write_manifest(dest: Path, files: dict) -> None:
    tmp = dest / f"{MANIFEST}.tmp"
    tmp.write_text(json.dumps({"files": files}, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, dest / MANIFEST)


def main(argv=None) -> int:
    """``python -m gpumemlab.cli.workcopy SOURCE DEST``: what ``./kit lab`` runs first."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m gpumemlab.cli.workcopy SOURCE DEST", file=sys.stderr)
        return 2
    try:
        print(sync(args[0], args[1]).text(), file=sys.stderr)
    except WorkCopyError as exc:
        print(f"gpumemlab: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
