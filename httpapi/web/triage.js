// Lily's console: triage of entries and groups (POST /api/triage).
// Loaded after app.js, whose helpers (h, api, can, page, notice, dl,
// failure, link, time, when, pages) it uses.
"use strict";

const TRIAGE_STATUSES = [["", "(none)"], ["investigating", "investigating"], ["needs_fix", "needs fix"],
  ["known_issue", "known issue"], ["wont_fix", "won't fix"]];

// ticketNode shows a stored ticket: a link only for an http or https
// URL, plain text otherwise, whatever the catalog holds (an older import
// could store javascript:…; the API refuses it today).
function ticketNode(ticket) {
  if (!ticket) return "";
  let u = null;
  try { u = new URL(ticket); } catch (e) { u = null; }
  if (u && (u.protocol === "http:" || u.protocol === "https:")) return h("a", {href: u.href, rel: "noopener noreferrer", class: "ticket-link"}, ticket);
  return h("span", {class: "ticket-text"}, ticket);
}

// triageRecord shows one triage record (an entry's or a group's) with its
// note history, oldest first.
function triageRecord(title, t, cls) {
  if (!t) return null;
  return h("section", {class: "triage-record " + cls},
    h("h3", {}, title),
    dl([["Status", t.status || "(none)"], ["Assignee", t.assignee], ["Ticket", ticketNode(t.ticket)],
      ["Updated", `by ${t.updated_by}, ${when(t.updated_at)}`]]),
    t.notes && t.notes.length ? h("ol", {class: "notes"}, t.notes.map(n => h("li", {},
      h("span", {class: "muted"}, `${n.author}, ${when(n.at)}: `), n.note))) : null);
}

// triageForm edits the triage of target ({filter} or {group}); current is
// the record it starts from (or null). onDone runs after a save.
function triageForm(id, target, current, onDone) {
  if (!can("triage")) return h("p", {class: "muted"}, "Your role may not triage (an operator or an admin may).");
  const cur = current || {};
  const status = h("select", {id: id + "-status", name: "status"},
    TRIAGE_STATUSES.map(([v, label]) => h("option", {value: v, selected: v === (cur.status || "")}, label)));
  const form = h("form", {id, class: "stack triage-form"},
    h("div", {}, h("label", {for: id + "-status"}, "Status"), status),
    field(id + "-assign", "Assignee", {value: cur.assignee || "", autocomplete: "off"}),
    field(id + "-ticket", "Ticket URL", {value: cur.ticket || "", type: "url", placeholder: "https://tracker.example.com/ISSUE-42"}),
    h("div", {}, h("label", {for: id + "-note"}, "Add a note"), h("textarea", {id: id + "-note", name: "note", rows: 3, maxlength: 4000})),
    h("div", {class: "buttons"}, h("button", {type: "submit", id: id + "-save"}, "Save triage")));
  const out = h("div", {id: id + "-result", "aria-live": "polite"});
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const body = Object.assign({}, target);
    const val = name => form.elements[id + "-" + name] ? form.elements[id + "-" + name].value.trim() : form.elements[name].value.trim();
    // Only what changed is sent: the rest stays as it is.
    if (status.value !== (cur.status || "")) body.status = status.value;
    if (val("assign") !== (cur.assignee || "")) body.assign = val("assign");
    if (val("ticket") !== (cur.ticket || "")) body.ticket = val("ticket");
    const note = form.elements[id + "-note"].value.trim();
    if (note) body.note = note;
    try {
      const r = await api("POST", "/api/triage", body);
      out.replaceChildren(notice("ok", `Triaged: ${r.target === "group" ? "the group (" + r.count + " held entries now; later ones inherit it)" : r.count + " entries"}. `,
        h("a", {href: link("/audit", {op: r.op})}, "audit")));
      if (onDone) onDone(r);
    } catch (e) {
      out.replaceChildren(failure(e));
    }
  });
  return h("div", {}, form, out);
}

// triageEntry is the triage section of an entry's page.
function triageEntry(e) {
  const t = e.triage || {};
  const groupLink = h("a", {href: link("/triage", {queue: e.queue, fingerprint: e.fingerprint}), id: "triage-group-link"},
    "Triage the group of this fingerprint…");
  return h("section", {id: "triage", class: "triage"},
    h("h2", {}, "Triage"),
    h("p", {id: "triage-status"}, "Status in effect: ", h("strong", {}, t.status || "(none)"),
      t.entry && t.entry.status ? " (the entry's own)" : t.group && t.group.status ? " (from its group)" : ""),
    triageRecord("This entry", t.entry, "entry"),
    triageRecord("Its group (" + e.queue + " / " + (e.fingerprint || "no fingerprint") + ")", t.group, "group"),
    e.fingerprint ? h("p", {}, groupLink) : null,
    triageForm("triage-entry", {filter: {ids: [e.id]}}, t.entry, () => setTimeout(render, 0)));
}

// triageGroupPage is #/triage?queue=Q&fingerprint=F: the group's record,
// its notes (through its most recent entry) and the form.
async function triageGroupPage(params, gen) {
  const queue = params.get("queue") || "", fingerprint = params.get("fingerprint") || "";
  if (!queue || !fingerprint) {
    page("Triage a group", notice("error", "A group is a queue and an error fingerprint: open it from the groups by fingerprint."));
    return;
  }
  const data = await api("GET", "/api/groups?" + new URLSearchParams({by: "fingerprint", queue, fingerprint, state: "all"}));
  const g = data.groups.find(x => x.key === fingerprint);
  let record = g && g.triage ? g.triage.find(x => x.queue === queue) : null;
  if (g) {
    const e = await api("GET", "/api/entries/" + g.sample_id + "?body=hex");
    if (e.triage && e.triage.group) record = e.triage.group;
  }
  if (gen !== generation) return;
  page("Triage a group",
    dl([["Queue", queue], ["Fingerprint", h("span", {class: "mono", id: "triage-fingerprint"}, fingerprint)],
      ["Entries", g ? `${g.count}, last seen ${when(g.last_seen)}` : "none yet (triaged in advance)"]]),
    h("p", {}, "The group's record applies to its later dead letters too; an entry's own status wins over it. ",
      "Known issue keeps /healthz and the not-empty alert quiet for this fingerprint in this queue; the retention deadline and an inflow spike still alarm."),
    triageRecord("Current triage", record, "group"),
    triageForm("triage-group", {group: {queue, fingerprint}}, record, () => setTimeout(render, 0)),
    h("p", {}, h("a", {href: link("/groups", {queue, by: "fingerprint"})}, "Back to the groups of " + queue)));
}

// triageCell is the triage column of the groups by fingerprint.
function triageCell(g, queue) {
  const ts = (g.triage || []).filter(t => !queue || t.queue === queue);
  const text = ts.map(t => (queue ? "" : t.queue + ": ") + (t.status || "(none)") + (t.assignee ? " @" + t.assignee : "")).join("; ");
  return h("td", {class: "triage-cell"}, text || h("span", {class: "muted"}, "untriaged"),
    queue ? [" ", h("a", {href: link("/triage", {queue, fingerprint: g.key}), class: "triage-link"}, "Triage…")] : null);
}

pages["/triage"] = triageGroupPage;
