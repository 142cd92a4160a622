// The read-mostly pages: environments, files (download), skills, memory stores, vaults
// (credential metadata only) and usage per agent and day.
import { download, listAll } from "./api.js";
import { costCents, errorBox, fill, h, json, money, table, timeEl } from "./dom.js";

export async function environmentsPage(main) {
  const envs = await listAll("/v1/environments", { include_archived: true }, 1000);
  fill(
    main,
    h("h1", {}, "Environments"),
    table(
      "Environments",
      [
        { label: "Name", cell: (e) => e.name || e.id },
        { label: "Kind", cell: (e) => (e.config && e.config.type) || "" },
        {
          label: "Networking",
          cell: (e) => (e.config && e.config.networking && e.config.networking.type) || "",
        },
        { label: "Created", cell: (e) => timeEl(e.created_at) },
        {
          label: "Configuration",
          cell: (e) =>
            h("details", {}, h("summary", {}, "Show"), h("pre", { class: "code" }, json(e.config))),
        },
      ],
      envs,
      "No environments yet.",
    ),
  );
}

function size(bytes) {
  if (bytes === undefined || bytes === null) return "";
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

async function save(fileId, filename, status) {
  try {
    const blob = await download(`/v1/files/${encodeURIComponent(fileId)}/content`);
    const link = h("a", { href: URL.createObjectURL(blob), download: filename || fileId });
    document.body.append(link);
    link.click();
    link.remove();
    window.setTimeout(() => URL.revokeObjectURL(link.href), 10000);
  } catch (err) {
    fill(status, errorBox(err));
  }
}

export async function filesPage(main) {
  const files = await listAll("/v1/files", {}, 1000);
  const status = h("div", { class: "form-status" });
  fill(
    main,
    h("h1", {}, "Files"),
    status,
    table(
      "Files",
      [
        { label: "Name", cell: (f) => f.filename || f.id },
        { label: "Type", cell: (f) => f.mime_type || "" },
        { label: "Size", cell: (f) => size(f.size_bytes) },
        {
          label: "Scope",
          cell: (f) =>
            f.scope && f.scope.type === "session"
              ? h("a", { href: `#/sessions/${f.scope.id}` }, f.scope.id)
              : (f.scope && f.scope.id) || "",
        },
        { label: "Created", cell: (f) => timeEl(f.created_at) },
        {
          label: "Download",
          cell: (f) =>
            f.downloadable === false
              ? "not downloadable"
              : h(
                  "button",
                  {
                    type: "button",
                    class: "secondary",
                    onclick: () => save(f.id, f.filename, status),
                  },
                  `Download ${f.filename || f.id}`,
                ),
        },
      ],
      files,
      "No files yet.",
    ),
  );
}

export async function skillsPage(main) {
  const skills = await listAll("/v1/skills", {}, 1000);
  fill(
    main,
    h("h1", {}, "Skills"),
    table(
      "Skills",
      [
        { label: "Name", cell: (s) => s.display_name || s.id },
        { label: "Id", cell: (s) => s.id },
        { label: "Source", cell: (s) => (s.source && s.source.type) || "" },
        { label: "Latest version", cell: (s) => s.latest_version_id || "" },
        { label: "Created", cell: (s) => timeEl(s.created_at) },
      ],
      skills,
      "No skills yet.",
    ),
  );
}

export async function memoryPage(main) {
  const stores = await listAll("/v1/memory_stores", { include_archived: true }, 1000);
  const sections = stores.map((store) => {
    const slot = h("div", {}, "Loading memories…");
    listAll(`/v1/memory_stores/${encodeURIComponent(store.id)}/memories`, {}, 200).then(
      (memories) =>
        fill(
          slot,
          table(
            `Memories in ${store.name || store.id}`,
            [
              {
                label: "Path",
                cell: (m) => (m.type === "memory_prefix" ? `${m.path} (folder)` : m.path || m.id),
              },
              { label: "Size", cell: (m) => size(m.content_size_bytes ?? m.size_bytes) },
              { label: "Updated", cell: (m) => timeEl(m.updated_at || m.created_at) },
            ],
            memories,
            "No memories in this store.",
          ),
        ),
      (err) => fill(slot, errorBox(err)),
    );
    return h(
      "section",
      { class: "card", "aria-label": store.name || store.id },
      h("h2", {}, store.name || store.id),
      store.description ? h("p", {}, store.description) : null,
      h("p", { class: "hint" }, `${store.id}${store.archived_at ? " · archived" : ""}`),
      slot,
    );
  });
  fill(
    main,
    h("h1", {}, "Memory stores"),
    sections.length ? sections : h("p", { class: "empty" }, "No memory stores yet."),
  );
}

/** Only metadata: the API never returns secrets, and this page shows a fixed set of fields. */
function credentialRow(c) {
  const auth = c.auth || {};
  return {
    name: c.display_name || c.id,
    kind: auth.type || "",
    target: auth.mcp_server_url || (auth.allowed_hosts || []).join(", ") || auth.secret_name || "",
    created: c.created_at,
    archived: Boolean(c.archived_at),
  };
}

export async function vaultsPage(main) {
  const vaults = await listAll("/v1/vaults", { include_archived: true }, 1000);
  const sections = vaults.map((vault) => {
    const slot = h("div", {}, "Loading credentials…");
    listAll(
      `/v1/vaults/${encodeURIComponent(vault.id)}/credentials`,
      { include_archived: true },
      1000,
    ).then(
      (creds) =>
        fill(
          slot,
          table(
            `Credentials in ${vault.display_name || vault.id}`,
            [
              { label: "Name", cell: (c) => c.name },
              { label: "Kind", cell: (c) => c.kind },
              { label: "Used for", cell: (c) => c.target },
              { label: "Created", cell: (c) => timeEl(c.created) },
              { label: "Archived", cell: (c) => (c.archived ? "yes" : "no") },
            ],
            creds.map(credentialRow),
            "No credentials in this vault.",
          ),
        ),
      (err) => fill(slot, errorBox(err)),
    );
    return h(
      "section",
      { class: "card", "aria-label": vault.display_name || vault.id },
      h("h2", {}, vault.display_name || vault.id),
      h("p", { class: "hint" }, `${vault.id}${vault.archived_at ? " · archived" : ""}`),
      slot,
    );
  });
  fill(
    main,
    h("h1", {}, "Vaults"),
    h("p", { class: "hint" }, "Secrets are write-only: only credential metadata is shown."),
    sections.length ? sections : h("p", { class: "empty" }, "No vaults yet."),
  );
}

/** Totals per agent and UTC day, summed here from the listed sessions (newest 1000). */
export async function usagePage(main) {
  const sessions = await listAll("/v1/sessions", { include_archived: true }, 1000);
  const groups = new Map();
  for (const s of sessions) {
    const day = (s.created_at || "").slice(0, 10);
    const key = `${s.agent.id} ${day}`;
    let g = groups.get(key);
    if (!g) {
      g = { agent: s.agent, day, sessions: 0, input: 0, output: 0, cents: 0, unpriced: 0 };
      groups.set(key, g);
    }
    const u = s.usage || {};
    g.sessions += 1;
    g.input +=
      (u.input_tokens || 0) +
      (u.cache_read_input_tokens || 0) +
      (u.cache_creation_input_tokens || 0);
    g.output += u.output_tokens || 0;
    const cents = costCents(u);
    if (cents === null) g.unpriced += 1;
    else g.cents += cents;
  }
  const rows = [...groups.values()].sort((a, b) =>
    a.day === b.day
      ? (a.agent.name || "").localeCompare(b.agent.name || "")
      : a.day < b.day
        ? 1
        : -1,
  );
  fill(
    main,
    h("h1", {}, "Usage"),
    h(
      "p",
      { class: "hint" },
      `Summed from the ${sessions.length} most recent sessions, by creation day (UTC).`,
    ),
    table(
      "Usage per agent and day",
      [
        { label: "Day", cell: (g) => g.day },
        {
          label: "Agent",
          cell: (g) => h("a", { href: `#/agents/${g.agent.id}` }, g.agent.name || g.agent.id),
        },
        { label: "Sessions", cell: (g) => String(g.sessions) },
        { label: "Input tokens", cell: (g) => g.input.toLocaleString() },
        { label: "Output tokens", cell: (g) => g.output.toLocaleString() },
        {
          label: "Cost",
          cell: (g) => `${money(g.cents)}${g.unpriced ? ` (+${g.unpriced} unpriced)` : ""}`,
        },
      ],
      rows,
      "No sessions yet.",
    ),
  );
}
