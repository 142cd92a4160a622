-- v3 (SQLite): events in insertion (rowid) order with a unique (session_id, seq) index, instead
-- of clustered by session. Appends from many sessions then write one sequential run of pages
-- per commit instead of one page per session (bench/log.py: several times the throughput).
CREATE TABLE events_v3 (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    id TEXT NOT NULL,
    type TEXT NOT NULL,
    created_at TEXT NOT NULL,
    body TEXT NOT NULL,
    writer_owner TEXT,
    writer_token INTEGER
);
INSERT INTO events_v3 SELECT session_id, seq, id, type, created_at, body, writer_owner,
    writer_token FROM events ORDER BY session_id, seq;
DROP TABLE events;
ALTER TABLE events_v3 RENAME TO events;
CREATE UNIQUE INDEX events_session_seq ON events (session_id, seq);
CREATE UNIQUE INDEX events_id ON events (id);
