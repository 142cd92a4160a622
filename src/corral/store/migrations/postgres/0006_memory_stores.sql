-- v6: memory stores' contents (the stores themselves are `resources` rows of kind
-- memory_store). One row per live memory, unique by path within its store; every change
-- appends a memory_versions row in the same transaction. Paths and ids use the "C"
-- collation: byte order, the order prefix listing relies on (and SQLite's).
CREATE TABLE memories (
    id TEXT COLLATE "C" PRIMARY KEY,
    store_id TEXT COLLATE "C" NOT NULL,
    path TEXT COLLATE "C" NOT NULL,
    content TEXT NOT NULL,
    content_sha256 TEXT NOT NULL,
    content_size_bytes INTEGER NOT NULL,
    version_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX memories_path ON memories (store_id, path);

CREATE TABLE memory_versions (
    id TEXT COLLATE "C" PRIMARY KEY,
    store_id TEXT COLLATE "C" NOT NULL,
    memory_id TEXT COLLATE "C" NOT NULL,
    operation TEXT NOT NULL,
    path TEXT,
    content TEXT,
    content_sha256 TEXT,
    content_size_bytes INTEGER,
    actor_type TEXT,
    actor_id TEXT,
    created_by JSONB,
    created_at TEXT NOT NULL,
    redacted_at TEXT,
    redacted_by JSONB
);
CREATE INDEX memory_versions_store ON memory_versions (store_id, id);
CREATE INDEX memory_versions_memory ON memory_versions (memory_id, id);
