"""One student's feedback as a self-contained HTML page (nbgrader's ``generate_feedback``).

The page shows the assignment, the student, the total score (and a late penalty when one was
taken), every test with its score, PASS or FAIL and its output (the error the student's code
raised, or the judge's message), the notes (timeouts, "NOT ISOLATED"), and the student's own
answers as handed in. It shows nothing of the source beyond the test names: no hidden test, no
solution, no test code; the answers are the student's text, not the rebuilt notebook's.

Why it is safe to open, whatever a student wrote:

* every text goes through ``cleantext.clean_text`` (lone surrogates, control characters and bidi
  overrides made visible) and then ``html.escape(quote=True)``, so no text becomes markup;
* the page loads nothing and runs nothing: inline CSS only, no script, no link, no image, and a
  Content-Security-Policy that forbids everything else, so it reads the same offline;
* the student-derived texts share ``limit`` characters (``reports`` passes ``FEEDBACK_LIMIT``,
  the cap of ``feedback.txt``), counted as written, escapes included; what does not fit is cut
  with a note, so a page is never much larger than that.
"""
from __future__ import annotations

import html

from gpumemlab.cleantext import clean_text
from .grade import INSIDE_ONLY, NOT_ISOLATED
from .intake import display_id

CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
       "form-action 'none'")
_MARK = 80   # room kept for the note that says a text was cut

STYLE = """
body{margin:0;background:#f3f4f6;color:#1f2937;font:15px/1.5 system-ui,-apple-system,
"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:900px;margin:24px auto;padding:0 16px}
header,section{background:#fff;border:1px solid #e5e7eb;border-radius:10px;padding:18px 22px;
margin-bottom:18px}
.assignment{margin:0;color:#6b7280;font-size:13px}
h1{margin:4px 0 10px;font-size:22px;overflow-wrap:anywhere}
h2{margin:0 0 12px;font-size:17px}
h3{margin:14px 0 6px;font-size:14px;font-family:ui-monospace,"DejaVu Sans Mono",monospace;
overflow-wrap:anywhere}
.total{margin:0;font-size:18px}.total b{font-size:40px;line-height:1}.pct{color:#6b7280}
.bar{height:10px;background:#e5e7eb;border-radius:5px;margin:10px 0 4px;overflow:hidden}
.bar span{display:block;height:100%;background:#16a34a}
.penalty{margin:8px 0 0;color:#92400e}.when{margin:6px 0 0;color:#6b7280;font-size:13px}
.warn{margin:10px 0 0;padding:8px 12px;border-radius:6px;background:#fef3c7;color:#92400e;
font-weight:600}
table{width:100%;border-collapse:collapse}
th{text-align:left;font-size:12px;color:#6b7280;text-transform:uppercase;letter-spacing:.05em;
border-bottom:2px solid #e5e7eb;padding:6px 8px}
td{padding:8px;border-top:1px solid #e5e7eb;vertical-align:top}
td.name{font-family:ui-monospace,"DejaVu Sans Mono",monospace;overflow-wrap:anywhere}
td.pts{white-space:nowrap;width:90px}td.res{width:70px}
tr.pass td.name{border-left:4px solid #16a34a}tr.fail td.name{border-left:4px solid #dc2626}
.badge{display:inline-block;padding:1px 9px;border-radius:9px;font-size:12px;font-weight:700;
color:#fff}.badge.pass{background:#16a34a}.badge.fail{background:#dc2626}
tr.output td{border-top:none;padding-top:0}
.where{margin:2px 0;color:#6b7280;font-size:12px}
pre{margin:0;padding:10px 12px;border-radius:6px;background:#111827;color:#f9fafb;
font:13px/1.45 ui-monospace,"DejaVu Sans Mono",monospace;white-space:pre-wrap;
overflow-wrap:anywhere;max-height:420px;overflow:auto}
tr.fail pre{border-left:4px solid #dc2626}
pre.answer{background:#f9fafb;color:#111827;border:1px solid #e5e7eb}
ul{margin:0;padding-left:20px}li{margin:4px 0;overflow-wrap:anywhere}
.none{color:#6b7280;font-style:italic}
footer{color:#6b7280;font-size:12px;text-align:center;margin:0 0 24px}
"""


class _Texts:
    """Clean, escape and count the student-derived texts of one page (see the module)."""

    def __init__(self, limit):
        self.left = limit

    def __call__(self, value, *, limit=None, one_line=False) -> str:
        cleaned = clean_text(value, limit=limit, keep_newlines=not one_line)
        out = html.escape(cleaned, quote=True)
        room = self.left - _MARK
        if len(out) > self.left and room <= 0:
            out = "[cut: this page is full]"
        elif len(out) > self.left:
            # the share of the text that fits, else the worst case (6 characters an escape)
            out = html.escape(clean_text(cleaned, limit=len(cleaned) * room // len(out)),
                              quote=True)
            if len(out) > self.left:
                out = html.escape(clean_text(cleaned, limit=room // 6), quote=True)
        self.left = max(0, self.left - len(out))
        return out


def _num(x) -> str:
    return html.escape(f"{x:g}")


def _header(result, assignment, text) -> list:
    tests = result.tests
    passed = sum(t["status"] == "passed" for t in tests)
    raw, final = result.score, result.final_score
    penalty, late = result.penalty, result.late_text
    top = result.max_score
    pct = f" <span class=\"pct\">({final / top:.0%})</span>" if top > 0 else ""
    width = f"{max(0.0, min(1.0, final / top)) * 100:.1f}" if top > 0 else "0"
    out = ["<header>",
           f"<p class=\"assignment\">Assignment: {text(assignment, limit=200, one_line=True)}"
           "</p>",
           f"<h1>Feedback for {text(display_id(result.student_id), limit=200, one_line=True)}"
           "</h1>",
           f"<p class=\"total\">Score: <b>{_num(final)}</b> / {_num(top)}{pct}</p>",
           f"<div class=\"bar\"><span style=\"width:{width}%\"></span></div>",
           f"<p class=\"when\">{passed} of {len(tests)} test{'s' * (len(tests) != 1)} "
           f"passed</p>"]
    if penalty > 0 or late:
        line = f"Late penalty: &minus;{_num(penalty)} (score before it: {_num(raw)})"
        if late:
            line += f" &middot; {text(late, limit=300, one_line=True)}"
        out.append(f"<p class=\"penalty\">{line}</p>")
    if result.timestamp:
        out.append(f"<p class=\"when\">Submitted: "
                   f"{text(result.timestamp, limit=100, one_line=True)}</p>")
    if not getattr(result, "isolated", True):
        said = next((n for n in result.notes if _is_isolation_note(n)), NOT_ISOLATED)
        out.append(f"<p class=\"warn\">{text(said, limit=2000, one_line=True)}</p>")
    return out + ["</header>"]


def _tests(result, text) -> list:
    out = ["<section class=\"tests\"><h2>Tests</h2>"]
    if not result.tests:
        return out + ["<p class=\"none\">No test was run; see the notes.</p></section>"]
    out.append("<table><thead><tr><th>Test</th><th>Points</th><th>Result</th></tr></thead>"
               "<tbody>")
    for t in result.tests:
        ok = t["status"] == "passed"
        cls = "pass" if ok else "fail"
        out.append(f"<tr class=\"{cls}\"><td class=\"name\">"
                   f"{text(t['name'], limit=200, one_line=True)}</td>"
                   f"<td class=\"pts\">{_num(t['score'])} / {_num(t['max_score'])}</td>"
                   f"<td class=\"res\"><span class=\"badge {cls}\">{cls.upper()}</span></td>"
                   "</tr>")
        where = f"<p class=\"where\">({INSIDE_ONLY})</p>" if t.get("inside_only") else ""
        if t.get("output") or where:
            body = f"<pre>{text(t['output'])}</pre>" if t.get("output") else ""
            out.append(f"<tr class=\"output {cls}\"><td colspan=\"3\">{where}{body}</td></tr>")
    return out + ["</tbody></table></section>"]


def _is_isolation_note(note) -> bool:
    return isinstance(note, str) and note.startswith("NOT ISOLATED")


def _notes(result, text) -> list:
    notes = [n for n in result.notes if not _is_isolation_note(n)]   # the header says it
    if not notes:
        return []
    return (["<section class=\"notes\"><h2>Notes</h2><ul>"]
            + [f"<li>{text(n, limit=2000)}</li>" for n in notes] + ["</ul></section>"])


def _answers(result, text) -> list:
    answers = result.answers
    out = ["<section class=\"answers\"><h2>Your answers</h2>"]
    if not answers:
        return out + ["<p class=\"none\">No answer cell was found in the submission.</p>"
                      "</section>"]
    for gid, source in answers.items():
        out.append(f"<h3>{text(gid, limit=200, one_line=True)}</h3>")
        out.append(f"<pre class=\"answer\">{text(source)}</pre>" if str(source).strip()
                   else "<p class=\"none\">(empty)</p>")
    return out + ["</section>"]


def feedback_page(result, assignment: str, *, limit: int) -> str:
    """The whole page for one ``grade.StudentResult``; its texts share ``limit`` characters."""
    text = _Texts(limit)
    who = text(display_id(result.student_id), limit=200, one_line=True)
    title = f"{text(assignment, limit=200, one_line=True)}: feedback for {who}"
    parts = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
             f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">",
             "<meta name=\"referrer\" content=\"no-referrer\">",
             "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
             f"<title>{title}</title>", f"<style>{STYLE}</style></head>", "<body><main>"]
    parts += _header(result, assignment, text)
    parts += _tests(result, text)
    parts += _notes(result, text)
    parts += _answers(result, text)
    parts += ["<footer>Written by gpumemlab grade. This page loads nothing and runs no script."
              "</footer>", "</main></body></html>"]
    return "\n".join(parts) + "\n"
