"""Memory over time (``gml.timeline``): allocated, reserved and requested bytes event by event.

The gap between the reserved and allocated curves is the cache; when reserved climbs while
allocated does not, fragmentation is at work. Peaks are marked, releases of whole segments
(``empty_cache``, or the OOM path) drawn as grey rules, and OOMs as red crosses. Several
replays of one workload (say, with and without ``expandable_segments``) can share one axis.
Accepts a snapshot with history (``device_traces``), a device, a :class:`History`, a replay
result (an object with ``.timeline``: dicts with event, action, allocated_bytes,
reserved_bytes, requested_bytes), such a list of dicts, or a list of any of these to compare.
Compared runs are drawn as small multiples (one panel per run, shared axes) so that no curve
hides another. The y axis is scaled to the data: a device capacity far above the curves (a
replay's "unlimited" card) is written at the top of the axes instead of stretching the axis.
"""
from __future__ import annotations

from gpumemlab.recordings.replay.prepare import UNLIMITED_BYTES as UNLIMITED  # replay's "no limit"
from gpumemlab.units import format_size
from gpumemlab.viz.history import History
from gpumemlab.viz.palette import COMPARE_COLOURS, OKABE_ITO, SERIES_STYLE, unit_for
from gpumemlab.viz.words import count

RELEASE_ACTIONS = ("segment_free", "segment_unmap")


def timeline_data(source, label=None) -> dict:
    """One run as plain lists: event, action and the three byte series, plus its label."""
    rows = None
    capacity = getattr(source, "total_memory", None)
    if isinstance(source, History):
        rows = source.timeline()
        capacity = source.source.total_memory
    elif _is_rows(source):
        rows = list(source)
    elif not isinstance(source, dict) and isinstance(getattr(source, "timeline", None), list):
        rows = source.timeline
    elif not isinstance(source, dict) and hasattr(getattr(source, "timeline", None), "reserved"):
        rows = _rows_from_arrays(source)
    if rows is None:
        history = History(source)
        rows, capacity = history.timeline(), history.source.total_memory
    for i, row in enumerate(rows[:1]):
        missing = [k for k in ("allocated_bytes", "reserved_bytes") if k not in row]
        if missing:
            raise ValueError(f"timeline row {i} lacks {missing}: expected dicts with event, "
                             f"action, allocated_bytes, reserved_bytes, requested_bytes")
    label = label or str(getattr(source, "label", "") or getattr(source, "alloc_conf", "") or "")
    if not label and hasattr(source, "alloc_conf"):
        label = "default settings"
    return {
        "label": label,
        "event": [row.get("event", i) for i, row in enumerate(rows)],
        "action": [row.get("action", "") for row in rows],
        **{name: [row.get(name, 0) or 0 for row in rows] for name in SERIES_STYLE},
        "total_memory": capacity if isinstance(capacity, int) else None,
        "metadata": [str(row.get("user_metadata") or "") for row in rows],
    }


def _rows_from_arrays(result) -> list:
    """A replay result's Timeline (parallel arrays, one value per replayed trace entry) as rows;
    its ``oom`` (a dict with the entry ``index``) becomes an 'oom' row."""
    tl = result.timeline
    allocated, reserved = list(tl.allocated), list(tl.reserved)
    requested = list(getattr(tl, "requested", allocated))
    meta = list(getattr(tl, "metadata", None) or [])
    meta += [""] * (len(allocated) - len(meta))
    rows = [{"event": i, "action": "", "allocated_bytes": a, "reserved_bytes": r,
             "requested_bytes": q, "user_metadata": m}
            for i, (a, r, q, m) in enumerate(zip(allocated, reserved, requested, meta))]
    oom = getattr(result, "oom", None)
    if isinstance(oom, dict) and isinstance(oom.get("index"), int):
        k = oom["index"]
        if k < len(rows):
            rows[k]["action"] = "oom"
        elif rows:
            rows.append(dict(rows[-1], event=k, action="oom"))
    return rows


def _is_rows(obj) -> bool:
    return isinstance(obj, (list, tuple)) and bool(obj) and isinstance(obj[0], dict) \
        and "reserved_bytes" in obj[0]


def timeline(source, ax=None, *, labels=None, cursor=None, by=None, steps=None, host=False):
    """Plot memory over the events of one run, or compare several runs (a list): one panel per
    run with shared axes, or all in ``ax`` when one is given. With ``by`` ("frame", "category"
    or "size"), one run's live allocations as stacked bands coloured by that key
    (``gpumemlab.viz.active_timeline``).

    Args:
        labels: names for the runs when comparing (default: each run's label or alloc_conf).
        cursor: an event index to mark with a vertical line (the player's position).
        by: colour each allocation's band by its allocating frame, category or size.
        steps: event indices where steps begin (default, with ``by``: where the entries'
            ``user_metadata`` changes).
        host: plot the pinned host memory of one run instead (``viz.host_view.host_timeline``).

    Returns:
        The matplotlib Figure (``fig.gml_timeline`` holds the plotted data).
    """
    if host:
        from .host_view import host_timeline

        return host_timeline(source, ax)
    if by is not None:
        from gpumemlab.viz.active_timeline import draw_active_timeline
        return draw_active_timeline(source, ax, by=by, steps=steps)
    compare = isinstance(source, (list, tuple)) and not _is_rows(source) and bool(source) \
        and not isinstance(source[0], dict)
    runs = list(source) if compare else [source]
    if labels is not None and len(labels) != len(runs):
        raise ValueError(f"got {len(labels)} labels for {len(runs)} runs")
    data = [timeline_data(run, labels[i] if labels else None) for i, run in enumerate(runs)]
    for i, d in enumerate(data):
        d["label"] = d["label"] or (f"run {i}" if compare else "")
    # runs of different lengths side by side: one x-axis in steps, when every run marks them
    in_steps = compare and all(len(phases(d)) > 1 for d in data)
    if in_steps:
        for d in data:
            to_steps(d)
    import matplotlib.pyplot as plt
    own = ax is None
    if own and compare:
        fig, axes = plt.subplots(len(data), 1, figsize=(10, 1.0 + 2.0 * len(data)),
                                 layout="constrained", sharex=True, sharey=True, squeeze=False)
        top = data_top(data)
        for i, (panel, d) in enumerate(zip(axes[:, 0], data)):
            draw_timeline(panel, [d], compare=True, cursor=cursor, index=i, top=top)
            panel.set_title(d["label"], fontsize=9, loc="left")
            if in_steps:
                _step_marks(panel, d)
            if i < len(data) - 1:
                panel.set_xlabel("")
    else:
        if own:
            fig, ax = plt.subplots(figsize=(10, 3.8), layout="constrained")
        else:
            fig = ax.figure
        draw_timeline(ax, data, compare=compare, cursor=cursor)
    fig.gml_timeline = data
    if own:
        plt.close(fig)  # returned, so Jupyter shows it once (see blockmap.show)
    return fig


OFF_SCALE = 2.0  # a capacity more than this many times the data's peak is not drawn to scale


def data_top(data) -> int:
    """The top of the y axis: the curves' peak, or the capacity when it is near it."""
    peak = max([max(d["reserved_bytes"] + d["allocated_bytes"] + [0]) for d in data] + [1])
    capacity = max([d["total_memory"] or 0 for d in data] + [0])
    return capacity if capacity and capacity <= OFF_SCALE * peak else peak


def draw_timeline(ax, data, *, compare=False, cursor=None, index=0, top=None) -> None:
    """Draw runs into ``ax``; used by :func:`timeline` and the player. ``index`` is the colour
    of the first run; ``top`` the y extent in bytes (default: :func:`data_top`)."""
    from matplotlib.ticker import FuncFormatter
    top = top or data_top(data)
    unit, unit_name = unit_for(top)
    for i, d in enumerate(data, index):
        x = d["event"]
        if compare:
            colour = COMPARE_COLOURS[i % len(COMPARE_COLOURS)]
            peak = max(d["reserved_bytes"], default=0)
            ax.plot(x, [v / unit for v in d["reserved_bytes"]], color=colour, lw=1.6,
                    drawstyle="steps-post", gid=f"reserved:{i}",
                    label=f"{d['label']}: reserved (peak {format_size(peak)})")
            ax.plot(x, [v / unit for v in d["allocated_bytes"]], color=colour, lw=1.0, ls=":",
                    drawstyle="steps-post", gid=f"allocated:{i}", label=f"{d['label']}: allocated")
            _last_step(ax, x, d["reserved_bytes"], unit, color=colour, lw=1.6)
            _last_step(ax, x, d["allocated_bytes"], unit, color=colour, lw=1.0, ls=":")
        else:
            for name, (colour, label, style) in SERIES_STYLE.items():
                if name != "requested_bytes" and d[name]:
                    k = _peak(d[name])
                    label += f" (peak {format_size(d[name][k])} at event {d['event'][k]})"
                    ax.plot([d["event"][k]], [d[name][k] / unit], marker="o", color=colour,
                            ms=5, gid=f"peak:{name}", linestyle="none")
                ax.plot(x, [v / unit for v in d[name]], color=colour, ls=style, lw=1.4,
                        drawstyle="steps-post", gid=name, label=label)
                _last_step(ax, x, d[name], unit, color=colour, ls=style, lw=1.4)
        _mark_events(ax, d, unit, colour=COMPARE_COLOURS[i % len(COMPARE_COLOURS)]
                     if compare else OKABE_ITO["vermillion"], first=(i == index))
    capacity = next((d["total_memory"] for d in data if d["total_memory"]), None)
    if capacity and capacity <= top:
        ax.axhline(capacity / unit, color="black", ls="--", lw=0.8, gid="capacity",
                   label=f"device capacity {format_size(capacity)}")
    elif capacity:
        # a replay without a card size runs on a 4 TiB "unlimited" device: say so, not 4096 GiB
        # written at the top of the axes, where a line would be, not a legend entry for nothing
        text = "no capacity limit (replayed without a card size)" if capacity >= UNLIMITED \
            else f"device capacity {format_size(capacity)}: far above (not to scale) \u2191"
        ax.annotate(text, xy=(0.99, 0.995), xycoords="axes fraction", ha="right", va="top",
                    fontsize=7, gid="capacity_off_scale")
        ax.set_ylim(top=1.12 * top / unit)
    if cursor is not None:
        ax.axvline(cursor, color="black", lw=1.0, gid="cursor")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel(f"memory ({unit_name})")
    ax.set_xlabel("event (trace entry)")
    ax.set_ylim(bottom=0)
    ax.set_title("memory over the trace" + (": comparison" if compare else ""),
                 fontsize=10, loc="left")
    # beside the axes, so it never hides a curve
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _last_step(ax, x, values, unit, **style) -> None:
    """Steps-post gives the last event no width: draw its value over one more event, so the
    state after the last event (an OOM's request served, say) is seen, not a vertical hair."""
    if x and values:
        width = (x[-1] - x[0]) / (len(x) - 1) if len(x) > 1 else 1
        ax.plot([x[-1], x[-1] + width], [values[-1] / unit] * 2, gid="last_step", **style)


def _peak(values) -> int:
    """Index of the first event that reaches the maximum."""
    return max(range(len(values)), key=values.__getitem__)


def phases(d) -> list:
    """(first row, end row, user_metadata) of each run of rows with one non-empty
    ``user_metadata`` (``set_memory_metadata("step 3")``): the steps or phases a run marked."""
    out, meta = [], d.get("metadata") or []
    start = None
    for i, m in enumerate(meta + [None]):
        if start is not None and m != meta[start]:
            out.append((start, i, meta[start]))
            start = None
        if start is None and m:
            start = i
    return out


def to_steps(d) -> None:
    """Put a run on an x-axis in steps: the rows of its k-th marked phase spread evenly over
    [k, k + 1), rows before the first phase before 0 and after the last beyond it. The trace
    entry of each point stays in ``d["entry"]``."""
    marks = phases(d)
    n = len(d["event"])
    x = [0.0] * n
    first, last = marks[0][0], marks[-1][1]
    for k, (a, b, _) in enumerate(marks):
        for i in range(a, b):
            x[i] = k + (i - a) / (b - a)
    for i in range(first):
        x[i] = (i - first) / max(first, 1)
    for i in range(last, n):
        x[i] = len(marks) + (i - last) / max(n - last, 1)
    d["entry"], d["event"], d["x_unit"] = d["event"], x, "step"


def _step_marks(ax, d) -> None:
    marks = phases(d)
    if len(marks) <= 40:   # more would be a grey haze: the ticks say where steps are
        for k in range(len(marks)):
            ax.axvline(k, color="#BBBBBB", lw=0.6, ls=":", gid="step_mark")
    what = "step" if all(m.startswith("step") for _, _, m in marks) else "phase"
    if len(marks) <= 8:   # a few: name them where they begin
        ax.set_xticks([k for k in range(len(marks))], [m for _, _, m in marks], fontsize=7,
                      ha="left")
    else:
        ax.set_xticks(range(0, len(marks), max(1, -(-len(marks) // 15))))
    ax.set_xlabel(f"{what} (each run's marks from set_memory_metadata, e.g. {marks[0][2]!r}; "
                  f"its events spread evenly across it)", fontsize=8)


def release_moments(d) -> tuple:
    """(events of the release moments, events of every segment_free/segment_unmap) of one run's
    ``timeline_data``: a burst of consecutive releases (one empty_cache call, or the OOM path
    emptying the cache) is one moment, drawn as one grey rule."""
    rows = [i for i, a in enumerate(d["action"]) if a in RELEASE_ACTIONS]
    x = d["event"]
    return [x[i] for j, i in enumerate(rows) if j == 0 or rows[j - 1] != i - 1], \
        [x[i] for i in rows]


def _mark_events(ax, d, unit, *, colour, first) -> None:
    bursts, releases = release_moments(d)
    # a rule is a release moment, not a segment: say how many of each
    for j, x in enumerate(bursts):
        ax.axvline(x, color="#999999", lw=0.8, gid="release",
                   label=f"{count(len(bursts), 'release moment')}:\n{count(len(releases), 'segment')} freed "
                         f"or unmapped" if first and j == 0 else None)   # two lines: it fits
    ooms = [(x, r) for x, a, r in zip(d["event"], d["action"], d["reserved_bytes"]) if a == "oom"]
    if ooms:
        ax.plot([x for x, _ in ooms], [r / unit for _, r in ooms], marker="X", ms=9,
                color=colour, linestyle="none", gid="oom",
                label=f"{d['label'] + ': ' if d['label'] else ''}out of memory")
