//! Named policies, rollouts and the cohort reports that compare them.

use super::*;

pub(crate) async fn policies_are_named_listed_and_never_change(h: &impl Harness) {
    let store = h.open().await;
    let policy = |name: &str, definition: &str| StoredPolicy {
        name: name.into(),
        definition: definition.into(),
        created_at: T0,
        created_by: Some("oncall".into()),
    };
    let first = store
        .create_policy(policy("retry-520", r#"{"retryable":[520]}"#))
        .await
        .unwrap();
    assert_eq!(store.get_policy("retry-520").await.unwrap(), first);
    assert!(matches!(
        store.create_policy(policy("retry-520", "{}")).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store.get_policy("retry-520").await.unwrap().definition,
        r#"{"retryable":[520]}"#,
        "the refused one changed nothing"
    );
    assert!(matches!(
        store.get_policy("nope").await,
        Err(StoreError::NotFound(_))
    ));
    for name in ["b", "c"] {
        store.create_policy(policy(name, "{}")).await.unwrap();
    }
    let page = store.list_policies(2, None).await.unwrap();
    let names: Vec<&str> = page.items.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["retry-520", "b"]);
    let rest = store.list_policies(2, page.next_cursor).await.unwrap();
    assert_eq!((rest.items.len(), rest.next_cursor), (1, None));
    drop(store);
    let reopened = h.open().await;
    assert_eq!(reopened.get_policy("c").await.unwrap().name, "c");
}

fn rollout(id: &str, policy: &str, started_at: i64) -> Rollout {
    Rollout {
        id: id.into(),
        policy: policy.into(),
        baseline: "default".into(),
        basis_points: 500,
        subscriber_ids: vec!["listed".into()],
        abort_if: Some(AbortIf {
            terminal_rate_increase: 0.05,
            min_deliveries: 200,
        }),
        state: RolloutState::Running,
        reason: None,
        started_at,
        ended_at: None,
        created_by: Some("oncall".into()),
    }
}

pub(crate) async fn rollouts_run_one_at_a_time_and_end_once(h: &impl Harness) {
    let store = h.open().await;
    assert_eq!(
        store.policies_in_force().await.unwrap(),
        PoliciesInForce::default()
    );
    let first = store
        .start_rollout(rollout("ro_1", "cf", T0))
        .await
        .unwrap();
    assert_eq!(store.get_rollout("ro_1").await.unwrap(), first);
    let second = store.start_rollout(rollout("ro_2", "other", T0)).await;
    assert!(matches!(second, Err(StoreError::Conflict(_))), "{second:?}");
    assert!(matches!(
        store.get_rollout("ro_2").await,
        Err(StoreError::NotFound(_))
    ));
    let raised = store
        .change_rollout("ro_1", RolloutChange::Share(5_000), T0 + 1)
        .await
        .unwrap();
    assert_eq!(raised.basis_points, 5_000);
    let in_force = store.policies_in_force().await.unwrap();
    assert_eq!((in_force.default, in_force.rollout), (None, Some(raised)));

    let aborted = store
        .change_rollout(
            "ro_1",
            RolloutChange::Abort {
                reason: "worse".into(),
            },
            T0 + 2,
        )
        .await
        .unwrap();
    assert_eq!(
        (aborted.state, aborted.reason.as_deref(), aborted.ended_at),
        (RolloutState::Aborted, Some("worse"), Some(T0 + 2))
    );
    // An ended rollout changes no more, and the refusal changes nothing.
    for change in [RolloutChange::Promote, RolloutChange::Share(100)] {
        let again = store.change_rollout("ro_1", change, T0 + 3).await;
        assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    }
    assert_eq!(store.get_rollout("ro_1").await.unwrap(), aborted);
    assert!(matches!(
        store
            .change_rollout("nope", RolloutChange::Promote, T0)
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        store.policies_in_force().await.unwrap(),
        PoliciesInForce::default(),
        "an abort leaves the default as it was"
    );

    // With none running, the next starts; promoting it makes its policy everyone's.
    store
        .start_rollout(rollout("ro_2", "cf", T0 + 4))
        .await
        .unwrap();
    store
        .change_rollout("ro_2", RolloutChange::Promote, T0 + 5)
        .await
        .unwrap();
    // A start that missed the promotion (its baseline is not in force) changes nothing.
    let stale = store.start_rollout(rollout("ro_3", "later", T0 + 6)).await;
    assert!(matches!(stale, Err(StoreError::Conflict(_))), "{stale:?}");
    let mut fresh = rollout("ro_3", "later", T0 + 6);
    fresh.baseline = "cf".into();
    store.start_rollout(fresh).await.unwrap();
    store
        .change_rollout("ro_3", RolloutChange::Promote, T0 + 7)
        .await
        .unwrap();
    drop(store);
    let store = h.open().await;
    let in_force = store.policies_in_force().await.unwrap();
    assert_eq!(
        (in_force.default.as_deref(), in_force.rollout),
        (Some("later"), None),
        "the policy promoted last is in force"
    );
    let page = store.list_rollouts(2, None).await.unwrap();
    let ids: Vec<&str> = page.items.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["ro_1", "ro_2"]);
    let rest = store.list_rollouts(2, page.next_cursor).await.unwrap();
    assert_eq!(rest.items[0].subscriber_ids, ["listed"]);
    assert_eq!(rest.items[0].abort_if, rollout("x", "y", 0).abort_if);
}

pub(crate) async fn cohort_reports_count_what_each_policy_decided(h: &impl Harness) {
    let store = h.open().await;
    for id in ["a", "b", "c"] {
        store.create_subscriber(sub(id, &["t"]), T0).await.unwrap();
    }
    let decided_by = |c: &ClaimedDelivery, transition, policy: &str, at: i64| {
        let mut done = completion(c, transition, at);
        done.record.policy = Some(policy.into());
        done.record.duration_ms = 10;
        done
    };
    // Before the range: not counted.
    accepted(&*store, event("early", "t"), T0).await;
    let early = store.claim_due(claim(T0, 10, 10)).await.unwrap();
    let done = early
        .iter()
        .map(|c| decided_by(c, Transition::Delivered, "cf", T0))
        .collect();
    store.complete(done, T0).await.unwrap();

    // In range: a and b by "cf" (a delivered after a retry, b dead), c by "default".
    let t1 = T0 + 1_000;
    accepted(&*store, event("e1", "t"), t1).await;
    let claimed = store.claim_due(claim(t1 + 5, 10, 10)).await.unwrap();
    assert_eq!(claimed.len(), 3);
    let retry_at = t1 + 100;
    let done = claimed
        .iter()
        .map(|c| match c.destination.subscriber_id.as_str() {
            "a" => decided_by(c, Transition::Reschedule { run_at: retry_at }, "cf", t1 + 5),
            "b" => decided_by(
                c,
                Transition::Dead(DeadReason::AttemptsExhausted),
                "cf",
                t1 + 5,
            ),
            _ => decided_by(c, Transition::Delivered, "default", t1 + 5),
        })
        .collect();
    store.complete(done, t1 + 5).await.unwrap();
    let again = store.claim_due(claim(retry_at, 10, 10)).await.unwrap();
    assert_eq!(again.len(), 1);
    let done = vec![decided_by(&again[0], Transition::Delivered, "cf", retry_at)];
    store.complete(done, retry_at).await.unwrap();

    let report = |policy: &str| {
        store.cohort_report(CohortQuery {
            policy: policy.into(),
            since: t1,
            until: t1 + 10_000,
        })
    };
    let cf = report("cf").await.unwrap();
    assert_eq!(
        (cf.subscribers, cf.deliveries, cf.delivered, cf.dead),
        (2, 2, 1, 1)
    );
    assert_eq!((cf.retry_attempts, cf.retried), (1, 1));
    assert_eq!(
        cf.dead_by_reason,
        [("attempts_exhausted".to_owned(), 1)].into()
    );
    // From the event's acceptance to the end of the first attempt: 5 ms queued + 10 ms.
    assert_eq!(
        (
            cf.first_attempt_latency_p50_ms,
            cf.first_attempt_latency_p99_ms
        ),
        (Some(15), Some(15))
    );
    let default = report("default").await.unwrap();
    assert_eq!(
        (
            default.deliveries,
            default.delivered,
            default.retry_attempts
        ),
        (1, 1, 0)
    );
    assert_eq!(report("none").await.unwrap(), CohortReport::default());
}
