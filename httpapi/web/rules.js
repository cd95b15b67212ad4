// Lily's console: rule-driven redrive ([[redrive_rule]]), read only. The
// rules are configured in lily.toml and fired by 'lily serve'; this page
// shows what each would do now (a dry run) and what each did.
"use strict";

async function rulesPage(_, gen) {
  const data = await api("GET", "/api/rules");
  if (gen !== generation) return;
  if (!data.rules.length) {
    page("Redrive rules", notice("info", "No [[redrive_rule]] in the configuration: rule-driven redrive is off."));
    return;
  }
  const rows = data.plans.map(p => {
    let now = "";
    if (!p.occurrence) now = "nothing: " + p.trigger;
    else if (p.fired) now = p.job_id ? h("a", {href: "#/redrives"}, "fired: job " + p.job_id) : "fired: nothing to redrive";
    else now = `would redrive ${p.selected} pending entries` + (p.held_back ? ` (${p.held_back} delivery_limit held back)` : "");
    return h("tr", {"data-rule": p.rule}, h("th", {scope: "row"}, p.rule), h("td", {}, p.queue), h("td", {}, p.occurrence ? p.trigger : "—"),
      h("td", {class: "rule-now"}, now), h("td", {class: "mono"}, p.occurrence ? p.filter : ""));
  });
  const fired = data.firings.map(f => h("tr", {}, h("th", {scope: "row"}, f.rule), h("td", {}, f.occurrence), h("td", {}, time(f.fired_at)),
    h("td", {class: "num"}, f.job_id || "—"), h("td", {}, f.detail), h("td", {}, h("a", {href: link("/audit", {op: f.op})}, f.op))));
  page("Redrive rules",
    h("p", {}, "Rules from the configuration's [[redrive_rule]] entries. 'lily serve' fires each once per occurrence of its trigger — a breaker of the queue closing after an outage, or a fixed consumer version acking messages — with a dry run recorded first, then an ordinary redrive job (sample, rate, max_redrives). A rule takes only the dead-letter reason it names."),
    h("h2", {}, "What each rule would do now (dry run)"),
    table(["Rule", "Queue", "Trigger", "Now", "Selection"], rows, {class: "rules"}),
    h("h2", {}, "Firings"),
    fired.length ? table(["Rule", "Occurrence", "Fired", "Job", "Detail", "Audit"], fired) : notice("info", "No rule has fired yet."));
}

pages["/rules"] = rulesPage;
