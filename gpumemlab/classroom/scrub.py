"""What a student receives, scrubbed: no path of the grader's machine, no unsafe character.

A submission can print what its sandbox lets it see: ``/proc/self/mountinfo`` names the host
folders bound into the sandbox (the kit, the exchange folder, the Python installation), and a
traceback from IPython's own code names the virtual environment. Every text of the feedback
(test outputs, notes, judges' messages) is therefore passed through ``scrub``: each of the
grader's paths (``grader_paths``), in its plain form and in the octal-escaped form mountinfo
writes (``\\040`` for a space), becomes what it stands for (``<kit>``, ``<python>``,
``<teacher>``, ...), as does any name of the grader's temporary folders (``gml-kit-...``,
``gml-grade-...``) however it is written; then the text goes through ``cleantext.clean_text``
(lone surrogates, control characters and bidi overrides made visible; length capped).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from gpumemlab.cleantext import clean_text

# mountinfo shows a bind mount's source relative to its file system's root, so the temporary
# folders are also matched by name, wherever they sit
_TEMP_NAMES = re.compile(r"[^\s'\"]*gml-(?:kit|grade)-[\w.-]+")


def _mountinfo_form(path: str) -> str:
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in path)


def grader_paths(kit, deny_roots, base=None, home=None, folder=None) -> list:
    """[(path, stands for)], longest first: the grader's folders a student must not see."""
    from . import isolation

    pairs = [(home, "<your folder>"), (folder, "<your folder>"), (base, "<grader>"),
             (kit, "<kit>")]
    pairs += [(d, "<teacher>") for d in deny_roots]
    # as resolved, and as written (a venv reached through a link shows its own path in tracebacks)
    pythons = set(isolation.python_roots()) | {sys.prefix, sys.base_prefix, sys.exec_prefix}
    pairs += [(r, "<python>") for r in pythons if r != "/usr" and not r.startswith("/usr/")]
    package = Path(__file__).resolve().parent.parent   # a source checkout, not installed
    pairs.append((str(package.parent), "<gpumemlab>"))
    out = []
    for path, name in pairs:
        if path and str(path) not in ("/", ""):
            for form in {str(path), _mountinfo_form(str(path))}:
                out.append((form, name))
    return sorted(out, key=lambda pair: -len(pair[0]))


def scrub(text, paths, limit=None) -> str:
    """``text`` for a student: the grader's paths replaced, then cleaned and capped."""
    text = str(text) if not isinstance(text, str) else text
    for path, name in paths:
        text = text.replace(path, name)
    text = _TEMP_NAMES.sub("<grader>", text)
    return clean_text(text, limit=limit)
