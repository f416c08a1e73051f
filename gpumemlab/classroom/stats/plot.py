"""The item statistics plot: difficulty (share right) against discrimination, one point per
item, as PNG bytes for ``view``'s page.

x runs from 0 (no one got it) to 1 (everyone did); y is the corrected item-total correlation
from -1 to 1, with a red line at 0 (below it: stronger students did worse) and a dotted one at
``measures.WEAK``. An item whose discrimination is undefined cannot sit on that scale: it is
drawn as a grey cross on a separate "undefined" strip under it. Items at the same place share one
label; an item worth no points has no share right and is left out (the title counts the items
drawn). Matplotlib's Agg canvas only, no pyplot and no display; labels are plain text (no
mathtext, so a ``$`` in a question name is shown as it is).
"""
from __future__ import annotations

import io

from gpumemlab.cleantext import clean_text
from .measures import WEAK

UNDEFINED_Y = -1.3
LABEL_LIMIT = 24


def _label(name) -> str:
    return clean_text(name, limit=None, keep_newlines=False)[:LABEL_LIMIT]


def plot_png(stats) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 5.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    places = {}
    for st in stats.items:
        if st.difficulty is None:
            continue
        y = UNDEFINED_Y if st.discrimination is None else st.discrimination
        places.setdefault((round(st.difficulty, 3), round(y, 3)), []).append(st)
    for (x, y), group in places.items():
        undefined = group[0].discrimination is None
        flagged = any(st.warnings for st in group)
        ax.scatter([x], [y], marker="x" if undefined else "o", s=60, zorder=3,
                   color="grey" if undefined else ("tab:red" if flagged else "tab:blue"))
        names = ", ".join(_label(st.item) for st in group[:3])
        if len(group) > 3:
            names += f" +{len(group) - 3}"
        ax.annotate(names, (x, y), xytext=(6, 5), textcoords="offset points", fontsize=8,
                    parse_math=False, annotation_clip=False)
    ax.axhline(0, color="tab:red", linestyle="--", linewidth=1)
    ax.axhline(WEAK, color="grey", linestyle=":", linewidth=1)
    ax.axhline((UNDEFINED_Y - 1) / 2, color="black", linewidth=0.5)
    ax.set_xlim(-0.05, 1.12)
    ax.set_ylim(UNDEFINED_Y - 0.2, 1.05)
    ax.set_yticks([UNDEFINED_Y, -1, -0.5, 0, WEAK, 0.5, 1])
    ax.set_yticklabels(["undefined", "-1", "-0.5", "0", f"{WEAK:g}", "0.5", "1"])
    ax.set_xlabel("difficulty: share right (mean score / max score)")
    ax.set_ylabel("discrimination: r with the rest of the score")
    shown = sum(st.difficulty is not None for st in stats.items)
    count = f"{shown} of {len(stats.items)}" if shown < len(stats.items) else f"{shown}"
    ax.set_title(f"{count} items, {stats.n_students} students. Blue: no warning; "
                 "red: a warning; grey cross: discrimination undefined", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
