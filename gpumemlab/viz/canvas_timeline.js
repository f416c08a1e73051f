// The canvas player's timeline (the second part of its module; see canvas_data.js): every live
// block a band of the bytes it was asked for, stacked in the order of their allocs, coloured
// by the frame that made them (the kernel ranks the frames by bytes and sends their colours),
// as gml.timeline(by="frame") draws it (gpumemlab/viz/active_timeline.py); over them the
// reserved (dashed) and allocated curves. One pixel column shows one event: the one of its
// bucket with the most allocated, so a one-event peak is never lost. Drawn once per recording
// into an image; the cursor is a separate element, so a slider move repaints none of it.

const OTHER_BAND = "#BBBBBB";

function timelineEvents(rec) {
  const n = rec.n, a = rec.c.event_allocated, out = new Int32Array(PLOT_W);
  for (let x = 0; x < PLOT_W; x++) {
    const lo = Math.min(n - 1, Math.floor(x * n / PLOT_W));
    const hi = Math.max(lo + 1, Math.floor((x + 1) * n / PLOT_W));
    let best = lo;
    for (let i = lo; i < hi && i < n; i++) if (a[i] > a[best]) best = i;
    out[x] = best;
  }
  return out;
}

function bandColours(rec) {
  const colours = new Map();
  for (const [frame, colour] of rec.meta.frame_colours || []) colours.set(frame, colour);
  return colours;
}

function timelineTop(rec) {
  let top = 1;
  for (let i = 0; i < rec.n; i++) top = Math.max(top, rec.c.event_reserved[i]);
  return top;
}

function drawBands(ctx, rec, events, top, h) {
  // one sweep over the block records: born ones join the live set, ended ones leave it
  const c = rec.c, nb = c.block_t0.length, colours = bandColours(rec);
  const ends = Int32Array.from({ length: nb }, (_, i) => i)
    .sort((a, b) => c.block_t1[a] - c.block_t1[b]);
  const live = new Set();
  let next = 0, gone = 0;
  for (let x = 0; x < PLOT_W; x++) {
    const t = events[x] + 1;
    while (next < nb && c.block_t0[next] <= t) live.add(next++);
    while (gone < nb && c.block_t1[ends[gone]] <= t) live.delete(ends[gone++]);
    let y = 0, runColour = null, runStart = 0;
    const flush = () => {
      if (runColour === null || y <= runStart) return;
      ctx.fillStyle = runColour;
      const y0 = 4 + h - (y / top) * h, y1 = 4 + h - (runStart / top) * h;
      ctx.fillRect(LEFT + x, y0, 1, Math.max(y1 - y0, 0.5));
    };
    for (const b of rec.stacked([...live])) {
      const colour = colours.get(c.block_frame[b]) || OTHER_BAND;
      if (colour !== runColour) { flush(); runColour = colour; runStart = y; }
      y += c.block_requested[b];
    }
    flush();
  }
}

function drawTimelineImage(rec) {
  const off = document.createElement("canvas");
  off.width = WIDTH;
  off.height = TIMELINE_H;
  const ctx = off.getContext("2d"), c = rec.c, colours = rec.meta.colours;
  const top = timelineTop(rec), h = TIMELINE_H - 22, events = timelineEvents(rec);
  drawBands(ctx, rec, events, top, h);
  for (const [name, colour, dash] of [["event_reserved", colours.reserved, [5, 3]],
                                       ["event_allocated", colours.allocated, []]]) {
    ctx.strokeStyle = colour;
    ctx.setLineDash(dash);
    ctx.beginPath();
    for (let x = 0; x < PLOT_W; x++) {
      const y = 4 + h - (c[name][events[x]] / top) * h;
      x ? ctx.lineTo(LEFT + x, y) : ctx.moveTo(LEFT + x, y);
    }
    ctx.stroke();
  }
  ctx.setLineDash([]);
  ctx.fillStyle = "#333";
  ctx.fillText(sizeText(top), 2, 12);
  ctx.fillText("0", 2, 4 + h);
  ctx.fillStyle = colours.reserved;
  ctx.fillText("reserved (dashed)", LEFT + 4, TIMELINE_H - 4);
  ctx.fillStyle = colours.allocated;
  ctx.fillText("allocated", LEFT + 110, TIMELINE_H - 4);
  ctx.fillStyle = "#333";
  ctx.fillText("bands: live blocks' requests, by frame", LEFT + 175, TIMELINE_H - 4);
  ctx.textAlign = "right";
  ctx.fillText("events 0.." + (rec.n - 1), WIDTH - RIGHT, TIMELINE_H - 4);
  return { image: off, top, h, events };
}

function timelineHover(rec, drawn, x, y) {
  // the event of the column under the pointer and the band at that height, in words
  if (x < LEFT || x >= LEFT + PLOT_W) return null;
  const k = drawn.events[Math.floor(x - LEFT)], c = rec.c;
  const lines = ["event " + k + ": allocated " + sizeText(c.event_allocated[k]) + ", reserved " +
                 sizeText(c.event_reserved[k])];
  const bytes = ((4 + drawn.h - y) / drawn.h) * drawn.top;
  let below = 0;
  for (const b of rec.stacked(rec.stateAt(k).blocks)) {
    if (bytes >= below && bytes < below + c.block_requested[b]) {
      const f = c.block_frame[b];
      lines.push("band: requested " + sizeText(c.block_requested[b]) + " (block " +
                 sizeText(c.block_size[b]) + ", " + rec.meta.states[c.block_state[b]] +
                 "), allocated " + (c.block_born[b] > 0 ? "at event " + (c.block_born[b] - 1)
                                   : "before the recording"),
                 "frame " + (f >= 0 ? rec.meta.frames[f] : "(no frames recorded)"));
      break;
    }
    below += c.block_requested[b];
  }
  return lines;
}
