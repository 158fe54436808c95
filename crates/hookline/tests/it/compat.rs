//! Rollback and upgrade with deliveries outstanding, against the previous tagged release built
//! from git: a rollback that cannot read yesterday's scheduled rows is not a rollback.
//!
//! - Rollback: this release writes a store holding a delivery in every state (scheduled in the
//!   future, due, in flight at a kill -9, dead with each reason, delivered, held for a paused
//!   subscriber, signed with a rotated secret in its grace period, deferred by an open breaker,
//!   sent in a pinned payload version). The previous release starts on it and delivers every
//!   outstanding delivery with its `webhook-id` and a signature the reference verifier
//!   accepts, and replays its dead letters; then this release starts again and does the same
//!   with what the previous one left outstanding.
//! - Upgrade: the previous release writes the store (with a kill -9 mid-attempt), this one
//!   starts on it and delivers everything outstanding.
//!
//! The previous release is built once (a release build, a few minutes) from `git archive` of
//! its commit into `target/previous-release/<commit>`, or `$HOOKLINE_PREVIOUS_RELEASE_CACHE`
//! (`.ci/run` points it outside the clone, so CI builds it once per machine). Set
//! `HOOKLINE_PREVIOUS_BIN` to use an existing binary instead.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::*;
use hookline_policy::{BreakerConfig, DeadReason, Outcome};
use hookline_store::*;
use serde_json::{json, Value};

/// The release before this one: its tag and the commit the tag names. A new release tag moves
/// this forward (docs/RUNBOOK.md, "Releasing").
const PREVIOUS_RELEASE: (&str, &str) = ("v0.1.0", "a156dcdb934de2a60b1e342605210ad070dae126");

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const ROTATED_TO: &str = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0";

/// Keys both releases understand. A 1 s attempt timeout makes a lease run out 6 s after a kill.
const CONFIG: &str = r#"allow_private_destinations = true
[delivery]
attempt_timeout = "1s"
[retry]
base_delay = "200ms"
max_delay = "1s"
max_attempts = 5
delivery_window = "10m"
[breaker]
failures = 2
cool_down = "1s"
"#;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(command: &mut std::process::Command, what: &str) -> Vec<u8> {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Builds the previous release from git (once per cache directory) and answers its binary.
fn build_previous_release() -> PathBuf {
    if let Ok(bin) = std::env::var("HOOKLINE_PREVIOUS_BIN") {
        return PathBuf::from(bin);
    }
    let (tag, commit) = PREVIOUS_RELEASE;
    let cache = std::env::var("HOOKLINE_PREVIOUS_RELEASE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace().join("target/previous-release"))
        .join(commit);
    let bin = cache.join("target/release/hookline");
    if bin.is_file() {
        return bin;
    }
    let has_commit = std::process::Command::new("git")
        .current_dir(workspace())
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has_commit,
        "the previous release {tag} ({commit}) is not in this git clone (a shallow clone?): \
         fetch the full history, or set HOOKLINE_PREVIOUS_BIN to a {tag} binary"
    );
    let src = cache.join("src");
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(&src).unwrap();
    let archive = run(
        std::process::Command::new("git")
            .current_dir(workspace())
            .args(["archive", "--format=tar", commit]),
        "git archive",
    );
    let mut tar = std::process::Command::new("tar")
        .current_dir(&src)
        .args(["-x", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(tar.stdin.as_mut().unwrap(), &archive).unwrap();
    drop(tar.stdin.take());
    assert!(tar.wait().unwrap().success(), "unpacking {tag}");
    eprintln!("building hookline {tag} ({commit}) in {}", cache.display());
    run(
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(&src)
            .env("CARGO_TARGET_DIR", cache.join("target"))
            .args(["build", "--release", "--locked", "--bin", "hookline"]),
        "building the previous release",
    );
    assert!(bin.is_file());
    bin
}

async fn previous_release() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    tokio::task::spawn_blocking(|| BIN.get_or_init(build_previous_release).clone())
        .await
        .unwrap()
}

fn this_release() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_hookline"))
}

/// A store to run both releases on: a SQLite file, or a PostgreSQL schema of its own.
enum Db {
    Sqlite(tempfile::TempDir),
    Postgres(hookline_store::testing::PgSchema),
}

impl Db {
    async fn sqlite() -> Self {
        Db::Sqlite(tempfile::tempdir().unwrap())
    }
    /// `None` without a PostgreSQL to test (skip).
    async fn postgres() -> Option<Self> {
        hookline_store::testing::PgSchema::create()
            .await
            .map(Db::Postgres)
    }
    fn url(&self) -> String {
        match self {
            Db::Sqlite(dir) => format!("sqlite://{}", dir.path().join("hookline.db").display()),
            Db::Postgres(schema) => schema.url(),
        }
    }
    async fn cleanup(self) {
        if let Db::Postgres(schema) = self {
            schema.drop_schema().await;
        }
    }
}

/// One hookline process of either release, and its API.
struct Api {
    process: Process,
    http: reqwest::Client,
}

impl Api {
    async fn start(binary: &Path, dir: &Path, db: &Db) -> Self {
        let mut config = format!("database = {:?}\n{CONFIG}", db.url());
        if binary == this_release() {
            // Its tenants' subscribers are local receivers too (the previous release refuses
            // the section).
            config.push_str("[tenants]\ndestinations = \"as_platform\"\n");
        }
        Api {
            process: Process::spawn_binary(binary, dir, "hookline", &config, "all").await,
            http: reqwest::Client::new(),
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.process.base));
        if let Some(body) = body {
            req = req.json(&body);
        }
        let r = req.send().await.unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "{path}: {status} {body}");
        body
    }

    async fn subscriber(&self, id: &str, rx: &Receiver) {
        self.call(
            reqwest::Method::POST,
            "/v1/subscribers",
            Some(json!({"id": id, "url": rx.url(&format!("/{id}")),
                        "event_types": [format!("t.{id}")], "secret": SECRET})),
        )
        .await;
    }

    async fn publish(&self, event: &str, subscriber: &str) {
        self.call(
            reqwest::Method::POST,
            "/v1/events",
            Some(json!({"id": event, "type": format!("t.{subscriber}"),
                        "payload": {"shipment": event}})),
        )
        .await;
    }

    async fn set_status(&self, subscriber: &str, status: &str) {
        self.call(
            reqwest::Method::PATCH,
            &format!("/v1/subscribers/{subscriber}"),
            Some(json!({"status": status})),
        )
        .await;
    }

    async fn replay(&self, reason: &str) {
        self.call(
            reqwest::Method::POST,
            "/v1/dead-letters/replay",
            Some(json!({"reason": reason, "limit": 100})),
        )
        .await;
    }

    async fn state(&self, delivery: &str) -> String {
        let d = self
            .call(
                reqwest::Method::GET,
                &format!("/v1/deliveries/{delivery}"),
                None,
            )
            .await;
        d["state"].as_str().unwrap().to_owned()
    }

    async fn dead_letter_ids(&self) -> Vec<String> {
        let page = self
            .call(reqwest::Method::GET, "/v1/dead-letters?limit=1000", None)
            .await;
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["delivery_id"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Waits until each delivery is delivered, then checks that the subscriber received it
    /// under its own `webhook-id`, signed so that the reference verifier accepts it with each
    /// of the secrets in `secrets` (the subscriber's, or both during a rotation).
    async fn delivered(&self, rx: &Receiver, ids: &[&str], secrets: &HashMap<&str, Vec<&str>>) {
        for id in ids {
            eventually(&format!("{id} to be delivered"), async || {
                (self.state(id).await == "delivered").then_some(())
            })
            .await;
            let got = rx.received_for(id);
            assert!(!got.is_empty(), "{id} was never received");
            let subscriber = id.split(':').nth(1).unwrap();
            for r in &got {
                assert_eq!(r.webhook_id, *id);
                for secret in secrets.get(subscriber).cloned().unwrap_or(vec![SECRET]) {
                    standardwebhooks::Webhook::new(secret)
                        .unwrap()
                        .verify(&r.body, &r.headers())
                        .unwrap_or_else(|e| panic!("{id}: signature with {secret}: {e}"));
                }
            }
        }
    }

    async fn kill_9(mut self) {
        self.process.kill_9();
    }
}

/// Waits until the receiver holds a request for `id` (its attempt is in flight).
async fn in_flight(rx: &Receiver, id: &str) {
    eventually(&format!("{id} to be in flight"), async || {
        (!rx.received_for(id).is_empty()).then_some(())
    })
    .await;
}

fn now_ms() -> i64 {
    unix_ms_now()
}

/// Writes, with this release's store, a delivery in every state a delivery can be in.
async fn every_state(url: &str, rx: &Receiver) {
    let store = hookline_store::open_with(
        url,
        &OpenOptions {
            pool_size: 2,
            serving: false,
        },
    )
    .await
    .unwrap();
    let now = now_ms();
    let subscriber = |id: &str, pin: Option<i64>| NewSubscriber {
        tenant_id: None,
        id: id.into(),
        url: rx.url(&format!("/{id}")),
        event_types: vec![format!("t.{id}")],
        secret: SECRET.into(),
        max_in_flight: None,
        rate_limit_per_second: None,
        payload_version: pin,
        headers: Default::default(),
    };
    for id in [
        "s-due",
        "s-future",
        "s-paused",
        "s-rotated",
        "s-breaker",
        "s-dead",
        "s-revoked",
        "s-done",
    ] {
        store
            .create_subscriber(subscriber(id, None), now)
            .await
            .unwrap();
    }
    store
        .create_subscriber(subscriber("s-pinned", Some(1)), now)
        .await
        .unwrap();
    store
        .create_subscriber(subscriber("s-old", Some(0)), now)
        .await
        .unwrap();
    let publish = async |event: &str, subscriber: &str| {
        let e = NewEvent::single(event, &format!("t.{subscriber}"), r#"{"n":1}"#, 1);
        store.publish(e, now).await.unwrap();
    };
    // Claims only what was just published, and completes it with `transition`.
    let settle = async |transition: Transition, outcome: Outcome| {
        let claimed = store
            .claim_due(ClaimRequest {
                now,
                limit: 100,
                slots: 100,
                lend: 0,
                lease_ms: 10_000,
                max_in_flight_per_subscriber: 100,
                max_in_flight_per_host: 0,
                max_retries: 100,
                exclude_subscribers: vec![],
                window_ended_for_start: i64::MIN,
            })
            .await
            .unwrap();
        let done = claimed
            .iter()
            .map(|c| Completion {
                key: c.key,
                lease: c.lease,
                record: AttemptRecord {
                    ordinal: c.attempt,
                    started_at: now,
                    duration_ms: 5,
                    outcome,
                    status: Some(if outcome == Outcome::Success {
                        200
                    } else {
                        503
                    }),
                    error: None,
                    response_body: None,
                    policy: Some("default".into()),
                },
                transition,
                revoke_subscriber: false,
                // Two retryable failures open the breaker (as the config this test runs with).
                breaker: BreakerConfig {
                    failures: 2,
                    cool_down: Duration::from_secs(1),
                    max_cool_down: Duration::from_secs(1),
                },
            })
            .collect();
        store.complete(done, now).await.unwrap();
    };
    publish("done", "s-done").await;
    settle(Transition::Delivered, Outcome::Success).await;
    publish("future", "s-future").await;
    settle(
        Transition::Reschedule {
            run_at: now + 3_000,
        },
        Outcome::Retryable,
    )
    .await;
    for (event, reason) in [
        ("perm", DeadReason::PermanentFailure),
        ("exhausted", DeadReason::AttemptsExhausted),
        ("window", DeadReason::WindowExpired),
        ("nextdelay", DeadReason::NextDelayExceedsWindow),
    ] {
        publish(event, "s-dead").await;
        settle(Transition::Dead(reason), Outcome::Permanent).await;
    }
    // Two retryable failures open the breaker; its third delivery waits behind it.
    for event in ["b1", "b2"] {
        publish(event, "s-breaker").await;
        settle(
            Transition::Reschedule { run_at: now + 200 },
            Outcome::Retryable,
        )
        .await;
    }
    publish("b3", "s-breaker").await;
    assert!(
        store
            .get_subscriber("s-breaker")
            .await
            .unwrap()
            .breaker
            .open_until
            > Some(now)
    );
    publish("revoked", "s-revoked").await;
    store.revoke_subscriber("s-revoked", now).await.unwrap();
    store
        .update_subscriber(
            "s-paused",
            SubscriberPatch {
                status: Some(SubscriberStatus::Paused),
                ..Default::default()
            },
            now,
        )
        .await
        .unwrap();
    publish("paused", "s-paused").await;
    store
        .rotate_secret("s-rotated", ROTATED_TO.into(), now + 3_600_000, now)
        .await
        .unwrap();
    publish("rotated", "s-rotated").await;
    let mut versions = NewEvent::single("versions", "t.s-pinned", r#"{"v":2}"#, 2);
    versions.earlier_payloads = vec![(1, r#"{"v":1}"#.into())];
    store.publish(versions, now).await.unwrap();
    let old = NewEvent::single("unversioned", "t.s-old", r#"{"v":1}"#, 1);
    store.publish(old, now).await.unwrap();
    publish("due", "s-due").await;
}

async fn rollback_and_upgrade_again(db: Db) {
    let previous = previous_release().await;
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::start(|_, _| 200).await;
    let url = db.url();
    let secrets: HashMap<&str, Vec<&str>> =
        HashMap::from([("s-rotated", vec![SECRET, ROTATED_TO])]);

    // This release: an attempt in flight when it is killed, and a tenant's subscriber with a
    // delivery in flight too (rows of a migration the previous release does not know).
    let current = Api::start(this_release(), dir.path(), &db).await;
    current.subscriber("s-inflight", &rx).await;
    current
        .call(
            reqwest::Method::POST,
            "/v1/tenants",
            Some(json!({"id": "acme"})),
        )
        .await;
    current
        .call(
            reqwest::Method::POST,
            "/v1/subscribers",
            Some(
                json!({"id": "s-tenant", "url": rx.url("/s-tenant"), "tenant_id": "acme",
                        "event_types": ["t.s-tenant"], "secret": SECRET}),
            ),
        )
        .await;
    let gate = rx.hold().await;
    current.publish("inflight", "s-inflight").await;
    current
        .call(
            reqwest::Method::POST,
            "/v1/events",
            Some(
                json!({"id": "tenant-event", "type": "t.s-tenant", "tenant_id": "acme",
                        "payload": {"shipment": "tenant-event"}}),
            ),
        )
        .await;
    in_flight(&rx, "inflight:s-inflight").await;
    in_flight(&rx, "tenant-event:s-tenant").await;
    current.kill_9().await;
    drop(gate);
    every_state(&url, &rx).await;

    // Roll back: the previous release delivers everything outstanding.
    let old = Api::start(&previous, dir.path(), &db).await;
    old.set_status("s-paused", "active").await;
    old.delivered(
        &rx,
        &[
            "due:s-due",
            "future:s-future",
            "paused:s-paused",
            "rotated:s-rotated",
            "b1:s-breaker",
            "b2:s-breaker",
            "b3:s-breaker",
            "versions:s-pinned",
            "inflight:s-inflight",
            "tenant-event:s-tenant",
        ],
        &secrets,
    )
    .await;
    // It knows no payload versions: it sends the latest (documented in the RUNBOOK).
    let sent = rx.received_for("versions:s-pinned");
    assert_eq!(sent.last().unwrap().json()["payload_version"], 2);
    assert_eq!(old.state("done:s-done").await, "delivered");
    let dead = old.dead_letter_ids().await;
    for id in [
        "perm:s-dead",
        "exhausted:s-dead",
        "window:s-dead",
        "nextdelay:s-dead",
        "revoked:s-revoked",
        "unversioned:s-old",
    ] {
        assert!(dead.iter().any(|d| d == id), "{id} missing from {dead:?}");
    }
    old.replay("attempts_exhausted").await;
    old.delivered(&rx, &["exhausted:s-dead"], &secrets).await;

    // The previous release leaves work outstanding: held, and in flight at a kill -9.
    old.subscriber("s-paused2", &rx).await;
    old.set_status("s-paused2", "paused").await;
    old.publish("rb-paused", "s-paused2").await;
    old.subscriber("s-inflight2", &rx).await;
    let gate = rx.hold().await;
    old.publish("rb-inflight", "s-inflight2").await;
    in_flight(&rx, "rb-inflight:s-inflight2").await;
    old.kill_9().await;
    drop(gate);

    // Upgrade again: this release delivers it, and replays the older dead letters.
    let again = Api::start(this_release(), dir.path(), &db).await;
    again.set_status("s-paused2", "active").await;
    again
        .call(
            reqwest::Method::PATCH,
            "/v1/subscribers/s-old",
            Some(json!({"payload_version": 1})),
        )
        .await;
    for reason in [
        "permanent_failure",
        "window_expired",
        "next_delay_exceeds_window",
    ] {
        again.replay(reason).await;
    }
    again
        .delivered(
            &rx,
            &[
                "rb-paused:s-paused2",
                "rb-inflight:s-inflight2",
                "perm:s-dead",
                "window:s-dead",
                "nextdelay:s-dead",
                "unversioned:s-old",
            ],
            &secrets,
        )
        .await;
    let sent = rx.received_for("unversioned:s-old");
    assert_eq!(sent.last().unwrap().json()["payload_version"], 1);
    // The tenant and its rows came through the rollback as they were.
    let tenant = again
        .call(
            reqwest::Method::GET,
            "/v1/deliveries/tenant-event:s-tenant",
            None,
        )
        .await;
    assert_eq!(tenant["tenant_id"], "acme");
    let listed = again
        .call(reqwest::Method::GET, "/v1/subscribers?tenant_id=acme", None)
        .await;
    assert_eq!(listed["items"][0]["id"], "s-tenant");
    let status = std::process::Command::new(this_release())
        .args(["migrate", "--status", "--database", &url])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{printed}");
    assert!(
        printed.contains("pending migrations:       none"),
        "{printed}"
    );
    again.kill_9().await;
    db.cleanup().await;
}

async fn upgrade_with_deliveries_outstanding(db: Db) {
    let previous = previous_release().await;
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::start(|path, _| if path == "/s-perm" { 400 } else { 200 }).await;
    let secrets = HashMap::new();

    let old = Api::start(&previous, dir.path(), &db).await;
    for id in ["s-perm", "s-paused", "s-inflight"] {
        old.subscriber(id, &rx).await;
    }
    old.publish("perm", "s-perm").await;
    eventually("the permanent failure", async || {
        (old.state("perm:s-perm").await == "dead").then_some(())
    })
    .await;
    old.set_status("s-paused", "paused").await;
    old.publish("paused", "s-paused").await;
    let gate = rx.hold().await;
    old.publish("inflight", "s-inflight").await;
    in_flight(&rx, "inflight:s-inflight").await;
    old.kill_9().await;
    drop(gate);

    rx.set_behaviour(|_, _| 200);
    let current = Api::start(this_release(), dir.path(), &db).await;
    current.set_status("s-paused", "active").await;
    current.replay("permanent_failure").await;
    current
        .delivered(
            &rx,
            &["inflight:s-inflight", "paused:s-paused", "perm:s-perm"],
            &secrets,
        )
        .await;
    current.kill_9().await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_rollback_to_the_previous_release_and_upgrade_again() {
    rollback_and_upgrade_again(Db::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rollback_to_the_previous_release_and_upgrade_again() {
    if let Some(db) = Db::postgres().await {
        rollback_and_upgrade_again(db).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_upgrade_from_the_previous_release() {
    upgrade_with_deliveries_outstanding(Db::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_upgrade_from_the_previous_release() {
    if let Some(db) = Db::postgres().await {
        upgrade_with_deliveries_outstanding(db).await;
    }
}
