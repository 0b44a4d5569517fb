// The offline attention explorer (kvutils/explorer/html.py writes this script into the page, after
// its controls and its data). The data: kvutils/explorer/data.py; per model, word, construction and
// side, `offset` and `stored_n` locate one lower triangle of stored_n tokens per layer and head,
// rows one after another, weights as round(w * levels) in one byte. unpack_matrix (Python) reads
// the same bytes the same way; the browser test compares the two.
(function () {
  "use strict";
  const root = document.currentScript.parentElement;
  const plot = root.querySelector(".ae-plot");
  if (!window.Plotly) { plot.textContent = root.dataset.noPlotly; return; }
  const spec = JSON.parse(root.querySelector(".ae-data").textContent);
  const controls = {}, shows = {};
  root.querySelectorAll("[data-control]").forEach((el) => { controls[el.dataset.control] = el; });
  root.querySelectorAll("output[data-show]").forEach((el) => { shows[el.dataset.show] = el; });
  const range = (n) => Array.from({ length: n }, (_, i) => i);
  // Plotly reads a subset of HTML in its labels: "<bos>" would vanish as an unknown tag
  const esc = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const short = (s, limit = 48) => (s.length <= limit ? s : "…" + s.slice(-limit));
  let blob = null;
  let draws = 0;

  async function inflate(b64) {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  function fillSelect(el, options, value) {
    el.replaceChildren(...options.map(([v, label]) => new Option(label, String(v))));
    el.value = options.some(([v]) => String(v) === String(value)) ? String(value) : String(options[0][0]);
  }

  const model = () => spec.models.find((m) => m.name === controls.model.value);
  const sides = () => model().pairs[controls.word.value][controls.construction.value];

  // a model, word or text changed: the layers, heads and query positions it allows
  function configure() {
    const m = model();
    controls.layer.max = m.layers;
    controls.layer.value = Math.min(Number(controls.layer.value), m.layers);
    fillSelect(controls.head, [["mean", "mean over heads"], ...range(m.heads).map((h) => [h, `head ${h}`])],
      controls.head.value);
    controls.query.max = Math.min(...sides().map((s) => s.tokens.length)) - 1;
    controls.query.value = Math.min(Number(controls.query.value), Number(controls.query.max));
  }

  // (n, n) weights of one side, null above the diagonal (a causal query sees no later key)
  function matrix(m, side, layer, head) {
    const n = side.tokens.length, stored = (side.stored_n * (side.stored_n + 1)) / 2;
    const base = side.offset + layer * m.heads * stored;
    const heads = head === "mean" ? range(m.heads) : [Number(head)];
    return range(n).map((q) => range(n).map((k) => {
      if (k > q) return null;
      let sum = 0;
      for (const h of heads) sum += blob[base + h * stored + (q * (q + 1)) / 2 + k];
      return sum / heads.length / spec.levels;
    }));
  }

  function draw() {
    const m = model(), layer = Number(controls.layer.value) - 1, head = controls.head.value;
    const back = Number(controls.query.value);
    const layout = structuredClone(spec.layout), traces = [], shapes = [];
    const texts = root.querySelector(".ae-texts");
    texts.replaceChildren();
    sides().forEach((side, i) => {
      const n = side.tokens.length, ticks = range(n), labels = side.tokens.map(esc);
      const z = matrix(m, side, layer, head), q = Math.max(n - 1 - back, 0), row = z[q].map((v) => v ?? 0);
      const [s0, s1] = side.span, heat = i === 0 ? "" : "2", bars = i === 0 ? "3" : "4";
      const hover = range(n).map((r) => range(n).map((k) => `${labels[r]} → ${labels[k]}`));
      traces.push({ type: "heatmap", z, x: ticks, y: ticks, text: hover, coloraxis: "coloraxis",
        xaxis: "x" + heat, yaxis: "y" + heat, hovertemplate: "%{text}: %{z:.3f}<extra></extra>" });
      traces.push({ type: "bar", x: ticks, y: row, text: labels, xaxis: "x" + bars, yaxis: "y" + bars,
        marker: { color: ticks.map((k) => (k === 0 ? "#d62728" : k >= s0 && k < s1 ? "#ff7f0e" : "#1f77b4")) },
        hovertemplate: "%{text}: %{y:.3f}<extra></extra>", textposition: "none" });
      for (const axis of ["xaxis" + heat, "yaxis" + heat, "xaxis" + bars]) {
        Object.assign(layout[axis], { tickmode: "array", tickvals: ticks, ticktext: labels, tickfont: { size: 9 } });
      }
      layout["xaxis" + bars].range = [-0.5, n - 0.5];
      shapes.push({ type: "rect", xref: "x" + heat, yref: "y" + heat, x0: -0.5, x1: n - 0.5, y0: q - 0.5,
        y1: q + 0.5, line: { color: "#d62728", width: 2 } });
      shapes.push({ type: "rect", xref: "x" + heat, yref: "y" + heat, x0: s0 - 0.5, x1: s1 - 0.5, y0: -0.5,
        y1: n - 0.5, line: { color: "#ff7f0e", width: 2, dash: "dot" } });
      shapes.push({ type: "rect", xref: "x" + bars, yref: `y${bars} domain`, x0: s0 - 0.5, x1: s1 - 0.5, y0: 0,
        y1: 1, fillcolor: "#ff7f0e", opacity: 0.12, line: { width: 0 }, layer: "below" });
      const onSpan = row.slice(s0, s1).reduce((a, b) => a + b, 0);
      const name = "AB"[i];
      layout.annotations[i].text = `${name}: every query row`;
      layout.annotations[i + 2].text = `${name}: query '${labels[q]}' (token ${q})<br>${onSpan.toFixed(3)} on the ` +
        `differing span, ${row[0].toFixed(3)} on the first token`;
      const line = document.createElement("div");
      line.textContent = `${name}: ${short(side.text, 120)}`;
      texts.append(line);
    });
    layout.shapes = shapes;
    layout.title.text = `Attention of one query token — ${m.name}, layer ${layer + 1} of ${m.layers}, ` +
      (head === "mean" ? "mean over heads" : `head ${head}`);
    shows.layer.value = `${layer + 1} / ${m.layers}`;
    const first = sides()[0];
    shows.query.value = `${back} (A: '${first.tokens[Math.max(first.tokens.length - 1 - back, 0)]}')`;
    return Plotly.react(plot, traces, layout, { displaylogo: false, responsive: true }).then(() => {
      root.dataset.draws = String(++draws);  // the browser test waits for this after each change
    });
  }

  const initial = spec.initial;
  fillSelect(controls.model, spec.models.map((m) => [m.name, m.name]), initial.model);
  fillSelect(controls.word, Object.keys(spec.models[0].pairs).map((w) => [w, w]), initial.word);
  fillSelect(controls.construction, Object.entries(spec.constructions).map(([c, t]) => [c, `${c}: ${t}`]),
    initial.construction);
  controls.layer.min = 1;
  controls.layer.value = initial.layer;
  controls.query.value = initial.query;
  for (const name of ["model", "word", "construction"]) {
    controls[name].addEventListener("change", () => { configure(); draw(); });
  }
  controls.head.addEventListener("change", draw);
  for (const name of ["layer", "query"]) controls[name].addEventListener("input", draw);
  inflate(spec.blob).then((bytes) => {
    blob = bytes;
    configure();
    controls.layer.value = Math.min(initial.layer, model().layers);
    return draw();
  }).catch((err) => { plot.textContent = `The explorer failed: ${err}`; console.error(err); });
})();
