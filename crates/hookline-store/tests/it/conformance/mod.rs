//! The one test suite every storage backend passes. Each case is written once against the
//! store's traits, in the file of its topic (as River's `riverdrivertest`); `all_cases!`
//! instantiates all of them for a backend's harness.

use std::sync::Arc;

use hookline_policy::{DeadReason, Evidence, Outcome, Shown};
use hookline_store::testing::completion;
use hookline_store::*;

/// How a backend gives each test a fresh, isolated database, and reopens it like a restart.
#[async_trait::async_trait]
pub trait Harness: Sized {
    /// `None`: this backend cannot be tested here (the reason is printed once); skip.
    async fn fresh() -> Option<Self>;
    async fn open(&self) -> Arc<dyn Store>;
    /// Removes what `fresh` made (a test that fails leaves it behind for inspection).
    async fn cleanup(self) {}
}

struct Sqlite {
    dir: tempfile::TempDir,
}

/// Every case runs with the SQLite writer recounting what it keeps in memory from the tables
/// after each batch: a case passes only if those figures never differ from the rows.
#[async_trait::async_trait]
impl Harness for Sqlite {
    async fn fresh() -> Option<Self> {
        hookline_store::testing::recount_sqlite_figures();
        Some(Sqlite {
            dir: tempfile::tempdir().unwrap(),
        })
    }
    async fn open(&self) -> Arc<dyn Store> {
        let path = self.dir.path().join("hookline.db");
        open(&format!("sqlite://{}", path.display())).await.unwrap()
    }
    async fn cleanup(self) {
        let differences = hookline_store::testing::sqlite_figure_differences(self.dir.path());
        assert!(differences.is_empty(), "{differences:#?}");
    }
}

/// Each test gets a PostgreSQL schema of its own.
struct Postgres(hookline_store::testing::PgSchema);

#[async_trait::async_trait]
impl Harness for Postgres {
    async fn fresh() -> Option<Self> {
        hookline_store::testing::PgSchema::create()
            .await
            .map(Postgres)
    }
    async fn open(&self) -> Arc<dyn Store> {
        open(&self.0.url()).await.unwrap()
    }
    async fn cleanup(self) {
        self.0.drop_schema().await;
    }
}

macro_rules! conformance {
    ($module:ident, $harness:ty, $($topic:ident::$case:ident),* $(,)?) => {
        mod $module {
            use super::*;
            $(
                #[tokio::test]
                async fn $case() {
                    let Some(harness) = <$harness as Harness>::fresh().await else {
                        return;
                    };
                    $topic::$case(&harness).await;
                    harness.cleanup().await;
                }
            )*
        }
    };
}

macro_rules! all_cases {
    ($module:ident, $harness:ty) => {
        conformance!(
            $module,
            $harness,
            subscribers::subscribers_crud,
            queue::publish_fans_out_once,
            queue::a_claim_reads_the_event_s_traceparent,
            queue::claims_only_due_within_caps,
            queue::completion_is_fenced_by_the_lease,
            queue::completions_free_slots_for_the_claim_that_follows,
            queue::a_claim_with_completions_fills_its_limit_from_the_slots_they_free,
            subscribers::a_nul_byte_in_an_id_is_the_callers_error_never_the_stores,
            subscribers::a_search_matches_query_values_only_when_asked,
            queue::rescue_returns_lost_attempts,
            subscribers::pause_holds_without_spending_attempts,
            subscribers::revocation_kills_pending_and_stops_fan_out,
            subscribers::gone_subscribers_are_named,
            subscribers::a_410_revokes_for_the_completions_after_it_in_its_batch,
            dead_letters::dead_letters_filter_and_page,
            dead_letters::dead_letters_group_by_reason_and_subscriber,
            dead_letters::replay_is_bounded_paced_and_audited,
            queue::state_survives_reopen,
            queue::prune_removes_old_delivered_only,
            subscribers::rotation_keeps_the_previous_secret_for_its_grace,
            queue::queue_stats_show_depths_and_oldest_waits,
            limits::the_breaker_opens_defers_probes_and_closes,
            limits::breakers_that_open_together_half_open_apart,
            limits::a_closed_breaker_starts_slowly,
            limits::deferred_deliveries_come_due_in_due_order,
            limits::a_recovered_host_starts_at_one_per_subscriber,
            limits::subscriber_caps_rate_limits_and_the_retry_budget,
            limits::a_cap_above_the_default_is_claimed_up_to,
            limits::a_wall_of_unclaimable_rows_hides_nobody,
            limits::a_subscriber_used_up_mid_claim_hides_nobody,
            limits::the_host_cap_holds_across_subscribers_and_inside_each_cap,
            limits::a_wall_of_rows_on_a_host_at_its_cap_hides_nobody,
            limits::deliveries_held_back_by_their_host_wait_on_its_cap,
            subscribers::payload_versions_follow_each_subscribers_pin,
            dead_letters::replay_selects_what_was_listed_and_audits_each_outcome_once,
            queue::waiting_deliveries_die_when_their_window_ends,
            subscribers::headers_go_with_every_claim_and_patches_replace_them,
            queue::a_heartbeat_commits,
            policies::policies_are_named_listed_and_never_change,
            policies::rollouts_run_one_at_a_time_and_end_once,
            policies::cohort_reports_count_what_each_policy_decided,
            queue::a_publish_over_its_admission_stores_nothing,
            capacity::backlog_and_meters_count_across_processes,
            capacity::backlog_waits_group_what_waits_for_a_time_or_a_rate,
            capacity::attempt_history_reads_the_recent_attempts,
            tenants::tenants_are_created_listed_changed_and_deleted,
            tenants::a_tenant_s_events_reach_its_subscribers_only,
            tenants::a_test_event_reaches_its_one_subscriber_only,
            tenants::a_tenant_s_dead_letters_and_replays_are_its_own,
            tenants::tenant_quotas_refuse_and_store_nothing,
            tenants::portal_sessions_expire_are_revoked_and_end_with_their_tenant,
            events::events_are_searched_newest_first_and_paged,
            events::wildcard_subscriptions_fan_out_below_their_prefix,
            ordering::a_key_s_deliveries_go_one_at_a_time_in_publish_order,
            ordering::a_key_s_line_keeps_windows_and_pauses,
            ordering::a_replay_leaves_its_key_s_line,
            tenants::a_tenant_s_wall_of_older_due_rows_hides_no_other_tenant_s,
            tenants::tenants_get_their_share_and_what_one_leaves_goes_to_others,
            tenants::a_tenant_borrows_its_share_while_another_holds_every_slot,
            tenants::tenants_past_the_walk_s_bound_are_reached_by_the_next_claim,
            resends::a_resend_selects_by_time_type_and_tenant,
            resends::resends_are_new_deliveries_with_fresh_ids,
            resends::resends_to_paused_are_held_and_to_revoked_refused,
            resends::resends_are_audited_and_paged,
            event_types::event_types_are_registered_listed_and_changed,
            event_types::a_refused_change_changes_nothing,
            event_types::the_catalog_s_revision_moves_with_every_write,
            health::failures_are_watched_told_once_and_a_success_ends_them,
            health::failing_subscribers_are_paused_after_disable_after_and_resume_fresh,
            health::finished_replays_and_the_dead_letter_inflow_are_read,
        );
    };
}

all_cases!(sqlite, Sqlite);
all_cases!(postgres, Postgres);

const T0: i64 = 1_800_000_000_000;
const LEASE: i64 = 10_000;

fn sub(id: &str, types: &[&str]) -> NewSubscriber {
    NewSubscriber {
        tenant_id: None,
        id: id.into(),
        url: format!("http://127.0.0.1:9/{id}"),
        event_types: types.iter().map(|s| s.to_string()).collect(),
        secret: "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0".into(),
        max_in_flight: None,
        rate_limit_per_second: None,
        payload_version: None,
        headers: SubscriberHeaders::default(),
    }
}

/// A subscriber whose URL is on `origin` (a path of its own: one gateway, many subscribers).
fn sub_on(origin: &str, id: &str, types: &[&str]) -> NewSubscriber {
    NewSubscriber {
        url: format!("{origin}/hooks/{id}"),
        ..sub(id, types)
    }
}

/// A claim under a cap per host.
fn claim_per_host(now: i64, limit: usize, cap: u32, host_cap: u32) -> ClaimRequest {
    ClaimRequest {
        max_in_flight_per_host: host_cap,
        ..claim(now, limit, cap)
    }
}

/// How many of `claimed` go to each subscriber and to each of `origins` (by URL prefix).
fn spread(
    claimed: &[ClaimedDelivery],
    origin: &str,
) -> (usize, std::collections::BTreeMap<String, usize>) {
    let mut per_subscriber = std::collections::BTreeMap::new();
    for c in claimed {
        *per_subscriber
            .entry(c.destination.subscriber_id.clone())
            .or_default() += 1;
    }
    let on_origin = claimed
        .iter()
        .filter(|c| c.destination.url.starts_with(&format!("{origin}/")))
        .count();
    (on_origin, per_subscriber)
}

/// The dispatcher's caps as the gauges and the window sweep see them, with no cap per host.
fn caps(per_subscriber: u32) -> InFlightCaps {
    InFlightCaps {
        max_in_flight_per_subscriber: per_subscriber,
        max_in_flight_per_host: 0,
    }
}

fn event(id: &str, ty: &str) -> NewEvent {
    NewEvent::single(id, ty, r#"{"shipment":"SHP-20418"}"#, 1)
}

fn claim(now: i64, limit: usize, cap: u32) -> ClaimRequest {
    ClaimRequest {
        now,
        limit,
        slots: limit,
        lend: 0,
        lease_ms: LEASE,
        max_in_flight_per_subscriber: cap,
        max_in_flight_per_host: 0,
        max_retries: usize::MAX,
        exclude_subscribers: Vec::new(),
        window_ended_for_start: i64::MIN,
    }
}

async fn accepted(store: &dyn Store, e: NewEvent, now: i64) -> u64 {
    match store.publish(e, now).await.unwrap() {
        PublishOutcome::Accepted(r) => r.deliveries,
        other => panic!("expected a new event, got {other:?}"),
    }
}

/// Claims everything due and kills it, so dead-letter and replay tests have material.
async fn kill_all(store: &dyn Store, now: i64, reason: DeadReason) -> usize {
    let claimed = store.claim_due(claim(now, 1000, 1000)).await.unwrap();
    let n = claimed.len();
    let done = claimed
        .iter()
        .map(|c| completion(c, Transition::Dead(reason), now))
        .collect();
    store.complete(done, now).await.unwrap();
    n
}
mod capacity;
mod dead_letters;
mod event_types;
mod events;
mod health;
mod limits;
mod ordering;
mod policies;
mod queue;
mod resends;
mod subscribers;
mod tenants;
