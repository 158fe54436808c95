-- Resends: new deliveries of events already published, to one subscriber, each named
-- `<event id>:<subscriber id>:resend-<n>`. `id` is generated from the event and subscriber
-- ids alone, so `resend` holds the n (NULL: a fan-out's delivery) and every read of a
-- delivery's id appends `:resend-<n>` to it. A resend is a second row for an event and a
-- subscriber: the unique constraint on the two gives way to a unique index on the three
-- (`0027_resends.index.sql`, built right after this transaction). Nothing an older release
-- runs relies on the constraint (no `ON CONFLICT` names it), so it runs on this schema.
ALTER TABLE deliveries ADD COLUMN resend INT;
ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_event_id_subscriber_id_key;
-- The audit of every resend; its deliveries are kept from prune, so no n is ever used twice.
CREATE TABLE resends (
    seq            BIGSERIAL PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    tenant_id      TEXT,
    created_at     BIGINT NOT NULL,
    subscriber_id  TEXT NOT NULL,
    since          BIGINT NOT NULL,
    until          BIGINT NOT NULL,
    event_types    TEXT[] NOT NULL,          -- empty: every type the subscriber takes
    limit_n        BIGINT NOT NULL,
    per_second     DOUBLE PRECISION,
    requested_by   TEXT,
    selected       BIGINT NOT NULL
);
CREATE TABLE resend_items (
    resend_seq    BIGINT NOT NULL,
    delivery_seq  BIGINT NOT NULL,
    PRIMARY KEY (resend_seq, delivery_seq)
);
CREATE INDEX resend_items_delivery ON resend_items (delivery_seq);
