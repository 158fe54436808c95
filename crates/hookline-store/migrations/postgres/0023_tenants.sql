-- Tenants: a subscriber, an event and a replay belong to one, or to none (as every row an older
-- binary writes). A deleted tenant keeps its row (`deleted_at`), so its id is never reused.
CREATE TABLE tenants (
    seq                    BIGSERIAL PRIMARY KEY,
    id                     TEXT NOT NULL UNIQUE,
    name                   TEXT,
    max_subscribers        BIGINT,
    max_events_per_second  DOUBLE PRECISION,
    -- The publish limiter's theoretical arrival time, in microseconds (`tenancy::admit_publish`).
    publish_tat_us         BIGINT,
    created_at             BIGINT NOT NULL,
    updated_at             BIGINT NOT NULL,
    deleted_at             BIGINT
);
ALTER TABLE subscribers ADD COLUMN tenant_id TEXT;
ALTER TABLE events ADD COLUMN tenant_id TEXT;
ALTER TABLE replays ADD COLUMN tenant_id TEXT;
-- Short-lived tokens for a tenant's portal: only each token's SHA-256 is kept.
CREATE TABLE portal_sessions (
    seq           BIGSERIAL PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    tenant_id     TEXT NOT NULL,
    token_sha256  TEXT NOT NULL UNIQUE,
    scope         TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    revoked_at    BIGINT,
    created_by    TEXT
);
