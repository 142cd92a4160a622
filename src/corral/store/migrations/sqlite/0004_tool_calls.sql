-- v4: the tool-call projection client events are validated against (session/projection.py
-- `CallBook`), kept by every append in its transaction so that a POST reads only the calls it
-- answers, never the log. Backfilled here from existing logs by the same rules (those of
-- brain/state.py): a turn closes at an idle other than requires_action or at termination,
-- abandoning its open calls; a result counts only while its call is open; the first
-- confirmation counts; an interrupt is pending until the next close.
CREATE TABLE tool_calls (
    session_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    kind TEXT NOT NULL,                  -- builtin | custom | mcp
    permission TEXT NOT NULL,            -- evaluated_permission: allow | ask | deny
    confirmation TEXT,                   -- allow | deny
    state TEXT NOT NULL DEFAULT 'open',  -- open | answered | abandoned
    PRIMARY KEY (session_id, event_id)
);
CREATE INDEX tool_calls_open ON tool_calls (session_id) WHERE state = 'open';
ALTER TABLE sessions ADD COLUMN interrupt_pending INTEGER NOT NULL DEFAULT 0;

WITH marked AS (
    SELECT session_id, seq, id, type, body,
        type = 'session.status_terminated' OR (type = 'session.status_idle'
            AND coalesce(json_extract(body, '$.stop_reason.type'), '') <> 'requires_action')
            AS closes
    FROM events WHERE type IN ('agent.tool_use', 'agent.custom_tool_use', 'agent.mcp_tool_use',
        'session.status_idle', 'session.status_terminated')
), uses AS (
    SELECT session_id, id, body, CASE type WHEN 'agent.tool_use' THEN 'builtin'
            WHEN 'agent.custom_tool_use' THEN 'custom' WHEN 'agent.mcp_tool_use' THEN 'mcp'
            END AS kind,
        min(CASE WHEN closes THEN seq END) OVER (PARTITION BY session_id ORDER BY seq
            ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS closed
    FROM marked
), results AS (
    SELECT session_id, CASE type
            WHEN 'user.custom_tool_result' THEN json_extract(body, '$.custom_tool_use_id')
            WHEN 'agent.mcp_tool_result' THEN json_extract(body, '$.mcp_tool_use_id')
            ELSE json_extract(body, '$.tool_use_id') END AS call_id, min(seq) AS seq
    FROM events WHERE type IN ('agent.tool_result', 'user.tool_result',
        'user.custom_tool_result', 'agent.mcp_tool_result')
    GROUP BY 1, 2
), verdicts AS (
    SELECT session_id, json_extract(body, '$.tool_use_id') AS call_id,
        json_extract(body, '$.result') AS result,
        row_number() OVER (PARTITION BY session_id, json_extract(body, '$.tool_use_id')
            ORDER BY seq) AS nth
    FROM events WHERE type = 'user.tool_confirmation'
)
INSERT INTO tool_calls (session_id, event_id, kind, permission, confirmation, state)
SELECT u.session_id, u.id, u.kind,
    CASE u.kind WHEN 'custom' THEN 'allow'
        ELSE coalesce(json_extract(u.body, '$.evaluated_permission'), 'allow') END,
    v.result,
    CASE WHEN r.seq IS NOT NULL AND (u.closed IS NULL OR r.seq < u.closed) THEN 'answered'
        WHEN u.closed IS NOT NULL THEN 'abandoned'
        ELSE 'open' END
FROM uses u
LEFT JOIN results r ON r.session_id = u.session_id AND r.call_id = u.id
LEFT JOIN verdicts v ON v.session_id = u.session_id AND v.call_id = u.id AND v.nth = 1
WHERE u.kind IS NOT NULL;

UPDATE sessions SET interrupt_pending = 1 WHERE id IN (
    SELECT session_id FROM events
    WHERE type IN ('user.interrupt', 'session.status_idle', 'session.status_terminated')
    GROUP BY session_id
    HAVING max(CASE WHEN type = 'user.interrupt' THEN seq END) > coalesce(max(CASE
        WHEN type = 'session.status_terminated' OR (type = 'session.status_idle'
            AND coalesce(json_extract(body, '$.stop_reason.type'), '') <> 'requires_action')
        THEN seq END), 0)
);
