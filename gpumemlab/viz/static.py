"""Static fallbacks for widget outputs: a MIME bundle holding the live widget view *and* its content
as ``text/html`` and a short ``text/plain``.

JupyterLab draws the widget view when its widget manager knows the model; every other reader
(``jupyter nbconvert --to html`` of a notebook saved without widget state, GitHub's viewer,
nbviewer, a terminal) falls back to the HTML or the plain text, so a quiz, a player frame or a
prediction is never reduced to ``VBox(children=...)`` or ``<... object at 0x...>``. The HTML is
the state when the output was made; later widget changes update the live view only.
"""
from __future__ import annotations

import base64
import html as _html

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def widget_bundle(widget, html: str, text: str) -> dict:
    """The MIME bundle of ``widget`` with ``html`` and ``text`` as its static fallbacks."""
    data = {"text/plain": text, "text/html": html}
    model_id = getattr(widget, "model_id", None) if widget is not None else None
    if model_id:
        data[WIDGET_VIEW] = {"version_major": 2, "version_minor": 0, "model_id": model_id}
    return data


def png_img(png: bytes, alt: str = "", width=None) -> str:
    """An ``<img>`` holding ``png`` inline (a data URI), so an exported page needs no file."""
    size = f' width="{int(width)}"' if width else ""
    return (f'<img src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}" '
            f'alt="{_html.escape(alt, quote=True)}"{size}>')


def pre(text: str) -> str:
    """Preformatted text, escaped, wrapping long lines."""
    return "<pre style='white-space:pre-wrap'>" + _html.escape(text) + "</pre>"


def escape(text: str) -> str:
    return _html.escape(text)
