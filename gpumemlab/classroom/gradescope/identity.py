"""Per-student variants on Gradescope: who submitted, and so which variant they were shown.

``gpumemlab assign --roster --secret`` gave each roster id its own variant (seed
``variants.student_seed(secret, assignment, id)``). On Gradescope the autograder learns who
submitted from ``users`` in ``submission_metadata.json``, read before the submission's code runs;
the teacher says which field of it is the roster id (``--student-key``: ``email``, ``sid`` or
``id``). The zip carries the course secret and the roster's ids, so a student the roster does not
list is told so instead of being judged against a variant nobody showed them. A submission that
cannot be tied to exactly one roster id (no readable metadata, a user without that field, a
group of several students) is not graded at all: score 0 and the reason, never a guess.
The seed goes to the judges, outside the sandbox; neither it nor the secret is written anywhere.
"""
from __future__ import annotations

from gpumemlab.cleantext import clean_text

from .results import NOT_YOUR_FAULT as TELL


class NotIdentified(Exception):
    """The variant this submission must be judged against is unknown; the message (one line,
    for the student and the teacher's log) says why."""


def roster_ids(roster: dict, key: str) -> list:
    """The ids of ``roster`` (``reports.read_roster``) the zip carries; a VariantError when they
    cannot be Gradescope's ``key`` (emails without '@', user ids that are not numbers)."""
    from ..variants import VariantError

    if not roster:
        raise VariantError("the roster lists no students")
    wrong = {"email": lambda i: "@" not in i, "id": lambda i: not (i.isascii() and i.isdigit())}
    bad = next((i for i in roster if wrong.get(key, lambda i: False)(i)), None)
    if bad is not None:
        what = "an email address" if key == "email" else "a Gradescope user id (a number)"
        raise VariantError(f"--student-key {key}: the roster id {clean_text(bad, limit=60)!r} "
                           f"is not {what}; give the key of the Gradescope field that holds "
                           f"the ids gpumemlab assign --roster used")
    return list(roster)


_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _ascii_lower(text: str) -> str:
    return text.translate(_LOWER)


def _match(value: str, key: str, roster) -> str:
    if value in roster:
        return value
    if key == "email":   # Gradescope may spell an address in another case than the roster:
        # ASCII letters only (casefold would make "ſam@" match "sam@" and "straße@" "strasse@")
        found = [i for i in roster if _ascii_lower(i) == _ascii_lower(value)]
        if len(found) == 1:
            return found[0]
    return None


def student_id(metadata_path, variants: dict) -> str:
    """The roster id of the one student who made this submission; NotIdentified otherwise."""
    from .metadata import MetadataError, read_users

    key, roster = variants["student_key"], variants["roster"]
    why = ("each student of this assignment has their own numbers, and the autograder cannot "
           "tell which numbers you were given")
    try:
        users = read_users(metadata_path)
    except MetadataError as exc:
        raise NotIdentified(f"Not graded: {why}: {exc}. {TELL}") from None
    if len(users) > 1:
        raise NotIdentified(f"Not graded: this is a group submission ({len(users)} students), "
                            f"but each student of this assignment has their own numbers, so "
                            f"no one notebook answers them all. Submit on your own, or ask "
                            f"your teacher.")
    value = users[0].get(key)
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value) == "":
        raise NotIdentified(f"Not graded: {why}: Gradescope gave no {key} for you. {TELL}")
    found = _match(str(value), key, roster)
    if found is None:
        raise NotIdentified(f"Not graded: {why}: your {key} on Gradescope, "
                            f"{clean_text(str(value), limit=120, keep_newlines=False)!r}, is "
                            f"not on the roster the numbers were made for. {TELL}")
    return found


def variant_seed(secret_path, metadata_path, config) -> str:
    """The seed of the submitting student's variants (None: the source has none)."""
    from ..variants import VariantError, read_secret, student_seed

    if config.get("variants") is None:
        return None
    try:
        secret = read_secret(secret_path, private=False)   # in the locked container
    except VariantError as exc:
        raise NotIdentified(f"The autograder is misconfigured: {exc}. {TELL}") from None
    return student_seed(secret, config["assignment"], student_id(metadata_path,
                                                                 config["variants"]))
