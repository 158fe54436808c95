//! Tenants' reads and writes. Writes run on the writer inside its group transaction, so a
//! quota's count and the row it admits commit together.

use hookline_policy::UnixMs;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, Row};

use super::writer::Writer;
use super::{queries, reads, writes};
use crate::*;

/// What a claim's walk over the tenants keeps between claims (`writes::claim_due`).
#[derive(Debug)]
pub(super) struct TenantWalk {
    pub cursor: TenantCursor,
    /// Whether a tenant was ever created in this file. Until one is, no delivery names a
    /// tenant and claims skip the walk: an embedded store without tenants pays nothing for them
    /// (on PostgreSQL, where another process may create one, the walk is one more statement in
    /// a round trip the claim makes anyway).
    pub any: bool,
}

impl TenantWalk {
    pub fn load(c: &Connection) -> Result<Self> {
        Ok(Self {
            cursor: TenantCursor::default(),
            any: c.query_row(queries::ANY_TENANT, [], |r| r.get(0))?,
        })
    }
}

/// A tenant's row as `TENANT` and `TENANT_PAGE` read it.
fn tenant_row(r: &Row<'_>) -> rusqlite::Result<(i64, Tenant)> {
    Ok((
        r.get(0)?,
        Tenant {
            id: r.get(1)?,
            name: r.get(2)?,
            max_subscribers: r.get(3)?,
            max_events_per_second: r.get(4)?,
            created_at: r.get(5)?,
            updated_at: r.get(6)?,
        },
    ))
}

pub(super) fn tenant(c: &Connection, id: &str) -> Result<Tenant> {
    c.prepare_cached(queries::TENANT)?
        .query_row([id], tenant_row)
        .optional()?
        .map(|(_, t)| t)
        .ok_or_else(|| reads::not_found("tenant", id))
}

pub(super) fn tenants(c: &Connection, limit: u32, after: i64) -> Result<Page<Tenant>> {
    let rows = c
        .prepare_cached(queries::TENANT_PAGE)?
        .query_map(params![after, limit + 1], tenant_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(page(rows, limit))
}

pub(super) fn create(c: &Connection, new: &NewTenant, now: UnixMs) -> Result<Tenant> {
    check_limits(new.max_events_per_second)?;
    let inserted = c.prepare_cached(queries::CREATE_TENANT)?.execute(params![
        new.id,
        new.name,
        new.max_subscribers,
        new.max_events_per_second,
        now
    ]);
    match inserted {
        Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == ErrorCode::ConstraintViolation => {
            Err(tenant_id_taken(&new.id))
        }
        other => {
            other?;
            tenant(c, &new.id)
        }
    }
}

pub(super) fn update(c: &Connection, id: &str, patch: TenantPatch, now: UnixMs) -> Result<Tenant> {
    let next = patched_tenant(tenant(c, id)?, patch, now)?;
    c.prepare_cached(queries::UPDATE_TENANT)?.execute(params![
        id,
        next.name,
        next.max_subscribers,
        next.max_events_per_second,
        now
    ])?;
    Ok(next)
}

/// Deletes the tenant and revokes its subscribers, as one write.
pub(super) fn delete(w: &mut Writer, id: &str, now: UnixMs) -> Result<Tenant> {
    let gone = tenant(&w.conn, id)?;
    let subscribers = w
        .conn
        .prepare_cached(queries::TENANT_SUBSCRIBERS)?
        .query_map([id], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    writes::revoke_subscribers(w, &subscribers, now)?;
    w.conn
        .prepare_cached(queries::DELETE_TENANT)?
        .execute(params![id, now])?;
    Ok(gone)
}

/// Refuses a subscriber of a tenant that does not exist, or one past its quota.
pub(super) fn room_for_a_subscriber(c: &Connection, id: &str) -> Result<()> {
    let Tenant {
        max_subscribers, ..
    } = tenant(c, id).map_err(|e| match e {
        StoreError::NotFound(_) => unknown_tenant(id),
        other => other,
    })?;
    if let Some(max) = max_subscribers {
        let live: u32 = c
            .prepare_cached(queries::TENANT_SUBSCRIBER_COUNT)?
            .query_row([id], |r| r.get(0))?;
        if live >= max {
            return Err(over_subscriber_quota(id, max));
        }
    }
    Ok(())
}

/// Refuses a publish for a tenant that does not exist, or one its publish rate does not admit
/// now; else counts it against the rate.
pub(super) fn admit(c: &Connection, id: &str, now: UnixMs) -> Result<()> {
    let limit: Option<(Option<f64>, Option<i64>)> = c
        .prepare_cached(queries::PUBLISH_LIMIT)?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((per_second, tat_us)) = limit else {
        return Err(unknown_tenant(id));
    };
    if let Some(per_second) = per_second {
        let next = admit_publish(tat_us, now, per_second)
            .map_err(|wait_ms| rate_limited(id, per_second, wait_ms))?;
        c.prepare_cached(queries::SET_PUBLISH_TAT)?
            .execute(params![id, next])?;
    }
    Ok(())
}

pub(super) fn counts(c: &Connection, id: &str) -> Result<StateCounts> {
    let mut counts = StateCounts::default();
    let mut statement = c.prepare_cached(queries::TENANT_STATE_COUNTS)?;
    let mut rows = statement.query([id])?;
    while let Some(r) = rows.next()? {
        let state: String = r.get(0)?;
        let state = DeliveryState::parse(&state)
            .ok_or_else(|| StoreError::backend(format!("unexpected state {state:?}")))?;
        counts.add(state, r.get(1)?);
    }
    Ok(counts)
}

/// A portal session's row as `PORTAL_SESSION` and `ACTIVE_PORTAL_SESSION` read it.
fn portal_session_row(r: &Row<'_>) -> rusqlite::Result<PortalSession> {
    Ok(PortalSession {
        id: r.get(0)?,
        tenant_id: r.get(1)?,
        scope: r.get(2)?,
        created_at: r.get(3)?,
        expires_at: r.get(4)?,
        revoked_at: r.get(5)?,
        created_by: r.get(6)?,
    })
}

fn portal_session(c: &Connection, tenant_id: &str, id: &str) -> Result<PortalSession> {
    c.prepare_cached(queries::PORTAL_SESSION)?
        .query_row([id, tenant_id], portal_session_row)
        .optional()?
        .ok_or_else(|| reads::not_found("portal session", id))
}

pub(super) fn create_portal_session(
    c: &Connection,
    new: &NewPortalSession,
    now: UnixMs,
) -> Result<PortalSession> {
    let made = c
        .prepare_cached(queries::CREATE_PORTAL_SESSION)?
        .execute(params![
            new.id,
            new.tenant_id,
            new.token_sha256,
            new.scope,
            now,
            new.expires_at,
            new.created_by
        ])?;
    if made == 0 {
        return Err(reads::not_found("tenant", &new.tenant_id));
    }
    portal_session(c, &new.tenant_id, &new.id)
}

pub(super) fn active_portal_session(
    c: &Connection,
    token_sha256: &str,
    now: UnixMs,
) -> Result<Option<PortalSession>> {
    Ok(c.prepare_cached(queries::ACTIVE_PORTAL_SESSION)?
        .query_row(params![token_sha256, now], portal_session_row)
        .optional()?)
}

pub(super) fn revoke_portal_session(
    c: &Connection,
    tenant_id: &str,
    id: &str,
    now: UnixMs,
) -> Result<PortalSession> {
    c.prepare_cached(queries::REVOKE_PORTAL_SESSION)?
        .execute(params![id, tenant_id, now])?;
    portal_session(c, tenant_id, id)
}
