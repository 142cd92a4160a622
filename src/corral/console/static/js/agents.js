// Agents: the list, one agent's versions, and a line diff between two versions.
import { listAll, request } from "./api.js";
import { errorBox, fill, h, json, table, timeEl } from "./dom.js";

export async function agentsPage(main) {
  const agents = await listAll("/v1/agents", { include_archived: true }, 1000);
  fill(
    main,
    h("h1", {}, "Agents"),
    table(
      "Agents",
      [
        { label: "Name", cell: (a) => h("a", { href: `#/agents/${a.id}` }, a.name || a.id) },
        {
          label: "Model",
          cell: (a) => (typeof a.model === "string" ? a.model : a.model && a.model.id) || "",
        },
        { label: "Latest version", cell: (a) => String(a.version) },
        { label: "Updated", cell: (a) => timeEl(a.updated_at) },
        { label: "Archived", cell: (a) => (a.archived_at ? "yes" : "no") },
      ],
      agents,
      "No agents yet.",
    ),
  );
}

/** A stable text form of a version: keys sorted, the version's own number and times dropped. */
function canonical(agent) {
  const sort = (v) => {
    if (Array.isArray(v)) return v.map(sort);
    if (v && typeof v === "object") {
      return Object.fromEntries(
        Object.keys(v)
          .sort()
          .map((k) => [k, sort(v[k])]),
      );
    }
    return v;
  };
  const { version, created_at, updated_at, ...rest } = agent;
  return json(sort(rest)).split("\n");
}

/** Line diff by longest common subsequence: [{op: " "|"-"|"+", line}]. */
export function diffLines(a, b) {
  const n = a.length;
  const m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) {
      out.push({ op: " ", line: a[i] });
      i++;
      j++;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) {
      out.push({ op: "-", line: a[i++] });
    } else {
      out.push({ op: "+", line: b[j++] });
    }
  }
  while (i < n) out.push({ op: "-", line: a[i++] });
  while (j < m) out.push({ op: "+", line: b[j++] });
  return out;
}

function renderDiff(lines) {
  const changed = lines.filter((l) => l.op !== " ").length;
  return [
    h(
      "p",
      { id: "diff-summary" },
      changed === 0 ? "The two versions are identical." : `${changed} changed lines.`,
    ),
    h(
      "pre",
      { class: "code diff", id: "diff", "aria-describedby": "diff-summary" },
      lines.map((l) => {
        if (l.op === "+") return h("ins", {}, `+ ${l.line}\n`);
        if (l.op === "-") return h("del", {}, `- ${l.line}\n`);
        return h("span", {}, `  ${l.line}\n`);
      }),
    ),
  ];
}

export async function agentPage(main, agentId) {
  const path = `/v1/agents/${encodeURIComponent(agentId)}`;
  const [agent, versions] = await Promise.all([
    request(path),
    listAll(`${path}/versions`, {}, 1000),
  ]);
  versions.sort((x, y) => x.version - y.version);
  const numbers = versions.map((v) => v.version);
  const pick = (id, label, value) => [
    h("label", { for: id }, label),
    h(
      "select",
      { id, name: id },
      numbers.map((n) => h("option", { value: String(n), selected: n === value }, `version ${n}`)),
    ),
  ];
  const result = h("div", { id: "diff-result" });
  const form = h(
    "form",
    { class: "filters", "aria-label": "Compare versions" },
    h(
      "div",
      {},
      pick("diff-from", "From", numbers.length > 1 ? numbers[numbers.length - 2] : numbers[0]),
    ),
    h("div", {}, pick("diff-to", "To", numbers[numbers.length - 1])),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Show diff")),
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const from = form.querySelector("#diff-from").value;
    const to = form.querySelector("#diff-to").value;
    try {
      const [a, b] = await Promise.all([
        request(path, { query: { version: from } }),
        request(path, { query: { version: to } }),
      ]);
      fill(
        result,
        h("h3", {}, `Version ${from} → version ${to}`),
        renderDiff(diffLines(canonical(a), canonical(b))),
      );
    } catch (err) {
      fill(result, errorBox(err));
    }
  });
  fill(
    main,
    h("h1", {}, `Agent ${agent.name || agent.id}`),
    h("p", { class: "hint" }, `${agent.id} · latest version ${agent.version}`),
    h(
      "section",
      { "aria-labelledby": "versions-title" },
      h("h2", { id: "versions-title" }, "Versions"),
      table(
        "Versions",
        [
          { label: "Version", cell: (v) => String(v.version) },
          { label: "Created", cell: (v) => timeEl(v.updated_at || v.created_at) },
          {
            label: "Model",
            cell: (v) => (typeof v.model === "string" ? v.model : v.model && v.model.id) || "",
          },
          { label: "Tools", cell: (v) => String((v.tools || []).length) },
        ],
        versions,
      ),
    ),
    h(
      "section",
      { "aria-labelledby": "diff-title" },
      h("h2", { id: "diff-title" }, "Compare two versions"),
      numbers.length < 2 ? h("p", { class: "empty" }, "Only one version so far.") : [form, result],
    ),
    h(
      "section",
      { "aria-labelledby": "config-title" },
      h("h2", { id: "config-title" }, "Current configuration"),
      h("pre", { class: "code" }, json(agent)),
    ),
    h("p", {}, h("a", { href: "#/usage" }, "Usage and cost per agent and day")),
  );
}
