-- The event type catalog: the platform's, shared by every tenant. A type is never deleted nor
-- renamed; `schemas` holds each payload version's JSON Schema (a JSON object of version to
-- schema, as given); `revision` counts the row's writes, so their sum changes with every write
-- (`EventTypes::event_types_revision`).
CREATE TABLE event_types (
    seq          INTEGER PRIMARY KEY,
    name         TEXT NOT NULL UNIQUE,
    description  TEXT,
    schemas      TEXT NOT NULL,
    deprecated   INTEGER NOT NULL,
    revision     INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    created_by   TEXT
);
