// inr view: the deep zoom of one network (tiles drawn by the server on demand) and, for a set, the
// gallery. A run is polled for its checkpoint's version; a new version brings new tiles, drawn over
// the old ones until they are all in, so the picture never goes blank while a run trains.
"use strict";

const $ = (id) => document.getElementById(id);
const POLL_MS = 1000;
const PAGE = 60;

let kind = null;
let viewer = null;
let shown = null;       // the state of the network in the viewer
let layers = [];        // the network's tiled images, oldest first (more than one while new tiles load)
let sourceLayer = null; // the training image laid over them, when asked for
const gallery = { sort: "-psnr", label: "", query: "", offset: 0, total: 0, labelsFilled: false };

async function getJson(url) {
  const response = await fetch(url, { cache: "no-store" });
  if (!response.ok) throw new Error(`${url}: ${response.status} ${await response.text()}`);
  return response.json();
}

function tileSource(state) {
  const p = state.pyramid;
  const version = encodeURIComponent(state.version);
  return {
    width: p.width, height: p.height, tileSize: p.tileSize, tileOverlap: 0, minLevel: 0, maxLevel: p.maxLevel,
    getTileUrl: (level, x, y) => `/tile/${state.net}/${level}/${x}/${y}.png?v=${version}`,
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
    immediateRender: true,
    timeout: 120000,
  });
}

function addLayer(state) {
  viewer.addTiledImage({
    tileSource: tileSource(state),
    index: layers.length,
    success: (event) => {
      const item = event.item;
      layers.push(item);
      const dropOlder = () => {
        while (layers.length && layers[0] !== item) viewer.world.removeItem(layers.shift());
      };
      if (item.getFullyLoaded()) dropOlder();
      else item.addOnceHandler("fully-loaded-change", dropOlder);
    },
  });
}

function showSource(on) {
  if (sourceLayer) { viewer.world.removeItem(sourceLayer); sourceLayer = null; }
  if (!on || !shown) return;
  viewer.addTiledImage({
    tileSource: { type: "image", url: `/source/${shown.net}.png` }, x: 0, y: 0, width: 1,
    success: (event) => { sourceLayer = event.item; },
  });
}

function openNetwork(state) {
  ensureViewer();
  shown = state;
  layers = [];
  sourceLayer = null;
  viewer.world.removeAll();
  addLayer(state);
  $("compare").checked = false;
  const source = $("source");
  $("source-box").hidden = !state.source;
  if (state.source) {
    source.src = `/source/${state.net}.png`;
    $("source-caption").textContent = `the training image, ${state.width} x ${state.height}, at its own size`;
  }
  describe(state);
}

function describe(state) {
  $("title").textContent = state.name;
  document.title = `${state.name} - inr view`;
  if (state.kind === "run") {
    $("step").textContent = `step ${state.step} / ${state.total_steps}`;
    $("psnr").textContent = state.psnr == null ? "" : `PSNR ${state.psnr.toFixed(2)} dB`;
    drawCurve(state.curve);
  } else {
    const row = state.row;
    $("step").textContent = `network ${state.net + 1} of ${state.count}` + (row.label ? ` · ${row.label}` : "");
    $("psnr").textContent = row.psnr == null ? "" : `PSNR ${row.psnr.toFixed(2)} dB`;
    $("curve-box").hidden = true;
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

async function loadGallery() {
  const params = new URLSearchParams({ sort: gallery.sort, offset: gallery.offset, limit: PAGE });
  if (gallery.label) params.set("label", gallery.label);
  if (gallery.query) params.set("q", gallery.query);
  const page = await getJson(`/api/networks?${params}`);
  gallery.total = page.total;
  if (page.labels && !gallery.labelsFilled) {
    $("label-filter").hidden = false;
    for (const label of page.labels) if (label) $("label").add(new Option(label, label));
    gallery.labelsFilled = true;
  }
  const cards = $("cards");
  cards.replaceChildren();
  for (const row of page.rows) {
    const card = document.createElement("a");
    card.className = "card";
    card.href = `#net=${row.net}`;
    card.dataset.name = row.name;
    const img = new Image();
    img.loading = "lazy";
    img.src = `/thumb/${row.net}.png`;
    img.alt = row.name;
    card.append(img);
    for (const [cls, text] of [["name", row.name], ["psnr", row.psnr == null ? "" : `${row.psnr.toFixed(2)} dB`],
                               ["label", row.label || ""]]) {
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
  const match = location.hash.match(/^#net=(\d+)$/);
  if (kind === "set" && !match) {
    $("zoom").hidden = true;
    $("gallery").hidden = false;
    $("back").hidden = true;
    $("psnr").textContent = "";
    $("title").textContent = gallery.name;
    await loadGallery();
    return;
  }
  const net = match ? Number(match[1]) : 0;
  $("gallery").hidden = true;
  $("zoom").hidden = false;
  $("back").hidden = kind !== "set";
  openNetwork(await getJson(`/api/state?net=${net}`));
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
  gallery.name = info.name;
  $("compare").addEventListener("change", (e) => showSource(e.target.checked));
  if (kind === "set") {
    wireGallery();
    window.addEventListener("hashchange", route);
  }
  await route();
  if (kind === "run") setInterval(poll, POLL_MS);
}

// For scripts and tests: the viewer and what it shows.
window.inrView = { viewer: () => viewer, shown: () => shown, layers: () => layers };
start();
