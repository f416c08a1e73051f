#!/usr/bin/env python
"""Build the curriculum notebooks (notebooks/NN_topic.ipynb) from their sources in scripts/nbsrc/.

Each notebook is a list of ``("markdown"|"code", text)`` cells in ``scripts/nbsrc/nbNN.py`` so that
lessons are reviewed as Python. The notebooks are written without outputs (execution_count None,
outputs []), with the python3 kernelspec, and with stable cell ids so that rebuilding an unchanged
source gives a byte-identical file.

    python scripts/build_notebooks.py            # build all
    python scripts/build_notebooks.py 02 05      # build some
    python scripts/build_notebooks.py --check    # exit 1 if a committed notebook is stale
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = {
    "00": "00_setup",
    "01": "01_caching_allocator",
    "02": "02_fragmentation",
    "03": "03_reading_the_evidence",
    "04": "04_empty_cache",
    "05": "05_allocator_settings",
    "06": "06_expandable_segments",
    "07": "07_activations",
    "08": "08_paged_kv_cache",
    "09": "09_diagnose_your_run",
}
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {"name": "python", "pygments_lexer": "ipython3",
                 "codemirror_mode": {"name": "ipython", "version": 3},
                 "file_extension": ".py", "mimetype": "text/x-python"}


def load_cells(key: str) -> list:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        module = importlib.import_module(f"nbsrc.nb{key}")
    finally:
        sys.path.pop(0)
    return module.CELLS


def build(key: str):
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": dict(LANGUAGE_INFO),
                   "gpumemlab": {"generated_by": "scripts/build_notebooks.py",
                                 "source": f"scripts/nbsrc/nb{key}.py"}}
    for i, (kind, text) in enumerate(load_cells(key)):
        cell_id = hashlib.sha1(f"{key}:{i}:{kind}".encode()).hexdigest()[:12]
        if kind == "markdown":
            cell = nbformat.v4.new_markdown_cell(text, id=cell_id)
        elif kind == "code":
            cell = nbformat.v4.new_code_cell(text, id=cell_id)
        else:
            raise ValueError(f"notebook {key}, cell {i}: unknown kind {kind!r}")
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def render(key: str) -> str:
    return nbformat.writes(build(key)) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="*", help="notebook numbers (default: all)")
    parser.add_argument("--check", action="store_true", help="report stale notebooks, write nothing")
    args = parser.parse_args(argv)
    src = Path(__file__).resolve().parent / "nbsrc"
    keys = [k.zfill(2) for k in args.which] or [k for k in NOTEBOOKS if (src / f"nb{k}.py").exists()]
    stale = []
    for key in keys:
        if key not in NOTEBOOKS:
            parser.error(f"unknown notebook {key!r}; known: {', '.join(NOTEBOOKS)}")
        path = ROOT / "notebooks" / f"{NOTEBOOKS[key]}.ipynb"
        text = render(key)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)} ({len(build(key).cells)} cells)")
    if stale:
        print("stale (rebuild with python scripts/build_notebooks.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
