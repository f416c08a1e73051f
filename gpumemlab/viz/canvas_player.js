// The browser block map and timeline of gml.player and gml.whatif (gpumemlab/viz/canvas_widget.py):
// the last part of the widget's module, after canvas_data.js and canvas_timeline.js.
//
// An anywidget module, shipped inside the package and loaded as it is: no build step, nothing
// fetched. Everything here runs in the browser: a slider move redraws the map at once, and the
// event index reaches the kernel afterwards (once the slider rests) for the text, metrics and the
// request's verdict there. The request marker is the kernel's: c10's best fit and its verdict
// for the event it last heard of (the `request` trait), drawn only while that is the event shown.
//
// Zoom: the wheel over the map zooms around the pointer (every row by the same factor), a drag
// pans, a double-click (or "reset") shows whole segments again. Hover: a block's size, state,
// requested bytes, segment, stream and frame; over the timeline, the event and the band.
// For tests and curious readers the root element says what it drew: data-event, data-segments,
// data-blocks (live blocks drawn), data-free-blocks, data-draw-ms, data-load-ms (columns viewed,
// timeline drawn, first frame), data-zoom (the fraction of
// a row's scale shown, "v0,v1"), data-request (the verdict shown, "" while stale) and
// data-request-drawn (1 when the marker is drawn), and data-hover (the tooltip).

// The kernel hears of a move once the slider has rested SYNC_MS, or every SYNC_MAX_MS during a
// long drag: each answer (its text, metrics table and request) costs the page scripts and a
// layout, which long-animation-frame entries showed filling a loaded machine's slow drag frames
const SYNC_MS = 150, SYNC_MAX_MS = 1000;
const MIN_SPAN = 1e-7;

function hatch(colour) {
  const tile = document.createElement("canvas");
  tile.width = tile.height = 6;
  const t = tile.getContext("2d");
  t.strokeStyle = colour;
  t.beginPath(); t.moveTo(0, 6); t.lineTo(6, 0); t.stroke();
  return tile;
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "gml-canvas-player";
  // contain: a redraw lays out and paints this widget only, not the notebook around it
  root.style.cssText = "font: 12px sans-serif; position: relative; contain: layout paint;" +
    " width: " + WIDTH + "px";
  const line = "white-space: nowrap; overflow: hidden; height: 16px";
  const head = document.createElement("div"), verdict = document.createElement("div");
  head.style.cssText = line;
  verdict.style.cssText = line + "; color: #b03a00";
  const bar = document.createElement("div");
  const slider = document.createElement("input");
  slider.type = "range";
  slider.style.width = (WIDTH - 150) + "px";
  const zoomText = document.createElement("span");
  const buttons = ["+", "\u2212", "reset"].map(label => {
    const b = document.createElement("button");
    b.textContent = label;
    return b;
  });
  bar.append(slider, ...buttons, zoomText);
  const map = document.createElement("canvas");
  const box = document.createElement("div");
  box.style.cssText = "position: relative; height: " + TIMELINE_H + "px";
  const timeline = document.createElement("canvas");
  const cursor = document.createElement("div");
  cursor.style.cssText = "position:absolute; left:0; top:2px; width:1px; background:#000;" +
    " height:" + (TIMELINE_H - 20) + "px; will-change: transform; pointer-events:none";
  box.append(timeline, cursor);
  const tip = document.createElement("div");
  tip.style.cssText = "position:absolute; display:none; pointer-events:none; background:#fff;" +
    "border:1px solid #888; padding:3px 5px; white-space:pre; font:11px monospace; z-index:10";
  map.width = WIDTH;
  timeline.width = WIDTH;
  timeline.height = TIMELINE_H;
  root.append(head, verdict, bar, map, box, tip);
  el.appendChild(root);

  let rec = null, current = -1, frame = null, drawnTimeline = null;
  let syncTimer = null, syncFirst = null;
  let view = [0, 1], pattern = null, headText = "", verdictText = null;

  function load() {
    const start = performance.now();
    rec = new Recording(model.get("meta"), model.get("data"));
    slider.min = 0;
    slider.max = Math.max(0, rec.n - 1);
    map.height = mapHeight(rec);
    drawnTimeline = drawTimelineImage(rec);
    const tctx = timeline.getContext("2d");
    tctx.clearRect(0, 0, WIDTH, TIMELINE_H);
    tctx.drawImage(drawnTimeline.image, 0, 0);
    pattern = map.getContext("2d").createPattern(hatch(rec.meta.colours.request), "repeat");
    current = -1;
    draw(Math.min(Math.max(model.get("index"), 0), rec.n - 1));
    root.dataset.loadMs = (performance.now() - start).toFixed(1);
  }

  function draw(k) {
    if (!rec || rec.n === 0) return;
    const start = performance.now();
    const c = rec.c, colours = rec.meta.colours;
    const { segs, blocks } = rec.stateAt(k);
    const { rows, rowH } = layoutRows(rec, segs);
    placeBlocks(rec, rows, blocks);
    const ctx = map.getContext("2d"), span = view[1] - view[0];
    ctx.clearRect(0, 0, WIDTH, map.height);
    ctx.save();
    ctx.beginPath();
    ctx.rect(LEFT, 0, PLOT_W, map.height);
    ctx.clip();
    let drawn = 0, freeBlocks = 0;
    // free first (the segment's whole band), then the live blocks over it, a colour at a time
    ctx.fillStyle = colours.free;
    for (const r of rows) {
      r.x = LEFT - (view[0] / span) * PLOT_W;
      r.w = Math.max(2, (c.seg_size[r.seg] / r.scale / span) * PLOT_W);
      ctx.fillRect(r.x, r.y, r.w, r.h);
    }
    const px = (r, address) => r.x + ((address - c.seg_address[r.seg]) / c.seg_size[r.seg]) * r.w;
    for (const [state, colour] of [[1, colours.requested], [2, colours.pending]]) {
      ctx.fillStyle = colour;
      for (const r of rows) for (const b of r.blocks) {
        if (c.block_state[b] !== state) continue;
        const x0 = px(r, c.block_address[b]);
        const part = state === 1 ? c.block_requested[b] : c.block_size[b];
        ctx.fillRect(x0, r.y, Math.max(1, px(r, c.block_address[b] + part) - x0), r.h);
      }
    }
    ctx.fillStyle = colours.rounding;
    for (const r of rows) for (const b of r.blocks) {
      if (c.block_state[b] !== 1 || c.block_requested[b] >= c.block_size[b]) continue;
      const x0 = px(r, c.block_address[b] + c.block_requested[b]);
      const x1 = px(r, c.block_address[b] + c.block_size[b]);
      if (x1 - x0 >= 1) ctx.fillRect(x0, r.y, x1 - x0, r.h);
    }
    for (const r of rows) {
      drawn += r.blocks.length;
      // the free blocks of a row are its gaps: count them as c10 keeps them, merged
      r.blocks.sort((a, b) => c.block_address[a] - c.block_address[b]);
      let at = c.seg_address[r.seg];
      for (const b of r.blocks) {
        if (c.block_address[b] > at) freeBlocks++;
        at = c.block_address[b] + c.block_size[b];
      }
      if (at < c.seg_address[r.seg] + c.seg_size[r.seg]) freeBlocks++;
      if (c.seg_expandable[r.seg]) {
        ctx.strokeStyle = colours.expandable;
        ctx.setLineDash([4, 3]);
        ctx.strokeRect(r.x + 0.5, r.y + 0.5, r.w - 1, Math.max(1, r.h - 1));
        ctx.setLineDash([]);
      }
    }
    const marked = drawRequest(ctx, k, rows, px);
    ctx.restore();
    if (rowH >= 10) {
      ctx.fillStyle = "#333";
      for (const r of rows) ctx.fillText("seg " + r.number, 4, r.y + r.h - 2);
    }
    cursor.style.transform = "translateX(" + (LEFT + ((k + 0.5) / rec.n) * PLOT_W) + "px)";
    const action = rec.meta.actions[c.event_action[k]] || "?";
    const text = "event " + k + " of 0.." + (rec.n - 1) + ": " + action +
      " · allocated " + sizeText(c.event_allocated[k]) + " · reserved " +
      sizeText(c.event_reserved[k]) + " · " + rows.length + " segment(s), " + drawn +
      " live block(s), " + freeBlocks + " free";
    if (text !== headText) head.textContent = headText = text;
    showVerdict(k);
    frame = { k, rows };
    current = k;
    if (String(slider.value) !== String(k)) slider.value = k;
    Object.assign(root.dataset, { event: k, segments: rows.length, blocks: drawn,
                                  freeBlocks, requestDrawn: marked ? 1 : 0 });
    root.dataset.drawMs = (performance.now() - start).toFixed(3);
  }

  function drawRequest(ctx, k, rows, px) {
    // the kernel's best fit, drawn only on the event it was computed for
    const req = model.get("request") || {};
    if (req.event !== k || !req.fit) return false;
    const c = rec.c, r = rows.find(r => c.seg_address[r.seg] === req.fit.segment_address);
    if (!r) return false;
    const x0 = px(r, req.fit.address), x1 = Math.max(x0 + 2, px(r, req.fit.address + req.fit.take));
    ctx.fillStyle = pattern;
    ctx.fillRect(x0, r.y, x1 - x0, r.h);
    ctx.strokeStyle = rec.meta.colours.request;
    ctx.lineWidth = 2;
    ctx.strokeRect(x0 + 1, r.y + 1, x1 - x0 - 2, Math.max(1, r.h - 2));
    ctx.lineWidth = 1;
    return true;
  }

  function showVerdict(k) {
    const req = model.get("request") || {};
    let text = "";
    if (req.text !== undefined) text = req.event === k ? req.text : "request of " +
      sizeText(req.bytes) + ": the kernel is working out event " + k + "\u2026";
    if (text !== verdictText) verdict.textContent = verdictText = text;
    root.dataset.request = req.event === k ? req.text || "" : "";
  }

  function sync() {
    const now = performance.now();
    if (syncTimer !== null) clearTimeout(syncTimer);
    if (syncFirst === null) syncFirst = now;
    syncTimer = setTimeout(() => {
      syncTimer = syncFirst = null;
      if (model.get("index") !== current) {
        model.set("index", current);
        model.save_changes();
      }
    }, Math.max(0, Math.min(SYNC_MS, syncFirst + SYNC_MAX_MS - now)));
  }

  function jump(k) {
    k = Math.min(Math.max(k | 0, 0), rec.n - 1);
    if (k !== current) draw(k);
    sync();
  }

  function zoom(factor, at) {
    // keep the byte under the pointer (`at`, a fraction of the plot's width) where it is
    const span = view[1] - view[0];
    const next = Math.min(1, Math.max(MIN_SPAN, span * factor));
    const fixed = view[0] + at * span;
    const v0 = Math.min(Math.max(0, fixed - at * next), 1 - next);
    setView(v0, v0 + next);
  }

  function setView(v0, v1) {
    view = [v0, v1];
    const f = 1 / (v1 - v0);
    zoomText.textContent = f > 1.0001 ? " zoom x" + (f < 100 ? f.toFixed(1) : Math.round(f)) : "";
    root.dataset.zoom = v0 + "," + v1;
    if (rec) { const k = current; current = -1; draw(k); }
  }

  function hover(ev) {
    if (!frame) return;
    const b0 = map.getBoundingClientRect();
    const x = ev.clientX - b0.left, y = ev.clientY - b0.top;
    const c = rec.c, r = frame.rows.find(r => y >= r.y && y < r.y + Math.max(r.h, 2));
    if (!r || x < Math.max(r.x, LEFT) || x > Math.min(r.x + r.w, LEFT + PLOT_W)) return hide();
    const segAddr = c.seg_address[r.seg], segEnd = segAddr + c.seg_size[r.seg];
    const address = segAddr + ((x - r.x) / r.w) * c.seg_size[r.seg];
    // the live block under the pointer, else the free gap around it
    let lines, start = segAddr, end = segEnd;
    const b = r.blocks.find(b => c.block_address[b] <= address &&
                            address < c.block_address[b] + c.block_size[b]);
    const where = "seg " + r.number + " (" + rec.meta.pools[c.seg_pool[r.seg]] + " pool, stream " +
      c.seg_stream[r.seg] + (c.seg_expandable[r.seg] ? ", expandable" : "") + ")";
    if (b !== undefined) {
      const frameNo = c.block_frame[b];
      lines = [sizeText(c.block_size[b]) + " " + rec.meta.states[c.block_state[b]],
               "requested " + sizeText(c.block_requested[b]),
               where + " +" + sizeText(c.block_address[b] - segAddr),
               "frame " + (frameNo >= 0 ? rec.meta.frames[frameNo] : "(no frames recorded)")];
    } else {
      for (const o of r.blocks) {
        const oEnd = c.block_address[o] + c.block_size[o];
        if (oEnd <= address && oEnd > start) start = oEnd;
        if (c.block_address[o] > address && c.block_address[o] < end) end = c.block_address[o];
      }
      lines = [sizeText(end - start) + " inactive (free, cached)", where + " +" +
               sizeText(start - segAddr)];
    }
    showTip(lines, x, map.offsetTop + y);
  }

  function showTip(lines, x, y) {
    tip.textContent = lines.join("\n");
    root.dataset.hover = lines.join(" | ");
    tip.style.left = Math.min(x + 12, WIDTH - 300) + "px";
    tip.style.top = (y + 14) + "px";
    tip.style.display = "block";
  }

  function hide() { tip.style.display = "none"; root.dataset.hover = ""; }

  function fromTimeline(ev) {
    const b0 = timeline.getBoundingClientRect();
    jump(Math.floor(((ev.clientX - b0.left - LEFT) / PLOT_W) * rec.n));
  }

  function onWheel(ev) {
    ev.preventDefault();
    const b0 = map.getBoundingClientRect();
    const at = Math.min(1, Math.max(0, (ev.clientX - b0.left - LEFT) / PLOT_W));
    zoom(ev.deltaY < 0 ? 0.8 : 1.25, at);
    hover(ev);
  }

  function onPan(ev) {
    if (view[1] - view[0] >= 1) return;
    let last = ev.clientX;
    const move = e => {
      const span = view[1] - view[0];
      const v0 = Math.min(Math.max(0, view[0] - ((e.clientX - last) / PLOT_W) * span), 1 - span);
      last = e.clientX;
      setView(v0, v0 + span);
    };
    const up = () => { window.removeEventListener("mousemove", move);
                       window.removeEventListener("mouseup", up); };
    window.addEventListener("mousemove", move);
    window.addEventListener("mouseup", up);
  }

  slider.addEventListener("input", () => jump(Number(slider.value)));
  buttons[0].addEventListener("click", () => zoom(0.5, 0.5));
  buttons[1].addEventListener("click", () => zoom(2, 0.5));
  buttons[2].addEventListener("click", () => setView(0, 1));
  map.addEventListener("mousemove", hover);
  map.addEventListener("mouseleave", hide);
  map.addEventListener("wheel", onWheel, { passive: false });
  map.addEventListener("mousedown", onPan);
  map.addEventListener("dblclick", () => setView(0, 1));
  timeline.addEventListener("mousemove", ev => {
    const b0 = timeline.getBoundingClientRect();
    const lines = timelineHover(rec, drawnTimeline, ev.clientX - b0.left, ev.clientY - b0.top);
    lines ? showTip(lines, ev.clientX - b0.left, box.offsetTop + ev.clientY - b0.top) : hide();
  });
  timeline.addEventListener("mouseleave", hide);
  timeline.addEventListener("mousedown", ev => {
    fromTimeline(ev);
    const move = e => fromTimeline(e);
    const up = () => { window.removeEventListener("mousemove", move);
                       window.removeEventListener("mouseup", up); };
    window.addEventListener("mousemove", move);
    window.addEventListener("mouseup", up);
  });
  const onIndex = () => { const k = model.get("index"); if (rec && k !== current) draw(k); };
  const onRequest = () => {
    if (rec && current >= 0) { const k = current; current = -1; draw(k); }
  };
  const onData = () => load();
  model.on("change:index", onIndex);
  model.on("change:request", onRequest);
  model.on("change:data", onData);
  setView(0, 1);
  load();
  return () => {
    model.off("change:index", onIndex);
    model.off("change:request", onRequest);
    model.off("change:data", onData);
    if (syncTimer !== null) clearTimeout(syncTimer);
  };
}

export default { render };
