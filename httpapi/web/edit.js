// Lily's console: guarded edit of a dead letter's body ('lily dlq edit').
// Loaded after app.js; uses its helpers. An edit stores a new version (the
// original is kept); the operator sees the diff first and types the entry
// ID to confirm.
"use strict";

// mayEdit reports whether the session may edit entries of queue: the
// editor permission (a token's edit_queues), never a role alone.
function mayEdit(queue) {
  if (!can("edit") || !session.edit_queues) return false;
  return session.edit_queues.includes("*") || session.edit_queues.includes(queue);
}

// editLink is the entry page's action, for an editor of the entry's queue.
function editLink(e) {
  if (!mayEdit(e.queue) || !["pending", "needs_manual"].includes(e.state) || e.erased_at) return null;
  return h("li", {}, h("a", {id: "edit-link", href: link("/edit", {id: String(e.id)})}, "Edit the body…"));
}

// bodyText is a rendered body as editable text, or null for a binary one.
function bodyText(b) {
  if (b.format === "json") return JSON.stringify(b.value, null, 2);
  if (b.format === "text") return b.value;
  if (b.format === "empty") return "";
  return null;
}

// versionsSection lists an edited entry's versions with their diffs.
function versionsSection(e) {
  if (!e.versions || e.versions.length < 2) return null;
  const last = e.versions[e.versions.length - 1].version;
  return [h("h2", {}, "Versions"),
    h("p", {class: "muted"}, `The body was edited: a redrive sends version ${last}. The original (version 0) is kept.`),
    h("ol", {class: "versions", start: "0"}, e.versions.map(v => h("li", {"data-version": v.version},
      h("p", {}, h("strong", {}, "Version " + v.version), " — ",
        v.version === 0 ? "original, as dead-lettered" : `by ${v.edited_by}, ${when(v.edited_at)}: ${v.reason}`,
        ` · ${v.body_size} bytes · `, h("span", {class: "mono"}, v.body_sha256), v.erased ? " · body removed" : ""),
      v.diff ? h("pre", {class: "diff", tabindex: "0", "aria-label": "change from version " + (v.version - 1)}, v.diff) : null)))];
}

async function editPage(params) {
  const id = params.get("id") || "";
  if (!/^\d+$/.test(id)) { page("Edit", notice("error", "No entry ID: open an entry and choose Edit the body.")); return; }
  const gen = generation;
  const e = await api("GET", `/api/entries/${id}?body=auto`);
  if (gen !== generation) return;
  const back = h("p", {}, h("a", {href: "#/entry/" + id}, "Back to entry " + id));
  if (!mayEdit(e.queue)) {
    page(`Edit entry ${id}`, back, notice("error", `You may not edit entries of ${e.queue}: only a token whose edit_queues lists the queue may (a role alone never does).`));
    return;
  }
  const latest = e.versions && e.versions.length ? e.versions[e.versions.length - 1] : {version: 0, body: e.body};
  const text = bodyText(latest.body);
  if (text === null) {
    page(`Edit entry ${id}`, back, notice("warn", "The body is binary: edit it with 'lily dlq edit --body-file' or the API's body_base64."));
    return;
  }
  const form = h("form", {id: "edit-form", class: "stack"},
    h("div", {}, h("label", {for: "edit-body"}, `New body (replaces version ${latest.version})`),
      h("textarea", {id: "edit-body", name: "body", rows: 14, cols: 80, spellcheck: "false", class: "mono"}, text)),
    field("edit-reason", "Why (kept with the version and in the audit log)", {required: true, size: 60}),
    h("div", {class: "buttons"}, h("button", {type: "submit", id: "edit-preview"}, "Show the change")));
  const body = (dry, confirm) => ({body: form.elements.body.value, reason: form.elements["edit-reason"].value, confirm, dry_run: dry});
  const result = twoStep(form, () => api("POST", `/api/entries/${id}/edit`, body(true, id)), (p, area) => {
    const typed = h("input", {id: "edit-confirm", name: "edit-confirm", autocomplete: "off", inputmode: "numeric", size: 10, "aria-describedby": "edit-confirm-help"});
    const btn = h("button", {type: "button", id: "confirm", class: "danger", disabled: true}, `Store version ${p.version}`);
    typed.addEventListener("input", () => { btn.disabled = typed.value.trim() !== id; });
    area.replaceChildren(h("div", {id: "edit-result", class: "plan"}, h("h2", {tabindex: "-1"}, "The change"),
      h("p", {}, `Version ${p.previous.version} (${p.previous.body_size} bytes) → version ${p.version} (${p.current.body_size} bytes). Nothing is stored yet.`),
      h("pre", {id: "edit-diff", class: "diff", tabindex: "0", "aria-label": "diff"}, p.diff),
      h("div", {}, h("label", {for: "edit-confirm"}, "Type the entry ID to confirm"), typed,
        h("small", {id: "edit-confirm-help"}, `enter ${id}: the new version is what a redrive of this entry sends`)), btn));
    area.querySelector("h2").focus();
    return btn;
  }, async (_, area) => {
    const r = await api("POST", `/api/entries/${id}/edit`, body(false, area.querySelector("#edit-confirm").value.trim()));
    area.append(notice("ok", h("span", {id: "edit-stored"}, `Stored version ${r.version} by ${r.edited_by}. `),
      h("a", {href: "#/entry/" + id}, "Back to the entry"), " · ", h("a", {id: "edit-audit", href: link("/audit", {op: r.op})}, "See it in the audit log")));
  });
  page(`Edit entry ${id}`, back,
    h("p", {}, `Queue ${e.queue}, event ${e.event_id}. The edit stores a new version; the original and every earlier version are kept, and the audit log records both hashes.`),
    form, result);
}

pages["/edit"] = editPage;
