#!/usr/bin/env python
"""Build the lesson notebooks (notebooks/NN_topic.ipynb) from their jupytext sources
(notebooks/src/NN_topic.py, percent format: ``# %%`` code cells, ``# %% [markdown]`` text cells,
cell tags in the header as ``# %% tags=["predict"]``).

The sources are real Python: lint them, run them, review them. The notebooks are written without
outputs, with the python3 kernelspec and stable cell ids, so rebuilding an unchanged source gives
a byte-identical file (tests/notebooks/test_notebooks_meta.py checks that the committed notebooks are
exactly what this script makes).

    python scripts/build_notebooks.py            # build every notebook from notebooks/src/
    python scripts/build_notebooks.py 02 05      # build some
    python scripts/build_notebooks.py --check    # exit 1 if a committed notebook is stale
    python scripts/build_notebooks.py --pull 02  # edited notebook 02 in JupyterLab: write its
                                                 # cells back into notebooks/src/02_*.py
"""
from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
SOURCE_DIR = NOTEBOOK_DIR / "src"
FORMAT = "py:percent"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {"name": "python", "pygments_lexer": "ipython3",
                 "codemirror_mode": {"name": "ipython", "version": 3},
                 "file_extension": ".py", "mimetype": "text/x-python"}
# Cell metadata that belongs to a lesson's source (tags, hidden check cells); anything else a
# notebook front end adds (execution timings, scroll state) is dropped on --pull.
CELL_METADATA = ("tags", "jupyter")


def lessons() -> dict:
    """``{"02": "02_fragmentation", ...}``, one entry per source file."""
    return {p.stem[:2]: p.stem for p in sorted(SOURCE_DIR.glob("[0-9][0-9]_*.py"))}


def source_path(key: str) -> Path:
    return SOURCE_DIR / f"{lessons()[key]}.py"


def build(key: str):
    name = lessons()[key]
    parsed = jupytext.read(source_path(key), fmt=FORMAT)
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": dict(LANGUAGE_INFO),
                   "gpumemlab": {"generated_by": "scripts/build_notebooks.py",
                                 "source": f"notebooks/src/{name}.py"}}
    for i, cell in enumerate(parsed.cells):
        cell_id = hashlib.sha1(f"{key}:{i}:{cell.cell_type}".encode()).hexdigest()[:12]
        meta = {k: cell.metadata[k] for k in CELL_METADATA if k in cell.metadata}
        if cell.cell_type == "markdown":
            new = nbformat.v4.new_markdown_cell(cell.source, id=cell_id, metadata=meta)
        elif cell.cell_type == "code":
            new = nbformat.v4.new_code_cell(cell.source, id=cell_id, metadata=meta)
        else:
            raise ValueError(f"{name}: cell {i} is a {cell.cell_type} cell; use code or markdown")
        nb.cells.append(new)
    nbformat.validate(nb)
    return nb


def render(key: str) -> str:
    return nbformat.writes(build(key)) + "\n"


def source_text(nb) -> str:
    """The percent-format source of a notebook: its cells, their tags, nothing else."""
    clean = nbformat.v4.new_notebook()
    for cell in nb.cells:
        meta = {k: cell.metadata[k] for k in CELL_METADATA if k in cell.metadata}
        make = nbformat.v4.new_markdown_cell if cell.cell_type == "markdown" else nbformat.v4.new_code_cell
        clean.cells.append(make(cell.source, metadata=meta))
    clean.metadata["jupytext"] = {"notebook_metadata_filter": "-all",
                                  "cell_metadata_filter": ",".join(CELL_METADATA) + ",-all"}
    return jupytext.writes(clean, fmt=FORMAT)


def pull(key: str) -> Path:
    """Write notebook ``key``'s cells (as edited in JupyterLab; outputs dropped) into its source."""
    nb = nbformat.read(NOTEBOOK_DIR / f"{lessons()[key]}.ipynb", as_version=4)
    path = source_path(key)
    path.write_text(source_text(nb), encoding="utf-8")
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="*", help="notebook numbers (default: all)")
    parser.add_argument("--check", action="store_true", help="report stale notebooks, write nothing")
    parser.add_argument("--pull", action="store_true",
                        help="write the given notebooks' cells back into their sources")
    args = parser.parse_args(argv)
    known = lessons()
    keys = [k.zfill(2) for k in args.which] or list(known)
    for key in keys:
        if key not in known:
            parser.error(f"unknown notebook {key!r}; sources in {SOURCE_DIR.relative_to(ROOT)}: "
                         + ", ".join(known))
    if args.pull:
        if not args.which:
            parser.error("--pull needs the numbers of the notebooks to write back")
        for key in keys:
            print(f"wrote {pull(key).relative_to(ROOT)}; now rebuild: python scripts/build_notebooks.py {key}")
        return 0
    stale = []
    for key in keys:
        path = NOTEBOOK_DIR / f"{known[key]}.ipynb"
        text = render(key)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
            continue
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)} ({len(build(key).cells)} cells)")
    orphans = sorted(p.name for p in NOTEBOOK_DIR.glob("*.ipynb") if p.stem not in known.values())
    if orphans:
        print("notebooks without a source in notebooks/src/: " + ", ".join(orphans))
        return 1
    if stale:
        print("stale (rebuild with python scripts/build_notebooks.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
