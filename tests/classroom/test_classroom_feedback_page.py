"""The HTML feedback page: hostile student text stays text, no hidden test or solution shows,
a real browser renders it offline with nothing injected running, and the grader writes it."""
import html
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
TESTS = Path(__file__).resolve().parents[1]
import make_submissions as M  # noqa: E402

from gpumemlab.classroom import isolation  # noqa: E402
from gpumemlab.classroom.build import student_answers, student_version  # noqa: E402
from gpumemlab.classroom.feedback_page import feedback_page  # noqa: E402
from gpumemlab.classroom.grade import NOT_ISOLATED, StudentResult  # noqa: E402
from gpumemlab.classroom.reports import FEEDBACK_LIMIT  # noqa: E402

INJECT = ("</pre></td></tr></table><script>document.title='pwned';document.body.appendChild("
          "Object.assign(document.createElement('div'),{id:'injected'}))</script>")
HOSTILE = [INJECT, "<img src=x onerror=\"document.title='pwned'\">",
           "<a href=\"javascript:document.title='pwned'\">click</a>",
           "abc\u202edcba\u2066", "lone \ud800 surrogate", "\x1b[2J\rPASS",
           "<style>body{display:none}</style>", "<iframe src=\"https://example.org\">",
           "<meta http-equiv=\"refresh\" content=\"0;url=https://example.org\">"]
ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "main", "header", "p", "b",
                "span", "div", "section", "h1", "h2", "h3", "table", "thead", "tbody", "tr",
                "th", "td", "pre", "ul", "li", "footer"}


def hostile_result() -> StudentResult:
    bad = "\n".join(HOSTILE)
    tests = [
        {"name": "round-size-test", "score": 2, "max_score": 2, "status": "passed",
         "output": "", "inside_only": False},
        {"name": "reserved-test", "score": 0, "max_score": 1, "status": "failed",
         "output": "RuntimeError: boom\n" + bad, "inside_only": False},
        {"name": "frag-test", "score": 2, "max_score": 2, "status": "passed", "output": "",
         "inside_only": True}]
    r = StudentResult("eve" + INJECT, tests, 4.0, 5.0, 3.2, timestamp="2026-11-30 " + INJECT,
                      notes=["a note " + bad], answers={"reserved-answer": "x = 1  # " + bad,
                                                        "frag-answer" + INJECT: bad})
    return r


class Tags(HTMLParser):
    """Every element and attribute the page really holds, as a browser's tokenizer sees it."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v) for k, v in attrs]


def parse(page: str) -> Tags:
    p = Tags()
    p.feed(page)
    p.close()
    return p


def test_hostile_text_is_shown_as_text_and_makes_no_element():
    page = feedback_page(hostile_result(), "lab" + INJECT, limit=FEEDBACK_LIMIT)
    page.encode("utf-8")   # lone surrogates were escaped: the page can be written
    tags = parse(page)
    assert set(tags.tags) <= ALLOWED_TAGS, set(tags.tags) - ALLOWED_TAGS
    assert tags.tags.count("style") == 1 and tags.tags.count("title") == 1
    for tag, name, value in tags.attrs:
        assert not name.startswith("on") and name not in ("href", "src", "action"), (tag, name)
        assert "javascript:" not in (value or "") and "pwned" not in (value or "")
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "\u202e" not in page and "\u2066" not in page and "\x1b" not in page
    # shown, escaped: the student can read what they wrote
    assert html.escape(INJECT, quote=True) in page
    assert "\\u202e" in page and "\\ud800" in page and "\\x1b[2J" in page
    assert "&lt;a href=&quot;javascript:" in page


def test_page_loads_nothing_and_forbids_everything_else():
    r = hostile_result()
    r.student_id, r.timestamp, r.notes, r.answers = "alice", "", ["a note"], {"a": "x = 1"}
    r.tests[1]["output"] = "RuntimeError: boom"
    page = feedback_page(r, "lab", limit=FEEDBACK_LIMIT)
    csp = [v for t, k, v in parse(page).attrs if t == "meta" and k == "content"
           and "default-src" in (v or "")]
    assert csp and "default-src 'none'" in csp[0] and "script-src" not in csp[0]
    style = page[page.index("<style>"):page.index("</style>")]
    assert "url(" not in style and "@import" not in style
    assert "://" not in page and "<link" not in page   # no address anywhere: works offline


def test_score_tests_notes_and_answers_are_on_the_page():
    r = hostile_result()
    page = feedback_page(r, "lab", limit=FEEDBACK_LIMIT)
    assert "Score: <b>4</b> / 5" in page and "(80%)" in page and "2 of 3 tests passed" in page
    for name in ("round-size-test", "reserved-test", "frag-test"):
        assert f"<td class=\"name\">{name}</td>" in page
    assert page.count(">PASS</span>") == 2 and page.count(">FAIL</span>") == 1
    assert "RuntimeError: boom" in page and "(checked inside the submission)" in page
    assert "a note " in page and "x = 1  # " in page and "Your answers" in page
    assert "Late penalty" not in page and "NOT ISOLATED" not in page


def test_late_penalty_and_not_isolated_are_said():
    r = hostile_result()
    r.penalty, r.late_text = 1.5, "submitted 2 days late"   # fields the late policy adds
    r.isolated, r.notes = False, [NOT_ISOLATED, "the notebook hit the 120 s limit"]
    page = feedback_page(r, "lab", limit=FEEDBACK_LIMIT)
    assert "Score: <b>2.5</b> / 5" in page   # 4 from the tests, less 1.5
    assert "Late penalty: &minus;1.5 (score before it: 4)" in page
    assert "submitted 2 days late" in page
    assert page.count("NOT ISOLATED") == 1   # once, in the header, not again in the notes
    assert "hit the 120 s limit" in page


def test_page_size_is_capped_like_feedback_txt():
    # quotes are the worst case: 1 character becomes 6 once escaped
    huge = '"' * (FEEDBACK_LIMIT * 2)
    r = hostile_result()
    for t in r.tests:
        t["output"] = huge
    r.answers = {f"a{i}": huge for i in range(3)}
    r.notes = [huge]
    page = feedback_page(r, "lab", limit=FEEDBACK_LIMIT)
    assert FEEDBACK_LIMIT // 2 < len(page) < FEEDBACK_LIMIT + 12_000
    assert "more characters cut" in page and "[cut: this page is full]" in page
    assert page.endswith("</html>\n") and set(parse(page).tags) <= ALLOWED_TAGS


def fixture_notebooks():
    source = nbformat.read(str(M.SOURCE), as_version=4)
    return source, student_version(source)


def test_answers_are_the_students_own_never_the_source():
    source, student = fixture_notebooks()
    wrong = M.answered(student, M.WRONG)
    answers = student_answers(source, wrong)
    assert answers == M.WRONG   # only solution cells, in order, as handed in
    assert student_answers(source, None) == {}
    # a cell forged with a test's grade_id is not an answer
    forged = M.add_cell_after(wrong, "frag-answer", "print('forged')")
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in forged.cells]
    forged.cells[ids.index("frag-answer") + 1].metadata["nbgrader"] = {
        "grade_id": "frag-test", "grade": True, "points": 2}
    assert student_answers(source, forged) == M.WRONG
    for nb, own in ((wrong, "return 0.5"), (student, "NotImplementedError")):
        r = hostile_result()
        r.answers = student_answers(source, nb)
        page = html.unescape(feedback_page(r, "lab", limit=FEEDBACK_LIMIT))
        assert own in page
        for secret in ("assert_correct", "BEGIN HIDDEN", "BEGIN SOLUTION", "END SOLUTION",
                       "max(free) / sum(free)", "reserved_mib = 20", "-(-size // 512)",
                       "assert round_size(1) == 512", "assert callable(fragmentation)"):
            assert secret not in page, secret


CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_a_real_browser_shows_the_score_and_runs_nothing_injected(tmp_path):
    page = tmp_path / "feedback.html"
    page.write_text(feedback_page(hostile_result(), "lab", limit=FEEDBACK_LIMIT),
                    encoding="utf-8")
    run = subprocess.run(CHROMIUM + ["--dump-dom", f"file://{page}"], capture_output=True,
                         timeout=120)
    dom = run.stdout.decode(errors="replace")
    assert run.returncode == 0 and "</html>" in dom
    assert "Score: <b>4</b> / 5" in dom and "2 of 3 tests passed" in dom
    for name in ("round-size-test", "reserved-test", "frag-test"):
        assert name in dom
    assert dom.count('class="badge pass"') == 2 and dom.count('class="badge fail"') == 1
    # an injected script would have renamed the page and added an element; an injected
    # image or link would be an element of the DOM
    title = dom.split("<title>")[1].split("</title>")[0]
    assert title == "lab: feedback for eve" + html.escape(INJECT, quote=False)
    assert 'id="injected"' not in dom and "<script" not in dom and "<img" not in dom
    assert "<iframe" not in dom and "<a " not in dom
    assert "&lt;script&gt;document.title='pwned'" in dom   # shown as text instead
    shot = tmp_path / "shot.png"
    run = subprocess.run(CHROMIUM + ["--window-size=1000,1100", f"--screenshot={shot}",
                                     f"file://{page}"], capture_output=True, timeout=120)
    assert run.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 10_000   # a rendered page, not a blank one


@pytest.mark.skipif(isolation.unavailable_reason() is not None,
                    reason="no OS sandbox here; .ci/run installs bubblewrap")
def test_grade_writes_the_page_with_the_students_own_answers(tmp_path):
    from gpumemlab.cli import main

    _, student = fixture_notebooks()
    subs = tmp_path / "submitted"
    teacher = str(M.SOURCE.parent)   # a folder of the grader's: shown as <teacher>
    script = INJECT.replace("'", '"')
    eve = {**M.RIGHT, "reserved-answer": f"raise RuntimeError('{script}')\n"
           f"# \u202e {teacher}/lab.ipynb\n# " + "y" * 30_000}
    for sid, answers in (("wrong", M.WRONG), ("eve", eve)):
        (subs / sid).mkdir(parents=True)
        nbformat.write(M.answered(student, answers), str(subs / sid / "lab.ipynb"))
    out = tmp_path / "out" / "grades.csv"
    assert main(["grade", str(subs), "--source", str(M.SOURCE), "--out", str(out),
                 "--cell-timeout", "10", "--timeout", "120", "--workers", "2"]) == 0
    wrong = (tmp_path / "out" / "feedback" / "wrong" / "feedback.html").read_text()
    assert "Score: <b>0</b> / 5" in wrong and wrong.count(">FAIL</span>") == 3
    assert "def fragmentation(snapshot):\n    return 0.5" in wrong   # the student's own text
    for secret in ("assert_correct", "BEGIN HIDDEN", "max(free) / sum(free)",
                   "reserved_mib = 20", "assert round_size(1) == 512"):
        assert secret not in html.unescape(wrong), secret
    eve = (tmp_path / "out" / "feedback" / "eve" / "feedback.html").read_text()
    assert "Score: <b>4</b> / 5" in eve and eve.count(">FAIL</span>") == 1
    # the failed test's output: the answer cell raised, so the test found no reserved_mib
    assert "NameError: name &#x27;reserved_mib&#x27; is not defined" in eve
    assert "<script" not in eve and html.escape(script) in eve
    # the student's answer: scrubbed of the grader's paths, cleaned, cut at 20,000 characters
    assert "# \\u202e &lt;teacher&gt;/lab.ipynb" in eve and teacher not in eve
    assert "\u202e" not in eve and "y" * 19_000 in eve and "y" * 20_001 not in eve
    assert "more characters cut]" in eve
    assert set(parse(eve).tags) <= ALLOWED_TAGS
