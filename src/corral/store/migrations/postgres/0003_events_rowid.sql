-- v3: a SQLite-only storage change (events in rowid order); PostgreSQL's heap already
-- appends in insertion order, so nothing changes here.
SELECT 1;
