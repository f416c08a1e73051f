"""Item statistics shown three ways: a table for the terminal, ``stats.csv`` and a
self-contained ``stats.html`` (the plot of ``plot`` embedded as a base64 PNG, the table,
the warnings; no script, no link, nothing fetched, so it opens offline and can be mailed).

Item names and answers came from notebooks and CSV files: they are cleaned (``cleantext``) for
the terminal, neutralised for spreadsheets (``reports.cell_text``) in the CSV and HTML-escaped in
the page. An undefined figure is written "undefined", never NaN.
"""
from __future__ import annotations

import base64
import csv
import html
import io

from gpumemlab.cleantext import clean_text
from ..reports import cell_text

CSV_COLUMNS = ["item", "n_students", "missing", "max_score", "mean_score", "difficulty",
               "discrimination", "common_wrong_answers", "warnings"]
TEXT_COLUMNS = {"item", "common_wrong_answers", "warnings"}   # the rest are numbers or UNDEFINED
UNDEFINED = "undefined"


def _clean(text, limit=None) -> str:
    return clean_text(str(text), limit=limit, keep_newlines=False)


def _difficulty(st, digits=2) -> str:
    return UNDEFINED if st.difficulty is None else f"{st.difficulty:.{digits}f}"


def _discrimination(st, digits=2) -> str:
    return UNDEFINED if st.discrimination is None else f"{st.discrimination:.{digits}f}"


def _wrong(st) -> str:
    return "; ".join(f"{_clean(a)} (x{n})" for a, n in st.wrong_answers)


def _rows(stats):
    """[(cells)] in CSV_COLUMNS' order, all text (3 decimals: the table's 2 and more)."""
    return [[_clean(st.item), str(st.n), str(st.missing), f"{st.max_score:g}",
             f"{st.mean_score:.4g}", _difficulty(st, 3), _discrimination(st, 3), _wrong(st),
             "; ".join(st.warnings)] for st in stats.items]


def csv_text(stats) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    text = [c in TEXT_COLUMNS for c in CSV_COLUMNS]
    for row in _rows(stats):   # numbers as they are (a negative r is a number, not a formula)
        writer.writerow([cell_text(c) if t else c for c, t in zip(row, text)])
    return out.getvalue()


def _warning_lines(stats) -> list:
    return [f"{_clean(st.item, 60)}: {w}" for st in stats.items for w in st.warnings]


def table_text(stats) -> str:
    head = ["item", "n", "share right", "discrimination", "common wrong answers"]
    body = [[_clean(st.item, 40), str(st.n), _difficulty(st), _discrimination(st),
             _clean(_wrong(st), 60)] for st in stats.items]
    widths = [max(len(r[k]) for r in [head] + body) for k in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head] + body]
    lines.insert(1, "  ".join("-" * w for w in widths))
    warnings = _warning_lines(stats)
    if warnings:
        lines += ["", "warnings:"] + [f"  - {w}" for w in warnings]
    if stats.notes:
        lines += ["", "notes:"] + [f"  - {n}" for n in stats.notes]
    return "\n".join(lines) + "\n"


STYLE = ("body{font-family:sans-serif;max-width:60em;margin:1em auto;padding:0 1em}"
         "table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:.25em .5em;"
         "text-align:left;vertical-align:top}th{background:#eee}.warn{color:#a00}"
         "img{max-width:100%}")


def html_text(stats, title: str, png: bytes) -> str:
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in CSV_COLUMNS)
    rows = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>\n"
                   for row in _rows(stats))
    warnings = "".join(f"<li class='warn'>{e(w)}</li>\n" for w in _warning_lines(stats))
    notes = "".join(f"<li>{e(n)}</li>\n" for n in stats.notes)
    image = base64.b64encode(png).decode("ascii")
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>{e(title)}</title><style>{STYLE}</style></head><body>\n"
            f"<h1>{e(title)}</h1>\n"
            f"<p>{stats.n_students} students, {len(stats.items)} items. Share right: mean score "
            f"/ max score. Discrimination: Pearson r between the item and the rest of the score "
            f"(total minus the item).</p>\n"
            f"<img alt='difficulty against discrimination, one point per item' "
            f"src='data:image/png;base64,{image}'>\n"
            f"<h2>Warnings</h2>\n<ul>\n{warnings or '<li>none</li>'}</ul>\n"
            + (f"<h2>Notes</h2>\n<ul>\n{notes}</ul>\n" if notes else "") +
            f"<h2>Items</h2>\n<table>\n<tr>{head}</tr>\n{rows}</table>\n</body></html>\n")
