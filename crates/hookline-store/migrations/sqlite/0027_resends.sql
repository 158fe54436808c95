-- Resends: new deliveries of events already published, to one subscriber, each named
-- `<event id>:<subscriber id>:resend-<n>`. `resend` is its n (NULL: a fan-out's delivery),
-- the highest so far found through the unique index on the ids.
ALTER TABLE deliveries ADD COLUMN resend INTEGER;
-- The audit of every resend; its deliveries are kept from prune, so no n is ever used twice.
CREATE TABLE resends (
    seq            INTEGER PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    tenant_id      TEXT,
    created_at     INTEGER NOT NULL,
    subscriber_id  TEXT NOT NULL,
    since          INTEGER NOT NULL,
    until          INTEGER NOT NULL,
    event_types    TEXT NOT NULL,            -- JSON array; [] every type the subscriber takes
    limit_n        INTEGER NOT NULL,
    per_second     REAL,
    requested_by   TEXT,
    selected       INTEGER NOT NULL
);
CREATE TABLE resend_items (
    resend_seq    INTEGER NOT NULL,
    delivery_seq  INTEGER NOT NULL,
    PRIMARY KEY (resend_seq, delivery_seq)
) WITHOUT ROWID;
CREATE INDEX resend_items_delivery ON resend_items (delivery_seq);
