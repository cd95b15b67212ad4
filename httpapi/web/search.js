// Lily's console: search (GET /api/search), export (GET /api/export) and
// import (POST /api/import). Loaded after app.js, whose helpers it uses.
"use strict";

pages["/search"] = searchPage;

const SEARCH_FIELDS = [["queue", "Queue"], ["where", "Body field (where), e.g. .customer.id == \"42\""], ["state", "State (held, all, pending, …)"]];

// snippetNode renders a hit's snippet, the matches in <mark>; text only.
function snippetNode(hit) {
  if (hit.snippet_omitted) return h("span", {class: "muted"}, "(snippet hidden: bodies are masked for your token)");
  return h("span", {class: "snippet"}, (hit.snippet || []).map(p => p.match ? h("mark", {}, p.text) : p.text));
}

function searchForm(params) {
  const form = h("form", {class: "filters", id: "search-form", role: "search", "aria-label": "Search entries"},
    h("div", {}, h("label", {for: "s-q"}, "Words (\"phrase\", prefix*)"),
      h("input", {id: "s-q", name: "q", type: "search", value: params.get("q") || "", required: true, autocomplete: "off"})),
    SEARCH_FIELDS.map(([k, label]) => h("div", {}, h("label", {for: "s-" + k}, label),
      h("input", {id: "s-" + k, name: k, value: params.get(k) || "", autocomplete: "off"}))),
    h("div", {class: "buttons"}, h("button", {type: "submit", id: "search-submit"}, "Search")));
  form.addEventListener("submit", ev => {
    ev.preventDefault();
    const p = {};
    for (const el of form.elements) if (el.name && el.value) p[el.name] = el.value.trim();
    location.hash = link("/search", p);
  });
  return form;
}

// transferSection offers the export of the current filters (every state
// unless one is given) and, for an admin, the import of an export file.
function transferSection(params) {
  const sel = {};
  for (const k of FILTERS) if (params.get(k)) sel[k] = params.get(k);
  if (!sel.state) sel.state = "all";
  const bodies = session.show_bodies;
  const href = "/api/export?" + new URLSearchParams(bodies ? sel : {...sel, omit_bodies: "true"}).toString();
  const parts = [h("h2", {}, "Export and import"),
    h("p", {}, h("a", {href, id: "export-link", download: "lily-dlq-export.ndjson"},
      bodies ? "Export the entries of these filters (NDJSON)" : "Export the entries of these filters without bodies (NDJSON)"),
      " — the search words do not apply; the export is audited.")];
  if (can("import")) {
    const result = h("div", {id: "import-result", "aria-live": "polite"});
    const form = h("form", {class: "stack", id: "import-form", "aria-label": "Import an export"},
      h("label", {for: "import-file"}, "Export file to import (lily.dlq.export/v1)"),
      h("input", {id: "import-file", type: "file", accept: ".ndjson,application/x-ndjson", required: true}),
      h("label", {for: "import-queue"}, "Into queue (empty: the queue of each line)"),
      h("input", {id: "import-queue", autocomplete: "off"}),
      h("button", {type: "submit", id: "import-submit"}, "Import"), result);
    form.addEventListener("submit", async ev => {
      ev.preventDefault();
      const file = form.querySelector("#import-file").files[0];
      if (!file) return;
      const queue = form.querySelector("#import-queue").value.trim();
      const resp = await fetch("/api/import" + (queue ? "?queue=" + encodeURIComponent(queue) : ""), {method: "POST",
        credentials: "same-origin", headers: {"Content-Type": "application/x-ndjson", "X-CSRF-Token": session.csrf_token}, body: file});
      let data = null;
      try { data = await resp.json(); } catch (e) { data = null; }
      if (!resp.ok) { result.replaceChildren(failure(new APIError(resp.status, data))); return; }
      result.replaceChildren(notice("ok", `Imported ${data.lines} lines: ${data.added} entries added, ${data.skipped_duplicates} duplicates skipped (op ${data.op}).`));
    });
    parts.push(form);
  }
  return h("section", {"aria-label": "Export and import"}, parts);
}

async function searchPage(params, gen) {
  if (!session.show_bodies) { // search matches body words: refused by the API (403)
    page("Search", notice("info", "Search matches the words of message bodies, which your token may not read: filter the Entries or Groups pages by reason, error type or fingerprint, or ask an admin for show_bodies."),
      transferSection(params));
    return;
  }
  const text = params.get("q") || "";
  if (!text) {
    page("Search", h("p", {}, "Find entries by the words of their error messages and bodies. Bodies are indexed after redaction: secrets are never searchable."),
      searchForm(params), transferSection(params));
    return;
  }
  const q = query(params, ["q", ...FILTERS, "after_id"]);
  let data;
  try {
    data = await api("GET", "/api/search?" + q);
  } catch (e) {
    if (e.status === 401 || gen !== generation) throw e;
    page("Search", searchForm(params), failure(e), transferSection(params));
    return;
  }
  if (gen !== generation) return;
  const rows = data.entries.map(e => h("tr", {"data-id": e.id},
    h("td", {class: "num"}, h("a", {href: "#/entry/" + e.id}, e.id)),
    h("td", {}, e.queue), h("td", {}, e.state), h("td", {}, e.reason),
    h("td", {}, snippetNode(e)), h("td", {}, time(e.dead_lettered_at))));
  const next = data.next_after_id ? h("p", {}, h("a", {id: "search-next", href: link("/search", Object.fromEntries([...params, ["after_id", data.next_after_id]]))}, "Next page")) : null;
  page("Search", searchForm(params),
    h("p", {id: "search-count", role: "status"}, data.entries.length + (next ? "+" : "") + " entries match " + JSON.stringify(text)),
    data.entries.length ? table(["ID", "Queue", "State", "Reason", "Match", "Dead-lettered"], rows, {class: "search"})
      : notice("info", "No entry matches."), next, transferSection(params));
}
