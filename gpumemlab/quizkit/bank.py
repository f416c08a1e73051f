"""Question banks: one YAML file per notebook in ``quizzes/``, validated on load.

A bank is ``{notebook: "02", title: ..., questions: [...]}``. Each question has an ``id``
("02.3"), a ``kind`` and a ``prompt``, plus optional ``points``, ``hints`` (shown one more per
wrong attempt), ``explanation`` (shown after a correct answer or a few tries), ``faq`` and
``tags``. The kinds, and the fields each one adds:

* ``choice``   ``options`` (each ``{text, feedback}``), ``salt``, ``answer_hash``
* ``text``     ``salt``, ``answer_hashes`` (one per accepted spelling)
* ``numeric``  ``unit``, ``tolerance``, ``compute`` (ops run on the simulated GPU, or an arithmetic
               ``expr``): the expected value is computed when checked, never typed in
* ``predict``  ``generator`` (+ ``params``): a seeded allocation sequence whose answer the
               simulated GPU computes, so each learner can get their own variant
* ``code``     ``exercise``: a function the learner writes, graded against the real model

Shipped banks are *sealed*: ``feedback``, ``hints`` and ``explanation`` are stored as
``feedback_sealed``, ``hints_sealed`` and ``explanation_sealed`` (see ``answers.seal_field``),
keyed by the question's ``salt`` and id. The loader checks each seal's tag and keeps the sealed
form; ``Question.explanation``, ``Question.shown_hints(n)`` and ``Question.option_feedback(i)``
decode only when the text is about to be shown. Plain fields are still accepted, for authors'
drafts; ``plain_fields(question)`` lists them, and ``author seal`` turns them into sealed ones.

Banks are found in ``$GPUMEMLAB_QUIZZES``, else in the checkout's top-level ``quizzes/`` (beside
the ``gpumemlab/`` package: a clone or an editable install), else in the ``banks`` folder beside
this module, where an installed wheel has them (setup.py maps ``quizzes/`` there).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .answers import SealError, check_sealed, unseal_field
from .compute import validate_compute
from .exercises import EXERCISES
from .generators import GENERATORS

KINDS = ("choice", "text", "numeric", "predict", "code")
UNITS = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "count": 1, "percent": 1,
         "ratio": 1}
_ID = re.compile(r"^(\d\d)\.(\d+)$")
BANK_LIMIT_BYTES = 4 << 20   # a bank is tens of kilobytes
_COMMON = {"id", "kind", "prompt", "points", "hints", "explanation", "faq", "tags", "salt",
           "hints_sealed", "explanation_sealed"}
_FIELDS = {
    "choice": {"options", "salt", "answer_hash"},
    "text": {"salt", "answer_hashes"},
    "numeric": {"unit", "tolerance", "compute"},
    "predict": {"generator", "params"},
    "code": {"exercise"},
}
_REQUIRED = {
    "choice": {"options", "salt", "answer_hash"},
    "text": {"salt", "answer_hashes"},
    "numeric": {"unit", "compute"},
    "predict": {"generator"},
    "code": {"exercise"},
}


class BankError(ValueError):
    """A question bank that cannot be used; the message names the file and the question."""


@dataclass(frozen=True)
class Question:
    id: str
    kind: str
    prompt: str
    points: float = 1.0
    stored_hints: tuple = ()        # as stored: plain text (drafts) or sealed, see ``sealed``
    stored_explanation: str = ""
    faq: bool = False
    tags: tuple = ()
    data: dict = field(default_factory=dict)   # the kind-specific fields, validated
    salt: str = ""
    sealed: frozenset = frozenset()  # which of "hints", "explanation" are stored sealed

    @property
    def notebook(self) -> str:
        return self.id.split(".")[0]

    # -- decoded only when shown --
    def shown_hints(self, n: int) -> tuple:
        """The first ``n`` hints, as text."""
        hints = self.stored_hints[:max(0, n)]
        if "hints" not in self.sealed:
            return hints
        return tuple(unseal_field(self.id, self.salt, f"hint:{i}", h)
                     for i, h in enumerate(hints, 1))

    @property
    def hints(self) -> tuple:
        return self.shown_hints(len(self.stored_hints))

    @property
    def explanation(self) -> str:
        if self.stored_explanation and "explanation" in self.sealed:
            return unseal_field(self.id, self.salt, "explanation", self.stored_explanation)
        return self.stored_explanation

    def option_feedback(self, index: int) -> str:
        """The feedback of option ``index`` (0 = a) of a choice question, as text ("" if none)."""
        opt = self.data["options"][index]
        if "feedback_sealed" in opt:
            return unseal_field(self.id, self.salt, f"feedback:{_LETTERS[index]}",
                                opt["feedback_sealed"])
        return opt.get("feedback", "")


_LETTERS = "abcdefgh"


def plain_fields(question: Question) -> list:
    """The answer-revealing fields ``question`` stores readable (empty for a sealed question)."""
    found = []
    if question.stored_explanation and "explanation" not in question.sealed:
        found.append("explanation")
    if question.stored_hints and "hints" not in question.sealed:
        found.append("hints")
    for i, opt in enumerate(question.data.get("options", ())):
        if "feedback" in opt:
            found.append(f"options[{i + 1}].feedback")
    return found


@dataclass(frozen=True)
class Bank:
    notebook: str
    title: str
    questions: tuple
    path: Path

    def get(self, question_id: str) -> Question:
        for q in self.questions:
            if q.id == question_id:
                return q
        known = ", ".join(q.id for q in self.questions)
        raise KeyError(f"no question {question_id!r} in bank {self.notebook} (known: {known})")


def quizzes_dir() -> Path:
    """The folder holding the banks (see the module docstring for the search order)."""
    env = os.environ.get("GPUMEMLAB_QUIZZES")
    if env:
        path = Path(env)
        if not path.is_dir():
            raise BankError(f"GPUMEMLAB_QUIZZES={env!r} is not a folder")
        return path
    here = Path(__file__).resolve().parent
    for candidate in (here.parent.parent / "quizzes", here / "banks"):
        if candidate.is_dir() and any(candidate.glob("[0-9][0-9]*.yaml")):
            return candidate
    raise BankError("no question banks found: set GPUMEMLAB_QUIZZES to the quizzes/ folder")


def bank_path(notebook: str, root: Path | None = None) -> Path:
    root = Path(root) if root is not None else quizzes_dir()
    matches = sorted(root.glob(f"{notebook}*.yaml"))
    if not matches:
        raise BankError(f"no question bank for notebook {notebook!r} in {root}")
    return matches[0]


def notebook_key(notebook) -> str:
    """'2', 2, '02', '02_fragmentation' -> '02'."""
    text = str(notebook).strip()
    match = re.match(r"^(\d{1,2})(?:[_.-].*)?$", text)
    if isinstance(notebook, bool) or not match:
        raise ValueError(f"notebook must be a number like '02', got {notebook!r}")
    return match.group(1).zfill(2)


def load_bank(notebook, root: Path | None = None) -> Bank:
    """Load and validate the bank of ``notebook`` ('02' or 2)."""
    return load_bank_file(bank_path(notebook_key(notebook), root))


# Parsed banks by resolved path, each with the file's (inode, mtime_ns, size) when parsed: a bank
# is parsed again only when its file changed (an edit, or an atomic replace: a new inode).
_PARSED: dict = {}


def load_bank_file(path) -> Bank:
    path = Path(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise BankError(f"{path.name}: cannot read: {exc.strerror}") from None
    key, stamp = path.resolve(), (st.st_ino, st.st_mtime_ns, st.st_size)
    cached = _PARSED.get(key)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    bank = _parse_file(path)
    _PARSED[key] = (stamp, bank)
    return bank


def _parse_file(path: Path) -> Bank:
    import yaml  # lazy: PyYAML is only needed once a quiz is opened

    try:
        if path.stat().st_size > BANK_LIMIT_BYTES:
            raise BankError(f"{path.name}: larger than {BANK_LIMIT_BYTES >> 20} MiB")
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        return parse_bank(raw, path)
    except yaml.YAMLError as exc:
        raise BankError(f"{path.name}: not valid YAML: {str(exc)[:300]}") from None
    except RecursionError:   # YAML and the checks below recurse: a deep file ends here
        raise BankError(f"{path.name}: nested too deeply to be a question bank") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BankError(f"{path.name}: cannot read: {exc}") from None


def parse_bank(raw, path: Path) -> Bank:
    where = Path(path).name
    if not isinstance(raw, dict):
        raise BankError(f"{where}: a bank must be a mapping with notebook, title and questions")
    extra = set(raw) - {"notebook", "title", "questions"}
    if extra:
        raise BankError(f"{where}: unknown top-level keys {sorted(extra)}")
    notebook = raw.get("notebook")
    if not isinstance(notebook, str) or not re.fullmatch(r"\d\d", notebook):
        raise BankError(f"{where}: 'notebook' must be a two-digit string like \"02\"")
    title = raw.get("title")
    if not isinstance(title, str) or not title.strip():
        raise BankError(f"{where}: 'title' must be a non-empty string")
    items = raw.get("questions")
    if not isinstance(items, list) or not items:
        raise BankError(f"{where}: 'questions' must be a non-empty list")
    questions, seen = [], set()
    for i, item in enumerate(items, 1):
        q = _parse_question(item, notebook, f"{where}: question {i}")
        if q.id in seen:
            raise BankError(f"{where}: question id {q.id} is used twice")
        seen.add(q.id)
        questions.append(q)
    return Bank(notebook, title.strip(), tuple(questions), Path(path))


def _parse_question(item, notebook: str, where: str) -> Question:
    if not isinstance(item, dict):
        raise BankError(f"{where}: must be a mapping")
    qid = item.get("id")
    if not isinstance(qid, str) or not _ID.match(qid):
        raise BankError(f"{where}: 'id' must look like \"{notebook}.1\", got {qid!r}")
    where = f"{where} ({qid})"
    if _ID.match(qid).group(1) != notebook:
        raise BankError(f"{where}: id must start with the bank's notebook {notebook}")
    kind = item.get("kind")
    if kind not in KINDS:
        raise BankError(f"{where}: 'kind' must be one of {', '.join(KINDS)}, got {kind!r}")
    unknown = set(item) - _COMMON - _FIELDS[kind]
    if unknown:
        raise BankError(f"{where}: unknown keys for a {kind} question: {sorted(unknown)}")
    missing = _REQUIRED[kind] - set(item)
    if missing:
        raise BankError(f"{where}: a {kind} question needs {sorted(missing)}")
    prompt = _text(item.get("prompt"), "prompt", where)
    points = item.get("points", 1)
    if isinstance(points, bool) or not isinstance(points, (int, float)) \
            or not 0 < points <= 1000:
        raise BankError(f"{where}: 'points' must be a positive number, at most 1000")
    salt = item.get("salt", "")
    if "salt" in item:
        salt = _text(salt, "salt", where)
    sealed = set()
    for name in ("hints", "explanation"):
        if name in item and f"{name}_sealed" in item:
            raise BankError(f"{where}: give '{name}' or '{name}_sealed', not both")
        if f"{name}_sealed" in item:
            sealed.add(name)
    if sealed and not salt:
        raise BankError(f"{where}: sealed fields need the question's 'salt'")
    hints = item.get("hints_sealed" if "hints" in sealed else "hints", [])
    if not isinstance(hints, list) or not all(isinstance(h, str) and h.strip() for h in hints):
        raise BankError(f"{where}: 'hints' must be a list of non-empty strings")
    hints = [h.strip() for h in hints]
    explanation = item.get("explanation_sealed" if "explanation" in sealed else "explanation", "")
    if not isinstance(explanation, str):
        raise BankError(f"{where}: 'explanation' must be a string")
    explanation = explanation.strip()
    if "hints" in sealed:
        for i, h in enumerate(hints, 1):
            _sealed_ok(qid, salt, f"hint:{i}", h, f"hints_sealed[{i}]", where)
    if "explanation" in sealed and explanation:
        _sealed_ok(qid, salt, "explanation", explanation, "explanation_sealed", where)
    tags = item.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise BankError(f"{where}: 'tags' must be a list of strings")
    faq = item.get("faq", False)
    if not isinstance(faq, bool):
        raise BankError(f"{where}: 'faq' must be true or false")
    data = {k: item[k] for k in _FIELDS[kind] if k in item}
    _CHECKS[kind](data, where)
    if kind == "choice":
        for j, opt in enumerate(data["options"]):
            if "feedback_sealed" in opt:
                _sealed_ok(qid, salt, f"feedback:{_LETTERS[j]}", opt["feedback_sealed"],
                           f"options[{j + 1}].feedback_sealed", where)
    return Question(qid, kind, prompt, float(points), tuple(hints), explanation, faq,
                    tuple(tags), data, salt, frozenset(sealed))


def _sealed_ok(qid, salt, purpose, value, name, where):
    try:
        check_sealed(qid, salt, purpose, value)
    except SealError as exc:
        raise BankError(f"{where}: '{name}': {exc}") from None


def _text(value, name, where) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BankError(f"{where}: '{name}' must be a non-empty string")
    return value.strip()


def _hex64(value, name, where):
    if not isinstance(value, str) or not re.fullmatch(r"[0-9a-f]{64}", value):
        raise BankError(f"{where}: '{name}' must be a SHA-256 hex digest (64 lower-case hex "
                        f"characters); make one with python -m gpumemlab.quizkit.author hash")


def _check_choice(data, where):
    options = data["options"]
    if not isinstance(options, list) or len(options) < 2 or len(options) > 8:
        raise BankError(f"{where}: 'options' must be a list of 2 to 8 items")
    for j, opt in enumerate(options, 1):
        if not isinstance(opt, dict) or set(opt) - {"text", "feedback", "feedback_sealed"} \
                or "text" not in opt:
            raise BankError(f"{where}: option {j} must be a mapping with 'text' and optional "
                            f"'feedback' (or 'feedback_sealed')")
        _text(opt["text"], f"options[{j}].text", where)
        if "feedback" in opt and "feedback_sealed" in opt:
            raise BankError(f"{where}: option {j} has both 'feedback' and 'feedback_sealed'")
        for name in ("feedback", "feedback_sealed"):
            if name in opt:
                _text(opt[name], f"options[{j}].{name}", where)
    _text(data["salt"], "salt", where)
    _hex64(data["answer_hash"], "answer_hash", where)


def _check_text(data, where):
    _text(data["salt"], "salt", where)
    hashes = data["answer_hashes"]
    if not isinstance(hashes, list) or not hashes:
        raise BankError(f"{where}: 'answer_hashes' must be a non-empty list")
    for h in hashes:
        _hex64(h, "answer_hashes[]", where)


def _check_numeric(data, where):
    if data["unit"] not in UNITS:
        raise BankError(f"{where}: 'unit' must be one of {', '.join(UNITS)}, got {data['unit']!r}")
    tol = data.get("tolerance", 0)
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or tol < 0:
        raise BankError(f"{where}: 'tolerance' must be a number >= 0")

    try:
        validate_compute(data["compute"])
    except ValueError as exc:
        raise BankError(f"{where}: compute: {exc}") from None


def _check_predict(data, where):

    if data["generator"] not in GENERATORS:
        raise BankError(f"{where}: unknown generator {data['generator']!r} "
                        f"(known: {', '.join(sorted(GENERATORS))})")
    params = data.get("params", {})
    if not isinstance(params, dict):
        raise BankError(f"{where}: 'params' must be a mapping")


def _check_code(data, where):

    if data["exercise"] not in EXERCISES:
        raise BankError(f"{where}: unknown exercise {data['exercise']!r} "
                        f"(known: {', '.join(sorted(EXERCISES))})")


_CHECKS = {"choice": _check_choice, "text": _check_text, "numeric": _check_numeric,
           "predict": _check_predict, "code": _check_code}


def all_banks(root: Path | None = None) -> list:
    """Every bank in the quizzes folder, in notebook order."""
    root = Path(root) if root is not None else quizzes_dir()
    return [load_bank_file(p) for p in sorted(root.glob("[0-9][0-9]*.yaml"))]
