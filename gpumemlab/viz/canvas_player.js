// The browser block map and timeline of gml.player (gpumemlab/viz/canvas_widget.py).
//
// An anywidget module, shipped inside the package and loaded as it is: no build step, nothing
// fetched. The kernel sends the recording once (gpumemlab/viz/compact.py): every segment and live
// block is a record alive for t0 <= t < t1, where t is the number of events applied, so the
// state after event k is one scan of typed arrays at t = k + 1; free blocks are the gaps between
// live blocks (c10 merges free neighbours). Everything below runs in the browser: a slider move
// redraws at once, and the event index reaches the kernel afterwards (throttled) for the text
// and metrics there.
//
// For tests and curious readers the root element says what it drew: data-event, data-segments,
// data-blocks (live blocks drawn), data-free-blocks, data-draw-ms, and data-hover (the tooltip).

const WIDTH = 880, LEFT = 64, RIGHT = 8, MAP_MAX_H = 420, TIMELINE_H = 110;
const SYNC_MS = 120;  // the kernel hears of a drag at most this often

function sizeText(n) {
  const units = [[2 ** 40, "TiB"], [2 ** 30, "GiB"], [2 ** 20, "MiB"], [2 ** 10, "KiB"]];
  for (const [u, name] of units) if (n >= u) return (n / u).toFixed(2) + " " + name;
  return n + " bytes";
}

function columnsOf(meta, data) {
  // a fresh, aligned copy: a DataView from the comm may start at any byte
  const bytes = data instanceof DataView
    ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
    : new Uint8Array(data.buffer || data);
  const buffer = bytes.slice().buffer;
  const types = { Float64Array, Int32Array, Uint8Array };
  const out = {};
  for (const [name, p] of Object.entries(meta.columns)) {
    out[name] = new types[p.type](buffer, p.offset, p.length);
  }
  return out;
}

class Recording {
  constructor(meta, data) {
    this.meta = meta;
    this.c = columnsOf(meta, data);
    this.n = meta.n_events;
  }

  // the state after event k: visible segments in drawing order and the live blocks
  stateAt(k) {
    const c = this.c, t = k + 1, segs = [], blocks = [];
    const sT0 = c.seg_t0, sT1 = c.seg_t1;
    for (let i = 0; i < sT0.length; i++) if (sT0[i] <= t && t < sT1[i]) segs.push(i);
    // records were made in time order: stop at the first one born after t
    const bT0 = c.block_t0, bT1 = c.block_t1;
    for (let i = 0; i < bT0.length && bT0[i] <= t; i++) if (t < bT1[i]) blocks.push(i);
    segs.sort((a, b) => c.seg_address[a] - c.seg_address[b]);
    return { segs, blocks };
  }
}

function layoutRows(rec, segs) {
  // large pool first, then small (its own scale); a row per segment, address order in each
  const c = rec.c, groups = [[], []];
  segs.forEach((s, number) => groups[c.seg_pool[s] === 1 ? 1 : 0].push({ s, number }));
  const rows = [];
  const count = segs.length + (groups[0].length && groups[1].length ? 1 : 0);
  const rowH = Math.max(1, Math.min(18, Math.floor(MAP_MAX_H / Math.max(1, count))));
  let y = 4;
  for (let g = 0; g < 2; g++) {
    if (!groups[g].length) continue;
    let scale = 0;
    for (const r of groups[g]) scale = Math.max(scale, c.seg_size[r.s]);
    for (const r of groups[g]) {
      rows.push({ seg: r.s, number: r.number, pool: g, y, h: Math.max(1, rowH - (rowH > 3 ? 2 : 0)),
                  scale, blocks: [] });
      y += rowH;
    }
    y += rowH;  // a gap between the pools
  }
  return { rows, rowH };
}

function mapHeight(rec) {
  // one height for the whole recording, room for its most segments at once (plus the gap row):
  // resizing a canvas reallocates it, which cost a jump up to 30 ms
  const c = rec.c, delta = new Int32Array(rec.n + 3);
  for (let i = 0; i < c.seg_t0.length; i++) { delta[c.seg_t0[i]]++; delta[c.seg_t1[i]]--; }
  let live = 0, most = 1;
  for (let t = 0; t < delta.length; t++) { live += delta[t]; most = Math.max(most, live); }
  return Math.max(40, Math.min(MAP_MAX_H, (most + 1) * 18) + 12);
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "gml-canvas-player";
  root.style.cssText = "font: 12px sans-serif; position: relative; width: " + WIDTH + "px";
  const head = document.createElement("div");
  const slider = document.createElement("input");
  slider.type = "range";
  slider.style.width = WIDTH + "px";
  const map = document.createElement("canvas");
  const timeline = document.createElement("canvas");
  const tip = document.createElement("div");
  tip.style.cssText = "position:absolute; display:none; pointer-events:none; background:#fff;" +
    "border:1px solid #888; padding:3px 5px; white-space:pre; font:11px monospace; z-index:10";
  map.width = WIDTH;
  timeline.width = WIDTH;
  timeline.height = TIMELINE_H;
  root.append(head, slider, map, timeline, tip);
  el.appendChild(root);

  let rec = null, current = -1, frame = null, timelineImage = null, syncTimer = null;

  function load() {
    rec = new Recording(model.get("meta"), model.get("data"));
    slider.min = 0;
    slider.max = Math.max(0, rec.n - 1);
    timelineImage = drawTimelineImage();
    map.height = mapHeight(rec);
    current = -1;
    draw(Math.min(Math.max(model.get("index"), 0), rec.n - 1));
  }

  function drawTimelineImage() {
    // reserved and allocated after every event, one pixel column per bucket of events: the
    // column's maximum, so a one-event peak is never lost
    const off = document.createElement("canvas");
    off.width = WIDTH;
    off.height = TIMELINE_H;
    const ctx = off.getContext("2d"), c = rec.c, n = rec.n, plotW = WIDTH - LEFT - RIGHT;
    const colours = rec.meta.colours;
    let top = 1;
    for (let i = 0; i < n; i++) top = Math.max(top, c.event_reserved[i]);
    const h = TIMELINE_H - 18;
    for (const [name, colour] of [["event_reserved", colours.reserved],
                                   ["event_allocated", colours.allocated]]) {
      ctx.strokeStyle = colour;
      ctx.beginPath();
      for (let x = 0; x < plotW; x++) {
        const lo = Math.floor(x * n / plotW), hi = Math.max(lo + 1, Math.floor((x + 1) * n / plotW));
        let v = 0;
        for (let i = lo; i < hi && i < n; i++) v = Math.max(v, c[name][i]);
        const y = 4 + h - (v / top) * h;
        x ? ctx.lineTo(LEFT + x, y) : ctx.moveTo(LEFT + x, y);
      }
      ctx.stroke();
    }
    ctx.fillStyle = "#333";
    ctx.fillText(sizeText(top), 2, 12);
    ctx.fillText("0", 2, 4 + h);
    ctx.fillStyle = colours.reserved;
    ctx.fillText("reserved", LEFT + 4, TIMELINE_H - 3);
    ctx.fillStyle = colours.allocated;
    ctx.fillText("allocated", LEFT + 64, TIMELINE_H - 3);
    ctx.fillStyle = "#333";
    ctx.textAlign = "right";
    ctx.fillText("events 0.." + (n - 1), WIDTH - RIGHT, TIMELINE_H - 3);
    return off;
  }

  function draw(k) {
    if (!rec || rec.n === 0) return;
    const start = performance.now();
    const c = rec.c, colours = rec.meta.colours;
    const { segs, blocks } = rec.stateAt(k);
    const { rows, rowH } = layoutRows(rec, segs);
    const height = map.height;
    // rows by segment address, to find each block's row by bisection
    const byAddr = rows.slice().sort((a, b) => c.seg_address[a.seg] - c.seg_address[b.seg]);
    for (const b of blocks) {
      const a = c.block_address[b];
      let lo = 0, hi = byAddr.length - 1, found = -1;
      while (lo <= hi) {
        const mid = (lo + hi) >> 1;
        if (c.seg_address[byAddr[mid].seg] <= a) { found = mid; lo = mid + 1; } else hi = mid - 1;
      }
      if (found >= 0) {
        const r = byAddr[found];
        if (a < c.seg_address[r.seg] + c.seg_size[r.seg]) r.blocks.push(b);
      }
    }
    const ctx = map.getContext("2d");
    ctx.clearRect(0, 0, WIDTH, height);
    const plotW = WIDTH - LEFT - RIGHT;
    let drawn = 0, freeBlocks = 0;
    // free first (the segment's whole band), then the live blocks over it, a colour at a time
    ctx.fillStyle = colours.free;
    for (const r of rows) {
      r.x = LEFT;
      r.w = Math.max(2, (c.seg_size[r.seg] / r.scale) * plotW);
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
      let cursor = c.seg_address[r.seg];
      for (const b of r.blocks) {
        if (c.block_address[b] > cursor) freeBlocks++;
        cursor = c.block_address[b] + c.block_size[b];
      }
      if (cursor < c.seg_address[r.seg] + c.seg_size[r.seg]) freeBlocks++;
      if (c.seg_expandable[r.seg]) {
        ctx.strokeStyle = colours.expandable;
        ctx.setLineDash([4, 3]);
        ctx.strokeRect(r.x + 0.5, r.y + 0.5, r.w - 1, Math.max(1, r.h - 1));
        ctx.setLineDash([]);
      }
    }
    if (rowH >= 10) {
      ctx.fillStyle = "#333";
      for (const r of rows) ctx.fillText("seg " + r.number, 4, r.y + r.h - 2);
    }
    // the timeline: the saved curves, then the cursor
    const tctx = timeline.getContext("2d");
    tctx.clearRect(0, 0, WIDTH, TIMELINE_H);
    tctx.drawImage(timelineImage, 0, 0);
    const cx = LEFT + ((k + 0.5) / rec.n) * plotW;
    tctx.strokeStyle = "#000";
    tctx.beginPath();
    tctx.moveTo(cx, 2);
    tctx.lineTo(cx, TIMELINE_H - 16);
    tctx.stroke();

    const action = rec.meta.actions[c.event_action[k]] || "?";
    head.textContent = "event " + k + " of 0.." + (rec.n - 1) + ": " + action +
      " · allocated " + sizeText(c.event_allocated[k]) + " · reserved " +
      sizeText(c.event_reserved[k]) + " · " + rows.length + " segment(s), " + drawn +
      " live block(s), " + freeBlocks + " free";
    frame = { k, rows };
    current = k;
    if (String(slider.value) !== String(k)) slider.value = k;
    root.dataset.event = k;
    root.dataset.segments = rows.length;
    root.dataset.blocks = drawn;
    root.dataset.freeBlocks = freeBlocks;
    root.dataset.drawMs = (performance.now() - start).toFixed(3);
  }

  function sync(k) {
    if (syncTimer !== null) return;
    syncTimer = setTimeout(() => {
      syncTimer = null;
      if (model.get("index") !== current) {
        model.set("index", current);
        model.save_changes();
      }
    }, SYNC_MS);
  }

  function jump(k) {
    k = Math.min(Math.max(k | 0, 0), rec.n - 1);
    if (k !== current) draw(k);
    sync(k);
  }

  function hover(ev) {
    if (!frame) return;
    const box = map.getBoundingClientRect();
    const x = ev.clientX - box.left, y = ev.clientY - box.top;
    const c = rec.c, r = frame.rows.find(r => y >= r.y && y < r.y + Math.max(r.h, 2));
    if (!r || x < r.x || x > r.x + r.w) { tip.style.display = "none"; root.dataset.hover = ""; return; }
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
    tip.textContent = lines.join("\n");
    root.dataset.hover = lines.join(" | ");
    tip.style.left = Math.min(x + 12, WIDTH - 260) + "px";
    tip.style.top = (map.offsetTop + y + 14) + "px";
    tip.style.display = "block";
  }

  function fromTimeline(ev) {
    const box = timeline.getBoundingClientRect();
    const plotW = WIDTH - LEFT - RIGHT;
    jump(Math.floor(((ev.clientX - box.left - LEFT) / plotW) * rec.n));
  }

  slider.addEventListener("input", () => jump(Number(slider.value)));
  map.addEventListener("mousemove", hover);
  map.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  timeline.addEventListener("mousedown", ev => {
    fromTimeline(ev);
    const move = e => fromTimeline(e);
    const up = () => { window.removeEventListener("mousemove", move); window.removeEventListener("mouseup", up); };
    window.addEventListener("mousemove", move);
    window.addEventListener("mouseup", up);
  });
  const onIndex = () => { const k = model.get("index"); if (rec && k !== current) draw(k); };
  const onData = () => load();
  model.on("change:index", onIndex);
  model.on("change:data", onData);
  load();
  return () => {
    model.off("change:index", onIndex);
    model.off("change:data", onData);
    if (syncTimer !== null) clearTimeout(syncTimer);
  };
}

export default { render };
