// Lily's console: the consumers seen through their heartbeats, and the
// pause of each queue (docs/design.md §9.10). A pause is obeyed by every
// consumer of the queue at its next heartbeat; stale instances are shown,
// never hidden.
"use strict";

// instanceState says what an instance's heartbeat says: stale (silent for
// 3 of its intervals), paused (it reached its queue's pause) or running.
function instanceState(c, now) {
  if (c.stale) return h("span", {class: "badge stale"}, "stale — silent for " + age((now - new Date(c.last_seen)) / 1000));
  if (c.paused) return h("span", {class: "badge paused"}, "paused");
  return h("span", {class: "badge live"}, "running");
}

// pauseControl is the pause (with a reason) or resume button of a queue.
function pauseControl(q) {
  const out = h("span", {"aria-live": "polite"});
  const path = `/api/queues/${encodeURIComponent(q.queue)}/`;
  if (q.paused) {
    const resume = h("button", {type: "button"}, "Resume " + q.queue);
    resume.addEventListener("click", async () => {
      resume.disabled = true;
      try { await api("POST", path + "resume"); render(); } catch (e) { resume.disabled = false; out.replaceChildren(failure(e)); }
    });
    return h("td", {}, resume, out);
  }
  const id = "pause-reason-" + q.queue.replace(/[^A-Za-z0-9_-]/g, "_");
  const reason = h("input", {id, type: "text", placeholder: "why (audited)"});
  const form = h("form", {class: "inline"}, h("label", {for: id, class: "visually-hidden"}, "Reason to pause " + q.queue), reason,
    h("button", {type: "submit"}, "Pause " + q.queue));
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    try { await api("POST", path + "pause", {reason: reason.value}); render(); } catch (e) { out.replaceChildren(failure(e)); }
  });
  return h("td", {}, form, out);
}

async function consumersPage(_, gen) {
  const data = await api("GET", "/api/consumers");
  if (gen !== generation) return;
  const now = new Date(data.now);
  const queues = data.queues.map(q => {
    const of = data.consumers.filter(c => c.queue === q.queue);
    const stale = of.filter(c => c.stale).length;
    const state = q.paused
      ? h("span", {}, h("span", {class: "badge paused"}, "paused"), ` by ${q.actor} since `, time(q.paused_at), q.reason ? ": " + q.reason : "")
      : h("span", {class: "badge live"}, "consuming");
    return h("tr", {"data-queue": q.queue}, h("th", {scope: "row"}, q.queue), h("td", {class: "queue-state"}, state),
      h("td", {class: "num"}, of.length - stale), h("td", {class: "num"}, stale), can("pause") ? pauseControl(q) : null);
  });
  const instances = data.consumers.map(c => h("tr", {"data-instance": c.instance, class: c.stale ? "stale" : null},
    h("th", {scope: "row", class: "mono"}, c.instance), h("td", {}, c.queue), h("td", {}, c.name), h("td", {}, c.version),
    h("td", {}, c.host), h("td", {class: "num"}, c.pid), h("td", {}, c.breaker), h("td", {class: "instance-state"}, instanceState(c, now)),
    h("td", {}, time(c.started_at)), h("td", {}, time(c.last_seen))));
  const head = ["Queue", "State", "Running", "Stale"];
  if (can("pause")) head.push("Pause");
  page("Consumers",
    h("p", {}, "Every consumer that counts through the catalog writes a heartbeat every few seconds. An instance silent for 3 of its intervals is stale: its process died or cannot reach the catalog (its row is pruned after a day). Pausing a queue stops its consumers from taking messages at their next heartbeat; they finish what they hold, and the messages wait at the broker with their delivery counts untouched."),
    h("h2", {}, "Queues"),
    queues.length ? table(head, queues, {class: "queues-pause"}) : notice("info", "No queue is known yet."),
    h("h2", {}, "Instances"),
    instances.length ? table(["Instance", "Queue", "Name", "Version", "Host", "PID", "Breaker", "State", "Started", "Last seen"], instances, {class: "consumers"})
      : notice("info", "No consumer has sent a heartbeat."));
}

pages["/consumers"] = consumersPage;
