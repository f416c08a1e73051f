"""Issuing certificates: one signed certificate per passing student of a grades CSV, and the
unsigned self-study completion record behind ``gml.quiz.certificate(name)``.

The grades CSV is nbgrader's export (what ``gpumemlab grade`` writes): ``student_id``,
``first_name``, ``last_name``, ``score``, ``max_score`` (and ``assignment``). A student with rows
for several assignments is judged on the course total: sum of scores over sum of maxima.
"""
from __future__ import annotations

import csv
import hashlib
import math
import re
from pathlib import Path

from .record import completion_record, issue_certificate, load_private_key
from .keys import CertificateError

SELF_STUDY_COURSE = "gpumemlab: GPU memory management (self-study)"
INDEX_COLUMNS = ["student_id", "name", "score", "max_score", "percent", "issued", "id", "file"]


def _stem(text: str) -> str:
    return re.sub(r"[^\w.@+-]", "_", text).strip("._")[:80] or "certificate"


def certificate_stem(student_id: str) -> str:
    """The file name (without suffix) of a student's certificate: the id made safe for a file
    name, then 10 hex digits of the SHA-256 of the exact id. Two ids that read alike once made
    safe ("ann lee", "ann_lee") or differ only in case ("Bob", "bob", one file on a
    case-insensitive file system) still get different names, and a name already on disk was
    written for this same id (re-issuing replaces that student's own certificate)."""
    digest = hashlib.sha256(student_id.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{_stem(student_id)[:60]}-{digest}"


def _check_unique_stems(students) -> None:
    """Refuse, before anything is written, two students whose files would be one (the 40-bit
    hash makes this all but impossible; the check makes it certain, case-insensitively)."""
    seen = {}
    for s in students:
        key = certificate_stem(s["student_id"]).casefold()
        if key in seen:
            raise CertificateError(f"students {seen[key]!r} and {s['student_id']!r} would get "
                                   f"the same certificate file name; nothing was issued")
        seen[key] = s["student_id"]


def check_threshold(threshold) -> float:
    try:
        t = float(str(threshold).rstrip("%")) / (100 if str(threshold).endswith("%") else 1)
    except ValueError:
        raise CertificateError(f"threshold must be a fraction like 0.8 (or 80%), got "
                               f"{threshold!r}") from None
    if not 0 < t <= 1:
        raise CertificateError(f"threshold must lie in (0, 1], got {threshold!r}")
    return t


def read_grades(path, assignment=None) -> list:
    """[{student_id, name, score, max_score}] totalled per student, in first-seen order."""
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            missing = {"student_id", "score", "max_score"} - set(reader.fieldnames or [])
            if missing:
                raise CertificateError(f"{path}: not a grades CSV (missing columns: "
                                       f"{', '.join(sorted(missing))})")
            totals = {}
            for line, row in enumerate(reader, start=2):
                if assignment and row.get("assignment") != assignment:
                    continue
                sid = (row.get("student_id") or "").strip()
                if not sid:
                    raise CertificateError(f"{path}:{line}: empty student_id")
                try:
                    score, top = float(row["score"] or 0), float(row["max_score"])
                except (TypeError, ValueError):
                    raise CertificateError(f"{path}:{line}: score and max_score must be "
                                           f"numbers") from None
                if not (math.isfinite(score) and math.isfinite(top)) or top < 0:
                    raise CertificateError(f"{path}:{line}: bad score {score}/{top}")
                name = " ".join(f"{row.get('first_name') or ''} {row.get('last_name') or ''}"
                                .split()) or sid
                t = totals.setdefault(sid, {"student_id": sid, "name": name, "score": 0.0,
                                            "max_score": 0.0})
                t["score"] += score
                t["max_score"] += top
    except OSError as exc:
        raise CertificateError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise CertificateError(f"{path}: not a readable CSV file ({exc})") from None
    return list(totals.values())


def issue_from_grades(grades, private_key, course, threshold=0.8, out="certificates",
                      issuer="", date=None, assignment=None, png=True, progress=None) -> list:
    """Sign a certificate for every student whose total reaches ``threshold``; write
    ``OUT/<student_id>-<hash>.html|.png|.json`` (``certificate_stem``) and
    ``OUT/certificates.csv`` (every student, issued or not, with the IDs and file names). One
    line per student goes to ``progress`` (a text stream)."""
    threshold = check_threshold(threshold)
    key = load_private_key(private_key)
    students = read_grades(grades, assignment)
    _check_unique_stems(students)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, s in enumerate(students, start=1):
        frac = s["score"] / s["max_score"] if s["max_score"] > 0 else 0.0
        row = {**s, "percent": round(100 * frac, 1), "issued": "no", "id": "", "file": ""}
        if s["max_score"] > 0 and frac + 1e-9 >= threshold and s["score"] <= s["max_score"]:
            cert = issue_certificate(s["name"], course, s["score"], s["max_score"], date, key,
                                     issuer=issuer)
            paths = cert.write(out, certificate_stem(s["student_id"]), png=png)
            row.update(issued="yes", id=cert.id, file=paths["html"].name)
            note = f"certificate {cert.id}"
        else:
            note = f"below the {100 * threshold:g}% threshold, no certificate"
        rows.append(row)
        if progress is not None:
            print(f"[{i}/{len(students)}] {s['student_id']}: {s['score']:g}/{s['max_score']:g} "
                  f"({row['percent']:g}%) {note}", file=progress, flush=True)
    with open(out / "certificates.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, INDEX_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "score": f"{row['score']:g}",
                             "max_score": f"{row['max_score']:g}"})
    return rows


def self_study_record(quiz, name, threshold=0.8, out=".", course=SELF_STUDY_COURSE,
                      date=None, png=True):
    """Write an unsigned completion record if the learner's quiz points reach ``threshold`` of
    every question's points; print what happened. Returns the paths written, or None."""
    threshold = check_threshold(threshold)
    got, total = quiz.score()
    if total <= 0:
        print("No questions found: nothing to record.")
        return None
    need = threshold * total
    if got + 1e-9 < need:
        print(f"Not yet: you have {got:g} of {total:g} points ({100 * got / total:.0f}%). "
              f"A completion record needs {100 * threshold:g}% ({math.ceil(need - 1e-9):g} "
              f"points): {math.ceil(need - got - 1e-9):g} more to go. "
              f"See gml.quiz.summary().")
        return None
    record = completion_record(name, course, got, total, date)
    paths = record.write(out, "gpumemlab_completion_" + _stem(record.payload["name"]), png=png)
    print(f"Self-study completion record for {record.payload['name']}: {got:g}/{total:g} "
          f"points, record ID {record.id}.\nWritten to {paths['html']}"
          + (f" and {paths['png']}" if "png" in paths else "") +
          ".\nIt is NOT signed and cannot be verified: it shows your own progress file. "
          "For a verifiable certificate, take the course with a teacher.")
    return paths
