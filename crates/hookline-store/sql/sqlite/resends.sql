-- Resends: new deliveries of published events to one subscriber, and the audit of each. A
-- resend's columns are read in the order `resend_row` reads them.

-- name: RESEND_CANDIDATES
-- Events of tenant ?3 (NULL: none) accepted at or after ?4 and before ?5, after (accepted_at,
-- id) (?1, ?2), oldest first, at most ?6, through `events_accepted`: a page of a resend's walk
-- (`resends.rs`, which matches the types). Each with the payload version a subscriber pinned
-- at ?7 (NULL: unpinned) is sent, as a fan-out chooses it: the highest at or below the pin
-- (NULL: none).
SELECT e.accepted_at, e.id, e.type,
       CASE WHEN ?7 IS NULL OR e.payload_version <= ?7 THEN e.payload_version
            ELSE (SELECT max(p.version) FROM event_payloads p
                  WHERE p.event_id = e.id AND p.version <= ?7) END
FROM events e INDEXED BY events_accepted
WHERE (e.accepted_at, e.id) > (?1, ?2)
  AND e.accepted_at >= ?4 AND e.accepted_at < ?5
  AND e.tenant_id IS ?3
ORDER BY e.accepted_at, e.id LIMIT ?6;

-- name: RESENDS_SO_FAR
-- The highest resend number among the ids at or after ?1 and before ?2 (those of one event's
-- resends to one subscriber, `resend_id_range`), through the unique index on the ids; 0: none.
SELECT coalesce(max(resend), 0) FROM deliveries WHERE id >= ?1 AND id < ?2;

-- name: INSERT_RESENT
-- Delivery ?1 (resend ?9 of event ?2 to subscriber ?3), made at ?5 and released at ?6 (its
-- window starts then: pacing is persisted as its run_at, so a restart keeps it), sending
-- version ?7; held (?4) while its subscriber is paused, as a fan-out's are. It names its
-- tenant ?8, for the claims' fair share.
INSERT INTO deliveries
    (id, event_id, subscriber_id, state, held, first_seen, window_start, run_at, updated_at,
     payload_version, tenant_id, resend)
VALUES (?1, ?2, ?3, 'scheduled', ?4, ?5, ?6, ?6, ?5, ?7, ?8, ?9);

-- name: INSERT_RESEND
INSERT INTO resends (id, tenant_id, created_at, subscriber_id, since, until, event_types,
                     limit_n, per_second, requested_by, selected)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11);

-- name: INSERT_RESEND_ITEM
INSERT INTO resend_items (resend_seq, delivery_seq) VALUES (?1, ?2);

-- name: RESEND
SELECT seq, id, tenant_id, created_at, subscriber_id, since, until, event_types, limit_n,
       per_second, requested_by, selected
FROM resends WHERE id = ?1;

-- name: RESENDS
-- Resends after key ?1, at most ?2 (of tenant ?3 and subscriber ?4, each if not NULL).
SELECT seq, id, tenant_id, created_at, subscriber_id, since, until, event_types, limit_n,
       per_second, requested_by, selected
FROM resends
WHERE seq > ?1 AND (CAST(?3 AS TEXT) IS NULL OR tenant_id = ?3)
  AND (CAST(?4 AS TEXT) IS NULL OR subscriber_id = ?4)
ORDER BY seq LIMIT ?2;

-- name: RESENDS_NEWEST_FIRST
-- Resends before key ?1, at most ?2 (of tenant ?3 and subscriber ?4, each if not NULL).
SELECT seq, id, tenant_id, created_at, subscriber_id, since, until, event_types, limit_n,
       per_second, requested_by, selected
FROM resends
WHERE seq < ?1 AND (CAST(?3 AS TEXT) IS NULL OR tenant_id = ?3)
  AND (CAST(?4 AS TEXT) IS NULL OR subscriber_id = ?4)
ORDER BY seq DESC LIMIT ?2;

-- name: RESENT_DELIVERIES
SELECT d.id FROM resend_items ri JOIN deliveries d ON d.seq = ri.delivery_seq
WHERE ri.resend_seq = ?1 ORDER BY d.seq;

-- name: RESEND_OUTCOMES
-- Delivered and dead among resend ?1's deliveries.
SELECT coalesce(sum(d.state = 'delivered'), 0), coalesce(sum(d.state = 'dead'), 0)
FROM resend_items ri JOIN deliveries d ON d.seq = ri.delivery_seq
WHERE ri.resend_seq = ?1;
