// The recording as the browser holds it, and the block map's row layout (the first part of the
// canvas player's module: gpumemlab/viz/canvas_widget.py joins canvas_data.js,
// canvas_timeline.js and canvas_player.js, in that order, into one anywidget module).
//
// The kernel sends the recording once (gpumemlab/viz/compact.py): every segment and live block
// is a record alive for t0 <= t < t1, where t is the number of events applied, so the state
// after event k is one scan of typed arrays at t = k + 1; free blocks are the gaps between live
// blocks (c10 merges free neighbours).

const WIDTH = 880, LEFT = 64, RIGHT = 8, MAP_MAX_H = 420, TIMELINE_H = 150;
const PLOT_W = WIDTH - LEFT - RIGHT;

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

  // live blocks in the order the stacked timeline piles them: by their alloc, then address
  stacked(blocks) {
    const c = this.c;
    return blocks.sort((a, b) => (c.block_born[a] - c.block_born[b]) ||
                                 (c.block_address[a] - c.block_address[b]));
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

function placeBlocks(rec, rows, blocks) {
  // each live block into its segment's row, found by bisection over the rows by address
  const c = rec.c;
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
