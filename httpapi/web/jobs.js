// Lily's console: redrive jobs' live progress. The Redrives page and the
// overview's recent redrives poll GET /api/redrives while they are shown
// and update each job's row in place — progress, counts, state — until
// it ends and shows its final state; no page reload. Loaded after app.js,
// whose helpers (h, api, generation, jobRow, jobTable, activeJob) it uses.
"use strict";

// jobProgress is a job's progress cell: handled of total, and a bar.
function jobProgress(j) {
  return h("td", {class: "job-progress"},
    h("progress", {max: Math.max(1, j.total), value: j.done, "aria-label": `job ${j.id}: ${j.done} of ${j.total} handled`}),
    h("span", {class: "job-done-count"}, `${j.done}/${j.total}`));
}

// jobSig is what a job's row shows: the row is rebuilt when it changes.
function jobSig(j) {
  return [j.state, j.stage, j.done, j.total, j.redriven, j.needs_manual, j.failed, j.held_back, j.error].join("|");
}

// updateJobRow puts the job's new figures into its row. While the job is
// active its cancel button stays as it is (it may hold the focus); once
// the job ended, the whole row is its final one.
function updateJobRow(tr, j) {
  if (tr.dataset.sig === jobSig(j)) return;
  const fresh = jobRow(j);
  const keep = activeJob(j.state) && activeJob(tr.dataset.state) ? 1 : 0;
  const cells = [...fresh.children];
  for (let i = 0; i < cells.length - keep; i++) tr.children[i].replaceWith(cells[i]);
  tr.dataset.sig = fresh.dataset.sig;
  tr.dataset.state = fresh.dataset.state;
}

// watchJobs polls the jobs shown in list while its page is the current
// one (gen): every second while one of them is active, every 5 seconds
// otherwise. A job that appears (started elsewhere) redraws the list;
// limit > 0 shows only the newest limit jobs. It returns list.
function watchJobs(list, gen, limit) {
  (async () => {
    for (;;) {
      const busy = [...list.querySelectorAll("tr[data-state]")].some(tr => activeJob(tr.dataset.state));
      await new Promise(r => setTimeout(r, busy ? 1000 : 5000));
      if (gen !== generation || !list.isConnected) return;
      let data;
      try { data = await api("GET", "/api/redrives"); } catch (e) { if (e.status === 401) return; continue; }
      if (gen !== generation || !list.isConnected) return;
      const jobs = limit > 0 ? data.redrives.slice(0, limit) : data.redrives;
      const shown = [...list.querySelectorAll("tr[data-job]")].map(tr => tr.dataset.job);
      if (jobs.length && jobs.map(j => String(j.id)).join() !== shown.join()) {
        list.replaceChildren(jobTable(jobs));
        continue;
      }
      for (const j of jobs) updateJobRow(list.querySelector(`tr[data-job="${j.id}"]`), j);
    }
  })();
  return list;
}
