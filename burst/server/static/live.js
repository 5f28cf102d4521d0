// A run's live part: its state, epoch, step, loss, samples/s, cost and physics, asked of the server
// every few seconds while the run goes on (the server reads them from the run's cluster as its owner).
(function () {
  "use strict";
  const facts = document.getElementById("facts");
  if (!facts) return;
  const url = facts.dataset.live;
  const LOSSES = ["loss", "g_loss", "d_loss"];
  const text = (id, value) => { const el = document.getElementById(id); if (el) el.textContent = value; };
  const lossOf = (epoch) => { for (const k of LOSSES) if (typeof epoch[k] === "number") return [k, epoch[k]]; return [null, null]; };
  const svgNS = "http://www.w3.org/2000/svg";

  function chart(epochs) {
    const svg = document.getElementById("chart");
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const points = epochs.map((e) => [e.epoch, lossOf(e)[1]]).filter((p) => typeof p[1] === "number");
    if (!points.length) return;
    const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
    const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1), y0 = Math.min(...ys), y1 = Math.max(...ys, y0 + 1e-9);
    const X = (x) => 50 + (660 * (x - x0)) / (x1 - x0), Y = (y) => 200 - (180 * (y - y0)) / (y1 - y0);
    const line = document.createElementNS(svgNS, "polyline");
    line.setAttribute("class", "loss");
    line.setAttribute("points", points.map((p) => X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1)).join(" "));
    svg.appendChild(line);
    for (const [label, y] of [[y1, 20], [y0, 200]]) {
      const t = document.createElementNS(svgNS, "text");
      t.setAttribute("x", "4"); t.setAttribute("y", String(y)); t.setAttribute("class", "note");
      t.textContent = label.toPrecision(3);
      svg.appendChild(t);
    }
  }

  function table(id, rows) {
    const body = document.querySelector("#" + id + " tbody");
    body.textContent = "";
    for (const cells of rows) {
      const tr = document.createElement("tr");
      for (const c of cells) { const td = document.createElement("td"); td.textContent = c; tr.appendChild(td); }
      body.appendChild(tr);
    }
  }

  function show(run) {
    if (run.error) { text("unreachable", run.error); return; }
    text("state", run.state);
    const epochs = run.epochs || [];
    const last = epochs[epochs.length - 1];
    text("epoch", last ? last.epoch + " / " + run.epochs_planned : "–");
    if (run.step) text("step", run.step.step + " / " + run.step.steps + " of epoch " + run.step.epoch);
    if (last) {
      const [name, value] = lossOf(last);
      if (name) text("loss", name + " " + value.toPrecision(4));
      if (last.samples_per_s) text("rate", String(last.samples_per_s));
    }
    text("cost", "$" + run.cost_usd.toFixed(4));
    if (run.forecast_usd !== null && run.forecast_usd !== undefined) text("forecast", "$" + run.forecast_usd.toFixed(2) + " at the last epoch");
    if (run.report) {
      const dd = document.getElementById("report");
      if (!dd.querySelector("a")) { dd.textContent = ""; const a = document.createElement("a"); a.href = run.report; a.id = "report-link"; a.textContent = "the run's report"; dd.appendChild(a); }
    }
    text("unreachable", run.log_unreachable || run.failure || "");
    table("epochs", epochs.map((e) => [e.epoch, lossOf(e)[1] === null ? "" : lossOf(e)[1].toPrecision(4), e.samples_per_s || "", e.said || ""]));
    chart(epochs);
    if (run.managed) {
      document.getElementById("managed").hidden = false;
      text("attempts", "attempt " + run.attempts + " (a managed run: its controller moves it when its cluster is lost)");
      const list = document.getElementById("moves");
      list.textContent = "";
      for (const line of run.moves || []) { const li = document.createElement("li"); li.textContent = line; list.appendChild(li); }
      const times = document.getElementById("timeline");
      times.textContent = "";
      for (const line of run.timeline || []) { const li = document.createElement("li"); li.textContent = line; times.appendChild(li); }
    }
    if (run.summary) {
      text("validation", run.validation || "");
      table("physics", Object.entries(run.summary).filter((kv) => typeof kv[1] === "number").map((kv) => [kv[0], kv[1].toPrecision(4)]));
    }
    return run.state;
  }

  const FINISHED = ["SUCCEEDED", "FAILED", "STOPPED", "STOPPED_BUDGET", "FAILED_QUALITY", "LOST", "CANCELLED"];
  async function tick() {
    let state = null;
    try {
      const answer = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (answer.ok) state = show(await answer.json());
    } catch (e) { text("unreachable", "the server did not answer"); }
    if (!FINISHED.includes(state)) setTimeout(tick, 5000);
  }
  tick();
})();
