//! Tenants' reads and writes on PostgreSQL. A quota's count and the row it admits are kept
//! together by the tenant's row lock (`TENANT_FOR_UPDATE`), taken by the transaction that
//! writes; a publish is admitted in a short transaction of its own, so that one tenant's
//! publishes do not wait on each other's fan-outs.

use deadpool_postgres::GenericClient;
use hookline_policy::UnixMs;
use tokio_postgres::error::SqlState;
use tokio_postgres::Row;

use super::reads::{corrupt, not_found};
use super::{execute, queries, query, query_one, query_opt, writes, Numbers};
use crate::*;

/// A tenant's row as `TENANT` and `TENANT_PAGE` read it.
fn tenant_row(r: &Row) -> Result<(i64, Tenant)> {
    Ok((
        r.get(0),
        Tenant {
            id: r.get(1),
            name: r.get(2),
            max_subscribers: r.bigint_opt(3)?,
            max_events_per_second: r.get(4),
            created_at: r.get(5),
            updated_at: r.get(6),
        },
    ))
}

pub(super) async fn tenant(c: &impl GenericClient, id: &str) -> Result<Tenant> {
    read_tenant(c, queries::TENANT, id).await
}

/// The tenant, its row locked until the transaction ends.
async fn tenant_for_update(c: &impl GenericClient, id: &str) -> Result<Tenant> {
    read_tenant(c, queries::TENANT_FOR_UPDATE, id).await
}

async fn read_tenant(c: &impl GenericClient, sql: &str, id: &str) -> Result<Tenant> {
    match query_opt(c, sql, &[&id]).await? {
        Some(r) => Ok(tenant_row(&r)?.1),
        None => Err(not_found("tenant", id)),
    }
}

pub(super) async fn tenants(
    c: &impl GenericClient,
    limit: u32,
    after: i64,
) -> Result<Page<Tenant>> {
    let rows = query(c, queries::TENANT_PAGE, &[&after, &i64::from(limit + 1)])
        .await?
        .iter()
        .map(tenant_row)
        .collect::<Result<Vec<_>>>()?;
    Ok(page(rows, limit))
}

pub(super) async fn create(c: &impl GenericClient, new: &NewTenant, now: UnixMs) -> Result<Tenant> {
    check_limits(new.max_events_per_second)?;
    let inserted = execute(
        c,
        queries::CREATE_TENANT,
        &[
            &new.id,
            &new.name,
            &new.max_subscribers.map(i64::from),
            &new.max_events_per_second,
            &now,
        ],
    )
    .await;
    match inserted {
        Err(e) if e.sqlstate() == Some(SqlState::UNIQUE_VIOLATION.code()) => {
            Err(tenant_id_taken(&new.id))
        }
        other => {
            other?;
            tenant(c, &new.id).await
        }
    }
}

pub(super) async fn update(
    c: &impl GenericClient,
    id: &str,
    patch: TenantPatch,
    now: UnixMs,
) -> Result<Tenant> {
    let next = patched_tenant(tenant_for_update(c, id).await?, patch, now)?;
    execute(
        c,
        queries::UPDATE_TENANT,
        &[
            &id,
            &next.name,
            &next.max_subscribers.map(i64::from),
            &next.max_events_per_second,
            &now,
        ],
    )
    .await?;
    Ok(next)
}

/// Deletes the tenant and revokes its subscribers, in the caller's transaction.
pub(super) async fn delete(c: &impl GenericClient, id: &str, now: UnixMs) -> Result<Tenant> {
    let gone = tenant_for_update(c, id).await?;
    let subscribers: Vec<String> = query(c, queries::TENANT_SUBSCRIBERS, &[&id])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for subscriber in &subscribers {
        writes::revoke_subscriber(c, subscriber, StatusReason::TenantDeleted, now).await?;
    }
    execute(c, queries::DELETE_TENANT, &[&id, &now]).await?;
    Ok(gone)
}

/// Refuses a subscriber of a tenant that does not exist, or one past its quota. Locks the
/// tenant's row for the caller's transaction, so two creations cannot both take the last place.
pub(super) async fn room_for_a_subscriber(c: &impl GenericClient, id: &str) -> Result<()> {
    let Tenant {
        max_subscribers, ..
    } = tenant_for_update(c, id).await.map_err(|e| match e {
        StoreError::NotFound(_) => unknown_tenant(id),
        other => other,
    })?;
    if let Some(max) = max_subscribers {
        let live: u64 = query_one(c, queries::TENANT_SUBSCRIBER_COUNT, &[&id])
            .await?
            .bigint(0)?;
        if live >= u64::from(max) {
            return Err(over_subscriber_quota(id, max));
        }
    }
    Ok(())
}

/// What [`admit`] moved the limiter from and to, so a publish that then stores nothing can
/// give it back ([`refund`]).
pub(super) struct Charge {
    from_us: Option<i64>,
    to_us: i64,
}

/// Refuses a publish for a tenant that does not exist, or one its publish rate does not admit
/// now; else counts it against the rate. Its own transaction, committed before the publish's.
pub(super) async fn admit(
    client: &mut deadpool_postgres::Object,
    id: &str,
    now: UnixMs,
) -> Result<Option<Charge>> {
    let tx = client.transaction().await?;
    let Some(limit) = query_opt(&tx, queries::PUBLISH_LIMIT_FOR_UPDATE, &[&id]).await? else {
        return Err(unknown_tenant(id));
    };
    let (per_second, tat_us): (Option<f64>, Option<i64>) = (limit.get(0), limit.get(1));
    let Some(per_second) = per_second else {
        return Ok(None);
    };
    let next = admit_publish(tat_us, now, per_second)
        .map_err(|wait_ms| rate_limited(id, per_second, wait_ms))?;
    execute(&tx, queries::SET_PUBLISH_TAT, &[&id, &next]).await?;
    tx.commit().await?;
    Ok(Some(Charge {
        from_us: tat_us,
        to_us: next,
    }))
}

/// Gives back what [`admit`] took, unless another publish has moved the limiter since (then
/// this one's place is already behind it, and the rate is kept either way).
pub(super) async fn refund(c: &impl GenericClient, id: &str, charge: Charge) -> Result<()> {
    execute(
        c,
        queries::REFUND_PUBLISH_TAT,
        &[&id, &charge.from_us, &charge.to_us],
    )
    .await?;
    Ok(())
}

/// Whether an event by this id was published already (its publish is answered, not admitted).
pub(super) async fn published(c: &impl GenericClient, id: &str) -> Result<bool> {
    Ok(query_opt(c, queries::PUBLISHED, &[&id]).await?.is_some())
}

pub(super) async fn counts(c: &impl GenericClient, id: &str) -> Result<StateCounts> {
    let mut counts = StateCounts::default();
    for r in query(c, queries::TENANT_STATE_COUNTS, &[&id]).await? {
        let state: String = r.get(0);
        let state = DeliveryState::parse(&state).ok_or_else(|| corrupt("state", &state))?;
        counts.add(state, r.bigint(1)?);
    }
    Ok(counts)
}

/// A portal session's row as `PORTAL_SESSION` and `ACTIVE_PORTAL_SESSION` read it.
fn portal_session_row(r: &Row) -> PortalSession {
    PortalSession {
        id: r.get(0),
        tenant_id: r.get(1),
        scope: r.get(2),
        created_at: r.get(3),
        expires_at: r.get(4),
        revoked_at: r.get(5),
        created_by: r.get(6),
    }
}

async fn portal_session(
    c: &impl GenericClient,
    tenant_id: &str,
    id: &str,
) -> Result<PortalSession> {
    query_opt(c, queries::PORTAL_SESSION, &[&id, &tenant_id])
        .await?
        .map(|r| portal_session_row(&r))
        .ok_or_else(|| not_found("portal session", id))
}

pub(super) async fn create_portal_session(
    c: &impl GenericClient,
    new: &NewPortalSession,
    now: UnixMs,
) -> Result<PortalSession> {
    let made = execute(
        c,
        queries::CREATE_PORTAL_SESSION,
        &[
            &new.id,
            &new.tenant_id,
            &new.token_sha256,
            &new.scope,
            &now,
            &new.expires_at,
            &new.created_by,
        ],
    )
    .await?;
    if made == 0 {
        return Err(not_found("tenant", &new.tenant_id));
    }
    portal_session(c, &new.tenant_id, &new.id).await
}

pub(super) async fn active_portal_session(
    c: &impl GenericClient,
    token_sha256: &str,
    now: UnixMs,
) -> Result<Option<PortalSession>> {
    Ok(
        query_opt(c, queries::ACTIVE_PORTAL_SESSION, &[&token_sha256, &now])
            .await?
            .map(|r| portal_session_row(&r)),
    )
}

pub(super) async fn revoke_portal_session(
    c: &impl GenericClient,
    tenant_id: &str,
    id: &str,
    now: UnixMs,
) -> Result<PortalSession> {
    execute(c, queries::REVOKE_PORTAL_SESSION, &[&id, &tenant_id, &now]).await?;
    portal_session(c, tenant_id, id).await
}
