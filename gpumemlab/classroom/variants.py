"""Per-student variants of graded predict questions: the course secret, each student's seed, and
the variant cells of a source notebook.

A *variant cell* is a markdown cell of the source with ``metadata.gpumemlab.variant = "<id>"``:
``gpumemlab assign`` writes into it the allocation sequence, the question and the unit of that
student's own variant of predict question ``<id>``. The id is a bank predict question ("01.7"),
or a *template* the teacher defines in the notebook's ``metadata.gpumemlab.variants``:
``[{"id": "lab.oom", "generator": "fragmented_oom", "params": {}, "prompt": "..."}]``.

A student's seed is HMAC-SHA256(course secret, assignment name, student id): the grader derives
it again from the same secret, outside the sandbox, and judges the student's answer against the
variant they were shown. Without the secret a student cannot compute another student's seed,
nor their own. The teacher's source notebook is checked against the ``PREVIEW_SEED`` variant,
which is no student's.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import re
import stat
import textwrap
from pathlib import Path

from .cells import NotebookFormatError, is_test, student_source

SECRET_BYTES = 32
PREVIEW_SEED = "teacher-preview"
_TEMPLATE_KEYS = {"id", "generator", "params", "prompt", "points"}
_BANK_ID = re.compile(r"^\d\d\.\d+$")


class VariantError(ValueError):
    """A course secret or roster that cannot be used for variants; the message is one line."""


# -- the course secret --

def create_secret(path) -> bytes:
    """Write a new random secret (hex, mode 0600); never overwrites an existing file."""
    secret = os.urandom(SECRET_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise VariantError(f"cannot create the course secret {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(secret.hex() + "\n")
    return secret


def read_secret(path, *, private: bool = True) -> bytes:
    """The secret in ``path``: one line of at least 64 hex digits (as ``create_secret`` writes).
    ``private``: refuse a file its group or other users may read (whoever reads it can compute
    every student's variant); the autograder's copy in Gradescope's container passes False, its
    folder being the grader's alone (``gradescope.run.lock_down``)."""
    from gpumemlab.recordings.bounded_read import read_regular_file

    if private:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = 0   # read_regular_file says why it cannot be read
        if stat.S_ISREG(mode) and mode & 0o077:
            raise VariantError(f"the course secret {path} may be read by other users (mode "
                               f"{mode & 0o777:04o}): run chmod 600 {path}")

    data = read_regular_file(str(path), 4096,
                             lambda why: VariantError(f"cannot read the course secret {why}"),
                             "course secret")
    text = data.decode("ascii", "replace").strip()
    if not re.fullmatch(r"[0-9a-fA-F]+", text) or len(text) % 2 or len(text) < 2 * SECRET_BYTES:
        raise VariantError(f"course secret {path} is not a secret gpumemlab wrote (one line of "
                           f"{2 * SECRET_BYTES} or more hex digits)")
    return bytes.fromhex(text)


def load_or_create(path) -> tuple:
    """-> (secret, created): read ``path``, or create it when it does not exist."""
    path = Path(path)
    if not os.path.lexists(path):
        return create_secret(path), True
    return read_secret(path), False


def student_seed(secret: bytes, assignment: str, student_id: str) -> str:
    """The seed of ``student_id``'s variants in ``assignment``: hex HMAC-SHA256 under the
    secret. Both names are length-prefixed, so no two (assignment, id) pairs share a message."""
    parts = [assignment.encode("utf-8", "surrogateescape"), os.fsencode(student_id)]
    message = b"gpumemlab-variant" + b"".join(len(p).to_bytes(4, "big") + p for p in parts)
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


# -- markup --

def _marked(cell):
    m = cell.get("metadata", {}).get("gpumemlab")
    return m.get("variant") if isinstance(m, dict) and "variant" in m else None


def _templates(nb) -> dict:
    from gpumemlab.quizkit.generators import GENERATORS

    meta = nb.metadata.get("gpumemlab", {})
    raw = meta.get("variants", []) if isinstance(meta, dict) else []
    if not isinstance(raw, list):
        raise NotebookFormatError("metadata.gpumemlab.variants must be a list of templates")
    out = {}
    for i, t in enumerate(raw):
        where = f"variant template {i}"
        if not isinstance(t, dict) or not isinstance(t.get("id"), str):
            raise NotebookFormatError(f"{where}: needs an 'id' (and 'generator', 'params')")
        tid = t["id"]
        where = f"variant template {tid!r}"
        if not re.fullmatch(r"[\w.-]{1,60}", tid) or _BANK_ID.match(tid):
            raise NotebookFormatError(f"{where}: an id of letters, digits, '_', '-', '.' that "
                                      f"is not a bank id like '01.7'")
        if tid in out:
            raise NotebookFormatError(f"{where}: defined twice")
        if set(t) - _TEMPLATE_KEYS:
            raise NotebookFormatError(f"{where}: unknown keys {sorted(set(t) - _TEMPLATE_KEYS)}")
        if t.get("generator") not in GENERATORS:
            raise NotebookFormatError(f"{where}: unknown generator {t.get('generator')!r} "
                                      f"(one of {', '.join(GENERATORS)})")
        params = t.get("params", {})
        steps = params.get("steps", 4) if isinstance(params, dict) else None
        if steps is None or set(params) - {"steps"} or isinstance(steps, bool) \
                or not isinstance(steps, int) or not 1 <= steps <= 8:
            raise NotebookFormatError(f"{where}: params may only hold 'steps', a whole number "
                                      f"from 1 to 8")
        if not isinstance(t.get("prompt", ""), str) or \
                not isinstance(t.get("points", 1), (int, float)) or t.get("points", 1) <= 0:
            raise NotebookFormatError(f"{where}: 'prompt' is text and 'points' a number > 0")
        out[tid] = dict(t)
    return out


def variant_questions(nb) -> dict:
    """{id: (Question, template dict or None)} of every variant cell of the source ``nb``;
    raises NotebookFormatError, naming the cell, for markup that cannot be used."""
    from .verdicts import question, split_test, template_question

    templates, found = _templates(nb), {}
    for i, cell in enumerate(nb.cells):
        qid = _marked(cell)
        if qid is None:
            continue
        where = f"cell {i}"
        if cell.get("cell_type") != "markdown" or not isinstance(qid, str):
            raise NotebookFormatError(f"{where}: a variant cell is a markdown cell whose "
                                      f"metadata.gpumemlab.variant is a question id")
        if qid in found:
            raise NotebookFormatError(f"{where}: variant {qid!r} is shown twice")
        if qid in templates:
            found[qid] = (template_question(templates[qid]), templates[qid])
            continue
        try:
            q = question(qid)
        except (KeyError, ValueError):
            raise NotebookFormatError(f"{where}: unknown variant question {qid!r} (a bank "
                                      f"predict question or a template in "
                                      f"metadata.gpumemlab.variants)") from None
        if q.kind != "predict":
            raise NotebookFormatError(f"{where}: {qid} is a {q.kind} question; only predict "
                                      f"questions have variants")
        found[qid] = (q, None)
    unshown = sorted(set(templates) - set(found))
    if unshown:
        raise NotebookFormatError(f"variant template {unshown[0]!r} is never shown: give a "
                                  f"markdown cell metadata.gpumemlab.variant = {unshown[0]!r}")
    for i, cell in enumerate(nb.cells):   # the student's own kernel cannot judge a variant
        if is_test(cell) and found:
            where = f"cell {i}"
            _, visible = split_test(student_source(cell, where), where)
            for j in visible:
                if j.question in found:
                    raise NotebookFormatError(
                        f"{where}: put assert_correct({j.question!r}, ...) between ### BEGIN "
                        f"HIDDEN TESTS and ### END HIDDEN TESTS: only the grader knows each "
                        f"student's variant")
    return found


def variant_templates(nb) -> dict:
    """{id: template dict or None (a bank question)}: what the grader adds to a judge request."""
    return {qid: t for qid, (_, t) in variant_questions(nb).items()}


def bank_judges(source_nb) -> list:
    """The judges of the source's test cells but those of variant templates (whose questions
    are the notebook's own), their questions checked against the banks: NotebookFormatError
    names an unknown one."""
    from .build import test_parts
    from .verdicts import check_questions

    shown = variant_templates(source_nb)
    judges = [j for _, js in test_parts(source_nb).values() for j in js
              if shown.get(j.question) is None]
    check_questions(judges, "source notebook")
    return judges


def seeds_for(source_nb, secret, assignment: str):
    """-> student id -> variant seed (None for a source without variants). A variant source
    without the course secret is a VariantError, raised before any grading."""
    questions = variant_questions(source_nb)
    if not questions:
        return lambda student_id: None
    if secret is None:
        raise VariantError(f"the source has per-student variant questions "
                           f"({', '.join(questions)}): grade with --secret FILE, the course "
                           f"secret gpumemlab assign used")
    return lambda student_id: student_seed(secret, assignment, student_id)


def judged_as(variants: dict, request: dict, student_id: str, variant_seed):
    """-> (request, seed) for the judge: a variant question is judged against the variant the
    student was shown (their seed; a template travels with the request, outside the sandbox);
    any other question keeps the student id as its seed, as before variants."""
    qid = request["question"]
    if qid not in variants:
        return request, student_id
    if variant_seed is None:
        raise ValueError(f"{qid} is a variant question: the grader needs the student's seed")
    template = variants[qid]
    return (request if template is None else dict(request, template=template)), variant_seed


# -- rendering --

def render(question, seed: str) -> str:
    """The markdown a student reads for their variant: prompt, ops, question and unit. Computes
    the expected answer too, so a variant the simulator cannot answer fails here, not at
    grading time."""
    from gpumemlab.quizkit.generators import make_variant

    variant = make_variant(question, seed)
    variant.answer()
    body, ask = variant.text().rsplit("\n", 1)
    return (f"**{question.id}** {question.prompt}\n\n```python\n{textwrap.dedent(body)}\n```\n\n"
            f"{ask}")


def expected(question, seed: str) -> str:
    """The expected answer of ``seed``'s variant, as text with its unit (for the teacher)."""
    from gpumemlab.quizkit.generators import make_variant

    variant = make_variant(question, seed)
    value = variant.answer()
    return f"{value:g} {variant.unit}" if isinstance(value, (int, float)) else str(value)


def personalise(student_nb, questions: dict, seed: str):
    """``student_nb`` (a student version) with every variant cell showing ``seed``'s variant."""
    import copy

    nb = copy.deepcopy(student_nb)
    for cell in nb.cells:
        qid = _marked(cell)
        if qid in questions:
            cell.source = render(questions[qid][0], seed)
    return nb
