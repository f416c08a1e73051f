"""The figure of a ``GrowthReport``: allocated and reserved bytes entry by entry with each
iteration shaded by its cause (top), and per iteration the bytes that stay and the growth of
reserved memory (bottom), so the cause can be read off the two curves."""
from __future__ import annotations

from gpumemlab.viz.palette import OKABE_ITO, SERIES_STYLE, unit_for

CAUSE_COLOURS = {
    "leak": OKABE_ITO["vermillion"], "one-time state": OKABE_ITO["reddish_purple"],
    "new shapes": OKABE_ITO["sky_blue"], "higher peak": OKABE_ITO["yellow"],
    "fragmentation": OKABE_ITO["bluish_green"], "steady": "#FFFFFF",
}


def plot_growth(report, title=None):
    """A two-panel matplotlib figure of ``report``; returns the Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    its = report.iterations
    tl = report.result.timeline
    first, last = its[0].start, min(its[-1].end, len(tl))
    xs = range(first, last)
    alloc = [tl.allocated[i] for i in xs]
    res = [tl.reserved[i] for i in xs]
    top = max(res + [1])
    unit, uname = unit_for(top)
    fig = plt.figure(figsize=(9, 6), constrained_layout=True)
    grid = fig.add_gridspec(2, 2, height_ratios=(3, 2))
    ax = fig.add_subplot(grid[0, :])
    ends, grows = fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
    for it in its:
        ax.axvspan(it.start - 0.5, it.end - 0.5, color=CAUSE_COLOURS[it.cause], alpha=0.3, lw=0)
        ax.axvline(it.start - 0.5, color="#999999", lw=0.6)
    for name, ys in (("reserved_bytes", res), ("allocated_bytes", alloc)):
        colour, label, style = SERIES_STYLE[name]
        ax.step(list(xs), [y / unit for y in ys], where="post", color=colour, ls=style,
                lw=1.6, label=label)
    ax.set_ylim(0, top / unit * 1.08)
    ax.set_xlim(first - 0.5, last - 0.5)
    ax.set_ylabel(uname)
    ax.set_xlabel("trace entry")
    used = [c for c in CAUSE_COLOURS if c in report.causes]
    handles, labels = ax.get_legend_handles_labels()
    handles += [Patch(facecolor=CAUSE_COLOURS[c], alpha=0.5 if c != "steady" else 1,
                      edgecolor="#999999") for c in used]
    labels += used
    # outside the axes: inside, it would hide the reserved curve where it is highest
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0,
              fontsize=8)
    ax.set_title(title or "memory, entry by entry; each iteration shaded by its cause")

    n = list(range(len(its)))
    labels = [f"{it.name.replace(' (', chr(10) + '(')}\n{it.cause}" for it in its]
    # what stays shows as a staircase in allocated-at-the-end; growth of the cache on its own axis
    alloc_end = [it.allocated_bytes for it in its]
    stays = [it.kept_bytes for it in its]
    cum = [sum(stays[:i + 1]) for i in n]
    aunit, aname = unit_for(max(alloc_end + [1]))
    ends.bar(n, [a / aunit for a in alloc_end], 0.6, color=SERIES_STYLE["allocated_bytes"][0],
             label="allocated at the end")
    ends.bar(n, [c / aunit for c in cum], 0.6, color=OKABE_ITO["vermillion"],
             label="of it, bytes that stay (so far)")
    ends.set_ylim(0, max(alloc_end + [1]) / aunit * 1.3)
    ends.set_ylabel(aname)
    ends.set_title("allocated at each iteration's end", fontsize=9)
    ends.legend(loc="upper left", fontsize=7)
    grew = [max(it.reserved_growth_bytes, 0) for it in its]
    gunit, gname = unit_for(max(grew + [1]))
    grows.bar(n, [g / gunit for g in grew], 0.6, color=SERIES_STYLE["reserved_bytes"][0])
    grows.set_ylim(0, max(grew + [1]) / gunit * 1.2)
    grows.set_ylabel(gname)
    grows.set_title("reserved grew by, per iteration", fontsize=9)
    for b in (ends, grows):
        b.set_xticks(n)
        b.set_xticklabels(labels, fontsize=7)
    # returned and shown by Jupyter; closed in pyplot so the inline backend does not show it twice
    plt.close(fig)
    return fig
