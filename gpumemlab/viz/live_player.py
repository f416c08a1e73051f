"""The live player (``gml.player``): step through a trace and watch the block map change.

A Play button and a slider over the events of a recorded trace (a snapshot with history, a
device, or a replay result). Each position redraws the block map of the allocator state after
that event, moves the cursor on the timeline, says in words what the event did and why, and
updates the metrics table. The image is a PNG in an ``ipywidgets.Image`` and the text is in
``HTML`` widgets, not an ``Output`` widget, so nothing leaks into cell output when notebooks run
headless (nbval). All state lives in the kernel: ``player.goto(k)`` or ``player.slider.value = k``
moves it, and ``player.index``, ``player.state``, ``player.metrics()``, ``player.description()``
read it. Stepping applies one trace entry to the previous state (:class:`History`), never
re-replaying from the start. Its MIME bundle carries the current frame as ``text/html`` (the
PNG inline, the event in words, the metrics table) and a one-line ``text/plain`` as well as the
widget view (``gpumemlab.viz.static``), so an exported notebook shows the frame.

Where a front end is there (a Jupyter kernel, ``GPUMEMLAB_HEADLESS`` unset) and anywidget
imports, the frame is drawn in the browser instead (``gpumemlab.viz.canvas_widget``): the whole
recording goes there once and the browser redraws on every slider move; the PNG is then made only
when asked for (``player.png``, the exported copy). A ``request``'s best fit and verdict are still
worked out here, for each event the kernel hears of, and sent to the browser to mark. Headless,
under nbval, it is the PNG as before.
"""
from __future__ import annotations

import io
import textwrap
from html import escape

from gpumemlab.units import format_size
from gpumemlab.viz.blockmap import blockmap_info, draw_panel_data, plan_panels, setup_panel
from gpumemlab.viz.request_path import driver_room
from gpumemlab.viz.describe import plus
from gpumemlab.viz.history import History
from gpumemlab.viz.memory_timeline import draw_timeline, timeline_data
from gpumemlab.viz.palette import BLOCK_STYLE, EXPANDABLE_EDGE, LARGEST_FREE_EDGE, REQUEST_COLOUR

from .metrics import fragmentation

BLOCKMAP_SHARE = 0.62  # of the figure height; the timeline gets the rest
LAYOUTS_KEPT = 32      # recent block-map layouts kept drawn (about 1.5 MB each at 72 dpi)


def player(source, *, device=None, request=None, interval_ms: int = 400, dpi: int = 72,
           start=None, canvas=None) -> "Player":
    """A :class:`Player` over the events of a snapshot with history, a device or replay result.

    Args:
        request: a request size (bytes or "2GiB") whose best fit is marked at every step.
        interval_ms: time between frames when Play runs.
        dpi: resolution of the rendered frame.
        start: the first event shown (default: the last one, the state the snapshot shows).
        canvas: draw in the browser (True), as a PNG (False), or None: the browser when a front
            end is there and anywidget imports.
    """
    return Player(source, device=device, request=request, interval_ms=interval_ms, dpi=dpi,
                  start=start, canvas=canvas)


class Player:
    """Kernel-side stepping over a :class:`History`, mirrored by widgets."""

    def __init__(self, source, *, device=None, request=None, interval_ms=400, dpi=72,
                 start=None, canvas=None):
        self.history = source if isinstance(source, History) else History(source, device=device)
        n = len(self.history)
        if n == 0:
            raise ValueError("this snapshot has no recorded history (device_traces is empty): "
                             "record with SimulatedGPU(record_history=True) or "
                             "torch.cuda.memory._record_memory_history(), or draw the single "
                             "state with gml.show(snapshot)")
        if isinstance(interval_ms, bool) or not isinstance(interval_ms, int) or interval_ms < 1:
            raise ValueError(f"interval_ms must be a positive int, got {interval_ms!r}")
        self.request = request
        self.dpi = dpi
        self.total_memory = self.history.source.total_memory
        self._timeline = timeline_data(self.history)
        self._build_figure()
        self._png, self._png_index = None, None
        self.canvas_widget = _canvas(self.history, canvas)
        self._build_widgets(n, interval_ms)
        self.index = None
        self.goto(n - 1 if start is None else start)
        self._link_widgets()

    # ---- kernel-side API
    def __len__(self):
        return len(self.history)

    def goto(self, k: int) -> "Player":
        """Show the state after event ``k`` (negative k counts from the end)."""
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(f"event index must be an int, not {type(k).__name__}")
        n = len(self.history)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise ValueError(f"event index out of range: the trace has {n} events (0..{n - 1})")
        if self.slider.value != k:
            self.slider.value = k  # the observer redraws
        elif self.index != k:
            self._show(k)
        return self

    def step(self, n: int = 1) -> "Player":
        """Move ``n`` events forward (negative: back), stopping at the ends."""
        return self.goto(min(max(self.index + n, 0), len(self.history) - 1))

    @property
    def state(self) -> dict:
        """The snapshot dict of the allocator state at the current event."""
        return self.history.snapshot()

    def segments(self) -> list:
        return self.history.segments()

    def description(self) -> str:
        """The current event in words."""
        return self.history.last_description

    def metrics(self):
        """Fragmentation figures of the current state (``gml.fragmentation``)."""
        return fragmentation({"segments": self._segments,
                              "allocator_settings": self.history.source.settings},
                             total_memory=self.total_memory)

    @property
    def event(self) -> dict:
        """The trace entry under the cursor."""
        return self.history.events[self.index]

    # ---- drawing
    # Text is what costs in Agg (a few ms a label), so a frame redraws only what changed: the
    # blocks, the timeline cursor and the title are drawn over a saved image of everything else
    # (axes, labels, legends, the timeline curves). The saved image is remade only when the
    # panels change (a segment appears or goes) to a layout not among the recent ones kept.
    def _build_figure(self) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        # a bare Figure, not pyplot: it is shown only through the Image widget, never twice
        self.figure = Figure(figsize=(10, 7.5), dpi=self.dpi)
        self.canvas = FigureCanvasAgg(self.figure)
        grid = self.figure.add_gridspec(2, 1, height_ratios=(BLOCKMAP_SHARE, 1 - BLOCKMAP_SHARE),
                                        left=0.15, right=0.74, top=0.84, bottom=0.07, hspace=0.3)
        self._map_spec = grid[0]
        self._map_axes, self._data, self._plan_key, self._background = [], [], None, None
        self._layouts = {}  # plan key -> (axes, background), least recently used first
        self.timeline_ax = self.figure.add_subplot(grid[1])
        draw_timeline(self.timeline_ax, [self._timeline], cursor=0)
        self._cursor = next(line for line in self.timeline_ax.lines if line.get_gid() == "cursor")
        self._cursor.set_animated(True)
        self._title = self.figure.text(0.02, 0.985, "", fontsize=9, va="top", ha="left",
                                       animated=True)

    def _frame_info(self) -> None:
        """The panels and block-map figures of the current state (no drawing)."""
        segments = self._segments
        self._panels = plan_panels(segments)
        room = None if self.request is None else driver_room(
            None, segments, total_memory=self.total_memory, trace=[self.event])
        self.blockmap_info = blockmap_info(self._panels, segments, self.history.rules,
                                           request=self.request, room=room)

    def _draw_map(self) -> None:
        segments, panels, info = self._segments, self._panels, self.blockmap_info
        marks = _marks(segments, info)
        key = (tuple((p["title"], tuple(p["rows"]), p["max_bytes"],
                      tuple(segments[i]["total_size"] for i in p["rows"])) for p in panels), marks)
        for artist in self._data:
            artist.remove()
        if key != self._plan_key:
            self._use_layout(key, panels, segments, marks)
        self._data = []
        for ax, panel in zip(self._map_axes, panels):
            self._data += draw_panel_data(ax, panel, segments, info)
        for artist in self._data:
            artist.set_animated(True)

    def _use_layout(self, key, panels, segments, marks) -> None:
        """Show the panels' axes and background for ``key``: from the cache of recent layouts
        (a jump back to a state with the same segments redraws no axis, label or legend), else
        drawn anew and cached, the least recently used layout making room."""
        for ax in self._map_axes:
            ax.set_visible(False)   # kept in the figure, hidden, for a later jump back
        cached = self._layouts.pop(key, None)
        if cached is None:
            self._new_axes(panels, segments, marks, setup_panel)
        else:
            self._map_axes, self._background = cached
            for ax in self._map_axes:
                ax.set_visible(True)
        self._layouts[key] = (self._map_axes, self._background)
        while len(self._layouts) > LAYOUTS_KEPT:
            for ax in self._layouts.pop(next(iter(self._layouts)))[0]:
                ax.remove()
        self._plan_key = key

    def _new_axes(self, panels, segments, marks, setup_panel) -> None:
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
        sub = self._map_spec.subgridspec(
            len(panels), 1, hspace=0.9,
            height_ratios=[max(1.0, min(6.0, 1 + 0.25 * len(p["rows"]))) for p in panels])
        self._map_axes = [self.figure.add_subplot(sub[i]) for i in range(len(panels))]
        for ax, panel in zip(self._map_axes, panels):
            setup_panel(ax, panel, segments)
        # the legend names what this frame draws (remade with the axes when that changes);
        # sizes go in the title
        handles = [Patch(facecolor=c, label=label) for name, (c, label) in BLOCK_STYLE.items()
                   if name in marks]
        if "largest" in marks:
            handles.append(Patch(facecolor="none", edgecolor=LARGEST_FREE_EDGE, linewidth=2,
                                 label="largest free block"))
        if "request" in marks:
            handles.append(Patch(facecolor="none", edgecolor=REQUEST_COLOUR, hatch="///",
                                 label="where the request would go"))
        if "expandable" in marks:
            handles.append(Line2D([], [], color=EXPANDABLE_EDGE, ls="--",
                                  label="expandable segment"))
        self._map_axes[0].legend(handles=handles, fontsize=7, loc="upper left",
                                 bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        self.canvas.draw()  # animated artists are left out of this
        self._background = self.canvas.copy_from_bbox(self.figure.bbox)

    def _show(self, k: int) -> None:
        self.history.goto(k)
        self.index = k
        self._segments = self.history.segments()  # built once a frame, read by map and metrics
        self._frame_info()
        if self.canvas_widget is None:
            self._draw_frame()
        else:   # the browser draws; the PNG waits until someone reads player.png
            from gpumemlab.viz.canvas_widget import request_mark
            with self.canvas_widget.hold_sync():
                self.canvas_widget.index = k
                if self.request is not None:   # c10's fit and verdict, worked out here
                    self.canvas_widget.request = request_mark(k, self.blockmap_info,
                                                              self._segments)
        self._texts()

    @property
    def png(self) -> bytes:
        """The current frame as PNG bytes (drawn now if the browser drew the frame)."""
        if self._png_index != self.index:
            self._draw_frame()
        return self._png

    def _draw_frame(self) -> None:
        k = self.index
        self._draw_map()
        self._cursor.set_xdata([k, k])
        lines = [self.description()]
        largest = self.blockmap_info["largest"]
        if largest:
            lines.append(f"largest free block: {format_size(largest['size_bytes'])} at seg "
                         f"{largest['segment']} {plus(largest['offset_bytes'])}")
        # the request verdict goes to the HTML line only: every glyph drawn costs a frame time
        self._title.set_text("\n".join(w for line in lines for w in textwrap.wrap(line, 120)))
        self._render()

    def _render(self) -> None:
        self.canvas.restore_region(self._background)
        for artist in self._data + [self._cursor, self._title]:
            artist.axes.draw_artist(artist) if artist.axes else self.figure.draw_artist(artist)
        self._png, self._png_index = _png(self.canvas), self.index
        if self.canvas_widget is None:
            self.image.value = self._png

    def _texts(self) -> None:
        verdict = self.blockmap_info.get("request_text")
        self.text.value = f"<b>{escape(self.description())}</b>" + \
            (f"<br>{escape(verdict)}" if verdict else "")
        self.table.value = self.metrics()._repr_html_()

    # ---- widgets
    def _build_widgets(self, n: int, interval_ms: int) -> None:
        import ipywidgets as widgets
        self.play = widgets.Play(min=0, max=n - 1, step=1, interval=interval_ms,
                                 description="Play")
        self.slider = widgets.IntSlider(min=0, max=n - 1, step=1, value=0,
                                        description="event", continuous_update=False,
                                        layout=widgets.Layout(width="60%"))
        self.text = widgets.HTML()
        self.image = widgets.Image(format="png")
        self.table = widgets.HTML()
        self.slider.observe(self._on_slider, names="value")
        frame = self.image
        if self.canvas_widget is not None:
            # the browser's own slider drags the drawing; Play drives it there too, and the
            # kernel hears of each move through the widget's index
            frame = self.canvas_widget
            self.slider.layout.display = "none"
            frame.observe(self._on_canvas, names="index")
        self.widget = widgets.VBox([widgets.HBox([self.play, self.slider]), self.text,
                                    frame, self.table])

    def _link_widgets(self) -> None:
        """The Play button drives the slider, or the browser's drawing, in the browser;
        headless, goto() does. Linked once the first event is shown, from there: a link starts
        by copying Play's value over. With the browser drawing, the hidden slider is linked to
        nothing: its kernel-side moves, arriving after a drag has gone on, would pull the
        drawing back through Play's link."""
        import ipywidgets as widgets
        self.play.value = self.index
        target = (self.slider, "value") if self.canvas_widget is None else \
            (self.canvas_widget, "index")
        self._link = widgets.jslink((self.play, "value"), target)

    def _on_slider(self, change) -> None:
        self._show(int(change["new"]))

    def _on_canvas(self, change) -> None:
        k = int(change["new"])
        if 0 <= k < len(self.history) and k != self.index:
            self.slider.value = k

    def _repr_mimebundle_(self, **kwargs):
        from gpumemlab.viz.static import escape, png_img, widget_bundle
        html = (f"<div><b>{escape(self._headline())}</b><br>"
                f"{png_img(self.png, alt=self.description())}<br>{self.table.value}</div>")
        return widget_bundle(self.widget, html, self._headline())

    def _headline(self) -> str:
        # the description already starts "event k: ..."; say where k sits in the trace
        return f"player, {len(self.history)} events (0..{len(self.history) - 1}): " \
            f"{self.description()}"

    def __repr__(self):
        return f"<{self._headline()}>"


def _canvas(history, wanted):
    """The browser's block map for ``history``, or None for the PNG (``front_end``)."""
    from gpumemlab.viz.front_end import browser_wanted
    if not browser_wanted(wanted):
        return None
    from gpumemlab.viz.canvas_widget import CanvasPlayer
    return CanvasPlayer(history, index=len(history) - 1)


def _png(canvas) -> bytes:
    """The canvas as PNG bytes; fast compression, since a frame is shown once."""
    from PIL import Image
    width, height = canvas.get_width_height(physical=True)
    image = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    buffer = io.BytesIO()
    image.save(buffer, format="png", compress_level=1)
    return buffer.getvalue()


def _marks(segments, info) -> frozenset:
    """What a frame draws that its legend names: block states, largest block, request, outline."""
    marks = set()
    for seg in segments:
        for block in seg["blocks"]:
            state = block["state"]
            if state == "active_allocated":
                marks.add("requested")
                if block.get("requested_size", block["size"]) < block["size"]:
                    marks.add("rounding")
            else:
                marks.add("pending" if state == "active_pending_free" else "free")
    for name, present in (("largest", info["largest"]), ("request", info["fit"]),
                          ("expandable", info["expandable"])):
        if present:
            marks.add(name)
    return frozenset(marks)
