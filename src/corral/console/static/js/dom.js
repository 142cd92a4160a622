// Small DOM helpers. Text always goes in as text nodes: session contents are model output.

/** h("a", {href: "#/x", class: "y"}, "text", child) -> element. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      el.className = value;
    } else if (name in el && typeof value !== "string") {
      el[name] = value;
    } else {
      el.setAttribute(name, value === true ? "" : value);
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

let announcer;

/** Tell screen readers something happened (polite live region). */
export function announce(text) {
  announcer = announcer || document.getElementById("announce");
  if (announcer) announcer.textContent = text;
}

export function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

export function timeEl(iso) {
  return h("time", { datetime: iso || "" }, when(iso));
}

export function tokens(usage) {
  if (!usage) return "0";
  const input =
    (usage.input_tokens || 0) +
    (usage.cache_read_input_tokens || 0) +
    (usage.cache_creation_input_tokens || 0);
  return `${input.toLocaleString()} in / ${(usage.output_tokens || 0).toLocaleString()} out`;
}

/** Cents (the API's `list_cost.amount`, an integer string) of a usage, or null if unpriced. */
export function costCents(usage) {
  const cost = usage && usage.list_cost;
  if (!cost || cost.amount === undefined || cost.amount === null) return null;
  const cents = Number(cost.amount);
  return Number.isFinite(cents) ? cents : null;
}

export function money(cents, currency = "USD") {
  if (cents === null || cents === undefined) return "unpriced";
  return `${(cents / 100).toFixed(2)} ${currency}`;
}

export function cost(usage) {
  const cents = costCents(usage);
  if (cents === null && !(usage && (usage.input_tokens || usage.output_tokens))) return "none yet";
  return money(cents, usage && usage.list_cost ? usage.list_cost.currency : "USD");
}

export function json(value) {
  return JSON.stringify(value, null, 2);
}

/** A status badge (text, not colour alone, carries the meaning). */
export function badge(status) {
  return h("span", { class: `badge badge-${status || "unknown"}` }, status || "unknown");
}

/**
 * A table whose rows stack into labelled cards on narrow screens.
 * columns: [{label, cell: (row) => node|string}]
 */
export function table(caption, columns, rows, empty = "Nothing here yet.") {
  if (rows.length === 0) return h("p", { class: "empty" }, empty);
  return h(
    "table",
    { class: "list" },
    h("caption", {}, caption),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        columns.map((c) => h("th", { scope: "col" }, c.label)),
      ),
    ),
    h(
      "tbody",
      {},
      rows.map((row) =>
        h(
          "tr",
          {},
          columns.map((c) => h("td", { "data-label": c.label }, c.cell(row))),
        ),
      ),
    ),
  );
}

/** An error paragraph (role=alert so it is read out). */
export function errorBox(err) {
  return h("p", { class: "error", role: "alert" }, err && err.message ? err.message : String(err));
}
