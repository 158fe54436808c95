//! PostgreSQL's statements, by name, from `sql/postgres/` (see `crate::sql`).

crate::sql::statements! {
    "postgres";
    "capacity.sql" => {
        BACKLOG,
        BACKLOG_DEFERRED,
        BACKLOG_RATE_LIMITED,
        ATTEMPT_HISTORY,
        RECORD_METER,
        FORGET_METERS,
        METER_TOTALS,
        RECORD_SHOWN,
        SHOWN,
    }
    "claims.sql" => {
        LOCK_OUT_CLAIMS,
        IN_FLIGHT_LIMITS,
        IN_FLIGHT,
        DUE,
        TENANTS_WAITING,
        DUE_OF_TENANTS,
        DEFER,
        LOCK_DUE_SUBSCRIBERS,
        HOLD_PAUSED,
        KILL_REVOKED,
        LEASE,
        RESCUE_EXPIRED,
        COMPLETE,
        RELEASE_NEXT_IN_ORDER,
        ORPHANED_IN_ORDER,
        INSERT_ATTEMPTS,
        EXPIRING_WINDOWS,
        EXPIRE_WINDOWS,
        PRUNE_DELIVERED,
        PRUNE_ATTEMPTS,
    }
    "dead_letters.sql" => {
        DEAD_LETTERS_OF_REASON_AND_SUBSCRIBER,
        DEAD_LETTERS_OF_REASON,
        DEAD_LETTERS_OF_SUBSCRIBER,
        DEAD_LETTERS,
        DEAD_LETTER_GROUPS,
        DEAD_LETTERS_BY_REASON,
        REPLAY_SELECTION,
        REPLAY_SELECTION_OF_SUBSCRIBER,
        REPLAY_SELECTION_FOR_UPDATE,
        REPLAY_SELECTION_OF_SUBSCRIBER_FOR_UPDATE,
    }
    "deliveries.sql" => {
        DELIVERY,
        DELIVERY_ATTEMPTS,
        EVENT_DELIVERIES,
        EVENT_DELIVERIES_NEWEST_FIRST,
        SUBSCRIBER_DELIVERIES,
        SUBSCRIBER_DELIVERIES_NEWEST_FIRST,
        DELIVERIES,
        DELIVERIES_NEWEST_FIRST,
        NEXT_WAKEUP,
    }
    "health.sql" => {
        AUTO_DISABLE,
        WATCHED_SUBSCRIBERS,
        SET_TOLD,
        FINISHED_REPLAYS,
        SET_REPLAY_FINISHED,
        DEAD_LETTER_INFLOW,
    }
    "event_types.sql" => {
        EVENT_TYPE,
        EVENT_TYPE_FOR_UPDATE,
        EVENT_TYPES,
        INSERT_EVENT_TYPE,
        UPDATE_EVENT_TYPE,
        EVENT_TYPES_REVISION,
    }
    "events.sql" => {
        EVENT,
        EVENT_STATE_COUNTS,
        EARLIER_PAYLOADS,
        INSERT_EVENT,
        PUBLISHED,
        SHARE_LOCK_PAUSED,
        FAN_OUT,
        HOLD_BEHIND_IN_ORDER,
        LOCK_ORDERING_KEYS,
        COUNT_DELIVERIES,
        INSERT_EARLIER_PAYLOADS,
        EVENT_BODIES,
        NOTIFY,
        NOTIFY_WITH,
        EVENT_PAGE,
        EVENTS_STATE_COUNTS,
    }
    "maintenance.sql" => {
        HEARTBEAT,
    }
    "policies.sql" => {
        POLICY,
        POLICIES,
        INSERT_POLICY,
        ROLLOUT,
        ROLLOUT_FOR_UPDATE,
        RUNNING_ROLLOUT,
        ROLLOUTS,
        INSERT_ROLLOUT,
        CHANGE_ROLLOUT,
        ROLLOUTS_ONE_AT_A_TIME,
        PROMOTED_POLICY,
        COHORT_TOTALS,
        COHORT_DEAD,
        COHORT_LATENCY_AT,
    }
    "replays.sql" => {
        INSERT_REPLAY,
        RELEASE_REPLAYED,
        DIE_AGAIN_UNVERSIONED,
        INSERT_REPLAY_ITEMS,
        REPLAY,
        REPLAYS,
        REPLAYS_NEWEST_FIRST,
        REPLAYED_DELIVERIES,
        REPLAY_OUTCOMES,
    }
    "resends.sql" => {
        RESEND_CANDIDATES,
        RESENDS_SO_FAR,
        INSERT_RESENT,
        INSERT_RESEND,
        RESEND,
        RESENDS,
        RESENDS_NEWEST_FIRST,
        RESENT_DELIVERIES,
        RESEND_OUTCOMES,
    }
    "schema.sql" => {
        MIGRATION_LOCK,
        MIGRATION_LOCK_TIMEOUT,
        LEGACY_TABLE,
        RECORDS_TABLE,
        TABLE_EXISTS,
        LEGACY_VERSION,
        APPLIED_MIGRATIONS,
        RECORD_LEGACY,
        CLOSE_LEGACY,
        RECORD_MIGRATION,
        MISSING_ORIGINS,
        SET_ORIGINS,
        INDEX_VALIDITY,
        TRY_INDEX_LOCK,
        INDEX_UNLOCK,
        CURRENT_SCHEMA,
    }
    "stats.sql" => {
        STATE_COUNTS,
        DUE_GROUPS,
        OLDEST_WAITING,
        OPEN_BREAKERS,
        BEHIND_OPEN_BREAKERS,
    }
    "subscribers.sql" => {
        SUBSCRIBER,
        SUBSCRIBER_FOR_UPDATE,
        SUBSCRIBERS_BY_ID,
        SUBSCRIBER_PAGE,
        GONE_AMONG,
        CREATE_SUBSCRIBER,
        UPDATE_SUBSCRIBER,
        RELEASE_HELD,
        ROTATE_SECRET,
        REVOKE_SUBSCRIBER,
        KILL_WAITING,
        RATE_LIMITED,
        LOCK_SUBSCRIBERS,
        SET_RATE_NEXT_AT,
        END_SLOW_STARTS,
        BREAKERS_FOR_UPDATE,
        SET_BREAKERS,
    }
    "tenants.sql" => {
        TENANT,
        TENANT_PAGE,
        CREATE_TENANT,
        UPDATE_TENANT,
        DELETE_TENANT,
        TENANT_SUBSCRIBERS,
        TENANT_SUBSCRIBER_COUNT,
        TENANT_STATE_COUNTS,
        CREATE_PORTAL_SESSION,
        PORTAL_SESSION,
        ACTIVE_PORTAL_SESSION,
        REVOKE_PORTAL_SESSION,
        SET_PUBLISH_TAT,
        TENANT_FOR_UPDATE,
        PUBLISH_LIMIT_FOR_UPDATE,
        REFUND_PUBLISH_TAT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_and_the_constants_name_the_same_statements() {
        crate::sql::check_listed(DIR, FILES, ALL);
    }

    /// Every statement prepares in a schema the migrations made: its tables and columns are
    /// there, its parameters' types are clear, and its text is one statement.
    #[cfg(feature = "testing")]
    #[tokio::test]
    async fn every_statement_prepares() {
        let Some(schema) = crate::testing::PgSchema::create().await else {
            return;
        };
        let (mut client, connection) =
            tokio_postgres::connect(&schema.url(), tokio_postgres::NoTls)
                .await
                .unwrap();
        let connection = tokio::spawn(connection);
        super::super::schema::migrate(&mut client).await.unwrap();
        for (name, sql) in ALL {
            if let Err(e) = client.prepare(sql).await {
                let why = e
                    .as_db_error()
                    .map_or_else(|| e.to_string(), |db| db.message().to_owned());
                panic!("{name}: {why}\n{sql}");
            }
        }
        drop(client);
        connection.await.unwrap().unwrap();
        schema.drop_schema().await;
    }
}
