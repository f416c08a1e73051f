"""Live what-if controls (``gml.whatif``): dropdowns and sliders for the allocator setting, the card
size, the batch size... that re-run a workload (or replay a recording) and redraw its block map
and memory timeline in place, in one image.

    gml.whatif(lambda alloc_conf, total_memory: run_workload(alloc_conf, total_memory),
               alloc_conf=["", "expandable_segments:True"], total_memory=["8GiB", "16GiB"])
    gml.whatif(snapshot, alloc_conf=["", "max_split_size_mb:512"])   # a recording: gml.replay

Each control is a list of options (a ``Dropdown`` for text, a ``SelectionSlider`` for numbers);
every change calls the workload with the chosen values, as keyword arguments. The workload returns
anything the block map and the timeline read (a device with history, a snapshot, a replay
result), or a tuple whose first item is that (the rest, such as the live tensors, stays alive
with it, so the trace does not end in their frees). The figure is a matplotlib ``Figure`` drawn with Agg into an ``ipywidgets.Image`` with a
text line under it: no ``Output`` widget, nothing leaks into cell output headless. Results and
frames are kept per combination of values, so going back to a setting shows it at once.
``update(**values)`` does what a control change does (tests, benchmarks); ``last_ms`` is the time
the last update took (``last_cpu_ms`` its CPU time). The MIME bundle carries the current figure as PNG and HTML too
(``gpumemlab.viz.static``). Headless (``GPUMEMLAB_HEADLESS``) no widget is made: the object shows
the figure of the first values, with a line naming the choices. Where a front end is there
(``gpumemlab.viz.front_end``), a result with history is drawn in the browser instead
(``gpumemlab.viz.canvas_widget``: the block map at the same moment, its slider over the whole
run, the stacked timeline): each combination's recording is packed once and sent when chosen,
and the PNG is drawn only when asked for (``png``, the exported copy).
"""
from __future__ import annotations

import os
import time

from gpumemlab.recordings.gc_pause import collector_paused


def whatif(workload, *, title=None, at: str = "peak", dpi: int = 72, canvas=None,
           **controls) -> "WhatIf":
    """Controls over ``workload`` (a callable taking the control names as keyword arguments, or a
    recording to replay with ``alloc_conf`` / ``total_memory``). ``at`` is the moment the block
    map shows: "peak" (most memory allocated) or "end" (the last event). ``canvas``: draw in the
    browser (True), as a PNG (False), or None: the browser when a front end is there."""
    return WhatIf(workload, title=title, at=at, dpi=dpi, canvas=canvas, **controls)


class WhatIf:
    def __init__(self, workload, *, title=None, at="peak", dpi=72, canvas=None, **controls):
        if at not in ("peak", "end"):
            raise ValueError(f"at must be 'peak' or 'end', got {at!r}")
        self.at = at
        if not controls:
            raise ValueError("give at least one control, e.g. alloc_conf=['', "
                             "'expandable_segments:True']")
        for name, options in controls.items():
            if not isinstance(options, (list, tuple)) or not options:
                raise ValueError(f"control {name!r} needs a non-empty list of options")
        self.controls = {k: list(v) for k, v in controls.items()}
        self.workload = workload if callable(workload) else _replayer(workload)
        self.title, self.dpi = title, dpi
        self.values = {k: v[0] for k, v in self.controls.items()}
        self._cache, self.last_ms, self._png, self.line = {}, None, b"", ""
        self.last_cpu_ms, self._figure, self._frames = None, None, {}
        self._payloads, self.canvas_widget = {}, None
        self.widget = None if os.environ.get("GPUMEMLAB_HEADLESS") else self._build_widgets()
        if self.widget is not None:
            from .front_end import browser_wanted
            self._browser = browser_wanted(canvas)
        else:
            self._browser = False
        self.update()

    def result(self, **values):
        """The workload's result for ``values`` (cached per combination)."""
        key = tuple((k, repr(values[k])) for k in sorted(values))
        if key not in self._cache:
            self._cache[key] = self.workload(**values)
        return self._cache[key]

    # A full collection of the cycle collector over a heap holding torch and matplotlib costs
    # 150-200 ms, and lands on a random update: paused during one (resumed after, so nothing
    # leaks), the slowest update of lessons 05-09 went from 291-349 to 108-161 ms (bench_whatif.py).
    @collector_paused
    def update(self, **values) -> "WhatIf":
        """Re-run with ``values`` changed (the others kept) and redraw."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; known: "
                             f"{', '.join(self.controls)}")
        start, cpu = time.perf_counter(), time.process_time()
        self.values.update(values)
        key = tuple((k, repr(self.values[k])) for k in sorted(self.values))
        self._key = key
        try:
            if key not in self._frames:   # a combination seen before is not drawn again
                source = self._source()
                # the browser draws a recording with history; the PNG waits until asked for
                png = None if self._browser and self._to_browser(key, source) else \
                    self._draw(source)
                self._frames[key] = (png, _summary(source))
            self._png, self.line = self._frames[key]
        except Exception as exc:  # a workload that breaks under one setting: say so, stay live
            self.line = f"this combination could not be drawn: {type(exc).__name__}: {exc}"
        self.last_ms = 1000 * (time.perf_counter() - start)
        self.last_cpu_ms = 1000 * (time.process_time() - cpu)
        if self.widget is not None:
            self._show_frame(key)
            from html import escape
            self.text.value = f"<b>{escape(self._choice())}</b>: {escape(self.line)}"
        return self

    @property
    def png(self) -> bytes:
        """The current frame as PNG bytes (drawn now if the browser drew it)."""
        if self._png is None:
            self._png = self._draw(self._source())
            self._frames[self._key] = (self._png, self.line)
        return self._png

    def _source(self):
        source = self.result(**self.values)
        return source[0] if isinstance(source, tuple) else source   # (source, its tensors...)

    def _to_browser(self, key, source) -> bool:
        """The recording's payload for the browser, made once per combination; False for a
        source without history (a replay result's final state), which stays a PNG."""
        from .history import History
        history = History(source)
        if not len(history):
            return False
        from .canvas_widget import payload
        allocated = history.totals["allocated_bytes"]
        peak = len(history) - 1 if self.at == "end" else \
            max(range(len(history)), key=allocated.__getitem__)
        self._payloads[key] = payload(history) + (peak,)
        return True

    def _show_frame(self, key) -> None:
        if key not in self._payloads:
            self.image.value = self.png
            self.frame.children = (self.image,)
            return
        from .canvas_widget import CanvasPlayer
        meta, data, peak = self._payloads[key]
        if self.canvas_widget is None:
            self.canvas_widget = CanvasPlayer(packed=(meta, data), index=peak)
        else:
            self.canvas_widget.show(meta, data, peak)
        self.frame.children = (self.canvas_widget,)

    def _choice(self) -> str:
        return ", ".join(f"{k}={_show(v)}" for k, v in self.values.items())

    def _draw(self, source) -> bytes:
        # One figure for the object's life, fixed axes, no layout engine, and one legend drawn
        # once into a saved background: text is most of what a frame costs in Agg (constrained
        # layout measures every label again, two legends were a third of a frame).
        from .blockmap import show
        from .history import History
        from .live_player import _png
        from .memory_timeline import draw_timeline, timeline_data
        if self._figure is None:
            self._new_figure()
        self._top.cla()
        self._bottom.cla()
        # the block map at the moment most memory is in use: the end of a run has often freed all
        history = History(source)
        if len(history):
            data = timeline_data(history, label=self._choice())
        else:   # a replay result: its timeline arrays, and only its final state to draw
            data = timeline_data(source, label=self._choice())
        if self.at == "end" or not len(history):
            peak, when = len(data["event"]) - 1, "the end"
        else:
            peak = max(range(len(data["event"])), key=data["allocated_bytes"].__getitem__) \
                if data["event"] else -1
            when = "peak allocated"
        name = (self.title + ": " if self.title else "") + self._choice()
        if len(history):
            history.goto(peak)
            state = history.snapshot()
        else:
            state = source
        show(state, ax=self._top, title=f"{name}, at event {peak} ({when})")
        draw_timeline(self._bottom, [data], cursor=peak if peak >= 0 else None)
        for ax in (self._top, self._bottom):
            if ax.get_legend() is not None:
                ax.get_legend().remove()
        self._set_legend(_drawn_gids(self._top, self._bottom))
        self._canvas.restore_region(self._background)
        self._figure.draw_artist(self._top)
        self._figure.draw_artist(self._bottom)
        return _png(self._canvas)

    def _new_figure(self) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        self._figure = Figure(figsize=(10, 6.8), dpi=self.dpi)
        self._canvas = FigureCanvasAgg(self._figure)
        self._top = self._figure.add_axes((0.17, 0.55, 0.6, 0.33))
        self._bottom = self._figure.add_axes((0.08, 0.07, 0.69, 0.32))
        self._legend, self._legend_key = None, None

    def _set_legend(self, drawn: set) -> None:
        """The legend lists what this frame draws: remade (with the saved background) only when
        the optional marks drawn change, so most frames cost nothing more."""
        key = frozenset(drawn & set(OPTIONAL_MARKS))
        if key == self._legend_key:
            return
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
        from .palette import (BLOCK_STYLE, EXPANDABLE_EDGE, LARGEST_FREE_EDGE, OKABE_ITO,
                              SERIES_STYLE)
        handles = [Patch(facecolor=c, label=label) for name, (c, label) in BLOCK_STYLE.items()
                   if f"blocks:{name}" in key]
        optional = {
            "largest": Patch(facecolor="none", edgecolor=LARGEST_FREE_EDGE, linewidth=2,
                             label="largest free block"),
            "segments:expandable": Patch(facecolor="none", edgecolor=EXPANDABLE_EDGE,
                                         linestyle="--", label="expandable segment"),
            "release": Line2D([], [], color="#999999", lw=0.8,
                              label="release moment (segments freed or unmapped)"),
            "oom": Line2D([], [], color=OKABE_ITO["vermillion"], marker="X", ls="none",
                          label="out of memory"),
            "capacity": Line2D([], [], color="black", ls="--", lw=0.8, label="device capacity")}
        handles += [optional[g] for g in ("largest", "segments:expandable") if g in key]
        handles += [Line2D([], [], color=c, ls=style, label=label)
                    for c, label, style in SERIES_STYLE.values()]
        handles += [Line2D([], [], color="black", lw=1, label="event shown in the block map")]
        handles += [optional[g] for g in ("release", "oom", "capacity") if g in key]
        if self._legend is not None:
            self._legend.remove()
        self._legend = self._figure.legend(handles=handles, loc="upper left",
                                           bbox_to_anchor=(0.79, 0.88), fontsize=7,
                                           frameon=False)
        shown = [ax.get_visible() for ax in (self._top, self._bottom)]
        for ax in (self._top, self._bottom):
            ax.set_visible(False)
        self._canvas.draw()
        self._background = self._canvas.copy_from_bbox(self._figure.bbox)
        for ax, visible in zip((self._top, self._bottom), shown):
            ax.set_visible(visible)
        self._legend_key = key

    def _build_widgets(self):
        import ipywidgets as w
        self.inputs = {}
        for name, options in self.controls.items():
            labels = [(_show(o), o) for o in options]
            if all(isinstance(o, (int, float)) and not isinstance(o, bool) for o in options):
                field = w.SelectionSlider(options=labels, value=options[0], description=name,
                                          continuous_update=False)
            else:
                field = w.Dropdown(options=labels, value=options[0], description=name)
            field.observe(lambda change, n=name: self.update(**{n: change["new"]}),
                          names="value")
            self.inputs[name] = field
        self.image = w.Image(format="png")
        self.text = w.HTML()
        self.frame = w.Box([self.image])   # the PNG, or the browser's drawing
        return w.VBox([w.HBox(list(self.inputs.values())), self.text, self.frame])

    def _repr_mimebundle_(self, **kwargs):
        from .static import escape, png_img, widget_bundle
        choices = "; ".join(f"{k}: {', '.join(_show(o) for o in v)}"
                            for k, v in self.controls.items())
        head = f"what-if at {self._choice()}: {self.line}"
        html = (f"<div><b>{escape(head)}</b><br>{png_img(self.png, alt=head)}<br>"
                f"<small>choices: {escape(choices)}</small></div>")
        data = widget_bundle(self.widget, html, head)
        if self.png:
            import base64
            data["image/png"] = base64.b64encode(self.png).decode("ascii")
        return data

    def __repr__(self):
        return f"<what-if at {self._choice()}>"


# marks a frame may or may not draw (artist gids): the legend lists those it draws
OPTIONAL_MARKS = ("largest", "segments:expandable", "release", "oom", "capacity",
                  "blocks:requested", "blocks:rounding", "blocks:pending", "blocks:free")


def _drawn_gids(*axes) -> set:
    return {a.get_gid() for ax in axes for a in ax.get_children() if a.get_gid()}


def _show(value) -> str:
    if isinstance(value, str):
        return value or "defaults"
    if isinstance(value, int) and not isinstance(value, bool) and value >= (1 << 20) \
            and value % 1024 == 0:   # a byte count, not a batch size
        from gpumemlab.units import format_size
        return format_size(value)
    return f"{value:,}" if isinstance(value, int) else str(value)


def _summary(source) -> str:
    from gpumemlab.units import format_size
    from .memory_timeline import timeline_data
    data = timeline_data(source)
    ooms = sum(1 for a in data["action"] if a == "oom")
    peak_r = max(data["reserved_bytes"], default=0)
    peak_a = max(data["allocated_bytes"], default=0)
    text = f"peak reserved {format_size(peak_r)}, peak allocated {format_size(peak_a)}"
    from .memory_timeline import UNLIMITED
    if data.get("total_memory") and data["total_memory"] < UNLIMITED:
        text += f" on a {format_size(data['total_memory'])} card"
    elif data.get("total_memory"):
        text += " with no capacity limit"
    return text + (f"; {ooms} out-of-memory error(s)" if ooms else "; no out-of-memory error")


def _replayer(recording):
    def run(alloc_conf=None, total_memory=None):
        from gpumemlab.recordings.replay import replay
        return replay(recording, alloc_conf=alloc_conf, total_memory=total_memory)
    return run
