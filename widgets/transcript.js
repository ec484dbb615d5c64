// sessionkit transcript: draws the rows Python sends, marks each with the status Python
// computed, and reports the user message clicked.  It computes nothing itself.
//
// Model: rows [{idx, role, user, tokens, text, summary, calls}], status [string per row],
// statuses [{name, label, color, text}] (the status table: every status colour, and the text
// colour of each status chip, comes from it),
// selected (user index, written here), focus (row to scroll to: Python sets it to the window's
// first message whenever the window moves).

// Pixels of the row before the focused one left in view, so the window's edge shows.
const LEAD = 28;
// Frames spent re-placing the focused row while the rows around it settle.
const MAX_PLACEMENTS = 20;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function body(row) {
  if (row.role === "tool") {
    const details = el("details", "sk-fold");
    details.append(el("summary", "", row.summary), el("pre", "sk-text", row.text));
    return details;
  }
  const wrap = el("div", "sk-body");
  if (row.text) wrap.append(el("div", "sk-text", row.text));
  if (row.calls.length) {
    const details = el("details", "sk-fold");
    details.append(el("summary", "", row.summary));
    for (const call of row.calls) details.append(el("pre", "sk-call", call));
    wrap.append(details);
  }
  return wrap;
}

function rowNode(row) {
  const node = el("div", `sk-row sk-role-${row.role}`);
  node.dataset.idx = row.idx;
  if (row.user >= 0) node.dataset.user = row.user;
  const head = el("div", "sk-head");
  const role = row.user >= 0 ? `user #${row.user}` : row.role;
  head.append(
    el("span", "sk-idx", `${row.idx}`),
    el("span", "sk-role", role),
    el("span", "sk-status"),
    el("span", "sk-tokens", `${row.tokens} tok`),
  );
  node.append(head, body(row));
  return node;
}

function statusTable(model) {
  return new Map(model.get("statuses").map((status) => [status.name, status]));
}

function render({ model, el: root }) {
  root.classList.add("sk-transcript");
  const list = el("div", "sk-rows");
  root.append(list);
  let nodes = [];
  let table = statusTable(model);

  function restyle() {
    table = statusTable(model);
    for (const node of nodes) delete node.dataset.status;
    paint();
  }

  function paint() {
    const status = model.get("status");
    const selected = model.get("selected");
    for (let i = 0; i < nodes.length; i++) {
      const node = nodes[i];
      const value = status[i] || "";
      if (node.dataset.status !== value) {
        const entry = table.get(value);
        node.dataset.status = value;
        node.querySelector(".sk-status").textContent = entry ? entry.label : value;
        if (entry) {
          node.style.setProperty("--sk-status-color", entry.color);
          node.style.setProperty("--sk-status-text", entry.text);
        } else {
          node.style.removeProperty("--sk-status-color");
          node.style.removeProperty("--sk-status-text");
        }
      }
      node.classList.toggle("sk-selected", node.dataset.user === String(selected));
    }
  }

  function build() {
    const fragment = document.createDocumentFragment();
    nodes = model.get("rows").map((row) => fragment.appendChild(rowNode(row)));
    list.replaceChildren(fragment);
    root.dataset.rows = String(nodes.length);
    paint();
    requestAnimationFrame(scroll);
  }

  // Place the focused row LEAD pixels below the top, again on the next frames until it stays
  // (fonts and folded tool output may still be settling their heights).
  function scroll() {
    const node = nodes[model.get("focus")];
    if (!node) return;
    let frames = 0;
    const place = () => {
      const offset = node.getBoundingClientRect().top - list.getBoundingClientRect().top;
      if (Math.abs(offset - LEAD) < 1 || frames++ > MAX_PLACEMENTS) return;
      list.scrollTop += offset - LEAD;
      requestAnimationFrame(place);
    };
    place();
  }

  function click(event) {
    if (event.target.closest("summary")) return;
    const node = event.target.closest(".sk-row");
    if (!node || node.dataset.user === undefined) return;
    model.set("selected", Number(node.dataset.user));
    model.save_changes();
  }

  list.addEventListener("click", click);
  model.on("change:rows", build);
  model.on("change:status", paint);
  model.on("change:statuses", restyle);
  model.on("change:selected", paint);
  model.on("change:focus", scroll);
  build();
  return () => {
    list.removeEventListener("click", click);
    model.off("change:rows", build);
    model.off("change:status", paint);
    model.off("change:statuses", restyle);
    model.off("change:selected", paint);
    model.off("change:focus", scroll);
  };
}

export default { render };
