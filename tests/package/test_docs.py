"""The docs name only things that exist: every repository path, file name, anchor, dotted
``gpumemlab.*`` module name and ``gml.*`` attribute in README.md, docs/**/*.md, the module
docstrings of the code, tests, benchmarks and scripts, the lesson sources (notebooks/src/) and the
quiz banks; and no doc points outside the repository (a clone has nothing beside it).

Read as a newcomer would: ``docs/REPLAY.md`` and ``gpumemlab/allocator/block.py`` from the
repository root, ``research/NEWEST_PYTORCH_FACTS.md`` from the doc's own folder (docs/),
``allocator/rounding.py`` from ``gpumemlab/``; a bare ``rounding.py`` or ``SOURCE_MAP.md`` must
be a file somewhere in the repository, and ``docs/ALLOCATOR.md#snapshot-format`` a heading there.
``*``, ``<part>`` and ``NN`` in a path are placeholders (``tests/viz/test_viz_*.py``,
``benchmarks/bench_<part>.py``, ``notebooks/NN_topic.ipynb``); a path that starts with one
(``<feedback>/...``) or is not under a folder of ours (``torch/cuda/memory.py``) is not checked,
nor is an all-caps file name other than a .md (``SNAPSHOT.json`` stands for the reader's file).
"""
from __future__ import annotations

import ast
import fnmatch
import importlib
import pathlib
import re

import pytest

import gpumemlab

ROOT = pathlib.Path(__file__).resolve().parents[2]
SKIP_DIRS = {".git", ".venv", ".venv-torch", "__pycache__", ".ipynb_checkpoints", ".hypothesis", "build",
             "dist", ".pytest_cache"}
TOP = {p.name for p in ROOT.iterdir()}

# A path: at least one slash, made of name characters and placeholders, optionally #anchor.
PATH = re.compile(r"(?<![\w./:@-])((?:\.\./)*[\w.*<>-]+(?:/[\w.*<>-]+)+/?)(#[\w-]+)?")
# A bare file name with an extension the project's own files have.
BARE = re.compile(r"(?<![\w./:@-])([\w-]+\.(?:py|md|ipynb|ya?ml|toml))(?![\w/-])")
DOTTED = re.compile(r"(?<![\w.])(gpumemlab(?:\.\w+)+)")
GML = re.compile(r"(?<![\w.])gml\.([A-Za-z_]\w*)")
# All-caps stems stand for the reader's own files in usage lines (SOURCE.ipynb, SNAPSHOT.json);
# an all-caps .md is a doc of ours and is checked.
PLACEHOLDER_FILE = re.compile(r"^[A-Z][A-Z0-9_]*\.(?!md$)\w+$")
# Lower-case names that are the reader's files, not ours, each with where it is used.
CORPUS = "a public script of the planner's corpus (docs/PLANNER.md's table names its repository)"
READERS_FILES = {
    "train.py": "a learner's own training script (lessons 05 and 06: PYTORCH_CUDA_ALLOC_CONF=... python train.py)",
    "benchmarking_script.py": CORPUS,
    "gpu_info.py": CORPUS,
    "makemore.py": CORPUS,
    "pred_watch.py": CORPUS,
    "rnn_checkpoint.py": CORPUS,
    "simple_conv_model.py": CORPUS,
    "simple_model.py": CORPUS,
    "train_gpt2.py": CORPUS,
    "xformer_1_layer.py": CORPUS,
}


def _files():
    out = []
    for p in ROOT.rglob("*"):
        if p.is_file() and not SKIP_DIRS & set(p.relative_to(ROOT).parts):
            out.append(p)
    return out


FILES = _files()
NAMES = {p.name for p in FILES}


def _docs():
    """(label, folder the text is read from, text) for each doc."""
    found = [("README.md", ROOT, (ROOT / "README.md").read_text(encoding="utf-8"))]
    for p in sorted((ROOT / "docs").rglob("*.md")):
        found.append((str(p.relative_to(ROOT)), p.parent, p.read_text(encoding="utf-8")))
    for folder in ("gpumemlab", "tests", "benchmarks", "scripts"):
        for p in sorted((ROOT / folder).rglob("*.py")):
            if SKIP_DIRS & set(p.relative_to(ROOT).parts):
                continue
            if p.is_relative_to(ROOT / "tests" / "fixtures" / "real_scripts"):
                continue   # other projects' scripts, kept as they are (their PROVENANCE.md)
            doc = ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")), clean=False)
            if doc:
                found.append((f"{p.relative_to(ROOT)} (docstring)", p.parent, doc))
    for p in sorted((ROOT / "notebooks" / "src").glob("*.py")) + sorted((ROOT / "quizzes").glob("*.yaml")):
        found.append((str(p.relative_to(ROOT)), p.parent, p.read_text(encoding="utf-8")))
    return found


DOCS = _docs()


def _anchors(md: pathlib.Path) -> set:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in md.read_text(encoding="utf-8").splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            text = re.sub(r"[^\w\s-]", "", m.group(1).strip().lower())
            out.add(re.sub(r"\s", "-", text))
    return out


def _as_glob(rel: str) -> str:
    rel = re.sub(r"<[^>]*>", "*", rel)
    return re.sub(r"\bNN(_\w+)?", lambda m: "[0-9][0-9]" + ("_*" if m.group(1) else ""), rel)


def _exists(base: pathlib.Path, rel: str) -> list:
    rel = rel.rstrip("/")
    pattern = _as_glob(rel)
    if not any(c in pattern for c in "*?["):
        target = base / rel
        return [target] if target.exists() else []
    full = str(base / pattern)
    return [p for p in FILES if fnmatch.fnmatch(str(p), full)] + \
        [p for p in base.glob(pattern) if p.is_dir()]


def path_problems(folder: pathlib.Path, text: str) -> list:
    problems = []
    for m in PATH.finditer(text):
        rel, anchor = m.group(1).rstrip(".,;"), m.group(2)
        rel = re.sub(r"^<repo>/", "", rel)
        first = rel.split("/")[0]
        if first == ".." or rel.startswith("shared/") or "/shared/" in rel:
            problems.append(f"{rel}: outside the repository")
            continue
        if first.startswith("<"):
            continue            # the reader's own folder (<feedback>/<student>/...)
        # gpumemlab/ is a base for modules and rooms only: `certificates/alice.html` in a usage
        # line is the reader's output folder, `certificates/issue.py` is ours.
        in_package = rel.endswith((".py", "/")) or "." not in rel.split("/")[-1]
        bases = [b for b in (ROOT, folder, ROOT / "gpumemlab" if in_package else None)
                 if b is not None and (b / first).exists()]
        if not bases:
            continue            # not one of ours (torch/..., c10/..., a URL's path)
        hits = [h for b in bases for h in _exists(b, rel)]
        if not hits:
            problems.append(f"{rel}: no such file or folder")
        elif anchor and not any(anchor[1:] in _anchors(h) for h in hits if h.suffix == ".md"):
            problems.append(f"{rel}{anchor}: no such heading")
    return problems


def name_problems(text: str) -> list:
    problems = []
    for m in BARE.finditer(text):
        name = m.group(1)
        if name not in NAMES and name not in READERS_FILES and not PLACEHOLDER_FILE.match(name):
            problems.append(f"{name}: no file of that name in the repository")
    return problems


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    obj = None
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        base = ROOT.joinpath(*parts[:i])
        if base.is_dir() or base.with_suffix(".py").is_file():
            continue
        obj = importlib.import_module(".".join(parts[:i - 1]))
        for attr in parts[i - 1:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return True


def module_problems(text: str) -> list:
    problems = [f"{d}: no such module or attribute" for d in
                {m.group(1).rstrip(".") for m in DOTTED.finditer(text)} if not _resolves(d)]
    problems += [f"gml.{n}: not in the flat API" for n in
                 {m.group(1) for m in GML.finditer(text)} if not hasattr(gpumemlab, n)]
    return problems


@pytest.mark.parametrize("label,folder,text", DOCS, ids=[d[0] for d in DOCS])
def test_a_doc_names_only_what_exists(label, folder, text):
    problems = path_problems(folder, text) + name_problems(text) + module_problems(text)
    assert not problems, f"{label}:\n  " + "\n  ".join(sorted(set(problems)))


def test_the_checker_catches_what_it_is_for():
    """Each kind of stale reference is caught (so the test above can fail)."""
    assert path_problems(ROOT / "docs", "see `../shared/design/ALLOCATOR_SPEC.md` §7")
    assert path_problems(ROOT, "in `gpumemlab/snapshot_io.py`")
    assert path_problems(ROOT, "`docs/CONTRACT.md`")
    assert path_problems(ROOT, "`docs/REPLAY.md#no-such-heading`")
    assert not path_problems(ROOT, "`docs/REPLAY.md#replay-gmlreplay`, `tests/viz/test_viz_*.py`, "
                                   "`benchmarks/bench_<part>.py`, torch/cuda/memory.py")
    assert name_problems("Follows ALLOCATOR_SPEC.md §9 and simulated_gpu.py")
    assert not name_problems("gpumemlab assign SOURCE.ipynb OUT/ (see setup.py)")
    assert module_problems("``gpumemlab.snapshot_io.load_snapshot``")
    assert module_problems("gml.no_such_function()")
    assert not module_problems("gpumemlab.recordings.files.load_snapshot and gml.replay")


def test_every_doc_page_is_reachable_from_the_readme_or_another_page():
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    texts = "\n".join(t for label, _, t in DOCS if label.endswith(".md"))
    unlinked = sorted(p for p in pages if p not in texts and p.split("/")[-1] not in
                      (ROOT / "README.md").read_text(encoding="utf-8"))
    assert not unlinked, f"doc pages no other doc names: {unlinked}"
