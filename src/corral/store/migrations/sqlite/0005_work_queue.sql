-- v5: the self-hosted work queue (store/work_base.py). A work item asks a worker outside
-- this server to serve one session's tool calls; at most one item per session is live (not
-- stopped). Times are epoch seconds of the store's clock, like session_work's leases.
CREATE TABLE work_items (
    id TEXT PRIMARY KEY,
    environment_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    state TEXT NOT NULL,                  -- queued | starting | active | stopping | stopped
    metadata TEXT NOT NULL DEFAULT '{}',
    ttl_seconds INTEGER NOT NULL,
    created_at REAL NOT NULL,
    polled_at REAL,                       -- last handed out by poll and not acked since
    acknowledged_at REAL,
    started_at REAL,
    latest_heartbeat_at REAL,
    lease_expires REAL,
    stop_requested_at REAL,
    stopped_at REAL,
    lease_lost INTEGER NOT NULL DEFAULT 0,     -- stopped because its lease expired
    lost_reported INTEGER NOT NULL DEFAULT 0,  -- the session's log was told (corral.worker_lost)
    token_hash TEXT                       -- sha256 of the sessions token of the latest poll
);
CREATE INDEX work_items_queue ON work_items (environment_id, created_at) WHERE state = 'queued';
CREATE UNIQUE INDEX work_items_live ON work_items (session_id) WHERE state <> 'stopped';
CREATE INDEX work_items_env ON work_items (environment_id, id);
CREATE INDEX work_items_leases ON work_items (lease_expires)
    WHERE state IN ('starting', 'active', 'stopping');
CREATE INDEX work_items_unreported ON work_items (id) WHERE lease_lost = 1 AND lost_reported = 0;

CREATE TABLE work_pollers (
    environment_id TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    polled_at REAL NOT NULL,
    PRIMARY KEY (environment_id, worker_id)
);

-- Environment keys: the standing credential of a self-hosted environment's workers. Only a
-- SHA-256 of the key is kept; the key itself is shown once, by `corral env-key create`.
CREATE TABLE environment_keys (
    id TEXT PRIMARY KEY,
    environment_id TEXT NOT NULL,
    key_hash TEXT NOT NULL,
    created_at TEXT NOT NULL,
    revoked_at TEXT
);
CREATE INDEX environment_keys_env ON environment_keys (environment_id, id);
