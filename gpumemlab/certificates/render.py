"""Certificates as pages and pictures: a self-contained HTML page and a PNG (matplotlib Agg).

Both carry the certificate's JSON record: the page in ``<script type="application/json"
id="gml-certificate">``, the PNG in a ``gml-certificate`` text chunk. The HTML of format
``gpumemlab-certificate/1`` is a pure function of the record, so the verifier can re-render it
and require the file to match: keep this template stable, or bump the format.
"""
from __future__ import annotations

import datetime as _dt
import html
import re
import struct
import zlib

from .keys import CertificateError

_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_UNSIGNED = "Self-study completion record \u2014 not signed, not verifiable"
# The data block is found in one linear pass (a regex with a lazy ``.*?`` per candidate tag is
# quadratic on a page of repeated unclosed tags): script tags, their ends and closers are each
# scanned once, and nothing inside a script's content is taken for a tag.
_SCRIPT_OPEN = re.compile(r"<script\b", re.I)
_SCRIPT_CLOSE = re.compile(r"</script\s*>", re.I)
_CERT_ID = re.compile(r"\bid\s*=\s*[\"']?gml-certificate\b", re.I)
PNG_KEY = "gml-certificate"


def _long_date(iso: str) -> str:
    d = _dt.date.fromisoformat(iso)
    return f"{d.day} {_MONTHS[d.month - 1]} {d.year}"


def visible_fields(cert) -> dict:
    """The texts both renderings show, keyed by field."""
    p = cert.payload
    fields = {"name": p["name"], "course": p["course"],
              "score": f"{p['score']:g} / {p['max_score']:g} ({p['percent']:g}%)",
              "date": _long_date(p["date"]), "id": p["id"]}
    if cert.signed:
        fields["issuer"] = p["issuer"] or "the course teacher"
        fields["key"] = p["key_fingerprint"]
    return fields


def _embedded_json(cert) -> str:
    text = cert.to_json()        # ASCII only; escape what could end the script element
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


_CSS = """body{margin:0;background:#e9e5da;font-family:Georgia,'DejaVu Serif',serif;color:#1d2b36}
.cert{max-width:960px;margin:32px auto;background:#fbf8ef;border:3px double #1f4e5f;padding:48px 56px;
text-align:center;box-shadow:0 2px 12px rgba(0,0,0,.15)}
.brand{letter-spacing:.35em;text-transform:uppercase;font-size:13px;color:#8a6d1f}
h1{font-size:40px;font-weight:normal;margin:12px 0 28px;color:#1f4e5f}
.small{font-style:italic;color:#555;margin:6px 0}
.name{font-size:44px;font-weight:bold;margin:8px auto 14px;padding-bottom:6px;
border-bottom:1px solid #8a6d1f;display:inline-block;min-width:50%}
.course{font-size:26px;margin:6px 0 12px}
.score{font-size:20px}
.foot{display:flex;justify-content:space-between;margin-top:40px;font-size:15px}
.foot div{flex:1}
.meta{margin-top:32px;font-family:'DejaVu Sans Mono',monospace;font-size:13px;color:#444}
.warn{margin:0 0 24px;padding:10px;border:2px solid #a12d2d;color:#a12d2d;font-weight:bold;
font-family:'DejaVu Sans',sans-serif}"""


def render_html(cert) -> str:
    f = {k: html.escape(v, quote=True) for k, v in visible_fields(cert).items()}
    signed = cert.signed

    def span(key, cls="", tag="span"):
        c = f' class="{cls}"' if cls else ""
        return f'<{tag}{c} data-field="{key}">{f[key]}</{tag}>'

    title = "Certificate of Completion" if signed else "Self-Study Completion Record"
    warn = "" if signed else f'<p class="warn">{_UNSIGNED}</p>\n'
    if signed:
        sig = f"<div>Signed by<br>{span('issuer')}</div>"
        meta = (f"Certificate ID {span('id')} &middot; Ed25519 key {span('key')}<br>"
                "Verify: gpumemlab certificate verify THIS_FILE --key TEACHER_PUBLIC_KEY")
    else:
        sig = "<div>Self-study<br>(progress recorded on the learner's computer)</div>"
        meta = f"Record ID {span('id')} &middot; unsigned"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}: {f['name']} &mdash; {f['course']}</title>
<style>
{_CSS}
</style>
</head>
<body>
<div class="cert">
{warn}<div class="brand">gpumemlab</div>
<h1>{title}</h1>
<p class="small">This certifies that</p>
{span('name', 'name', 'div')}
<p class="small">has completed</p>
{span('course', 'course', 'div')}
<p class="small">with a score of</p>
{span('score', 'score', 'div')}
<div class="foot"><div>Date<br>{span('date')}</div>{sig}</div>
<div class="meta">{meta}</div>
</div>
<script type="application/json" id="gml-certificate">
{_embedded_json(cert)}
</script>
</body>
</html>
"""


def _data_blocks(text: str) -> list:
    blocks, pos = [], 0
    while True:
        m = _SCRIPT_OPEN.search(text, pos)
        if m is None:
            return blocks
        end = text.find(">", m.end())
        if end < 0:
            return blocks
        close = _SCRIPT_CLOSE.search(text, end + 1)
        if close is None:   # unclosed: no later block can be complete either
            return blocks
        if _CERT_ID.search(text, m.end(), end):
            blocks.append(text[end + 1:close.start()])
        pos = close.end()


def extract_from_html(text: str) -> str:
    blocks = _data_blocks(text)
    if not blocks:
        raise CertificateError("no certificate data in this file (not a gpumemlab certificate "
                               "page)")
    if len(blocks) > 1:
        raise CertificateError("more than one certificate data block in this page")
    return blocks[0]


# A field's element as ``render_html`` writes it: a start tag holding data-field="key" (no
# "<" or ">" inside, so each match is tried once per "<": linear for any tag soup).
_FIELD_OPEN = re.compile(r"<[A-Za-z][^<>]*?\bdata-field\s*=\s*[\"']?([\w-]+)[^<>]*>")
_ANY_TAG = re.compile(r"<[^<>]*>")


def _field_texts(page: str) -> dict:
    """{field: its text} of the first element of each ``data-field`` in ``page``: the text up
    to the next closing tag, tags inside dropped and character references decoded. A regular
    scan, not an HTML parser: HTMLParser rescans an unclosed start tag (``<a `` repeated) for
    every one that follows, quadratic on a page of them (17 KB: 5-11 s)."""
    fields = {}
    for m in _FIELD_OPEN.finditer(page):
        key = m.group(1)
        if key in fields:
            continue
        close = page.find("</", m.end())
        body = page[m.end():close if close >= 0 else len(page)]
        fields[key] = html.unescape(_ANY_TAG.sub("", body))
    return fields


def html_mismatch(cert, page: str):
    """None when ``page`` is exactly the rendering of ``cert``; else a reason naming the
    edited field when one can be found."""
    expected = render_html(cert)
    page = page.replace("\r\n", "\n")
    if page.rstrip() == expected.rstrip():
        return None
    if len(page) > 4 * len(expected) + (64 << 10):
        # far from the rendering in size: such a page is no edit of a single field
        return "the page was edited: it differs from the signed certificate's rendering"
    fields = _field_texts(page)
    for key, want in visible_fields(cert).items():
        shown = " ".join(fields.get(key, "").split())
        if shown != want:
            return (f"the page shows {key} {shown[:60]!r}, but the signed {key} is {want!r}")
    return "the page was edited: it differs from the signed certificate's rendering"


# -- PNG ---------------------------------------------------------------------------------------

def extract_from_png(data: bytes) -> str:
    pos, found = 8, []
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        crc = data[pos + 8 + length:pos + 12 + length]
        if len(body) != length or len(crc) != 4:
            raise CertificateError("truncated PNG file")
        if zlib.crc32(kind + body) != struct.unpack(">I", crc)[0]:
            raise CertificateError(f"PNG chunk {kind!r} is corrupt (bad checksum)")
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            if key == PNG_KEY.encode():
                found.append(value.decode("latin-1"))
        if kind == b"IEND":
            break
        pos += 12 + length
    if len(found) != 1:
        raise CertificateError("this PNG holds no certificate record" if not found else
                               "this PNG holds more than one certificate record")
    return found[0]


def _fit(text: str, size: float, width_chars: int) -> float:
    return size if len(text) <= width_chars else max(size * width_chars / len(text), 9)


def render_png(cert, path, dpi: int = 110) -> None:
    import warnings

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Circle, Rectangle

    f, signed = visible_fields(cert), cert.signed
    ink, gold, red, paper = "#1f4e5f", "#8a6d1f", "#a12d2d", "#fbf8ef"
    fig = Figure(figsize=(11, 8.5), dpi=dpi, facecolor=paper)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 110)
    ax.set_ylim(0, 85)
    ax.axis("off")
    ax.add_patch(Rectangle((2.5, 2.5), 105, 80, fill=False, lw=4, ec=ink))
    ax.add_patch(Rectangle((4, 4), 102, 77, fill=False, lw=1.2, ec=gold))

    def put(x, y, s, size, **kw):
        kw.setdefault("family", "DejaVu Serif")
        kw.setdefault("color", "#1d2b36")
        ax.text(x, y, s, fontsize=size, ha=kw.pop("ha", "center"), va="center",
                parse_math=False, **kw)

    put(55, 75 if signed else 73.6, "G P U M E M L A B", 11, color=gold, family="DejaVu Sans")
    put(55, 68, "Certificate of Completion" if signed else "Self-Study Completion Record",
        32 if signed else 28, color=ink)
    put(55, 60.5, "This certifies that", 14, style="italic", color="#555555")
    put(55, 53, f["name"], _fit(f["name"], 36, 30), weight="bold")
    ax.plot([27, 83], [49, 49], color=gold, lw=1)
    put(55, 44.5, "has completed", 14, style="italic", color="#555555")
    put(55, 38.5, f["course"], _fit(f["course"], 22, 55))
    put(55, 31.5, f"with a score of {f['score']}", 16)
    put(22, 20.5, f["date"], 14)
    ax.plot([10, 34], [18.5, 18.5], color=gold, lw=0.8)
    put(22, 16.3, "Date", 11, color="#555555", family="DejaVu Sans")
    if signed:
        ax.add_patch(Circle((55, 18), 6.5, fc="none", ec=gold, lw=2))
        ax.add_patch(Circle((55, 18), 5.4, fc="none", ec=gold, lw=0.8))
        put(55, 19, "SIGNED", 9, color=gold, family="DejaVu Sans", weight="bold")
        put(55, 16.6, "Ed25519", 8, color=gold, family="DejaVu Sans")
        put(88, 20.5, f["issuer"], _fit(f["issuer"], 14, 26))
        ax.plot([76, 100], [18.5, 18.5], color=gold, lw=0.8)
        put(88, 16.3, "Signed by", 11, color="#555555", family="DejaVu Sans")
        meta = f"Certificate ID {f['id']}   \u00b7   teacher's Ed25519 key {f['key']}"
        how = "verify: gpumemlab certificate verify CERTIFICATE.html --key TEACHER_PUBLIC_KEY"
    else:
        put(88, 18.5, "Self-study\n(learner's own progress file)", 11, color="#555555")
        ax.add_patch(Rectangle((14, 77), 82, 3.4, fc="#fbeaea", ec=red, lw=1.5))
        put(55, 78.7, _UNSIGNED.upper(), 11, color=red, family="DejaVu Sans", weight="bold")
        meta = f"Record ID {f['id']}   \u00b7   unsigned"
        how = "This record was not issued by a teacher and cannot be verified."
    put(55, 9.5, meta, 10.5, family="DejaVu Sans Mono")
    put(55, 6.5, how, 8.5, family="DejaVu Sans", color="#666666")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # a missing glyph must not stop issuing
        fig.savefig(path, format="png", facecolor=paper,
                    metadata={PNG_KEY: cert.to_json().replace("\n", "")})
