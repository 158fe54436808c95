-- Tenants: a subscriber, an event and a replay belong to one, or to none (as every row an older
-- binary writes). A deleted tenant keeps its row (`deleted_at`), so its id is never reused.
CREATE TABLE tenants (
    seq                    INTEGER PRIMARY KEY,
    id                     TEXT NOT NULL UNIQUE,
    name                   TEXT,
    max_subscribers        INTEGER,
    max_events_per_second  REAL,
    -- The publish limiter's theoretical arrival time, in microseconds (`tenancy::admit_publish`).
    publish_tat_us         INTEGER,
    created_at             INTEGER NOT NULL,
    updated_at             INTEGER NOT NULL,
    deleted_at             INTEGER
);
ALTER TABLE subscribers ADD COLUMN tenant_id TEXT;
ALTER TABLE events ADD COLUMN tenant_id TEXT;
ALTER TABLE replays ADD COLUMN tenant_id TEXT;
CREATE INDEX subscribers_tenant ON subscribers (tenant_id) WHERE tenant_id IS NOT NULL;
-- Short-lived tokens for a tenant's portal: only each token's SHA-256 is kept.
CREATE TABLE portal_sessions (
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    tenant_id     TEXT NOT NULL,
    token_sha256  TEXT NOT NULL UNIQUE,
    scope         TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    revoked_at    INTEGER,
    created_by    TEXT
);
