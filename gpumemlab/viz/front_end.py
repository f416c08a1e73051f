"""Whether a browser will show a widget: the choice between the browser-drawn block map
(``gpumemlab.viz.canvas_widget``) and today's matplotlib PNG, shared by ``gml.player`` and
``gml.whatif``.

A front end is there when this process is a Jupyter kernel (IPython with a ``kernel``),
``GPUMEMLAB_HEADLESS`` is unset (nbval and the lesson runs set it) and ``anywidget`` imports.
Anything else (a script, pytest, nbconvert's headless run) keeps the PNG, as does every exported
copy (the MIME bundle's ``text/html`` and ``image/png``).
"""
from __future__ import annotations

import os


def browser_wanted(wanted=None) -> bool:
    """``wanted`` True or False decides; None asks for a front end (see the module's text)."""
    if wanted is not None:
        return bool(wanted)
    if os.environ.get("GPUMEMLAB_HEADLESS"):
        return False
    try:
        from IPython import get_ipython
        import anywidget  # noqa: F401
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None
