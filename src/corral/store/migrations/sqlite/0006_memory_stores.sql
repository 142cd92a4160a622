-- v6: memory stores' contents (the stores themselves are `resources` rows of kind
-- memory_store). One row per live memory, unique by path within its store; every change
-- appends a memory_versions row in the same transaction. SQLite compares TEXT as bytes
-- (BINARY), the order prefix listing relies on.
CREATE TABLE IF NOT EXISTS memories (
    id TEXT PRIMARY KEY,
    store_id TEXT NOT NULL,
    path TEXT NOT NULL,
    content TEXT NOT NULL,
    content_sha256 TEXT NOT NULL,
    content_size_bytes INTEGER NOT NULL,
    version_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS memories_path ON memories (store_id, path);

CREATE TABLE IF NOT EXISTS memory_versions (
    id TEXT PRIMARY KEY,
    store_id TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    operation TEXT NOT NULL,
    path TEXT,
    content TEXT,
    content_sha256 TEXT,
    content_size_bytes INTEGER,
    actor_type TEXT,
    actor_id TEXT,
    created_by TEXT,
    created_at TEXT NOT NULL,
    redacted_at TEXT,
    redacted_by TEXT
);
CREATE INDEX IF NOT EXISTS memory_versions_store ON memory_versions (store_id, id);
CREATE INDEX IF NOT EXISTS memory_versions_memory ON memory_versions (memory_id, id);
