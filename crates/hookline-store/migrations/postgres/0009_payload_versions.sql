CREATE TABLE event_payloads (
    event_id  TEXT NOT NULL,
    version   BIGINT NOT NULL,
    payload   TEXT NOT NULL, -- canonical JSON of a version below the latest
    PRIMARY KEY (event_id, version)
);
ALTER TABLE events ADD COLUMN unversioned BIGINT;
ALTER TABLE subscribers ADD COLUMN payload_version BIGINT;
ALTER TABLE deliveries ADD COLUMN payload_version BIGINT;
ALTER TABLE deliveries ADD COLUMN dead_error TEXT;
