// A session's page: summary with usage and cost, actions it waits for, the live timeline
// (history from GET /events, then the SSE stream), message/interrupt controls and threads.
import { ApiError, listAll, openStream, request } from "./api.js";
import { announce, badge, cost, errorBox, fill, h, json, timeEl, tokens } from "./dom.js";

const RECONNECT_MS = 1000;
const TOOL_USES = new Set(["agent.tool_use", "agent.custom_tool_use", "agent.mcp_tool_use"]);

function blocksText(content) {
  if (!content || content.length === 0) return "";
  return content.map((b) => (b.type === "text" ? b.text : `[${b.type}]`)).join("\n");
}

function seconds(startIso, endIso) {
  const ms = new Date(endIso).getTime() - new Date(startIso).getTime();
  return Number.isFinite(ms) ? `${(ms / 1000).toFixed(2)} s` : "";
}

function item(kind, label, at, ...body) {
  return h(
    "li",
    { class: `event event-${kind}` },
    h("div", { class: "event-head" }, h("span", { class: "event-label" }, label), timeEl(at)),
    ...body,
  );
}

export async function timelinePage(main, sessionId) {
  let session = await request(`/v1/sessions/${encodeURIComponent(sessionId)}`);
  const base = `/v1/sessions/${encodeURIComponent(sessionId)}`;

  const statusSlot = h("span", { id: "session-status" });
  const tokensSlot = h("dd", { id: "session-tokens" });
  const costSlot = h("dd", { id: "session-cost" });
  const liveSlot = h("span", { id: "live", class: "live" }, "Connecting…");
  const pending = h("div", { id: "pending" });
  const timeline = h("ol", { id: "timeline", class: "timeline" });
  const threads = h("div", { id: "threads" }, "Loading threads…");
  const message = h("textarea", { id: "message", name: "message", rows: 3, required: true });
  const controlStatus = h("div", { class: "form-status" });
  const interrupt = h("button", { type: "button", id: "interrupt", class: "danger" }, "Interrupt");

  function showSummary() {
    fill(statusSlot, badge(session.status));
    fill(tokensSlot, tokens(session.usage));
    fill(costSlot, cost(session.usage));
    interrupt.disabled = session.status === "terminated";
  }

  const sendForm = h(
    "form",
    { class: "send", "aria-label": "Send a message" },
    h("label", { for: "message" }, "Message to the agent"),
    message,
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Send message"), interrupt),
    controlStatus,
  );

  fill(
    main,
    h("h1", {}, session.title || `Session ${session.id}`),
    h(
      "dl",
      { class: "summary" },
      h("dt", {}, "Status"),
      h("dd", {}, statusSlot, " ", liveSlot),
      h("dt", {}, "Agent"),
      h(
        "dd",
        {},
        h("a", { href: `#/agents/${session.agent.id}` }, session.agent.name || session.agent.id),
        ` version ${session.agent.version}`,
      ),
      h("dt", {}, "Environment"),
      h("dd", {}, session.environment_id),
      h("dt", {}, "Created"),
      h("dd", {}, timeEl(session.created_at)),
      h("dt", {}, "Tokens"),
      tokensSlot,
      h("dt", {}, "Cost"),
      costSlot,
    ),
    h(
      "section",
      { "aria-labelledby": "pending-title" },
      h("h2", { id: "pending-title" }, "Waiting for you"),
      pending,
    ),
    h(
      "section",
      { "aria-labelledby": "send-title" },
      h("h2", { id: "send-title", class: "visually-hidden" }, "Send"),
      sendForm,
    ),
    h(
      "section",
      { "aria-labelledby": "timeline-title" },
      h("h2", { id: "timeline-title" }, "Timeline"),
      h("div", { role: "log", "aria-labelledby": "timeline-title" }, timeline),
    ),
    h(
      "section",
      { "aria-labelledby": "threads-title" },
      h("h2", { id: "threads-title" }, "Threads"),
      threads,
    ),
  );
  showSummary();

  // ---- state folded from events ----
  const seen = new Set();
  const events = new Map();
  const answered = new Set();
  const toolSlots = new Map(); // tool use id -> {state, output, summary}
  const spans = new Map(); // span start id -> {li, at}
  let waitingFor = [];

  async function send(eventsToSend, what) {
    fill(controlStatus);
    try {
      await request(`${base}/events`, { method: "POST", body: { events: eventsToSend } });
      announce(`${what} sent`);
      return true;
    } catch (err) {
      fill(controlStatus, errorBox(err));
      return false;
    }
  }

  function confirmForm(ev) {
    const reason = h("input", { id: `deny-${ev.id}`, type: "text", name: "deny_message" });
    const answer = async (result, button) => {
      button.disabled = true;
      const body = { type: "user.tool_confirmation", tool_use_id: ev.id, result };
      if (result === "deny" && reason.value.trim()) body.deny_message = reason.value.trim();
      if (await send([body], result === "allow" ? "Allow" : "Deny")) answered.add(ev.id);
      else button.disabled = false;
      showPending();
    };
    const allow = h("button", { type: "button", class: "allow" }, `Allow ${ev.name}`);
    const deny = h("button", { type: "button", class: "danger" }, `Deny ${ev.name}`);
    allow.addEventListener("click", () => answer("allow", allow));
    deny.addEventListener("click", () => answer("deny", deny));
    return h(
      "div",
      { class: "card action", "data-tool-use-id": ev.id },
      h("h3", {}, `Confirm tool call: ${ev.name}`),
      h("pre", { class: "code" }, json(ev.input)),
      h("label", { for: `deny-${ev.id}` }, "Reason if denied (optional)"),
      reason,
      h("div", { class: "actions" }, allow, deny),
    );
  }

  function customForm(ev) {
    const id = `answer-${ev.id}`;
    const text = h("textarea", { id, rows: 3 });
    const isError = h("input", { id: `${id}-error`, type: "checkbox" });
    const button = h("button", { type: "submit" }, `Send result for ${ev.name}`);
    const form = h(
      "form",
      { class: "card action", "data-tool-use-id": ev.id, "aria-label": `Answer ${ev.name}` },
      h("h3", {}, `Answer custom tool: ${ev.name}`),
      h("pre", { class: "code" }, json(ev.input)),
      h("label", { for: id }, "Result"),
      text,
      h(
        "div",
        { class: "check" },
        isError,
        h("label", { for: `${id}-error` }, "Report as an error"),
      ),
      h("div", { class: "actions" }, button),
    );
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      button.disabled = true;
      const body = {
        type: "user.custom_tool_result",
        custom_tool_use_id: ev.id,
        content: [{ type: "text", text: text.value }],
      };
      if (isError.checked) body.is_error = true;
      if (await send([body], "Result")) answered.add(ev.id);
      else button.disabled = false;
      showPending();
    });
    return form;
  }

  function showPending() {
    const open = waitingFor.filter((id) => !answered.has(id) && events.has(id));
    if (open.length === 0) {
      fill(pending, h("p", { class: "empty" }, "Nothing is waiting for you."));
      return;
    }
    fill(
      pending,
      open.map((id) => {
        const ev = events.get(id);
        return ev.type === "agent.custom_tool_use" ? customForm(ev) : confirmForm(ev);
      }),
    );
  }

  function toolItem(ev) {
    const state = h("span", { class: "tool-state" }, "running");
    const output = h("div", { class: "tool-output" });
    const where =
      ev.type === "agent.custom_tool_use"
        ? " (custom)"
        : ev.mcp_server_name
          ? ` (MCP ${ev.mcp_server_name})`
          : "";
    const asks = ev.evaluated_permission === "ask" ? " · asks for confirmation" : "";
    const details = h(
      "details",
      {},
      h("summary", {}, `Tool call: ${ev.name}${where} — `, state),
      h("p", { class: "hint" }, `id ${ev.id}${asks}`),
      h("h3", { class: "small" }, "Input"),
      h("pre", { class: "code" }, json(ev.input)),
      output,
    );
    toolSlots.set(ev.id, { state, output });
    return item("tool", "Tool call", ev.processed_at, details);
  }

  function toolResult(ev, useId, label) {
    answered.add(useId);
    const slot = toolSlots.get(useId);
    const text = blocksText(ev.content);
    const body = [
      h("h3", { class: "small" }, ev.is_error ? "Error output" : "Output"),
      h("pre", { class: "code" }, text || "(empty)"),
    ];
    if (slot) {
      fill(slot.state, ev.is_error ? "error" : "done");
      fill(slot.output, body);
      return null;
    }
    return item(
      ev.is_error ? "error" : "tool",
      label,
      ev.processed_at,
      h("details", {}, h("summary", {}, `${label} for ${useId}`), body),
    );
  }

  function render(ev) {
    switch (ev.type) {
      case "user.message":
        return item(
          "user",
          "You",
          ev.processed_at,
          h("p", { class: "text" }, blocksText(ev.content)),
        );
      case "agent.message":
        return item(
          "agent",
          "Agent",
          ev.processed_at,
          h("p", { class: "text" }, blocksText(ev.content)),
        );
      case "agent.thinking":
        return item("marker", "Thinking…", ev.processed_at);
      case "agent.tool_use":
      case "agent.custom_tool_use":
      case "agent.mcp_tool_use":
        return toolItem(ev);
      case "agent.tool_result":
        return toolResult(ev, ev.tool_use_id, "Tool result");
      case "agent.mcp_tool_result":
        return toolResult(ev, ev.mcp_tool_use_id, "MCP tool result");
      case "user.custom_tool_result":
        return toolResult(ev, ev.custom_tool_use_id, "Custom tool result");
      case "user.tool_result":
        return toolResult(ev, ev.tool_use_id, "Tool result");
      case "user.tool_confirmation": {
        answered.add(ev.tool_use_id);
        const slot = toolSlots.get(ev.tool_use_id);
        if (slot && ev.result === "deny") fill(slot.state, "denied");
        const text =
          ev.result === "allow"
            ? "Allowed"
            : `Denied${ev.deny_message ? `: ${ev.deny_message}` : ""}`;
        return item(
          "marker",
          "Confirmation",
          ev.processed_at,
          h("p", {}, `${text} (${ev.tool_use_id})`),
        );
      }
      case "user.interrupt":
        return item("marker", "Interrupt", ev.processed_at, h("p", {}, "Interrupted by the user"));
      case "session.status_running":
        return item("status", "Running", ev.processed_at);
      case "session.status_rescheduled":
        return item("status", "Rescheduled (retrying)", ev.processed_at);
      case "session.status_terminated":
        return item("status", "Terminated", ev.processed_at);
      case "session.status_idle": {
        const reason = ev.stop_reason ? ev.stop_reason.type : "";
        return item("status", `Idle: ${reason.replace(/_/g, " ")}`, ev.processed_at);
      }
      case "session.error": {
        const err = ev.error || {};
        const retry = err.retry_status ? ` (${err.retry_status.type})` : "";
        return item(
          "error",
          "Error",
          ev.processed_at,
          h("p", {}, `${err.type || "error"}: ${err.message || ""}${retry}`),
        );
      }
      case "span.model_request_start": {
        const li = item(
          "span",
          "Model request",
          ev.processed_at,
          h("p", { class: "span-detail" }, "in progress…"),
        );
        spans.set(ev.id, { li, at: ev.processed_at });
        return li;
      }
      case "span.model_request_end": {
        const span = spans.get(ev.model_request_start_id);
        const u = ev.model_usage || {};
        const latency = span ? seconds(span.at, ev.processed_at) : "?";
        const detail = `${tokens(u)} tokens · ${latency}${ev.is_error ? " · failed" : ""}`;
        if (span) {
          fill(span.li.querySelector(".span-detail"), detail);
          if (ev.is_error) span.li.classList.add("event-error");
          return null;
        }
        return item(
          "span",
          "Model request",
          ev.processed_at,
          h("p", { class: "span-detail" }, detail),
        );
      }
      case "session.usage":
        return null; // folded into the summary
      case "session.updated":
        return item("marker", "Session updated", ev.processed_at);
      default:
        return item(
          "other",
          ev.type,
          ev.processed_at,
          h("details", {}, h("summary", {}, "Event data"), h("pre", { class: "code" }, json(ev))),
        );
    }
  }

  function fold(ev) {
    switch (ev.type) {
      case "session.status_running":
      case "session.status_rescheduled":
        session.status = ev.type === "session.status_running" ? "running" : "rescheduling";
        waitingFor = [];
        break;
      case "session.status_idle":
        session.status = "idle";
        waitingFor =
          ev.stop_reason && ev.stop_reason.type === "requires_action"
            ? ev.stop_reason.event_ids || []
            : [];
        break;
      case "session.status_terminated":
        session.status = "terminated";
        waitingFor = [];
        break;
      case "session.usage":
        session.usage = ev.usage;
        break;
      default:
        return;
    }
    showSummary();
  }

  function handle(ev) {
    if (!ev || !ev.id || seen.has(ev.id)) return;
    seen.add(ev.id);
    events.set(ev.id, ev);
    const li = render(ev);
    if (li) {
      li.dataset.type = ev.type;
      timeline.append(li);
    }
    fold(ev);
    if (
      TOOL_USES.has(ev.type) ||
      ev.type === "session.status_idle" ||
      ev.type.startsWith("session.status") ||
      answered.has(ev.id)
    )
      showPending();
  }

  // ---- live: subscribe first, then read history, so nothing falls between the two ----
  const controller = new AbortController();
  let stopped = false;

  async function connect() {
    let ready = false;
    const early = [];
    const stream = await openStream(`${base}/events/stream`, {
      signal: controller.signal,
      onEvent: (type, data) => {
        if (type === "ping" || type === "error") return;
        if (ready) handle(data);
        else early.push(data);
      },
    });
    const history = await listAll(`${base}/events`, {}, 1000000, 1000);
    history.forEach(handle);
    ready = true;
    early.forEach(handle);
    showPending();
    fill(liveSlot, "Live");
    await stream.done;
  }

  async function follow() {
    while (!stopped) {
      try {
        await connect();
      } catch (err) {
        if (stopped) return;
        if (err instanceof ApiError && err.status === 404) {
          fill(liveSlot, "Session deleted");
          return;
        }
      }
      if (stopped) return;
      fill(liveSlot, "Reconnecting…");
      await new Promise((resolve) => window.setTimeout(resolve, RECONNECT_MS));
    }
  }

  sendForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    const text = message.value.trim();
    if (!text) return;
    if (await send([{ type: "user.message", content: [{ type: "text", text }] }], "Message"))
      message.value = "";
  });
  interrupt.addEventListener("click", () => send([{ type: "user.interrupt" }], "Interrupt"));

  showPending();
  follow();
  loadThreads(base, threads);
  return () => {
    stopped = true;
    controller.abort();
  };
}

/** The session's threads as a tree; "No threads" when the server has none (or no such API). */
async function loadThreads(base, slot) {
  let list;
  try {
    list = await listAll(`${base}/threads`, {}, 1000);
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) {
      fill(slot, h("p", { class: "empty" }, "No threads."));
      return;
    }
    fill(slot, errorBox(err));
    return;
  }
  if (list.length === 0) {
    fill(slot, h("p", { class: "empty" }, "No threads."));
    return;
  }
  const parentOf = (t) => t.parent_thread_id || t.parent_id || null;
  const ids = new Set(list.map((t) => t.id));
  const children = new Map();
  for (const t of list) {
    const parent = ids.has(parentOf(t)) ? parentOf(t) : null;
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(t);
  }
  const branch = (parent) =>
    h(
      "ul",
      { class: parent ? "tree" : "tree tree-root" },
      (children.get(parent) || []).map((t) =>
        h(
          "li",
          {},
          h(
            "span",
            { class: "thread-name" },
            t.name || t.title || (t.agent && t.agent.name) || t.id,
          ),
          t.status ? [" ", badge(t.status)] : null,
          h("span", { class: "hint" }, ` ${t.id}`),
          children.has(t.id) ? branch(t.id) : null,
        ),
      ),
    );
  fill(slot, branch(null));
}
