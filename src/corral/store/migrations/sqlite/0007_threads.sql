-- v7: multi-agent threads (docs/threads.md). A child thread is a session row of its own
-- (own log, own lease, own call book) whose `parent_id` names the session it belongs to;
-- session lists show only rows without a parent. A child's events are cross-posted to its
-- parent's log under their own ids, so an event id is unique within a log, not globally.
ALTER TABLE sessions ADD COLUMN parent_id TEXT;
CREATE INDEX sessions_parent ON sessions (parent_id, id) WHERE parent_id IS NOT NULL;
DROP INDEX IF EXISTS events_id;
CREATE UNIQUE INDEX events_session_event_id ON events (session_id, id);
