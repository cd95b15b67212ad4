// Lily's console: the attempts of a dead letter (header x-lily-attempts,
// decoded by the API into evidence.attempts). Loaded after app.js, whose
// helpers (h, time, errorType) it uses.
"use strict";

const ATTEMPT_OUTCOMES = {immediate_retry: "retried at once", retry: "retried", held: "held (breaker open)", dead_letter: "dead-lettered"};

// attemptsSection lists the message's failed attempts, oldest first, each
// numbered: when (with its zone), retry and delivery counts, what became
// of it and the error. The attempts the bounded header gave up are counted
// where they were, after the first, and the numbering skips them.
function attemptsSection(e) {
  const list = (e.evidence && e.evidence.attempts) || [];
  if (!list.length) return null;
  const dropped = e.evidence.attempts_dropped || 0;
  const items = list.map((a, i) => h("li", {class: "attempt", value: i === 0 ? 1 : i + 1 + dropped},
    time(a.at), h("span", {class: "muted"}, ` — retry ${a.retry_count}`, a.delivery_count ? `, delivery ${a.delivery_count}` : "", " — "),
    h("span", {class: "outcome"}, ATTEMPT_OUTCOMES[a.outcome] || a.outcome), ": ",
    errorType(a.error_type), a.error_type && a.error_message ? ": " : "", h("span", {class: "message"}, a.error_message || "")));
  if (dropped) {
    items.splice(1, 0, h("li", {class: "attempts-dropped muted"},
      `… ${dropped} more ${dropped === 1 ? "attempt" : "attempts"} not kept: the message carries the first and the most recent ones`));
  }
  return [h("h2", {}, `Attempts (${list.length + dropped})`), h("ol", {class: "attempts"}, items)];
}
