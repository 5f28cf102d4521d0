// The clusters page's usage column, live: each cluster with a run on it asks the server for that
// run's last utilisation line (what the job's usage events say: CPU, accelerators, memory, samples/s)
// every 5 seconds; the server answers from one look at the cluster shared by every viewer.
(function () {
  "use strict";
  const cells = Array.from(document.querySelectorAll("td.usage[data-live]"));
  async function tick() {
    await Promise.all(cells.map(async (cell) => {
      try {
        const answer = await fetch(cell.dataset.live, { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (!answer.ok) return;
        const run = await answer.json();
        if (run.usage) cell.textContent = run.usage;
      } catch (e) { /* the next look tries again */ }
    }));
    if (cells.length) setTimeout(tick, 5000);
  }
  tick();
})();
