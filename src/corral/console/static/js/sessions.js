// The sessions list: filters (status, agent, environment, created time), live status by
// polling the list, usage and cost per session.
import { listAll, request } from "./api.js";
import { badge, cost, errorBox, fill, h, table, timeEl, tokens } from "./dom.js";

const STATUSES = ["idle", "running", "rescheduling", "terminated"];
const POLL_MS = 3000;
const PAGE_SIZE = 50;

function select(id, label, options, value) {
  return [
    h("label", { for: id }, label),
    h(
      "select",
      { id, name: id },
      h("option", { value: "" }, "Any"),
      options.map(([v, text]) => h("option", { value: v, selected: v === value }, text)),
    ),
  ];
}

function toIso(local) {
  if (!local) return undefined;
  const d = new Date(local);
  return Number.isNaN(d.getTime()) ? undefined : d.toISOString();
}

export async function sessionsPage(main) {
  const [agents, environments] = await Promise.all([
    listAll("/v1/agents", {}, 500),
    listAll("/v1/environments", {}, 500),
  ]);
  const agentName = new Map(agents.map((a) => [a.id, a.name]));
  const envName = new Map(environments.map((e) => [e.id, e.name]));

  const form = h(
    "form",
    { class: "filters", "aria-label": "Filter sessions" },
    h(
      "div",
      {},
      select(
        "f-status",
        "Status",
        STATUSES.map((s) => [s, s]),
        null,
      ),
    ),
    h(
      "div",
      {},
      select(
        "f-agent",
        "Agent",
        agents.map((a) => [a.id, a.name || a.id]),
        null,
      ),
    ),
    h(
      "div",
      {},
      select(
        "f-env",
        "Environment",
        environments.map((e) => [e.id, e.name || e.id]),
        null,
      ),
    ),
    h(
      "div",
      {},
      h("label", { for: "f-after" }, "Created after"),
      h("input", { id: "f-after", type: "datetime-local" }),
    ),
    h(
      "div",
      {},
      h("label", { for: "f-before" }, "Created before"),
      h("input", { id: "f-before", type: "datetime-local" }),
    ),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Apply filters")),
  );
  const results = h("div", { id: "session-results" });
  fill(
    main,
    h("h1", {}, "Sessions"),
    form,
    h("p", { class: "hint" }, "Statuses refresh every few seconds."),
    results,
  );

  let timer = null;
  let stopped = false;
  const cursors = [undefined]; // page cursors of the pages seen, newest first
  let next = null;
  let lastShown = null;
  let run = 0;
  const focusKey = (el) => el.getAttribute("href") || el.textContent;
  const value = (id) => form.querySelector(`#${id}`).value;

  async function load() {
    const status = value("f-status");
    const env = value("f-env");
    const query = {
      agent_id: value("f-agent"),
      "statuses[]": status ? [status] : undefined,
      "created_at[gte]": toIso(value("f-after")),
      "created_at[lte]": toIso(value("f-before")),
      include_archived: true,
    };
    try {
      const page = cursors[cursors.length - 1];
      const body = await request("/v1/sessions", { query: { ...query, limit: PAGE_SIZE, page } });
      next = body.next_page || null;
      let sessions = body.data;
      // The API has no environment filter: narrow the listed page here.
      if (env) sessions = sessions.filter((s) => s.environment_id === env);
      if (stopped) return;
      // Re-render only on change, and keep keyboard focus where it was.
      const shown = JSON.stringify([
        sessions.map((s) => [s.id, s.status, s.usage, s.title]),
        next,
        cursors.length,
      ]);
      if (shown === lastShown) return;
      lastShown = shown;
      const focused = results.contains(document.activeElement)
        ? focusKey(document.activeElement)
        : null;
      fill(
        results,
        table(
          "Sessions, newest first",
          [
            {
              label: "Session",
              cell: (s) => h("a", { href: `#/sessions/${s.id}` }, s.title || s.id),
            },
            { label: "Status", cell: (s) => badge(s.status) },
            {
              label: "Agent",
              cell: (s) =>
                `${agentName.get(s.agent.id) || s.agent.name || s.agent.id} v${s.agent.version}`,
            },
            {
              label: "Environment",
              cell: (s) => envName.get(s.environment_id) || s.environment_id,
            },
            { label: "Created", cell: (s) => timeEl(s.created_at) },
            { label: "Tokens", cell: (s) => tokens(s.usage) },
            { label: "Cost", cell: (s) => cost(s.usage) },
          ],
          sessions,
          "No sessions match.",
        ),
        pager(),
      );
      if (focused) {
        const again = [...results.querySelectorAll("a, button")].find(
          (el) => focusKey(el) === focused,
        );
        if (again) again.focus();
      }
    } catch (err) {
      lastShown = null;
      if (!stopped) fill(results, errorBox(err));
    }
  }

  function pager() {
    const newer = h(
      "button",
      { type: "button", class: "secondary", disabled: cursors.length < 2 },
      "Newer sessions",
    );
    const older = h(
      "button",
      { type: "button", class: "secondary", disabled: !next },
      "Older sessions",
    );
    newer.addEventListener("click", () => {
      cursors.pop();
      restart();
    });
    older.addEventListener("click", () => {
      cursors.push(next);
      restart();
    });
    return h("div", { class: "actions", role: "group", "aria-label": "Pages" }, newer, older);
  }

  function restart() {
    window.clearTimeout(timer);
    poll();
  }

  async function poll() {
    const mine = ++run; // a restart while a load is in flight leaves one polling chain
    await load();
    if (!stopped && mine === run) timer = window.setTimeout(poll, POLL_MS);
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    cursors.splice(1);
    lastShown = null;
    restart();
  });
  await poll();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}
