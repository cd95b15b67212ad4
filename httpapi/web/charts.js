// Lily's console: charts over time (GET /api/timeline), drawn here as
// inline SVG — no chart library, nothing fetched from elsewhere, so they
// work offline. Loaded after app.js, whose helpers (h, s, page, api,
// when, WHEN, link, query, table) it uses.
"use strict";

pages["/charts"] = chartsPage;

const WINDOWS = ["1h", "6h", "24h", "7d", "30d"];
const BUCKETS = ["", "1m", "5m", "15m", "1h", "6h", "1d"];

// whenLines splits a time in the console's one format (when) into two
// lines for a tick label: the date, then the time with its zone. Joined
// by ", " they read as when() does.
function whenLines(iso) {
  const parts = new Intl.DateTimeFormat(undefined, WHEN).formatToParts(new Date(iso));
  const i = parts.findIndex(p => p.type === "hour");
  if (i <= 0) return [when(iso)];
  return [parts.slice(0, i).map(p => p.value).join("").replace(/[\s,]+$/, ""), parts.slice(i).map(p => p.value).join("")];
}

// niceStep is the y-axis step for counts up to max: 1, 2 or 5 times a
// power of ten, about four steps, never below 1 (counts are whole).
function niceStep(max) {
  const raw = Math.max(1, max / 4);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  return [1, 2, 5, 10].map(m => m * mag).find(v => v >= raw);
}

// timeChart draws counts per bucket as bars on a time axis: a bar per
// bucket (several series stacked), a y-axis of counts and an x-axis whose
// ticks are bucket edges, labelled in the console's time format.
function timeChart(id, title, data, series) {
  const W = 1100, H = 240, L = 76, R = 76, T = 12, B = 48; // L, R: room for half a tick label
  const pw = W - L - R, ph = H - T - B, n = data.buckets.length, bw = pw / n, gap = bw > 4 ? 1 : 0;
  const edges = [...data.buckets, data.end];
  const sums = data.buckets.map((_, i) => series.reduce((a, x) => a + x.counts[i], 0));
  const max = Math.max(0, ...sums), step = niceStep(max), top = Math.max(step, Math.ceil(max / step) * step);
  const total = sums.reduce((a, b) => a + b, 0);
  const y = v => T + ph - v / top * ph;
  const svg = s("svg", {viewBox: `0 0 ${W} ${H}`, class: "chart timeline-chart", role: "img",
    "aria-label": `${title}: ${total} from ${when(data.start)} to ${when(data.end)}, in buckets of ${data.bucket}`});
  for (let v = 0; v <= top; v += step) {
    svg.append(s("g", {class: "y-tick", "data-value": v},
      s("line", {x1: L, x2: L + pw, y1: y(v), y2: y(v), class: v ? "grid" : "axis"}),
      s("text", {x: L - 6, y: y(v), "text-anchor": "end", "dominant-baseline": "middle"}, String(v))));
  }
  const k = Math.max(1, Math.ceil(n / 6));
  for (let i = 0; i <= n; i += k) {
    const x = L + i * bw, lines = whenLines(edges[i]);
    svg.append(s("g", {class: "x-tick", "data-at": edges[i]},
      s("line", {x1: x, x2: x, y1: T + ph, y2: T + ph + 5, class: "axis"}),
      s("text", {x, y: T + ph + 18, "text-anchor": "middle"}, s("title", {}, when(edges[i])),
        ...lines.map((l, j) => s("tspan", {x, dy: j ? "1.25em" : "0"}, l)))));
  }
  svg.append(s("line", {x1: L, x2: L, y1: T, y2: T + ph, class: "axis"}));
  data.buckets.forEach((b, i) => {
    let acc = 0;
    for (const x of series) {
      const c = x.counts[i];
      svg.append(s("rect", {class: "bar " + x.cls, x: (L + i * bw + gap).toFixed(2), y: y(acc + c).toFixed(2),
        width: Math.max(1, bw - 2 * gap).toFixed(2), height: (c / top * ph).toFixed(2),
        "data-series": x.name, "data-bucket": i, "data-count": c},
      s("title", {}, `${c} ${x.label}, ${when(b)} to ${when(edges[i + 1])}`)));
      acc += c;
    }
  });
  return h("figure", {class: "timeline", id},
    h("figcaption", {}, h("strong", {}, title), ` — ${total} in the last ${data.window}`),
    svg,
    h("ul", {class: "legend"}, series.map(x => h("li", {}, h("span", {class: "swatch " + x.cls, "aria-hidden": "true"}),
      `${x.label}: ${x.total}`, h("small", {}, " — " + x.source)))));
}

// chartsPage shows the dead letters, redrives and the ledger's rows over
// a window, of one queue or of all, with each queue's totals.
async function chartsPage(params, gen) {
  const sel = {queue: params.get("queue") || "", window: params.get("window") || "24h", bucket: params.get("bucket") || ""};
  const qs = await api("GET", "/api/queues");
  let data = null, refused = null;
  try {
    data = await api("GET", "/api/timeline?" + query(params, ["queue", "window", "bucket"]));
  } catch (e) {
    if (e.status !== 400) throw e;
    refused = failure(e); // a window and bucket that do not fit: say so under the form
  }
  if (gen !== generation) return;
  const names = qs.queues.map(q => q.queue);
  const pick = (name, label, values, labels) => h("div", {}, h("label", {for: "t-" + name}, label),
    h("select", {id: "t-" + name, name}, values.map((v, i) => h("option", {value: v, selected: v === sel[name]}, labels[i]))));
  const form = h("form", {class: "filters", id: "timeline-form", "aria-label": "What to chart"},
    pick("queue", "Queue", ["", ...names], ["All queues", ...names]),
    pick("window", "Window (the last)", WINDOWS, WINDOWS),
    pick("bucket", "Bucket", BUCKETS, BUCKETS.map(b => b || "auto")));
  form.addEventListener("change", ev => {
    const p = {};
    for (const el of form.elements) if (el.name && el.value) p[el.name] = el.value;
    if (ev.target.name === "window") delete p.bucket; // the old bucket may not suit the new window
    location.hash = link("/charts", p);
  });
  const title = sel.queue ? `Charts of ${sel.queue}` : "Charts of every queue";
  if (refused) { page(title, form, refused); return; }
  const named = (list, name) => list.find(x => x.name === name);
  const one = (name, label, cls) => Object.assign({label, cls}, named(data.series, name));
  const perQueue = !sel.queue && data.queues.length ? [h("h2", {}, "Per queue"),
    table(["Queue", "Dead-lettered", "Redriven", "Acked", "Accepted, not acked"], data.queues.map(q => h("tr", {"data-queue": q.queue},
      h("th", {scope: "row"}, h("a", {href: link("/charts", {...sel, queue: q.queue})}, q.queue)),
      ["dead_lettered", "redriven", "acked", "accepted_unacked"].map(n => h("td", {class: "num"}, named(q.series, n).total)))))] : null;
  page(title, form,
    h("p", {}, `From ${when(data.start)} to ${when(data.end)}, in buckets of ${data.bucket}.`),
    timeChart("chart-dead-lettered", "Dead letters", data, [one("dead_lettered", "dead-lettered", "s-dl")]),
    timeChart("chart-redriven", "Redrives", data, [one("redriven", "redriven", "s-rd")]),
    timeChart("chart-ledger", "Ledger: each message at its latest event", data,
      [one("acked", "acked", "s-ack"), one("accepted_unacked", "accepted, not acked yet", "s-unacked")]),
    h("p", {class: "muted"}, "The ledger keeps no acceptance time once a message is acked, so the messages accepted per bucket (the inflow) cannot be charted exactly: the ledger chart shows each message once, at its ack or, not acked yet, at its acceptance — their sum is the inflow where consumers ack within a bucket. Only broker transports keep these rows, and only within the ledger's horizon."),
    perQueue);
}
