"""Certificates: Ed25519 keys, issue + verify, tampering (signed JSON and visible HTML), wrong key,
unsigned self-study records, hostile files, classroom issuing from grades.csv, the CLI."""
import csv
import json
import stat
import struct
import subprocess
import sys

import pytest

from gpumemlab.cli import main as cli
from gpumemlab.quizkit.bank import all_banks
from gpumemlab.certificates.record import (Certificate, CertificateError, compute_id,
                                           completion_record, generate_keypair,
                                           issue_certificate, load_certificate,
                                           verify_certificate)
from gpumemlab.certificates.issue import certificate_stem, issue_from_grades
from gpumemlab.quizkit.core import Quiz


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    priv, pub = generate_keypair(d)
    other_priv, other_pub = generate_keypair(d / "other")
    return {"priv": priv, "pub": pub, "other_priv": other_priv, "other_pub": other_pub}


@pytest.fixture(scope="module")
def issued(keys, tmp_path_factory):
    cert = issue_certificate("Ada Lovelace", "GPU Memory 101", 45, 50, "2025-05-01", keys["priv"],
                             issuer="Prof. Hopper")
    paths = cert.write(tmp_path_factory.mktemp("cert"), "ada")
    return cert, paths


def edited(tmp_path, path, old, new, count=1):
    text = path.read_text(encoding="utf-8")
    assert text.count(old) >= count, (old, text)
    out = tmp_path / path.name
    out.write_text(text.replace(old, new), encoding="utf-8")
    return out


def test_keygen_writes_private_key_0600_and_refuses_to_overwrite(keys):
    assert stat.S_IMODE(keys["priv"].stat().st_mode) == 0o600
    assert b"BEGIN PRIVATE KEY" in keys["priv"].read_bytes()
    assert b"BEGIN PUBLIC KEY" in keys["pub"].read_bytes()
    with pytest.raises(CertificateError, match="already exists"):
        generate_keypair(keys["priv"].parent)


def test_round_trip_html_json_png(issued, keys):
    cert, paths = issued
    assert set(paths) == {"html", "json", "png"}
    for kind in ("html", "json", "png"):
        result = verify_certificate(paths[kind], keys["pub"])
        assert result.valid, (kind, result.reason)
        assert result.certificate.payload == cert.payload
    line = verify_certificate(paths["html"], keys["pub"]).line()
    assert line.startswith("valid: Ada Lovelace, GPU Memory 101, 45/50 (90%), 2025-05-01, ID ")
    assert "signed by Prof. Hopper" in line
    assert verify_certificate(cert, keys["pub"]).valid
    assert verify_certificate(cert.to_dict(), keys["pub"]).valid


def test_id_is_short_typable_and_bound_to_contents(issued, keys):
    cert, _ = issued
    assert len(cert.id) == 19 and cert.id.count("-") == 3
    assert set(cert.id.replace("-", "")) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
    assert compute_id(cert.payload) == cert.id
    assert compute_id({**cert.payload, "score": 44}) != cert.id
    assert cert.id in issued[1]["html"].read_text()
    again = issue_certificate("Ada Lovelace", "GPU Memory 101", 45, 50, "2025-05-01",
                              keys["priv"], issuer="Prof. Hopper")
    assert again.id == cert.id                      # deterministic: re-issuing gives the same ID


@pytest.mark.parametrize("old,new", [
    ('"name": "Ada Lovelace"', '"name": "Ada Lovelaec"'),
    ('"score": 45', '"score": 50'),
    ('"percent": 90.0', '"percent": 99.0'),
    ('"date": "2025-05-01"', '"date": "2025-05-02"'),
    ('"course": "GPU Memory 101"', '"course": "GPU Memory 102"'),
    ('"issuer": "Prof. Hopper"', '"issuer": "Prof. Turing"'),
])
def test_tampering_the_signed_json_fails(issued, keys, tmp_path, old, new):
    _, paths = issued
    for kind in ("html", "json"):
        result = verify_certificate(edited(tmp_path, paths[kind], old, new), keys["pub"])
        assert not result.valid and "signature" in result.reason, (kind, result.reason)


def test_tampering_the_id_or_signature_fails(issued, keys, tmp_path):
    cert, paths = issued
    bad_id = "AAAA-AAAA-AAAA-AAAA"
    result = verify_certificate(edited(tmp_path, paths["json"], cert.id, bad_id), keys["pub"])
    assert not result.valid
    sig = cert.signature
    flipped = sig[:10] + ("A" if sig[10] != "A" else "B") + sig[11:]
    result = verify_certificate(edited(tmp_path, paths["html"], sig, flipped), keys["pub"])
    assert not result.valid and "signature" in result.reason


@pytest.mark.parametrize("old,new,field", [
    (">Ada Lovelace<", ">Ada Lovelaec<", "name"),
    (">45 / 50 (90%)<", ">50 / 50 (100%)<", "score"),
    (">1 May 2025<", ">1 May 2026<", "date"),
    (">GPU Memory 101<", ">GPU Memory 102<", "course"),
    ('data-field="id">', 'data-field="id">X', "id"),
    ("This certifies that", "This certifies that (with distinction)", None),
])
def test_tampering_only_the_visible_html_fails(issued, keys, tmp_path, old, new, field):
    _, paths = issued
    result = verify_certificate(edited(tmp_path, paths["html"], old, new), keys["pub"])
    assert not result.valid
    assert (f"shows {field}" in result.reason) if field else ("edited" in result.reason)


def test_windows_line_endings_still_verify(issued, keys, tmp_path):
    _, paths = issued
    out = tmp_path / "crlf.html"
    out.write_bytes(paths["html"].read_bytes().replace(b"\n", b"\r\n"))
    assert verify_certificate(out, keys["pub"]).valid


def test_wrong_key_fails_even_with_forged_fingerprint(issued, keys, tmp_path):
    cert, paths = issued
    result = verify_certificate(paths["html"], keys["other_pub"])
    assert not result.valid and "another key" in result.reason
    from gpumemlab.certificates.record import key_fingerprint

    forged = Certificate({**cert.payload, "key_fingerprint": key_fingerprint(keys["other_pub"])},
                         cert.signature)
    assert not verify_certificate(forged, keys["other_pub"]).valid
    # signed by the other teacher: valid for their key only
    theirs = issue_certificate("Ada Lovelace", "GPU Memory 101", 45, 50, "2025-05-01",
                               keys["other_priv"])
    assert verify_certificate(theirs, keys["other_pub"]).valid
    assert not verify_certificate(theirs, keys["pub"]).valid


def test_unsigned_record_is_reported_unsigned(keys, tmp_path):
    rec = completion_record("Bob", "self-study", 50, 56, "2025-05-02")
    paths = rec.write(tmp_path, "bob", png=False)
    text = paths["html"].read_text()
    assert "not signed, not verifiable" in text
    result = verify_certificate(paths["html"], keys["pub"])
    assert not result.valid and "unsigned" in result.reason
    # turning it into a "signed" one by editing fails too
    forged = json.loads(paths["json"].read_text())
    forged["payload"]["kind"] = "signed"
    forged["signature"] = "AAAA"
    assert not verify_certificate(forged, keys["pub"]).valid


@pytest.mark.parametrize("content", [
    b"", b"\x00\xff\xfe garbage", b"<html>no certificate here</html>", b"{not json",
    b'{"format": "gpumemlab-certificate/1", "payload": {"name": 1}}',
    b"<script id=\"gml-certificate\">" + b"[" * 100000 + b"</script>",
    b"<script id=\"gml-certificate\">{}</script><script id=\"gml-certificate\">{}</script>",
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\x10IHDR",
])
def test_malformed_files_give_one_line_error_status_2(keys, tmp_path, capsys, content):
    bad = tmp_path / "bad.html"
    bad.write_bytes(content)
    with pytest.raises(CertificateError):
        load_certificate(bad)
    assert cli(["certificate", "verify", str(bad), "--key", str(keys["pub"])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err and "Traceback" not in err


def test_cli_verify_valid_invalid_and_bad_key(issued, keys, tmp_path, capsys):
    _, paths = issued
    assert cli(["certificate", "verify", str(paths["html"]), "--key", str(keys["pub"])]) == 0
    assert capsys.readouterr().out.startswith("valid: Ada Lovelace")
    assert cli(["certificate", "verify", str(paths["html"]),
                "--key", str(keys["other_pub"])]) == 1
    out = capsys.readouterr().out
    assert out.startswith("INVALID: ") and out.count("\n") == 1
    assert cli(["certificate", "verify", str(paths["html"]), "--key", str(paths["json"])]) == 2
    assert "not a PEM public key" in capsys.readouterr().err


def test_png_is_a_real_certificate_sized_png(issued):
    data = issued[1]["png"].read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert 800 <= width <= 3000 and 600 <= height <= 2500 and width > height
    assert len(data) > 20_000


def write_grades(path, rows=None):
    rows = rows or [
        ("lab1", "alice", "Liddell", "Alice", 4, 5), ("lab2", "alice", "Liddell", "Alice", 5, 5),
        ("lab1", "bob", "", "", 3, 5), ("lab2", "bob", "", "", 4, 5),
        ("lab1", "carol", "O'Neil", "Carol", 4, 5), ("lab2", "carol", "O'Neil", "Carol", 4, 5)]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name",
                    "email", "raw_score", "late_submission_penalty", "score", "max_score"])
        for a, sid, last, first, score, top in rows:
            w.writerow([a, "", "", sid, last, first, "", score, 0, score, top])


def test_classroom_issue_respects_threshold(keys, tmp_path):
    grades = tmp_path / "grades.csv"
    write_grades(grades)
    out = tmp_path / "certs"
    rows = issue_from_grades(grades, keys["priv"], "GPU Memory 101", threshold=0.8, out=out,
                             png=False, date="2025-06-01")
    issued = {r["student_id"]: r for r in rows}
    # course totals: alice 9/10, bob 7/10, carol 8/10 (exactly at the threshold)
    assert [r["issued"] for r in rows] == ["yes", "no", "yes"]
    assert not list(out.glob("bob*"))
    for sid, name in (("alice", "Alice Liddell"), ("carol", "Carol O'Neil")):
        assert issued[sid]["file"] == certificate_stem(sid) + ".html"
        result = verify_certificate(out / issued[sid]["file"], keys["pub"])
        assert result.valid and result.certificate.payload["name"] == name
        assert result.certificate.id == issued[sid]["id"]
    index = list(csv.DictReader(open(out / "certificates.csv")))
    assert [r["issued"] for r in index] == ["yes", "no", "yes"]
    one = issue_from_grades(grades, keys["priv"], "X", threshold="90%", out=tmp_path / "o",
                            png=False, assignment="lab2")
    assert [r["issued"] for r in one] == ["yes", "no", "no"]


def test_cli_issue_writes_progress_to_stderr(keys, tmp_path):
    grades = tmp_path / "grades.csv"
    write_grades(grades)
    cmd = [sys.executable, "-m", "gpumemlab.cli", "certificate", "issue", "--grades", str(grades),
           "--key", str(keys["priv"]), "--course", "GPU Memory 101", "--threshold", "0.85",
           "--out", str(tmp_path / "c"), "--no-png"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0].startswith("[1/3] alice: 9/10 (90%) certificate ")
    assert "below the 85% threshold" in proc.stderr
    assert "issued 1 certificate for 3 students" in proc.stdout
    bad = subprocess.run(cmd[:-3] + ["--threshold", "2", "--out", str(tmp_path / "d")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_self_study_record_needs_threshold_and_is_unsigned(keys, tmp_path, capsys):
    questions = [q for b in all_banks() for q in b.questions]
    total = sum(q.points for q in questions)
    progress = tmp_path / "progress.json"

    def solve(qs):
        progress.write_text(json.dumps({"version": 1, "seed": "s", "questions": {
            q.id: {"attempts": 1, "correct": True, "points": q.points, "max_points": q.points}
            for q in qs}}))

    quiz = Quiz(progress)
    solve(questions[: len(questions) // 2])
    assert quiz.certificate("Grace", out=tmp_path / "out") is None
    msg = capsys.readouterr().out
    assert msg.startswith("Not yet") and "more to go" in msg
    assert not (tmp_path / "out").exists()

    solve(questions)
    paths = quiz.certificate("Grace", out=tmp_path / "out", threshold=0.8)
    assert "NOT signed" in capsys.readouterr().out
    rec = load_certificate(paths["json"])[0]
    assert rec.payload["kind"] == "self-study" and rec.signature is None
    assert rec.payload["score"] == total and rec.payload["name"] == "Grace"
    assert "not signed, not verifiable" in paths["html"].read_text()
    assert paths["png"].stat().st_size > 20_000
    assert cli(["certificate", "verify", str(paths["html"]), "--key", str(keys["pub"])]) == 1
    assert "unsigned" in capsys.readouterr().out


def test_a_page_of_unclosed_tags_is_read_in_linear_work(issued, keys, tmp_path):
    # 18,000 unclosed tags in a 75 KB page took 2 s (each piece of text looked up its field
    # through every open tag); counted in lines run, not timed (bench_hostile_inputs.py times it)
    from gpumemlab.certificates import render

    _, paths = issued
    calls = {}

    def line(frame, event, arg):
        calls[0] = calls.get(0, 0) + 1
        return line

    def count(frame, event, arg):
        return line if frame.f_code.co_filename == render.__file__ else None

    def verify_with(n):
        page = paths["html"].read_text(encoding="utf-8")
        bad = tmp_path / f"unclosed{n}.html"
        bad.write_text(page.replace("</body>", "<a>x" * n + "</body>"), encoding="utf-8")
        calls.clear()
        sys.settrace(count)
        try:
            result = verify_certificate(bad, keys["pub"])
        finally:
            sys.settrace(None)
        assert not result.valid and "edited" in result.reason
        return calls.get(0, 0)

    small, big = verify_with(500), verify_with(2000)
    assert big < 6 * small     # linear: 4x the tags, about 4x the calls (it was 16x)


def test_ids_that_read_alike_never_share_a_certificate_file(keys, tmp_path, monkeypatch):
    # "ann lee" and "ann_lee" were both written to ann_lee.html (the second overwrote the
    # first while certificates.csv said both were issued); "Bob" and "bob" are one file on a
    # case-insensitive file system
    grades = tmp_path / "grades.csv"
    write_grades(grades, [("lab1", sid, "", "", 9, 10)
                          for sid in ("ann lee", "ann_lee", "Bob", "bob", "ann.lee")])
    out = tmp_path / "certs"
    rows = issue_from_grades(grades, keys["priv"], "GPU Memory 101", out=out, png=False)
    files = [r["file"] for r in rows]
    assert len({f.casefold() for f in files}) == 5 and all(r["issued"] == "yes" for r in rows)
    assert sorted(p.name for p in out.glob("*.html")) == sorted(files)
    for r in csv.DictReader(open(out / "certificates.csv", encoding="utf-8")):
        result = verify_certificate(out / r["file"], keys["pub"])
        assert result.valid and result.certificate.id == r["id"]
    # a clash of the short hash too is refused before anything is written, never overwritten
    import gpumemlab.certificates.issue as issue
    monkeypatch.setattr(issue, "certificate_stem", lambda sid: sid.lower().replace(" ", "_"))
    with pytest.raises(CertificateError, match="same certificate file name"):
        issue_from_grades(grades, keys["priv"], "X", out=tmp_path / "clash", png=False)
    assert not (tmp_path / "clash").exists()
