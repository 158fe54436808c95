-- Tenants. A tenant's columns are read in the order `tenant_row` reads them; a deleted tenant
-- is kept (its id is never reused) and read by nothing but CREATE_TENANT's conflict and the
-- join that ends its portal sessions (ACTIVE_PORTAL_SESSION).

-- name: TENANT
SELECT seq, id, name, max_subscribers, max_events_per_second, created_at, updated_at
FROM tenants WHERE id = ?1 AND deleted_at IS NULL;

-- name: TENANT_PAGE
-- Tenants after key ?1, at most ?2.
SELECT seq, id, name, max_subscribers, max_events_per_second, created_at, updated_at
FROM tenants WHERE deleted_at IS NULL AND seq > ?1 ORDER BY seq LIMIT ?2;

-- name: CREATE_TENANT
INSERT INTO tenants (id, name, max_subscribers, max_events_per_second, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?5);

-- name: UPDATE_TENANT
UPDATE tenants SET name = ?2, max_subscribers = ?3, max_events_per_second = ?4, updated_at = ?5
WHERE id = ?1 AND deleted_at IS NULL;

-- name: DELETE_TENANT
UPDATE tenants SET deleted_at = ?2, updated_at = ?2 WHERE id = ?1 AND deleted_at IS NULL;

-- name: TENANT_SUBSCRIBERS
-- Tenant ?1's subscribers not revoked (through `subscribers_tenant`).
SELECT id FROM subscribers WHERE tenant_id = ?1 AND status != 'revoked' ORDER BY seq;

-- name: TENANT_SUBSCRIBER_COUNT
SELECT count(*) FROM subscribers WHERE tenant_id = ?1 AND status != 'revoked';

-- name: PUBLISH_LIMIT
-- Tenant ?1's publish rate and its limiter's time.
SELECT max_events_per_second, publish_tat_us FROM tenants WHERE id = ?1 AND deleted_at IS NULL;

-- name: SET_PUBLISH_TAT
UPDATE tenants SET publish_tat_us = ?2 WHERE id = ?1;

-- name: TENANT_STATE_COUNTS
-- Tenant ?1's deliveries by state, through its subscribers (`subscribers_tenant`) and each
-- one's deliveries.
SELECT d.state, count(*)
FROM subscribers s JOIN deliveries d ON d.subscriber_id = s.id
WHERE s.tenant_id = ?1
GROUP BY d.state;

-- name: CREATE_PORTAL_SESSION
-- A portal session of tenant ?2, made only while the tenant exists (no row: it does not).
INSERT INTO portal_sessions (id, tenant_id, token_sha256, scope, created_at, expires_at,
                             created_by)
SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7
WHERE EXISTS (SELECT 1 FROM tenants WHERE id = ?2 AND deleted_at IS NULL);

-- name: PORTAL_SESSION
SELECT id, tenant_id, scope, created_at, expires_at, revoked_at, created_by
FROM portal_sessions WHERE id = ?1 AND tenant_id = ?2;

-- name: ACTIVE_PORTAL_SESSION
-- The session whose token hashes to ?1, if it is neither revoked nor expired at ?2 and its
-- tenant still exists.
SELECT s.id, s.tenant_id, s.scope, s.created_at, s.expires_at, s.revoked_at, s.created_by
FROM portal_sessions s JOIN tenants t ON t.id = s.tenant_id AND t.deleted_at IS NULL
WHERE s.token_sha256 = ?1 AND s.revoked_at IS NULL AND s.expires_at > ?2;

-- name: REVOKE_PORTAL_SESSION
UPDATE portal_sessions SET revoked_at = ?3
WHERE id = ?1 AND tenant_id = ?2 AND revoked_at IS NULL;

-- name: ANY_TENANT
-- Whether a tenant was ever created here (deleted ones keep their rows).
SELECT EXISTS (SELECT 1 FROM tenants);
