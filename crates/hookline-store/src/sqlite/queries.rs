//! SQLite's statements, by name, from `sql/sqlite/` (see `crate::sql`).

crate::sql::statements! {
    "sqlite";
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
        DUE,
        NEXT_TENANT_WAITING,
        DUE_OF_TENANT,
        HOLD,
        KILL_DUE,
        DEFER,
        LEASE,
        EXPIRED_LEASES,
        RENEW_LEASE,
        LEASE_HOLDER,
        RELEASE_NEXT_IN_ORDER,
        ORPHANED_IN_ORDER,
        END_ATTEMPT,
        INSERT_ATTEMPT,
        WAITING,
        IN_FLIGHT_PER_SUBSCRIBER,
        EXPIRING_WINDOWS,
        EXPIRE_WINDOW,
        PRUNABLE,
        PRUNE_ATTEMPTS,
        PRUNE_DELIVERY,
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
        EVENT_TYPES,
        INSERT_EVENT_TYPE,
        UPDATE_EVENT_TYPE,
        EVENT_TYPES_REVISION,
    }
    "events.sql" => {
        EVENT,
        EVENT_STATE_COUNTS,
        EARLIER_PAYLOADS,
        PUBLISHED,
        FANNED_OUT_TO,
        FAN_OUT,
        HOLD_BEHIND_IN_ORDER,
        INSERT_EVENT,
        INSERT_EARLIER_PAYLOAD,
        EVENT_BODY,
        EVENT_PAGE,
        EVENTS_STATE_COUNTS,
    }
    "maintenance.sql" => {
        HEARTBEAT,
        CHECKPOINT_PASSIVE,
        CHECKPOINT_TRUNCATE,
        HOOKLINE_TABLES,
        STATE_TOTALS,
        EVENT_TOTAL,
        BACKUP_INTO,
        QUICK_CHECK,
    }
    "policies.sql" => {
        POLICY,
        POLICIES,
        INSERT_POLICY,
        ROLLOUT,
        RUNNING_ROLLOUT,
        ROLLOUTS,
        INSERT_ROLLOUT,
        CHANGE_ROLLOUT,
        PROMOTED_POLICY,
        COHORT_TOTALS,
        COHORT_DEAD,
        COHORT_LATENCY_AT,
    }
    "replays.sql" => {
        INSERT_REPLAY,
        DIE_AGAIN_UNVERSIONED,
        RELEASE_REPLAYED,
        INSERT_REPLAY_ITEM,
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
        INSERT_RESEND_ITEM,
        RESEND,
        RESENDS,
        RESENDS_NEWEST_FIRST,
        RESENT_DELIVERIES,
        RESEND_OUTCOMES,
    }
    "schema.sql" => {
        RECORDS_TABLE,
        LEGACY_VERSION,
        HAS_RECORDS,
        APPLIED_MIGRATIONS,
        RECORD_MIGRATION,
        MISSING_ORIGINS,
        SET_ORIGIN,
    }
    "stats.sql" => {
        STATE_COUNTS,
        IN_FLIGHT_BY_ORIGIN,
        DUE_GROUPS,
        OLDEST_PAUSED,
        OLDEST_ORDERED,
        OLDEST_RETRYING,
        OPEN_BREAKERS,
        BEHIND_OPEN_BREAKERS,
    }
    "subscribers.sql" => {
        SUBSCRIBER,
        SUBSCRIBER_PAGE,
        GONE_AMONG,
        CREATE_SUBSCRIBER,
        UPDATE_SUBSCRIBER,
        RELEASE_HELD,
        ROTATE_SECRET,
        REVOKE_SUBSCRIBER,
        KILL_WAITING,
        SUBSCRIBERS_ON,
        RATE_LIMITED,
        SET_RATE_NEXT_AT,
        END_SLOW_START,
        SET_BREAKER,
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
        ANY_TENANT,
        PUBLISH_LIMIT,
        SET_PUBLISH_TAT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_and_the_constants_name_the_same_statements() {
        crate::sql::check_listed(DIR, FILES, ALL);
    }

    /// Every statement prepares on a database the migrations made: its tables, columns and
    /// named indexes are there, and its text is one statement SQLite reads.
    #[test]
    fn every_statement_prepares() {
        let mut c = rusqlite::Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&mut c).unwrap();
        for (name, sql) in ALL {
            if let Err(e) = c.prepare(sql) {
                panic!("{name}: {e}\n{sql}");
            }
        }
    }
}
