// inr view: the deep zoom of one network (tiles drawn by the server on demand) and, for a set, the
// gallery. A run is polled for its checkpoint's version; a new version brings new tiles, drawn over
// the old ones until they are all in, so the picture never goes blank while a run trains.
//
// Tiles go to the server in batches: OpenSeadragon asks for every tile a view needs in one frame, a
// TileQueue gathers them and sends them as one request, and the server streams them back as it draws
// them, coarse levels first. A request whose tiles all left the view is cancelled and its tiles wait,
// so the server draws the view the user is looking at, not the ones passed on the way. (Not through
// OpenSeadragon 6.1's own batches: its viewer drops a batch still gathering at every redraw.)
"use strict";

const $ = (id) => document.getElementById(id);
const POLL_MS = 1000;
const PAGE = 60;
const TILE_REQUESTS = 3;           // batches streaming at once (a browser opens six connections a server)
const BATCH_WAIT_MS = 10;          // the tiles asked for within this long go as one batch
const BATCH_MAX = 512;             // the server's limit on one request
// The finest level drawn shows each of its pixels on at least this many screen pixels: on a GPU 0.5
// (sharp: up to 4 network pixels a screen pixel), on the CPU 0.75, which draws half as many pixels.
const MIN_PIXEL_RATIO = { gpu: 0.5, cpu: 0.75 };
const ROUNDING = 0.9;              // a level a little finer than that is still wanted (rounding)
const PREVIEW_LEVELS = 2;          // coarser levels drawn first, for a picture at once; not every one
                                   // between a deep zoom's start and end
const SETTLE_MS = 150;             // tiles are sent once the view has stopped moving for this long
const NEVER_MS = 2147483647;       // a waiting tile is never failed for the time it waits
const MAX_WAITING = 2048;          // tiles out of view kept waiting; older ones are given back
const SORT_NAMES = { "-psnr": "by PSNR, best first", "psnr": "by PSNR, worst first",
                     "name": "by name, A to Z", "-name": "by name, Z to A" };

let kind = null;
let viewer = null;
let shown = null;       // the state of the network in the viewer
let layers = [];        // the network's tiled images, oldest first (more than one while new tiles load)
let sourceLayer = null; // the training image laid over them, when asked for
let split = 50;         // the training image covers this percentage of the viewer, from its left
let movedAt = 0;        // when the user last moved the view (zoom or pan)
let device = "cpu";     // where the server draws
const queues = new Set(); // the TileQueue of every layer
const gallery = { sort: "-psnr", label: "", query: "", offset: 0, total: 0, labelsFilled: false };

async function getJson(url) {
  const response = await fetch(url, { cache: "no-store" });
  if (!response.ok) throw new Error(`${url}: ${response.status} ${await response.text()}`);
  return response.json();
}

// --- tiles, in batches ------------------------------------------------------------------------------

// The frames of a /tiles/ answer as they arrive: [position in the request, PNG bytes].
async function* tileFrames(body) {
  const reader = body.getReader();
  let buffer = new Uint8Array(0);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    const joined = new Uint8Array(buffer.length + value.length);
    joined.set(buffer);
    joined.set(value, buffer.length);
    buffer = joined;
    while (buffer.length >= 8) {
      const head = new DataView(buffer.buffer, buffer.byteOffset, 8);
      const length = head.getUint32(4);
      if (buffer.length < 8 + length) break;
      yield [head.getUint32(0), buffer.slice(8, 8 + length)];
      buffer = buffer.subarray(8 + length);
    }
  }
}

// The tile jobs of one layer: sent in batches while they are in view, kept waiting while they are not.
class TileQueue {
  constructor(state) {
    this.state = state;
    this.waiting = [];
    this.flights = new Set();
    this.closed = false;
    this.timer = null;
    queues.add(this);
  }

  add(job) {
    this.waiting.push(job);
    if (this.timer == null) this.timer = setTimeout(() => { this.timer = null; this.pump(); }, BATCH_WAIT_MS);
  }

  drop(jobs) {
    for (const job of jobs) job.dropped = true;
    this.waiting = this.waiting.filter((job) => !job.dropped);
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    this.waiting = [];
    for (const flight of this.flights) flight.controller.abort();
    queues.delete(this);
    showProgress();
  }

  // In view at the view's destination, at the finest level drawn there or one of the PREVIEW_LEVELS
  // below it, in the viewer the tile is for (the main one or the navigator). views: each viewer's view,
  // computed once.
  wanted(job, views) {
    const tile = job.tile;
    const item = tile.tiledImage;
    if (!item || !item.viewport) return true;
    if (!views.has(item)) {
      const viewport = item.viewport;
      views.set(item, { zoom: item.viewportToImageZoom(viewport.getZoom(false)),
                        rect: item.viewportToImageRectangle(viewport.getBounds(false)) });
    }
    const { zoom, rect } = views.get(item);
    const scale = 2 ** (this.state.pyramid.maxLevel - tile.level);  // deepest-level pixels per pixel of the tile's
    const finest = ROUNDING * minPixelRatio();  // screen pixels per pixel of the finest level drawn, at least
    if (zoom * scale < finest || zoom * scale >= finest * 2 ** (PREVIEW_LEVELS + 1)) return false;
    const side = this.state.pyramid.tileSize * scale;
    const margin = 0.02 * Math.max(rect.width, rect.height);  // rounding, not a tile more
    return tile.x * side < rect.x + rect.width + margin && (tile.x + 1) * side > rect.x - margin &&
           tile.y * side < rect.y + rect.height + margin && (tile.y + 1) * side > rect.y - margin;
  }

  pump() {
    if (this.closed) return;
    const views = new Map();
    for (const flight of this.flights) {
      const open = flight.jobs.filter((job) => !job.finished && !job.dropped);
      if (!open.some((job) => this.wanted(job, views))) flight.controller.abort();  // its tiles wait again
    }
    // While the user is still zooming or panning, the views passed on the way are not drawn.
    const still = performance.now() - movedAt;
    if (still < SETTLE_MS) {
      clearTimeout(this.timer);
      this.timer = setTimeout(() => { this.timer = null; this.pump(); }, SETTLE_MS - still);
      showProgress();
      return;
    }
    while (this.flights.size < TILE_REQUESTS) {
      const ready = new Set(this.waiting.filter((job) => this.wanted(job, views)).slice(0, BATCH_MAX));
      if (!ready.size) break;
      this.waiting = this.waiting.filter((job) => !ready.has(job));
      this.send([...ready]);
    }
    this.release(views);
    showProgress();
  }

  // Tiles of views long left: given back to OpenSeadragon, which asks again if the view returns.
  release(views) {
    const excess = this.waiting.length - MAX_WAITING;
    if (excess <= 0) return;
    const stale = new Set(this.waiting.filter((job) => !this.wanted(job, views)).slice(0, excess));
    this.waiting = this.waiting.filter((job) => !stale.has(job));
    for (const job of stale) {
      job.fail("out of view", null);
      job.tile.exists = true;  // a failed tile is marked as missing for good; this one is not
    }
  }

  pending() {
    const views = new Map();
    let count = this.waiting.filter((job) => this.wanted(job, views)).length;
    for (const flight of this.flights) count += flight.jobs.filter((job) => !job.finished && !job.dropped).length;
    return count;
  }

  async send(jobs) {
    const flight = { jobs, controller: new AbortController() };
    this.flights.add(flight);
    const byName = new Map();  // the navigator asks for some of the viewer's tiles too: each name once
    for (const job of jobs) {
      const name = `${job.tile.level}-${job.tile.x}-${job.tile.y}`;
      byName.set(name, [...(byName.get(name) || []), job]);
    }
    const names = [...byName.keys()];
    const url = `/tiles/${this.state.net}?v=${encodeURIComponent(this.state.version)}&t=${names.join(",")}`;
    try {
      const response = await fetch(url, { cache: "no-store", signal: flight.controller.signal });
      if (!response.ok) throw new Error(`${response.status} ${await response.text()}`);
      for await (const [position, png] of tileFrames(response.body)) {
        for (const job of byName.get(names[position]) || []) {
          if (job.finished) continue;
          job.finished = true;
          if (!job.dropped) job.finish(new Blob([png], { type: "image/png" }), null, "rasterBlob");
        }
        showProgress();
      }
      for (const job of jobs) if (!job.finished && !job.dropped) job.fail("the server sent no such tile", null);
    } catch (error) {
      const open = jobs.filter((job) => !job.finished && !job.dropped);
      if (flight.controller.signal.aborted) {
        if (!this.closed) this.waiting.push(...open);
      } else {
        for (const job of open) job.fail(`tiles: ${error.message}`, null);
      }
    } finally {
      this.flights.delete(flight);
      this.pump();
    }
  }
}

function tileSource(state, queue) {
  const p = state.pyramid;
  const version = encodeURIComponent(state.version);
  const transparent = state.channels.length % 2 === 0;  // l,a or r,g,b,a
  return {
    width: p.width, height: p.height, tileSize: p.tileSize, tileOverlap: 0, minLevel: 0, maxLevel: p.maxLevel,
    // The tile's key in OpenSeadragon's cache (with the version: one layer per version), and its URL alone.
    getTileUrl: (level, x, y) => `/tile/${state.net}/${level}/${x}/${y}.png?v=${version}`,
    hasTransparency: () => transparent,
    downloadTileStart: (job) => queue.add(job),
    downloadTileAbort: (job) => queue.drop([job]),
  };
}

function sourceTileSource(state) {
  const p = state.pyramid;
  return {
    width: p.width, height: p.height, tileSize: p.tileSize, tileOverlap: 0, minLevel: 0, maxLevel: p.maxLevel,
    getTileUrl: (level, x, y) => `/source/${state.net}/${level}/${x}/${y}.png`,
    hasTransparency: () => state.channels.length % 2 === 0,
  };
}

function ensureViewer() {
  if (viewer) return;
  viewer = OpenSeadragon({
    id: "viewer",
    prefixUrl: "/static/openseadragon/images/",
    showNavigator: true,
    maxZoomPixelRatio: 4,
    visibilityRatio: 0.5,
    immediateRender: false,  // the coarse levels at once, the fine ones over them as they come
    blendTime: 0,
    minPixelRatio: minPixelRatio(),
    maxTilesPerFrame: 64,    // every tile a view needs asked for in one frame: one batch
    timeout: NEVER_MS,       // a tile out of view waits in its queue, as long as it takes
  });
  for (const name of ["zoom", "pan"]) viewer.addHandler(name, () => { movedAt = performance.now(); });
  for (const name of ["zoom", "pan", "resize", "animation-finish"]) {
    viewer.addHandler(name, () => { for (const queue of queues) queue.pump(); });
  }
  viewer.addHandler("viewport-change", () => { describeZoom(); placeSplit(); });
  viewer.addHandler("animation-finish", describeZoom);
}

function minPixelRatio() {
  return MIN_PIXEL_RATIO[device] || MIN_PIXEL_RATIO.cpu;
}

function addLayer(state) {
  const queue = new TileQueue(state);
  viewer.addTiledImage({
    tileSource: tileSource(state, queue),
    index: layers.length,
    success: (event) => {
      const item = event.item;
      item.inrQueue = queue;
      layers.push(item);
      const dropOlder = () => {
        while (layers.length && layers[0] !== item) removeLayer(layers.shift());
      };
      if (item.getFullyLoaded()) dropOlder();
      else item.addOnceHandler("fully-loaded-change", dropOlder);
      describeZoom();
    },
  });
}

function removeLayer(item) {
  if (item.inrQueue) item.inrQueue.close();
  viewer.world.removeItem(item);
}

function showProgress() {
  let count = 0;
  for (const queue of queues) count += queue.pending();
  $("loading").hidden = count === 0;
  $("loading").textContent = `drawing ${count} tile${count === 1 ? "" : "s"}`;
}

// --- what the viewer shows: zoom readout, the training image beside the network ----------------------

function describeZoom() {
  const item = layers[layers.length - 1];
  if (!viewer || !item || !shown) return;
  const zoom = viewer.viewport.getZoom(true) / viewer.viewport.getHomeZoom();
  const p = shown.pyramid;
  const perPixel = item.viewportToImageZoom(viewer.viewport.getZoom(true)) * 2 ** (p.maxLevel - p.base);
  $("readout").textContent = `zoom ${formatNumber(zoom)}x · 1 training pixel = ${formatNumber(perPixel)} screen px`;
  $("readout").dataset.perPixel = perPixel;
}

function formatNumber(value) {
  return value >= 100 ? Math.round(value).toLocaleString("en") : value.toPrecision(3);
}

function showSource(on) {
  if (sourceLayer) { viewer.world.removeItem(sourceLayer); sourceLayer = null; }
  $("split-box").hidden = !on;
  placeSplit();
  if (!on || !shown) return;
  viewer.addTiledImage({
    tileSource: sourceTileSource(shown),
    success: (event) => { sourceLayer = event.item; placeSplit(); },
  });
}

// The training image covers the viewer up to the split, the network the rest: pixels beside function.
function placeSplit() {
  const divider = $("divider");
  if (!sourceLayer) { divider.hidden = true; return; }
  const x = viewer.container.clientWidth * split / 100;
  const edge = sourceLayer.viewerElementToImageCoordinates(new OpenSeadragon.Point(x, 0)).x;
  const size = sourceLayer.getContentSize();
  sourceLayer.setClip(new OpenSeadragon.Rect(0, 0, Math.max(0, Math.min(size.x, edge)), size.y));
  divider.style.left = `${x}px`;
  divider.hidden = false;
}

function openNetwork(state) {
  ensureViewer();
  shown = state;
  for (const queue of [...queues]) queue.close();
  layers = [];
  sourceLayer = null;
  viewer.world.removeAll();
  addLayer(state);
  $("compare").checked = false;
  $("split-box").hidden = true;
  $("divider").hidden = true;
  const source = $("source");
  $("source-box").hidden = !state.source;
  if (state.source) {
    source.onload = () => describeSource(state);
    source.src = `/source/${state.net}.png`;
  }
  describe(state);
}

// The training image in the side panel, as large as the panel: its pixels as squares when enlarged.
function describeSource(state) {
  const source = $("source");
  const scale = source.clientWidth / state.width;
  source.style.imageRendering = scale > 1 ? "pixelated" : "auto";
  const shownAt = scale > 1.01 ? `shown ${formatNumber(scale)}x larger` : scale < 0.99 ? "shown smaller" : "at its own size";
  $("source-caption").textContent = `the training image, ${state.width} x ${state.height}, ${shownAt}`;
}

function describe(state) {
  $("title").textContent = state.name;
  $("title").title = state.name;
  document.title = `${state.name} - inr view`;
  if (state.kind === "run") {
    $("step").textContent = `step ${state.step} / ${state.total_steps}`;
    $("psnr").textContent = state.psnr == null ? "" : `PSNR ${state.psnr.toFixed(2)} dB`;
    drawCurve(state.curve);
  } else {
    const row = state.row;
    const at = state.position;
    $("step").textContent = at ? `${at.index + 1} of ${at.total} ${SORT_NAMES[gallery.sort] || ""}`.trim()
                               : `one of ${state.count} networks`;
    $("step").textContent += row.label ? ` · label ${row.label}` : "";
    $("psnr").textContent = row.psnr == null ? "" : `PSNR ${row.psnr.toFixed(2)} dB`;
    $("curve-box").hidden = true;
    for (const [id, net] of [["previous", at && at.previous], ["following", at && at.next]]) {
      $(id).hidden = net == null;
      if (net != null) $(id).href = networkHash(net);
    }
  }
  const table = $("settings");
  table.replaceChildren();
  for (const [section, values] of Object.entries(state.settings)) {
    for (const [key, value] of Object.entries(values)) {
      const tr = table.insertRow();
      tr.insertCell().textContent = `${section}.${key}`;
      tr.insertCell().textContent = JSON.stringify(value);
    }
  }
}

function drawCurve(curve) {
  const points = curve.step.map((s, i) => [s, curve.loss[i]]).filter(([, l]) => l != null && l > 0);
  $("curve-box").hidden = points.length < 2;
  if (points.length < 2) return;
  const steps = points.map((p) => p[0]);
  const logs = points.map((p) => Math.log10(p[1]));
  const [s0, s1] = [Math.min(...steps), Math.max(...steps)];
  const [l0, l1] = [Math.min(...logs), Math.max(...logs)];
  const line = points.map((p, i) => {
    const x = s1 > s0 ? ((p[0] - s0) / (s1 - s0)) * 300 : 0;
    const y = l1 > l0 ? 115 - ((logs[i] - l0) / (l1 - l0)) * 110 : 60;
    return `${x.toFixed(1)},${y.toFixed(1)}`;
  }).join(" ");
  const svg = $("curve");
  svg.replaceChildren();
  const polyline = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  polyline.setAttribute("points", line);
  svg.appendChild(polyline);
  const last = points[points.length - 1];
  $("curve-caption").textContent =
    `log scale, steps ${s0} to ${s1}; loss ${Math.pow(10, l1).toPrecision(3)} to ${last[1].toPrecision(3)}`;
}

async function poll() {
  try {
    const state = await getJson("/api/state?net=0");
    if (state.version !== shown.version) {
      shown = state;
      addLayer(state);
    }
    describe(state);
  } catch (error) {
    $("psnr").textContent = "(the server stopped)";
  }
}

// --- the gallery of a set ----------------------------------------------------------------------------

function listParams() {
  const params = new URLSearchParams({ sort: gallery.sort });
  if (gallery.label) params.set("label", gallery.label);
  if (gallery.query) params.set("q", gallery.query);
  return params;
}

// A network's address keeps the gallery's order, so that the page can say where it stands in it.
function networkHash(net) {
  return `#net=${net}&${listParams()}`;
}

async function loadGallery() {
  const params = listParams();
  params.set("offset", gallery.offset);
  params.set("limit", PAGE);
  const page = await getJson(`/api/networks?${params}`);
  gallery.total = page.total;
  if (page.labels && !gallery.labelsFilled) {
    $("label-filter").hidden = false;
    for (const label of page.labels) if (label) $("label").add(new Option(label, label));
    gallery.labelsFilled = true;
    $("label").value = gallery.label;
  }
  const cards = $("cards");
  cards.replaceChildren();
  for (const row of page.rows) {
    const card = document.createElement("a");
    card.className = "card";
    card.href = networkHash(row.net);
    card.dataset.name = row.name;
    card.title = row.name;
    const img = new Image();
    img.loading = "lazy";
    img.src = `/thumb/${row.net}.png`;
    img.alt = row.name;
    card.append(img);
    // A labelled set's names start with their label's folder: the label is said once, below.
    const prefix = row.label ? `${row.label}/` : "";
    const name = prefix && row.name.startsWith(prefix) ? row.name.slice(prefix.length) : row.name;
    for (const [cls, text] of [["name", name], ["psnr", row.psnr == null ? "" : `${row.psnr.toFixed(2)} dB`],
                               ["label", row.label || ""]]) {
      if (!text) continue;
      const span = document.createElement("span");
      span.className = cls;
      span.textContent = text;
      card.append(span);
    }
    cards.append(card);
  }
  const end = page.offset + page.rows.length;
  $("range").textContent = page.total ? `${page.offset + 1}-${end} of ${page.total}` : "none";
  $("prev").disabled = page.offset === 0;
  $("next").disabled = end >= page.total;
  $("step").textContent = `${page.count} networks`;
}

async function route() {
  const params = new URLSearchParams(location.hash.slice(1));
  const net = params.has("net") ? Number(params.get("net")) : null;
  if (kind === "set" && (net == null || !Number.isInteger(net))) {
    $("zoom").hidden = true;
    $("gallery").hidden = false;
    for (const id of ["back", "previous", "following"]) $(id).hidden = true;
    $("psnr").textContent = "";
    $("title").textContent = gallery.name;
    $("sort").value = gallery.sort;
    $("label").value = gallery.label;
    $("query").value = gallery.query;
    await loadGallery();
    return;
  }
  if (kind === "set") {
    gallery.sort = params.get("sort") || gallery.sort;
    gallery.label = params.get("label") || "";
    gallery.query = params.get("q") || "";
  }
  $("gallery").hidden = true;
  $("zoom").hidden = false;
  $("back").hidden = kind !== "set";
  openNetwork(await getJson(`/api/state?net=${net || 0}&${listParams()}`));
}

function wireGallery() {
  const reload = () => { gallery.offset = 0; loadGallery(); };
  $("sort").addEventListener("change", (e) => { gallery.sort = e.target.value; reload(); });
  $("label").addEventListener("change", (e) => { gallery.label = e.target.value; reload(); });
  $("query").addEventListener("input", (e) => { gallery.query = e.target.value; reload(); });
  $("prev").addEventListener("click", () => { gallery.offset = Math.max(0, gallery.offset - PAGE); loadGallery(); });
  $("next").addEventListener("click", () => { gallery.offset += PAGE; loadGallery(); });
}

async function start() {
  const info = await getJson("/api/info");
  kind = info.kind;
  device = info.device;
  gallery.name = info.name;
  $("compare").addEventListener("change", (e) => showSource(e.target.checked));
  $("split").addEventListener("input", (e) => { split = Number(e.target.value); placeSplit(); });
  window.addEventListener("resize", () => { if (shown && shown.source) describeSource(shown); });
  if (kind === "set") {
    wireGallery();
    window.addEventListener("hashchange", route);
  }
  await route();
  if (kind === "run") setInterval(poll, POLL_MS);
}

// For scripts and tests: the viewer and what it shows.
window.inrView = {
  viewer: () => viewer, shown: () => shown, layers: () => layers, sourceLayer: () => sourceLayer,
  pendingTiles: () => [...queues].reduce((sum, queue) => sum + queue.pending(), 0),
};
start();
