// Lily's console: plain JavaScript over the JSON API (/api/openapi.json).
// Every page is a hash route with real links; every action is a button in
// a form; data is inserted as text, never as HTML.
"use strict";

const main = document.getElementById("main");
let session = null;

// ---- DOM helpers -------------------------------------------------------

// h builds an element: h("a", {href: "#/"}, "text", child, ...).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const SVG = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

// page replaces the main region and moves focus to its heading.
function page(title, ...content) {
  document.title = title + " — Lily";
  const h1 = h("h1", {tabindex: "-1"}, title);
  main.replaceChildren(h1, ...content.flat(2).filter(c => c !== null && c !== undefined && c !== false));
  h1.focus();
}

function table(head, rows, attrs) {
  return h("div", {class: "scroll"},
    h("table", attrs || {},
      h("thead", {}, h("tr", {}, head.map(c => h("th", {scope: "col"}, c)))),
      h("tbody", {}, rows)));
}

function notice(kind, ...text) {
  return h("p", {class: "notice " + kind, role: kind === "error" ? "alert" : "status"}, ...text);
}

function dl(pairs) {
  return h("dl", {class: "kv"}, pairs.filter(p => p[1] !== undefined && p[1] !== null && p[1] !== "")
    .map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

// ---- formatting --------------------------------------------------------

// Go's names for its plain error values (errors.New, fmt.Errorf with %w,
// errors.Join) say nothing to an operator: they are shown by what they
// are, the Go type kept in the tooltip. Any other type (*json.SyntaxError,
// *url.Error) is a name worth reading as it is.
const GO_ERROR_TYPES = {
  "*errors.errorString": "error", "*fmt.wrapError": "wrapped error", "*fmt.wrapErrors": "wrapped errors",
  "*errors.joinError": "joined errors", "context.deadlineExceededError": "deadline exceeded",
};

function errorType(t) {
  if (!t) return "";
  const human = GO_ERROR_TYPES[t];
  return human ? h("span", {class: "error-type", title: t}, human) : h("span", {class: "error-type mono"}, t);
}

function age(seconds) {
  seconds = Math.max(0, Math.round(seconds));
  if (seconds < 60) return seconds + "s";
  if (seconds < 3600) return Math.floor(seconds / 60) + "m";
  if (seconds < 172800) return Math.floor(seconds / 3600) + "h" + String(Math.floor(seconds % 3600 / 60)).padStart(2, "0") + "m";
  return Math.floor(seconds / 86400) + "d" + Math.floor(seconds % 86400 / 3600) + "h";
}

// WHEN is the console's one time format, with its zone: a time without
// one is read in whichever zone the reader assumes (charts.js splits it).
const WHEN = {year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"};

function when(iso) {
  return iso ? new Date(iso).toLocaleString(undefined, WHEN) : "";
}

function time(iso) {
  return iso ? h("time", {datetime: iso, title: iso}, when(iso)) : "";
}

// ---- API ---------------------------------------------------------------

class APIError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : "HTTP " + status);
    this.status = status;
    this.field = body && body.field;
  }
}

async function api(method, path, body) {
  const headers = {"Accept": "application/json"};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && session && session.csrf_token) headers["X-CSRF-Token"] = session.csrf_token;
  const resp = await fetch(path, {method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body)});
  let data = null;
  try { data = await resp.json(); } catch (e) { data = null; }
  if (resp.status === 401) { session = null; showLogin(); throw new APIError(401, data); }
  if (!resp.ok) throw new APIError(resp.status, data);
  return data;
}

function can(perm) {
  return session && session.permissions.includes(perm);
}

function failure(err) {
  const field = err.field ? " (" + err.field + ")" : "";
  return notice("error", err.message + field);
}

// ---- routing -----------------------------------------------------------

// route returns [path, params] of the location hash "#/path?query".
function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  return [path, new URLSearchParams(query || "")];
}

function link(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== "" && v !== null && v !== undefined) q.set(k, v);
  const qs = q.toString();
  return "#" + path + (qs ? "?" + qs : "");
}

const FILTERS = ["queue", "reason", "error_type", "fingerprint", "consumer_version", "source", "key", "type",
  "older_than", "newer_than", "ids", "event_ids", "redrive_count", "state", "where"];

function filterFrom(params, keepState) {
  const f = {};
  for (const k of FILTERS) {
    const v = params.get(k);
    if (!v || (k === "state" && !keepState)) continue;
    if (k === "ids") f.ids = v.split(",").map(x => parseInt(x, 10));
    else if (k === "event_ids") f.event_ids = v.split(",").map(x => x.trim());
    else if (k === "redrive_count") f.redrive_count = parseInt(v, 10);
    else f[k] = v;
  }
  return f;
}

function query(params, names) {
  const q = new URLSearchParams();
  for (const k of names) if (params.get(k)) q.set(k, params.get(k));
  return q.toString();
}

const pages = {
  "/": overview, "/groups": groups, "/entries": entries, "/redrive": redrive, "/discard": discard,
  "/redrives": redrives, "/audit": audit, "/parked": parked, "/expire": expire,
};

let generation = 0;

async function render() {
  const gen = ++generation;
  const [path, params] = route();
  if (!session) {
    try {
      session = await api("GET", "/api/session");
    } catch (e) {
      if (e.status !== 401) page("Error", failure(e));
      return;
    }
    showWho();
  }
  for (const a of document.querySelectorAll(".top nav a")) {
    const target = a.getAttribute("href").slice(1);
    if (target === path || (target !== "/" && path.startsWith(target))) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const entry = path.match(/^\/entry\/(\d+)$/);
  const fn = entry ? () => entryPage(entry[1], params) : pages[path];
  if (!fn) { page("Not found", notice("error", "No page " + path + ". ", h("a", {href: "#/"}, "Back to the overview"))); return; }
  try {
    await fn(params, gen);
  } catch (e) {
    if (e.status !== 401 && gen === generation) page("Error", failure(e));
  }
}

function showWho() {
  const who = document.getElementById("who");
  if (!session) { who.replaceChildren(); return; }
  const parts = [h("span", {}, session.name + " · " + session.role)];
  if (session.via === "session" && !session.local) {
    parts.push(h("form", {method: "post", action: "/logout", class: "inline"},
      h("input", {type: "hidden", name: "csrf_token", value: session.csrf_token}),
      h("button", {type: "submit", class: "link"}, "Log out")));
  }
  who.replaceChildren(...parts);
}

function showLogin() {
  showWho();
  const failed = new URLSearchParams(location.search).get("login") === "failed";
  page("Log in",
    h("p", {}, "Enter your Lily token. Its name is recorded as the actor of every decision you make."),
    failed ? notice("error", "That token is not known. Check it, or ask an admin for a [[token]] entry.") : null,
    h("form", {method: "post", action: "/login", class: "stack"},
      h("label", {for: "token"}, "Token"),
      h("input", {id: "token", name: "token", type: "password", autocomplete: "current-password", required: true}),
      h("button", {type: "submit"}, "Log in")));
}

window.addEventListener("hashchange", render);
document.addEventListener("DOMContentLoaded", render);

// ---- overview ----------------------------------------------------------

// inflowChart draws dead letters per bucket as an inline SVG bar chart.
function inflowChart(q) {
  const w = 240, ht = 48, n = q.inflow.length, bw = w / n;
  const max = Math.max(1, ...q.inflow);
  const total = q.inflow.reduce((a, b) => a + b, 0);
  const hours = Math.round(n * q.inflow_bucket_seconds / 3600);
  const svg = s("svg", {viewBox: `0 0 ${w} ${ht + 2}`, width: w, height: ht + 2, role: "img", class: "chart",
    "aria-label": `${total} dead letters in the last ${hours} hours`});
  svg.append(s("line", {x1: 0, y1: ht + 1, x2: w, y2: ht + 1, class: "axis"}));
  q.inflow.forEach((c, i) => {
    const bh = c === 0 ? 0 : Math.max(2, Math.round(c / max * ht));
    const ago = (n - i) * q.inflow_bucket_seconds;
    svg.append(s("rect", {x: (i * bw + 1).toFixed(1), y: ht + 1 - bh, width: (bw - 2).toFixed(1), height: bh, class: "bar"},
      s("title", {}, `${c} dead-lettered ${age(ago)} to ${age(ago - q.inflow_bucket_seconds)} ago`)));
  });
  return h("figure", {class: "inflow"}, svg, h("figcaption", {}, `${total} in ${hours}h · ${q.inflow_last_hour} in the last hour`));
}

function deadline(q) {
  if (!q.oldest) return h("span", {class: "muted"}, "empty");
  const ret = q.retention_hours * 3600;
  return h("div", {class: "deadline" + (q.past_deadline ? " past" : q.oldest_age_seconds > ret / 2 ? " half" : "")},
    h("meter", {min: 0, max: ret, low: ret / 2, high: ret * 0.9, optimum: 0, value: Math.min(q.oldest_age_seconds, ret),
      "aria-label": "age of the oldest entry against the retention"}),
    h("span", {}, `${age(q.oldest_age_seconds)} of ${q.retention_hours}h`),
    h("small", {}, q.past_deadline ? "deadline passed: expire or decide" : "deadline " + when(q.deadline)));
}

async function overview(_, gen) {
  const [health, data, ledger, jobs] = await Promise.all([
    fetch("/healthz").then(r => r.json()), api("GET", "/api/queues"), api("GET", "/api/ledger"), api("GET", "/api/redrives")]);
  if (gen !== generation) return;
  const rows = data.queues.map(q => h("tr", {"data-queue": q.queue},
    h("th", {scope: "row"}, h("a", {href: link("/groups", {queue: q.queue}), class: "groups-link", "data-queue": q.queue}, q.queue)),
    h("td", {}, q.owner || h("span", {class: "muted"}, "no owner")),
    h("td", {class: "num"}, h("strong", {}, q.depth),
      h("small", {}, ` ${q.pending} pending · ${q.needs_manual} needs manual · ${q.parked} parked`)),
    h("td", {}, deadline(q)),
    h("td", {}, inflowChart(q)),
    h("td", {}, h("ul", {class: "actions"},
      h("li", {}, h("a", {href: link("/entries", {queue: q.queue})}, "Entries")),
      h("li", {}, h("a", {href: link("/charts", {queue: q.queue})}, "Charts")), // charts.js
      can("redrive") && q.pending > 0 ? h("li", {}, h("a", {href: link("/redrive", {queue: q.queue})}, "Redrive…")) : null))));
  const status = h("p", {class: "health " + health.status, role: "status"}, h("strong", {}, "Health: " + health.status),
    health.reasons.length ? h("ul", {}, health.reasons.map(r => h("li", {}, r))) : " — no dead letters held, the ledger balances.");
  page("Dead-letter queues", status,
    data.queues.length ? table(["Queue", "Owner", "Depth", "Oldest vs deadline", "Inflow (last 24h)", ""], rows, {class: "queues"})
      : notice("info", "No queue has dead letters or a ledger yet."),
    h("h2", {}, "Ledger"),
    table(["Queue", "Accepted", "Acked", "Dead-lettered", "Discarded", "In flight", "Lost"], ledger.queues.map(r => h("tr", {},
      h("th", {scope: "row"}, r.queue), [r.accepted, r.acked, r.dead_lettered, r.discarded, r.in_flight].map(n => h("td", {class: "num"}, n)),
      h("td", {class: "num" + (r.lost ? " bad" : "")}, r.lost)))),
    h("p", {}, ledger.balanced ? "Every accepted message is acked, dead-lettered, discarded with a record or in flight."
      : h("strong", {class: "bad"}, "Messages are unaccounted for: run 'lily reconcile'.")),
    jobs.redrives.length ? [h("h2", {}, "Recent redrives"), watchJobs(h("section", {}, jobTable(jobs.redrives.slice(0, 5))), gen, 5)] : null,
    can("expire") ? h("p", {}, h("a", {href: "#/expire"}, "Expire entries past their retention…")) : null);
}

// ---- groups and entries ------------------------------------------------

const GROUP_BY = [["reason", "Reason"], ["error_type", "Error type"], ["fingerprint", "Fingerprint"],
  ["consumer_version", "Consumer version"], ["source", "Source"]];

async function groups(params, gen) {
  const by = params.get("by") || "reason";
  const queue = params.get("queue") || "";
  const data = await api("GET", "/api/groups?" + query(new URLSearchParams({by, queue, state: params.get("state") || ""}), ["by", "queue", "state"]));
  if (gen !== generation) return;
  const tabs = h("ul", {class: "tabs"}, GROUP_BY.map(([k, label]) => h("li", {},
    h("a", {href: link("/groups", {queue, by: k}), "aria-current": k === by ? "true" : null}, label))));
  const rows = data.groups.map(g => {
    const sel = {queue, [by]: g.key};
    return h("tr", {"data-key": g.key},
      h("td", {class: "num"}, g.count),
      h("th", {scope: "row", class: "key"}, g.key || h("span", {class: "muted"}, "(none)")),
      h("td", {}, time(g.first_seen)), h("td", {}, time(g.last_seen)),
      h("td", {}, h("a", {href: "#/entry/" + g.sample_id}, "entry " + g.sample_id)),
      by === "fingerprint" ? triageCell(g, queue) : null, // triage.js
      h("td", {}, h("ul", {class: "actions"},
        h("li", {}, h("a", {href: link("/entries", sel)}, "Entries")),
        can("redrive") ? h("li", {}, h("a", {href: link("/redrive", sel), class: "redrive-link"}, "Redrive…")) : null,
        can("discard") ? h("li", {}, h("a", {href: link("/discard", sel), class: "discard-link"}, "Discard…")) : null)));
  });
  page(queue ? `Groups of ${queue}` : "Groups of every queue", tabs,
    h("p", {}, `${data.total} held entries in ${data.groups.length} groups by ${by.replace("_", " ")}.`,
      queue ? [" ", h("a", {href: link("/groups", {by})}, "All queues")] : null),
    data.groups.length ? table(["Count", GROUP_BY.find(g => g[0] === by)[1], "First seen", "Last seen", "Sample", ...(by === "fingerprint" ? ["Triage"] : []), ""], rows, {class: "groups"})
      : notice("info", "Nothing held: the work list is empty."));
}

// filterForm edits the filters of a page; submitting changes the hash.
function filterForm(path, params, extra) {
  const fields = [["queue", "Queue"], ["reason", "Dead-letter reason"], ["error_type", "Error type"], ["fingerprint", "Fingerprint"],
    ["key", "Key"], ["type", "Type"], ["older_than", "Older than (e.g. 2h, 7d)"], ["newer_than", "Newer than"], ["ids", "Entry IDs"]];
  if (path === "/entries") fields.push(["state", "State (held, all, pending, …)"]);
  // A where filter reads bodies: only for a session that may see them
  // (the API refuses it otherwise, 403).
  if (session.show_bodies) fields.push(["where", "Body field (where), e.g. .customer.id == \"42\""]); // search.js, docs/where.md
  const form = h("form", {class: "filters", "aria-label": "Filters"},
    fields.map(([k, label]) => h("div", {}, h("label", {for: "f-" + k}, label),
      h("input", {id: "f-" + k, name: k, value: params.get(k) || "", autocomplete: "off"}))),
    extra || null,
    h("div", {class: "buttons"}, h("button", {type: "submit", class: "secondary"}, "Apply filters")));
  form.addEventListener("submit", ev => {
    ev.preventDefault();
    const p = {};
    for (const el of form.elements) if (el.name && el.value) p[el.name] = el.value.trim();
    location.hash = link(path, p);
  });
  return form;
}

async function entries(params, gen) {
  const q = query(params, [...FILTERS, "after_id"]);
  const data = await api("GET", "/api/entries?" + q);
  if (gen !== generation) return;
  const rows = data.entries.map(e => h("tr", {},
    h("td", {class: "num"}, h("a", {href: "#/entry/" + e.id}, e.id)),
    h("td", {}, e.queue), h("td", {class: "mono"}, e.event_id), h("td", {}, e.state), h("td", {}, e.reason),
    h("td", {}, errorType(e.error_type), " ", e.error_message),
    h("td", {class: "num"}, e.redrive_count), h("td", {}, time(e.dead_lettered_at))));
  const next = data.next_after_id ? h("p", {}, h("a", {href: link("/entries", Object.fromEntries([...params, ["after_id", data.next_after_id]]))}, "Next page")) : null;
  const sel = Object.fromEntries([...params].filter(([k]) => FILTERS.includes(k) && k !== "state"));
  page("Entries", filterForm("/entries", params),
    h("ul", {class: "actions"},
      can("redrive") ? h("li", {}, h("a", {href: link("/redrive", sel)}, "Redrive these…")) : null,
      can("discard") ? h("li", {}, h("a", {href: link("/discard", sel)}, "Discard these…")) : null),
    data.entries.length ? table(["ID", "Queue", "Event ID", "State", "Reason", "Error", "Redrives", "Dead-lettered"], rows)
      : notice("info", "No entry matches."), next);
}

async function entryPage(id, params) {
  const body = params.get("body") || "auto";
  const gen = generation;
  const e = await api("GET", `/api/entries/${id}?body=${encodeURIComponent(body)}`);
  const hist = await api("GET", "/api/audit?event_id=" + encodeURIComponent(e.event_id));
  if (gen !== generation) return;
  const l = e.evidence.lily;
  const formats = h("ul", {class: "tabs", "aria-label": "Body format"}, ["auto", "text", "json", "hex"].map(f =>
    h("li", {}, h("a", {href: `#/entry/${id}?body=${f}`, "aria-current": f === body ? "true" : null}, f))));
  let shown = "";
  if (e.body.format === "json") shown = JSON.stringify(e.body.value, null, 2);
  else if (e.body.format === "hex") shown = (e.body.value || "").replace(/(.{32})/g, "$1\n").replace(/(\S{2})(?=\S)/g, "$1 ");
  else if (e.body.value !== undefined) shown = e.body.value;
  const sel = {ids: String(e.id)};
  page(`Entry ${e.id}`,
    h("ul", {class: "actions"},
      h("li", {}, h("a", {href: link("/entries", {queue: e.queue})}, "Entries of " + e.queue)),
      can("redrive") && e.state === "pending" ? h("li", {}, h("a", {href: link("/redrive", sel)}, "Redrive this entry…")) : null,
      can("discard") && ["pending", "parked", "needs_manual"].includes(e.state) ? h("li", {}, h("a", {href: link("/discard", sel)}, "Discard this entry…")) : null,
      editLink(e)),
    dl([["Queue", e.queue], ["State", e.state], ["Event ID", e.event_id], ["Key", e.key], ["Type", e.type], ["Reason", e.reason],
      ["Error", e.error_type || e.error_message ? h("span", {}, errorType(e.error_type), e.error_type ? ": " : "", e.error_message || "") : ""], ["Fingerprint", e.fingerprint],
      ["Counts", `delivery ${e.delivery_count}, retries ${e.retry_count}, redrives ${e.redrive_count}`],
      ["Dead-lettered", time(e.dead_lettered_at)], ["Decision", e.decision ? `${e.decision} — by ${e.decided_by}, ${when(e.decided_at)}` : ""],
      ["Erased", e.erased_at ? when(e.erased_at) + " (tombstone)" : ""], ["Body SHA-256", h("span", {class: "mono"}, e.body_sha256)]]),
    // Under the summary, what an operator reads first: every failed
    // attempt (attempts.js), then the body, above the triage form and the
    // evidence.
    attemptsSection(e),
    h("h2", {}, "Body"), formats,
    h("p", {class: "muted"}, `${e.body.format}, ${e.body.size} bytes`, e.body.note ? " — " + e.body.note : ""),
    shown !== "" ? h("pre", {class: "body", tabindex: "0", "aria-label": "message body"}, shown) : null,
    versionsSection(e),
    triageEntry(e), // triage.js
    h("h2", {}, "Lily evidence"),
    dl([["Reason", l.reason], ["Error type", l.error_type ? errorType(l.error_type) : ""], ["Error message", l.error_message], ["Source", l.source],
      ["Source message ID", l.source_message_id], ["First failure", time(l.first_failure_at)], ["Last failure", time(l.last_failure_at)],
      ["Consumer", [l.consumer, l.consumer_version, l.host ? "on " + l.host : ""].filter(Boolean).join(" ")],
      ["Trace", l.traceparent], ["Raw x-retry-count", l.raw_retry_count]]),
    l.error_stack ? h("details", {}, h("summary", {}, "Stack"), h("pre", {}, l.error_stack)) : null,
    e.evidence.problems.length ? notice("error", "Evidence problems: " + e.evidence.problems.join("; ")) : null,
    h("h2", {}, "Foreign evidence"),
    e.evidence.foreign.length ? e.evidence.foreign.map(f => h("section", {class: "foreign"},
      h("h3", {}, `${f.system} — ${f.origin}`),
      dl([["Reason", f.reason], ["Source", f.source], ["Partition", f.partition], ["Offset", f.offset], ["Count", f.count],
        ["Time", time(f.time)], ["Consumer", f.consumer], ["Exception", f.exception_type], ["Message", f.message]]),
      f.stack ? h("details", {}, h("summary", {}, "Stack"), h("pre", {}, f.stack)) : null))
      : h("p", {class: "muted"}, "None: no RabbitMQ x-death, MassTransit, Spring Kafka, Kafka Connect/Streams or NServiceBus headers."),
    h("h2", {}, "Headers"),
    table(["Header", "Value"], Object.keys(e.headers || {}).sort().map(k => h("tr", {}, h("th", {scope: "row", class: "mono"}, k),
      h("td", {class: "mono"}, e.headers[k])))),
    h("h2", {}, "History"),
    hist.records.length ? auditTable(hist.records) : h("p", {class: "muted"}, "No decision about this message yet."));
}

// ---- decisions: redrive, discard, expire --------------------------------

// selection describes the filter of a decision page.
function selection(f) {
  const pairs = Object.entries(f).map(([k, v]) => [k.replace("_", " "), Array.isArray(v) ? v.join(", ") : String(v)]);
  return pairs.length ? dl(pairs) : notice("warn", "No filter: every pending entry of every queue is selected.");
}

function field(id, label, attrs, help) {
  return h("div", {}, h("label", {for: id}, label), h("input", Object.assign({id, name: id}, attrs)),
    help ? h("small", {id: id + "-help"}, help) : null);
}

// twoStep runs the dry run → confirm flow of a decision: plan() makes the
// dry-run request, confirm() the real one; both return promises. Changing
// any input after the dry run withdraws the confirmation.
function twoStep(form, plan, showPlan, confirm) {
  const result = h("section", {id: "dry-result-area", "aria-live": "polite"});
  form.addEventListener("input", () => {
    if (result.firstChild) result.replaceChildren(notice("warn", "The options changed: run the dry run again before confirming."));
  });
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    result.replaceChildren(h("p", {class: "muted"}, "Dry run…"));
    try {
      const p = await plan();
      const btn = showPlan(p, result);
      if (btn) btn.addEventListener("click", async () => {
        btn.disabled = true;
        for (const el of form.elements) el.disabled = true;
        try { await confirm(p, result); } catch (e) { result.append(failure(e)); }
      });
    } catch (e) {
      result.replaceChildren(failure(e));
    }
  });
  return result;
}

function options(params) {
  return h("fieldset", {}, h("legend", {}, "How"),
    field("limit", "Limit (0: all)", {type: "number", min: 0, value: params.get("limit") || "0"}),
    field("sample", "Sample first", {type: "number", min: 0, max: 10000, value: params.get("sample") || "1", "aria-describedby": "sample-help"},
      "redrive this many first and watch them"),
    field("observe", "Watch the sample for", {value: params.get("observe") || "30s", "aria-describedby": "observe-help"},
      "a duration: 500ms, 30s, 5m"),
    field("rate", "Rate for the rest (messages/s, 0: no limit)", {type: "number", min: 0, step: "any", value: params.get("rate") || "50"}),
    field("new_consumer_version", "Consumer version now running (fixes a crash)", {value: params.get("new_consumer_version") || "", "aria-describedby": "new_consumer_version-help"},
      "delivery_limit entries of other versions are sent too"),
    h("div", {}, h("label", {}, h("input", {type: "checkbox", id: "include_crashers", name: "include_crashers"}),
      " Include every delivery_limit entry (crash-type poison)")),
    field("to", "Redirect to queue (empty: each entry's source queue)", {value: params.get("to") || "", "aria-describedby": "to-help"},
      "a configured queue: a quarantine, or a fixed consumer's queue"));
}

const activeJob = st => st === "queued" || st === "running" || st === "sampling";

async function redrive(params) {
  const f = filterFrom(params, false);
  const form = h("form", {id: "redrive-form", class: "stack"}, options(params),
    h("div", {class: "buttons"}, h("button", {type: "submit", id: "dry-run"}, "Dry run")));
  const body = (dry) => {
    const sample = parseInt(form.elements.sample.value || "0", 10);
    const b = {filter: f, dry_run: dry, limit: parseInt(form.elements.limit.value || "0", 10), rate: parseFloat(form.elements.rate.value || "0")};
    if (sample > 0) { b.sample = sample; b.observe = form.elements.observe.value.trim(); }
    const v = form.elements.new_consumer_version.value.trim();
    if (v) b.new_consumer_version = v;
    if (form.elements.include_crashers.checked) b.include_crashers = true;
    const to = form.elements.to.value.trim();
    if (to) b.to = to;
    return b;
  };
  const result = twoStep(form, () => api("POST", "/api/redrives", body(true)), (p, area) => {
    const b = body(false);
    const how = b.sample ? `a sample of ${b.sample}, which a consumer must ack within ${b.observe}, then the rest` : "all at once";
    const btn = h("button", {type: "button", id: "confirm", disabled: p.would_redrive === 0}, `Confirm: redrive ${p.would_redrive}`);
    area.replaceChildren(h("div", {id: "dry-result", class: "plan"},
      h("h2", {tabindex: "-1"}, "Dry run"),
      h("p", {}, `Would redrive ${p.would_redrive} and mark ${p.would_need_manual} needs manual (at max_redrives), of ${p.selected} pending entries selected. Nothing was sent; the plan is audited as operation `,
        h("a", {href: link("/audit", {op: p.op})}, p.op), "."),
      p.entries.length ? table(["Entry", "Queue", "Event ID", "Redrives", "Plan"], p.entries.map(e => h("tr", {},
        h("td", {class: "num"}, h("a", {href: "#/entry/" + e.id}, e.id)), h("td", {}, e.queue), h("td", {class: "mono"}, e.event_id),
        h("td", {class: "num"}, e.redrive_count), h("td", {}, e.outcome === "would_need_manual" ? "needs manual (at max_redrives)" : "redrive")))) : null,
      p.truncated ? h("p", {class: "muted"}, "The first 100 are listed.") : null,
      p.held_back ? notice("warn", `Held back: ${p.held_back} delivery_limit entries (crash-type poison: the consumer died on them). They stay pending; to send them, name the consumer version now running, or tick "Include every delivery_limit entry".`) : null,
      h("p", {}, `Confirming sends them ${b.to ? "to " + b.to + " instead of their source queues" : "back to their source queues"}: ${how}${b.rate ? " at " + b.rate + " per second" : ""}.`), btn));
    area.querySelector("h2").focus();
    return btn;
  }, async (_, area) => {
    const job = await api("POST", "/api/redrives", body(false));
    const prog = h("progress", {id: "job-progress", max: Math.max(1, job.total), value: 0});
    const state = h("p", {id: "job-state", role: "status"}, job.state);
    const cancel = h("button", {type: "button", id: "job-cancel"}, "Cancel the job");
    cancel.addEventListener("click", async () => {
      cancel.disabled = true;
      try { await api("POST", "/api/redrives/" + job.id + "/cancel"); } catch (e) { area.append(failure(e)); }
    });
    area.append(h("section", {class: "job"}, h("h2", {}, "Redrive job " + job.id), prog, state, cancel));
    await follow(job, prog, state);
    cancel.remove();
  });
  page("Redrive", h("p", {}, "Send pending dead letters back to their source queue, after the fix. A dry run comes first; you confirm what it shows."),
    h("h2", {}, "Selection"), selection(f), form, result);
}

// follow polls a redrive job until it ends, showing its progress.
async function follow(job, prog, state) {
  for (;;) {
    prog.value = job.done;
    prog.max = Math.max(1, job.total);
    const counts = `redriven ${job.redriven}, needs manual ${job.needs_manual}, failed ${job.failed} of ${job.total}`;
    if (activeJob(job.state)) {
      state.textContent = `${job.state}${job.stage ? " (" + job.stage + ")" : ""}: ${counts}`;
      await new Promise(r => setTimeout(r, 400));
      job = await api("GET", "/api/redrives/" + job.id);
      continue;
    }
    state.replaceChildren(h("strong", {class: "job-" + job.state}, job.state), `: ${counts}.`,
      job.sample_clean ? ` The sample of ${job.sampled.length} was acked by a consumer.` : "",
      job.held_back ? ` ${job.held_back} delivery_limit entries were held back.` : "",
      job.error ? h("span", {class: "bad"}, " " + job.error) : "", " ",
      h("a", {id: "job-audit", href: link("/audit", {op: job.op})}, "See it in the audit log"));
    return job;
  }
}

function jobTable(jobs) {
  return table(["Job", "Queue", "Actor", "State", "Progress", "Redriven", "Needs manual", "Failed", "Held back", "Total", "Created", "Audit", ""], jobs.map(jobRow));
}

// jobRow is a job's row; jobs.js updates it in place while the job runs.
function jobRow(j) {
  let cancel = null;
  if (can("redrive") && activeJob(j.state)) {
    cancel = h("button", {type: "button", class: "job-cancel", "data-job": j.id}, "Cancel");
    cancel.addEventListener("click", async () => {
      cancel.disabled = true;
      try { await api("POST", "/api/redrives/" + j.id + "/cancel"); cancel.replaceWith("cancelled"); } catch (e) { cancel.replaceWith(failure(e)); }
    });
  }
  return h("tr", {"data-job": j.id, "data-state": j.state, "data-sig": jobSig(j)},
    h("td", {class: "mono"}, j.id), h("td", {}, j.queue), h("td", {}, j.actor),
    h("td", {class: "job-state"}, j.state + (j.stage ? " (" + j.stage + ")" : ""), j.error ? h("small", {class: "bad"}, " " + j.error) : null),
    jobProgress(j), // jobs.js
    [j.redriven, j.needs_manual, j.failed, j.held_back, j.total].map(n => h("td", {class: "num"}, n)), h("td", {}, time(j.created_at)),
    h("td", {}, h("a", {href: link("/audit", {op: j.op})}, j.op)), h("td", {}, cancel));
}

async function redrives(_, gen) {
  const data = await api("GET", "/api/redrives");
  if (gen !== generation) return;
  const list = h("section", {id: "jobs"}, data.redrives.length ? jobTable(data.redrives) : notice("info", "No redrive job yet."));
  page("Redrives", h("p", {}, "Redrive jobs kept in the catalog, newest first: from this console, the API or 'lily dlq redrive', on any server. A job whose runner died is resumed by a 'lily serve' after its last handled entry; one job per queue runs at a time. The list follows running jobs live."),
    list);
  watchJobs(list, gen, 0); // jobs.js: live
}

async function discard(params) {
  const f = filterFrom(params, false);
  const form = h("form", {id: "discard-form", class: "stack"},
    field("reason", "Why (kept with the record)", {required: true, size: 60}),
    field("limit", "Limit (0: all)", {type: "number", min: 0, value: "0"}),
    h("div", {class: "buttons"}, h("button", {type: "submit", id: "dry-run"}, "Dry run")));
  const body = (dry) => ({filter: f, dry_run: dry, reason: form.elements.reason.value, limit: parseInt(form.elements.limit.value || "0", 10)});
  const result = twoStep(form, () => api("POST", "/api/discard", body(true)), (p, area) => {
    const btn = h("button", {type: "button", id: "confirm", class: "danger", disabled: p.count === 0}, `Confirm: discard ${p.count}`);
    area.replaceChildren(h("div", {id: "dry-result", class: "plan"}, h("h2", {tabindex: "-1"}, "Dry run"),
      h("p", {}, `Would discard ${p.count} held entries (operation ${p.op}). They leave the work list for good, with a record.`),
      decidedTable(p), btn));
    area.querySelector("h2").focus();
    return btn;
  }, async (_, area) => {
    const r = await api("POST", "/api/discard", body(false));
    area.append(notice("ok", `Discarded ${r.count}. `, h("a", {id: "job-audit", href: link("/audit", {op: r.op})}, "See it in the audit log")));
  });
  page("Discard", h("h2", {}, "Selection"), selection(f), form, result);
}

function decidedTable(p) {
  return p.entries.length ? table(["Entry", "Queue", "Event ID", "State"], p.entries.map(e => h("tr", {},
    h("td", {class: "num"}, h("a", {href: "#/entry/" + e.id}, e.id)), h("td", {}, e.queue), h("td", {class: "mono"}, e.event_id),
    h("td", {}, e.state)))) : null;
}

async function expire() {
  const form = h("form", {id: "expire-form", class: "stack"},
    h("p", {}, "Discards, with a record, the held entries older than their queue's dlq_retention_hours."),
    h("div", {class: "buttons"}, h("button", {type: "submit", id: "dry-run"}, "Dry run")));
  const result = twoStep(form, () => api("POST", "/api/expire", {dry_run: true}), (p, area) => {
    const btn = h("button", {type: "button", id: "confirm", class: "danger", disabled: p.count === 0}, `Confirm: expire ${p.count}`);
    area.replaceChildren(h("div", {id: "dry-result"}, h("p", {}, `Would expire ${p.count} entries.`), decidedTable(p), btn));
    return btn;
  }, async (_, area) => {
    const r = await api("POST", "/api/expire", {dry_run: false});
    area.append(notice("ok", `Expired ${r.count}. `, h("a", {href: link("/audit", {op: r.op})}, "See it in the audit log")));
  });
  page("Expire past retention", form, result);
}

// ---- audit and parked ---------------------------------------------------

function auditTable(records) {
  return table(["When", "Actor", "Action", "Outcome", "Count", "Operation", "Selector and detail"], records.map(r => h("tr", {"data-op": r.op, class: "a-" + r.action},
    h("td", {}, time(r.at)), h("td", {}, r.actor), h("td", {}, r.action + (r.dry_run ? " (dry run)" : "")),
    h("td", {}, r.outcome), h("td", {class: "num"}, r.count),
    h("td", {class: "mono"}, h("a", {href: link("/audit", {op: r.op})}, r.op)),
    h("td", {}, h("code", {}, r.selector), r.detail ? h("div", {}, r.detail) : null,
      r.event_ids.length ? h("details", {}, h("summary", {}, r.event_ids.length + " event IDs"), h("p", {class: "mono"}, r.event_ids.join(", "))) : null))),
  {class: "audit"});
}

async function audit(params, gen) {
  const q = query(params, ["action", "op", "actor", "event_id", "since"]);
  const data = await api("GET", "/api/audit?" + q);
  if (gen !== generation) return;
  const form = h("form", {class: "filters", "aria-label": "Audit filters"},
    h("div", {}, h("label", {for: "a-action"}, "Action"), h("select", {id: "a-action", name: "action"},
      ["", "redrive", "discard", "erase", "expire", "refused", "triage"].map(a => h("option", {value: a, selected: a === (params.get("action") || "")}, a || "any")))),
    ["op", "actor", "event_id", "since"].map(k => h("div", {}, h("label", {for: "a-" + k}, k.replace("_", " ")),
      h("input", {id: "a-" + k, name: k, value: params.get(k) || ""}))),
    h("div", {class: "buttons"}, h("button", {type: "submit", class: "secondary"}, "Apply")));
  form.addEventListener("submit", ev => {
    ev.preventDefault();
    const p = {};
    for (const el of form.elements) if (el.name && el.value) p[el.name] = el.value.trim();
    location.hash = link("/audit", p);
  });
  page("Audit log", h("p", {}, "Every decision, newest first: dry runs, redrives, discards, erasures, expiries and refused requests. The log is append-only."),
    form, data.records.length ? auditTable(data.records) : notice("info", "No record matches."));
}

async function parked(_, gen) {
  let data;
  try {
    data = await api("GET", "/api/parked");
  } catch (e) {
    if (e.status === 501) { page("Parked keys", notice("info", e.message)); return; }
    throw e;
  }
  if (gen !== generation) return;
  const rows = data.parked.map(k => {
    const out = h("td", {"aria-live": "polite"});
    const plan = h("button", {type: "button", class: "secondary"}, "Dry run");
    plan.addEventListener("click", async () => {
      try {
        const path = `/api/queues/${encodeURIComponent(k.queue)}/parked/${encodeURIComponent(k.key)}/unpark`;
        const p = await api("POST", path, {dry_run: true});
        const ok = h("button", {type: "button"}, `Confirm: unpark (${p.messages} message${p.messages === 1 ? "" : "s"}, in order)`);
        ok.addEventListener("click", async () => {
          ok.disabled = true;
          try {
            const r = await api("POST", path, {dry_run: false});
            out.replaceChildren(notice("ok", r.free ? "The key flows again. " : `Unparked: the ${r.action === "redrive_head" ? "head was" : "next message was"} sent; the rest follow in order as the consumer processes them. `, h("a", {href: link("/audit", {op: r.op})}, "audit")));
          } catch (e) { out.replaceChildren(failure(e)); }
        });
        out.replaceChildren(ok);
        ok.focus();
      } catch (e) { out.replaceChildren(failure(e)); }
    });
    const head = k.entry_id ? h("a", {href: "#/entry/" + k.entry_id}, "entry " + k.entry_id) : h("span", {}, k.head_event_id + " (not ingested yet)");
    return h("tr", {}, h("td", {}, k.queue), h("th", {scope: "row"}, k.key), h("td", {}, k.mode), h("td", {}, k.state), h("td", {}, head),
      h("td", {class: "num"}, k.messages), h("td", {}, time(k.parked_at)),
      can("unpark") ? [h("td", {}, plan), out] : h("td", {colspan: 2}, ""));
  });
  page("Parked and blocked keys",
    h("p", {}, "A key is held when one of its messages (the head) was dead-lettered with ordering park or block: its later messages wait here, in order, while the other keys flow. Unparking redrives the head first; the rest follow one at a time as the consumer processes them."),
    data.parked.length ? table(["Queue", "Key", "Mode", "State", "Head", "Waiting", "Since", "Unpark", ""], rows) : notice("info", "No key is parked or blocked."));
}
