-- Corral schema v1 (SQLite). One row per change in migrations/CHANGES.md.
CREATE TABLE IF NOT EXISTS resources (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    created_at TEXT NOT NULL,
    archived_at TEXT,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS resources_kind ON resources (kind, id);

CREATE TABLE IF NOT EXISTS agent_versions (
    agent_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (agent_id, version)
);

CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    updated_at TEXT,
    archived_at TEXT,
    environment_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    agent_version INTEGER NOT NULL,
    status TEXT NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT 0,
    body TEXT NOT NULL,
    usage TEXT NOT NULL,
    stats TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_agent ON sessions (agent_id, agent_version);

CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    id TEXT NOT NULL,
    type TEXT NOT NULL,
    created_at TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS events_id ON events (id);

CREATE TABLE IF NOT EXISTS session_work (
    session_id TEXT PRIMARY KEY,
    pending INTEGER NOT NULL DEFAULT 0,
    due_at REAL NOT NULL DEFAULT 0,
    owner TEXT,
    token INTEGER NOT NULL DEFAULT 0,
    lease_expires REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS session_work_due ON session_work (pending, due_at);
