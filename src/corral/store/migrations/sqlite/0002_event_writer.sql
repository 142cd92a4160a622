-- v2: record which brain lease (owner, token) appended each event, for audits and chaos checks.
ALTER TABLE events ADD COLUMN writer_owner TEXT;
ALTER TABLE events ADD COLUMN writer_token INTEGER;
