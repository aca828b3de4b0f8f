// Small line charts drawn as SVG, no library: a series or two over the Overview's window.
const NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

// lines: [{values: [number|null], cls: "p50"}]; the y axis starts at 0 and ends at the largest value.
export function lineChart(title, lines, format, { width = 260, height = 64 } = {}) {
  const all = lines.flatMap((l) => l.values).filter((v) => v !== null && v !== undefined);
  const top = Math.max(...all, 0) || 1;
  const count = Math.max(...lines.map((l) => l.values.length), 2);
  const x = (i) => (i / (count - 1)) * (width - 2) + 1;
  const y = (v) => height - 2 - (v / top) * (height - 6);
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img",
                            "aria-label": `${title}: last ${summary(lines, format)}` });
  chart.append(svg("line", { x1: 0, y1: height - 1, x2: width, y2: height - 1, class: "axis" }));
  for (const line of lines) {
    let path = "";
    line.values.forEach((v, i) => {
      if (v === null || v === undefined) return;
      path += `${path && line.values[i - 1] !== null && line.values[i - 1] !== undefined ? "L" : "M"}` +
        `${x(i).toFixed(1)},${y(v).toFixed(1)}`;
    });
    if (path) chart.append(svg("path", { d: path, class: `series ${line.cls}` }));
    line.values.forEach((v, i) => {  // a step with no neighbour is a dot, or it would not show at all
      const alone = [line.values[i - 1], line.values[i + 1]].every((n) => n === null || n === undefined);
      if (v !== null && v !== undefined && alone) {
        chart.append(svg("circle", { cx: x(i).toFixed(1), cy: y(v).toFixed(1), r: 2, class: `dot ${line.cls}` }));
      }
    });
  }
  const figure = document.createElement("figure");
  figure.className = "chart-box";
  const caption = document.createElement("figcaption");
  caption.textContent = `${title} — now ${summary(lines, format)}, max ${format(top)}`;
  figure.append(chart, caption);
  return figure;
}

function summary(lines, format) {
  return lines.map((l) => {
    const last = [...l.values].reverse().find((v) => v !== null && v !== undefined);
    return `${l.cls} ${last === undefined ? "–" : format(last)}`;
  }).join(", ");
}
