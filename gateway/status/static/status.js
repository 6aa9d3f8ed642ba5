// The status page's script: asks the gateway for its state (api/state, beside this page) every
// second and draws it; its form asks api/explain what the gateway would send for a pasted
// request. Everything it shows is set as text, never parsed as HTML. When the gateway asks for
// an API key, the key is asked for once and kept in this tab's sessionStorage.
"use strict";

const KEY = "gateway-status-key";
const POLL_MS = 1000;
const SVG = "http://www.w3.org/2000/svg";
const CHARTS = [
  { title: "Requests/s", lines: ["rps"], unit: "" },
  { title: "Error rate", lines: ["error_rate"], unit: "%" },
  { title: "In flight", lines: ["in_flight"], unit: "" },
  { title: "TTFT p50 / p95", lines: ["ttft_p50_s", "ttft_p95_s"], unit: "ms" },
  { title: "Inter-token p50 / p95", lines: ["itl_p50_s", "itl_p95_s"], unit: "ms" },
];

const $ = (id) => document.getElementById(id);

function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function row(cells, attrs) {
  const tr = el("tr", null, attrs);
  for (const c of cells) tr.append(c instanceof Node ? c : el("td", c));
  return tr;
}

function num(v, digits) {
  return v === null || v === undefined ? "–" : v.toFixed(digits);
}

function ms(seconds) {
  return seconds === null || seconds === undefined ? "–" : (seconds * 1000).toFixed(seconds < 0.01 ? 2 : 0) + " ms";
}

function pct(rate) {
  return rate === null || rate === undefined ? "–" : (rate * 100).toFixed(rate < 0.01 && rate > 0 ? 2 : 1) + "%";
}

function clock(unix) {
  return new Date(unix * 1000).toLocaleTimeString([], { hour12: false });
}

function when(unix) {
  const d = new Date(unix * 1000);
  const day = [d.getFullYear(), d.getMonth() + 1, d.getDate()].map((n) => String(n).padStart(2, "0")).join("-");
  return `${day} ${clock(unix)}`;
}

function figure(name, text) {
  return el("td", text, { class: "num", "data-figure": name });
}

function chartValue(name, v) {
  if (v === null || v === undefined) return null;
  if (name === "error_rate") return v * 100;
  if (name.endsWith("_s")) return v * 1000;
  return v;
}

// A small line chart of one or two series over the window; a gap where a value is missing.
function chart(spec, series, times) {
  const w = 220, h = 56, pad = 2;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("class", "chart");
  const lines = spec.lines.map((name) => (series[name] || []).map((v) => chartValue(name, v)));
  const highest = Math.max(...lines.flat().filter((v) => v !== null), 0);
  const top = highest || 1;
  const t0 = times.length ? times[0] : 0;
  const span = times.length > 1 ? times[times.length - 1] - t0 : 1;
  lines.forEach((values, n) => {
    const at = (v, i) => [
      (pad + ((times[i] - t0) / span) * (w - 2 * pad)).toFixed(1),
      (h - pad - (v / top) * (h - 2 * pad - 12)).toFixed(1),
    ];
    let d = "";
    values.forEach((v, i) => {
      if (v === null) return;
      const [x, y] = at(v, i);
      const joined = i > 0 && values[i - 1] !== null;
      const alone = !joined && (i + 1 >= values.length || values[i + 1] === null);
      // A value with none beside it is drawn as a dot: a line needs two.
      d += joined ? `L${x},${y}` : alone ? `M${x},${y}h0.01` : `M${x},${y}`;
    });
    const path = document.createElementNS(SVG, "path");
    path.setAttribute("d", d);
    path.setAttribute("class", `line line${n}`);
    svg.append(path);
  });
  const label = document.createElementNS(SVG, "text");
  label.setAttribute("x", pad);
  label.setAttribute("y", 10);
  label.textContent = `max ${highest.toFixed(highest < 10 ? 2 : 0)}${spec.unit}`;
  svg.append(label);
  const caption = el("figcaption");
  spec.title.split(" / ").forEach((part, n) => {
    if (n) caption.append(" / ");
    caption.append(el("span", part, spec.lines.length > 1 ? { class: `key${n}` } : {}));
  });
  const box = el("figure", null, { class: "chart-box" });
  box.append(caption, svg);
  return box;
}

function replica(r, now) {
  let text = `#${r.replica} ${r.state}`;
  if (r.state === "ejected") {
    text += r.back_at && r.back_at > now
      ? `, tried again in ${Math.ceil(r.back_at - now)} s (${clock(r.back_at)})`
      : ", its next request is a trial";
  }
  return el("span", text, { class: `replica ${r.state}`, "data-replica": String(r.replica), "data-state": r.state });
}

function render(s) {
  const hash = s.config.hashes.length ? s.config.hashes.join(" and ") : "(not known yet)";
  const loaded = s.config.loaded_at ? `, live since ${when(s.config.loaded_at)}` : "";
  $("summary").textContent = `Configuration ${hash}${loaded}. Updated ${clock(s.now)}.`;
  $("window").textContent = s.samples > 1
    ? `${Math.round(s.window_s)} s measured so far` + (s.window_s < 59 ? ", since this page was opened" : "")
    : "collecting the first samples";

  const routes = $("routes").tBodies[0];
  const charts = $("charts");
  routes.replaceChildren();
  charts.replaceChildren();
  for (const r of s.routes) {
    const paths = el("td");
    for (const p of r.paths) paths.append(el("div", `${p.method} ${p.path}`, { class: "path" }));
    routes.append(row([
      el("td", r.name, { class: "name" }),
      el("td", r.dialect),
      paths,
      el("td", `${r.backend} (${r.backend_dialect})`),
      figure("rps", num(r.rps, 1)),
      figure("error_rate", pct(r.error_rate)),
      figure("in_flight", num(r.in_flight, 0)),
      figure("ttft", `${ms(r.ttft_p50_s)} / ${ms(r.ttft_p95_s)}`),
      figure("itl", `${ms(r.itl_p50_s)} / ${ms(r.itl_p95_s)}`),
    ], { "data-route": r.name }));
    const card = el("div", null, { class: "card", "data-route": r.name });
    card.append(el("h3", `${r.name}: ${r.requests} requests, ${r.errors} errors`));
    const row_ = el("div", null, { class: "charts" });
    for (const spec of CHARTS) row_.append(chart(spec, r.series, s.times));
    card.append(row_);
    charts.append(card);
  }

  const backends = $("backends").tBodies[0];
  backends.replaceChildren();
  for (const b of s.backends) {
    const cell = el("td");
    for (const r of b.replicas) cell.append(replica(r, s.now));
    const limit = b.max_concurrent === null ? "none" : `${b.max_concurrent} (queue ${b.max_queued})`;
    backends.append(row([
      el("td", b.name + (b.simulated ? " (simulated)" : ""), { class: "name" }),
      el("td", b.dialect),
      cell,
      figure("queued", num(b.queued, 0)),
      el("td", limit, { class: "num" }),
    ], { "data-backend": b.name }));
  }

  const errors = $("errors").tBodies[0];
  errors.replaceChildren();
  for (const e of s.errors) {
    errors.append(row([e.class, e.route, el("td", e.count, { class: "num" })], { "data-error": e.class }));
  }
  $("no-errors").hidden = s.errors.length > 0;
  routeChoices(s.routes);
  $("content").hidden = false;
}

// The form's route list, redrawn only when the routes change (a reload), keeping the choice.
function routeChoices(routes) {
  const select = $("explain-route");
  const names = routes.map((r) => r.name);
  if (select.dataset.names === names.join("\n")) return;
  const chosen = select.value;
  select.replaceChildren(...routes.map((r) => el("option", `${r.name} (${r.dialect} → ${r.backend})`, { value: r.name })));
  if (names.includes(chosen)) select.value = chosen;
  select.dataset.names = names.join("\n");
}

function authHeaders() {
  const key = sessionStorage.getItem(KEY);
  return key ? { Authorization: `Bearer ${key}` } : {};
}

function askForKey(problem) {
  $("summary").textContent = "The figures need an API key of this gateway.";
  $("content").hidden = true;
  $("key-form").hidden = false;
  $("key-problem").textContent = problem;
  $("key").focus();
}

let timer = null;

async function poll() {
  timer = null;
  const key = sessionStorage.getItem(KEY);
  const headers = authHeaders();
  try {
    const resp = await fetch("api/state", { headers, cache: "no-store", credentials: "omit" });
    if (resp.status === 401) {
      if (key) sessionStorage.removeItem(KEY);
      askForKey(key ? "That key was not accepted." : "");
      return;
    }
    if (!resp.ok) throw new Error(`the gateway answered ${resp.status}`);
    render(await resp.json());
    $("connection").textContent = "";
    $("forget").hidden = !key;
  } catch (err) {
    $("connection").textContent = `No answer from the gateway (${err.message}); trying again.`;
  }
  timer = setTimeout(poll, POLL_MS);
}

$("key-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(KEY, $("key").value.trim());
  $("key").value = "";
  $("key-form").hidden = true;
  if (timer === null) poll();
});

$("explain-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const out = $("explain-out");
  const form = { route: $("explain-route").value, path: $("explain-path").value.trim() || null, request: $("explain-body").value };
  try {
    const resp = await fetch("api/explain", {
      method: "POST",
      headers: { ...authHeaders(), "Content-Type": "application/json" },
      body: JSON.stringify(form),
      cache: "no-store",
      credentials: "omit",
    });
    const answer = await resp.json();
    out.textContent = resp.ok ? answer.text : `Not explained: ${answer.error.message}`;
  } catch (err) {
    out.textContent = `No answer from the gateway (${err.message}).`;
  }
  out.hidden = false;
});

$("forget").addEventListener("click", () => {
  sessionStorage.removeItem(KEY);
  location.reload();
});

poll();
