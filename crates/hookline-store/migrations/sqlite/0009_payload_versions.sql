CREATE TABLE event_payloads (
    event_id  TEXT NOT NULL,
    version   INTEGER NOT NULL,
    payload   TEXT NOT NULL,   -- canonical JSON of a version below the latest
    PRIMARY KEY (event_id, version)
) WITHOUT ROWID;
ALTER TABLE events ADD COLUMN unversioned INTEGER;
ALTER TABLE subscribers ADD COLUMN payload_version INTEGER;
ALTER TABLE deliveries ADD COLUMN payload_version INTEGER;
ALTER TABLE deliveries ADD COLUMN dead_error TEXT;
