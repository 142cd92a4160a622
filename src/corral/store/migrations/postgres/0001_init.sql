-- Corral schema v1 (PostgreSQL). One row per change in migrations/CHANGES.md.
-- Ids and timestamps are RFC 3339 / ULID-like text compared byte-wise (COLLATE "C"), exactly as
-- the SQLite backend compares them; lease times are the database's clock (timestamptz).
CREATE TABLE resources (
    id TEXT COLLATE "C" PRIMARY KEY,
    kind TEXT NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    archived_at TEXT COLLATE "C",
    body JSON NOT NULL
);
CREATE INDEX resources_kind ON resources (kind, id);

CREATE TABLE agent_versions (
    agent_id TEXT COLLATE "C" NOT NULL,
    version INTEGER NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    body JSON NOT NULL,
    PRIMARY KEY (agent_id, version)
);

CREATE TABLE sessions (
    id TEXT COLLATE "C" PRIMARY KEY,
    created_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C",
    archived_at TEXT COLLATE "C",
    environment_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    agent_version INTEGER NOT NULL,
    status TEXT NOT NULL,
    last_seq BIGINT NOT NULL DEFAULT 0,
    body JSON NOT NULL,
    usage JSON NOT NULL,
    stats JSON NOT NULL
);
CREATE INDEX sessions_agent ON sessions (agent_id, agent_version);

CREATE TABLE events (
    session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    type TEXT NOT NULL,
    created_at TEXT COLLATE "C" NOT NULL,
    body JSON NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE UNIQUE INDEX events_id ON events (id);

CREATE TABLE session_work (
    session_id TEXT COLLATE "C" PRIMARY KEY,
    pending BOOLEAN NOT NULL DEFAULT FALSE,
    due_at TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
    owner TEXT,
    token BIGINT NOT NULL DEFAULT 0,
    lease_expires TIMESTAMPTZ NOT NULL DEFAULT '-infinity'
);
CREATE INDEX session_work_due ON session_work (due_at) WHERE pending;
CREATE INDEX session_work_leased ON session_work (lease_expires) WHERE owner IS NOT NULL;
