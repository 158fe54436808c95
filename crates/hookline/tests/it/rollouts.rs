//! Changing the retry policy by cohort: a candidate that makes 520 retryable, rolled out to
//! half of 40 subscribers that answer 520, compared with the baseline, aborted, promoted; a
//! bad candidate that aborts itself. On SQLite and on PostgreSQL, in one process with a manual
//! clock, and across an api and a worker process on PostgreSQL.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::*;
use hookline_policy::in_share;
use serde_json::{json, Value};

const SUBSCRIBERS: usize = 40;
const CONFIG: &str = "[retry]\nbase_delay = \"1s\"\nmax_delay = \"2s\"\nmax_attempts = 3\n";

fn ids() -> Vec<String> {
    (0..SUBSCRIBERS).map(|i| format!("sub-{i:02}")).collect()
}

async fn call_ok(app: &TestApp, method: &str, path: &str, body: Option<Value>, want: u16) -> Value {
    let (status, answer) = app.call(method, path, body).await;
    assert_eq!(status, want, "{method} {path}: {answer}");
    answer
}

/// The default's retryable statuses plus 520: what a cautious operator would try first.
async fn define_candidate(app: &TestApp, name: &str) {
    let default = call_ok(app, "GET", "/v1/policies/default", None, 200).await;
    let mut retryable: Vec<Value> = default["classification"]["retryable"]
        .as_array()
        .unwrap()
        .clone();
    retryable.push(json!(520));
    let body = json!({"name": name, "classification": {"retryable": retryable}});
    call_ok(app, "POST", "/v1/policies", Some(body), 201).await;
}

/// The deliveries of an event, by subscriber, once every one of them satisfies `done`.
async fn deliveries_when(
    app: &TestApp,
    event: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    eventually(what, async || {
        let (_, page) = app
            .call(
                "GET",
                &format!("/v1/deliveries?event_id={event}&limit=100"),
                None,
            )
            .await;
        let items = page["items"].as_array()?.clone();
        (items.len() == SUBSCRIBERS && items.iter().all(&done)).then_some(items)
    })
    .await
}

fn attempts(d: &Value) -> u64 {
    d["attempts"].as_u64().unwrap()
}

fn subscriber(d: &Value) -> &str {
    d["subscriber_id"].as_str().unwrap()
}

/// The policies that decided each attempt of a delivery, in order.
async fn deciders(app: &TestApp, d: &Value) -> Vec<String> {
    let full = app.delivery(d["id"].as_str().unwrap()).await;
    full["attempt_history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["policy"].as_str().unwrap().to_owned())
        .collect()
}

/// First attempts done: the baseline's died, the cohort's wait for a retry.
async fn first_attempts_done(app: &TestApp, event: &str) -> Vec<Value> {
    deliveries_when(app, event, "every first attempt decided", |d| {
        attempts(d) == 1 && (state(d) == "dead" || state(d) == "scheduled")
    })
    .await
}

async fn scenario(app: &TestApp) {
    let rx = Receiver::start(|_, _| 520).await;
    for id in ids() {
        app.subscriber(&id, &rx.url(&format!("/{id}"))).await;
    }
    define_candidate(app, "retry-520").await;
    // One subscriber outside the hashed half, listed by id.
    let listed = ids().into_iter().find(|id| !in_share(id, 5_000)).unwrap();
    let rollout = call_ok(
        app,
        "POST",
        "/v1/rollouts",
        Some(json!({"policy": "retry-520", "percent": 50, "subscriber_ids": [listed]})),
        201,
    )
    .await;
    assert_eq!(
        (
            &rollout["policy"],
            &rollout["baseline"],
            &rollout["percent"],
            &rollout["state"]
        ),
        (
            &json!("retry-520"),
            &json!("default"),
            &json!(50),
            &json!("running")
        )
    );
    assert!(rollout["started_at"].is_string());
    let id = rollout["id"].as_str().unwrap().to_owned();
    let cohort: BTreeSet<String> = ids()
        .into_iter()
        .filter(|s| in_share(s, 5_000) || *s == listed)
        .collect();
    assert!(
        (10..30).contains(&cohort.len()),
        "a half of 40: {}",
        cohort.len()
    );
    // One at a time.
    let (status, _) = app
        .call(
            "POST",
            "/v1/rollouts",
            Some(json!({"policy": "retry-520", "percent": 5})),
        )
        .await;
    assert_eq!(status, 409);

    // The cohort's deliveries are retried to the end of their budget; the others die at once.
    app.publish("e1", "shipment.updated").await;
    let first = first_attempts_done(app, "e1").await;
    for d in &first {
        let in_cohort = cohort.contains(subscriber(d));
        assert_eq!(
            state(d),
            if in_cohort { "scheduled" } else { "dead" },
            "{d}"
        );
    }
    for n in 2..=3 {
        app.clock.advance(Duration::from_secs(10));
        deliveries_when(app, "e1", &format!("attempt {n} of the cohort"), |d| {
            !cohort.contains(subscriber(d)) || attempts(d) == n
        })
        .await;
    }
    let ended = deliveries_when(app, "e1", "every delivery dead", |d| state(d) == "dead").await;
    for d in &ended {
        if cohort.contains(subscriber(d)) {
            assert_eq!(
                (attempts(d), &d["dead_reason"]),
                (3, &json!("attempts_exhausted"))
            );
            assert_eq!(deciders(app, d).await, ["retry-520"; 3]);
            assert_eq!(d["policy"], "retry-520");
        } else {
            assert_eq!(
                (attempts(d), &d["dead_reason"]),
                (1, &json!("permanent_failure"))
            );
            assert_eq!(deciders(app, d).await, ["default"]);
        }
    }

    // The comparison shows it.
    let c = call_ok(
        app,
        "GET",
        &format!("/v1/rollouts/{id}/comparison"),
        None,
        200,
    )
    .await;
    let (n, rest) = (cohort.len() as u64, (SUBSCRIBERS - cohort.len()) as u64);
    let (candidate, baseline) = (&c["candidate"], &c["baseline"]);
    assert_eq!(
        (
            &candidate["policy"],
            &candidate["deliveries"],
            &candidate["subscribers"]
        ),
        (&json!("retry-520"), &json!(n), &json!(n))
    );
    assert_eq!(
        (&candidate["retry_rate"], &candidate["terminal_rate"]),
        (&json!(2.0), &json!(1.0))
    );
    assert_eq!(
        candidate["dead_by_reason"],
        json!({"attempts_exhausted": n})
    );
    assert_eq!(
        (
            &baseline["deliveries"],
            &baseline["retry_rate"],
            &baseline["delivered"]
        ),
        (&json!(rest), &json!(0.0), &json!(0))
    );
    assert_eq!(
        baseline["dead_by_reason"],
        json!({"permanent_failure": rest})
    );
    assert!(candidate["first_attempt_latency_ms"]["p50"].is_i64());
    assert_eq!(c["difference"]["retry_rate"]["difference"], 2.0);
    assert_eq!(c["difference"]["retry_rate"]["significant"], true);
    assert_eq!(c["difference"]["terminal_rate"]["difference"], 0.0);
    assert_eq!(c["difference"]["terminal_rate"]["significant"], false);

    // Abort returns the cohort to the baseline at once: a retry already scheduled is decided
    // by it.
    app.publish("e2", "shipment.updated").await;
    first_attempts_done(app, "e2").await;
    let aborted = call_ok(
        app,
        "POST",
        &format!("/v1/rollouts/{id}/abort"),
        Some(json!({"reason": "trying the long way"})),
        200,
    )
    .await;
    assert_eq!(
        (&aborted["state"], &aborted["reason"]),
        (&json!("aborted"), &json!("trying the long way"))
    );
    app.clock.advance(Duration::from_secs(10));
    let ended = deliveries_when(app, "e2", "every delivery dead", |d| state(d) == "dead").await;
    for d in &ended {
        assert_eq!(d["dead_reason"], "permanent_failure", "{d}");
        if cohort.contains(subscriber(d)) {
            assert_eq!(deciders(app, d).await, ["retry-520", "default"]);
            assert_eq!(d["policy"], "default");
        }
    }
    // An ended rollout changes no more.
    for (method, path, body) in [
        (
            "PATCH",
            format!("/v1/rollouts/{id}"),
            Some(json!({"percent": 60})),
        ),
        ("POST", format!("/v1/rollouts/{id}/promote"), None),
        ("POST", format!("/v1/rollouts/{id}/abort"), None),
    ] {
        let (status, answer) = app.call(method, &path, body).await;
        assert_eq!(status, 409, "{method} {path}: {answer}");
    }

    // Promote makes it everyone's.
    let second = call_ok(
        app,
        "POST",
        "/v1/rollouts",
        Some(json!({"policy": "retry-520", "percent": 5})),
        201,
    )
    .await;
    let second_id = second["id"].as_str().unwrap();
    let raised = call_ok(
        app,
        "PATCH",
        &format!("/v1/rollouts/{second_id}"),
        Some(json!({"percent": 12.5})),
        200,
    )
    .await;
    assert_eq!(raised["percent"], 12.5);
    let promoted = call_ok(
        app,
        "POST",
        &format!("/v1/rollouts/{second_id}/promote"),
        None,
        200,
    )
    .await;
    assert_eq!(promoted["state"], "promoted");
    app.publish("e3", "shipment.updated").await;
    let first = first_attempts_done(app, "e3").await;
    for d in &first {
        assert_eq!(state(d), "scheduled", "everyone retries 520 now: {d}");
        assert_eq!(deciders(app, d).await, ["retry-520"]);
    }
    // It is in force now: a rollout of it is refused; the baseline of the next is it.
    let (status, answer) = app
        .call(
            "POST",
            "/v1/rollouts",
            Some(json!({"policy": "retry-520", "percent": 5})),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    let listed = call_ok(app, "GET", "/v1/rollouts", None, 200).await;
    let states: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["aborted", "promoted"]);

    let metrics = app.text("/metrics").await;
    let labelled = |name: &str| {
        metrics
            .lines()
            .any(|l| l.starts_with(name) && l.contains("policy=\"retry-520\""))
    };
    assert!(labelled("hookline_attempts_total"), "{metrics}");
    assert!(labelled("hookline_dead_letters_total"), "{metrics}");
}

/// A candidate that gives up on 503 at once, against a baseline that retries it (and the
/// subscribers answer the retry): its terminal rate is far worse, and it aborts itself.
async fn bad_candidate_aborts_itself(app: &TestApp) {
    let rx = Receiver::start(|_, nth| if nth == 1 { 503 } else { 200 }).await;
    for id in ids() {
        app.subscriber(&id, &rx.url(&format!("/{id}"))).await;
    }
    let body = json!({"name": "give-up", "classification": {"retryable": []}});
    call_ok(app, "POST", "/v1/policies", Some(body), 201).await;
    let rollout = call_ok(
        app,
        "POST",
        "/v1/rollouts",
        Some(json!({"policy": "give-up", "percent": 50,
                    "abort_if": {"terminal_rate_increase": 0.05, "min_deliveries": 5}})),
        201,
    )
    .await;
    let id = rollout["id"].as_str().unwrap().to_owned();
    app.publish("e1", "shipment.updated").await;
    first_attempts_done(app, "e1").await;
    app.clock.advance(Duration::from_secs(10));
    deliveries_when(app, "e1", "every delivery ended", |d| {
        state(d) == "dead" || state(d) == "delivered"
    })
    .await;
    // The check runs every 10 s of the clock.
    let aborted = eventually("the rollout to abort itself", async || {
        app.clock.advance(Duration::from_secs(1));
        let (_, r) = app.call("GET", &format!("/v1/rollouts/{id}"), None).await;
        (r["state"] == "aborted").then_some(r)
    })
    .await;
    let reason = aborted["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("abort_if: the candidate's terminal rate"),
        "{reason}"
    );
    // What `rollout compare` says of it: the comparison, and a verdict against (exit 1).
    let base = app.base();
    let compared = id.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
            .args([
                "rollout", "compare", &compared, "--api", &base, "-o", "json",
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("AGAINST"), "{stderr}");
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        printed["difference"]["terminal_rate"]["significant"], true,
        "{printed}"
    );
    // Back to the baseline: the next event's 503s are retried for everyone.
    app.publish("e2", "shipment.updated").await;
    let first = first_attempts_done(app, "e2").await;
    assert!(first.iter().all(|d| state(d) == "scheduled"), "{first:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cohort_is_retried_compared_aborted_and_promoted_on_sqlite() {
    let app = TestApp::start(CONFIG).await;
    scenario(&app).await;
    // The comparison as the operator's terminal prints it.
    let base = app.base();
    let listed = app.call("GET", "/v1/rollouts", None).await.1;
    let id = listed["items"][0]["id"].as_str().unwrap().to_owned();
    let compare_id = id.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
            .args(["rollout", "compare", &id, "--api", &base])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let retry = text.lines().find(|l| l.starts_with("retry rate")).unwrap();
    assert_eq!(
        retry.split_whitespace().collect::<Vec<_>>(),
        ["retry", "rate", "0.0000", "2.0000", "2.0000", "yes"],
        "{text}"
    );
    assert!(text.contains("dead attempts_exhausted"), "{text}");
    // And as the API answers it, for a script.
    let base = app.base();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
            .args([
                "rollout",
                "compare",
                &compare_id,
                "--api",
                &base,
                "-o",
                "json",
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        printed["difference"]["retry_rate"]["difference"], 2.0,
        "{printed}"
    );
    assert_eq!(printed["candidate"]["retry_rate"], 2.0, "{printed}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cohort_is_retried_compared_aborted_and_promoted_on_postgres() {
    let Some(app) = TestApp::start_on_postgres(CONFIG).await else {
        return;
    };
    scenario(&app).await;
    app.stop().await;
}

on_both_backends!(
    a_bad_candidate_aborts_itself_on_sqlite,
    a_bad_candidate_aborts_itself_on_postgres,
    CONFIG,
    bad_candidate_aborts_itself
);

/// An operator's calls to the `api` process of a real deployment.
struct Remote {
    http: reqwest::Client,
    base: String,
}

impl Remote {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let answer: Value = response.json().await.unwrap();
        assert!(status.is_success(), "{method} {path}: {status} {answer}");
        answer
    }

    async fn get(&self, path: &str) -> Value {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// The deliveries of an event once every one has ended.
    async fn ended(&self, event: &str, count: usize) -> Vec<Value> {
        eventually("every delivery to end", async || {
            let page = self
                .get(&format!("/v1/deliveries?event_id={event}&limit=100"))
                .await;
            let items = page["items"].as_array()?.clone();
            let ended = items.len() == count
                && items
                    .iter()
                    .all(|d| state(d) == "dead" || state(d) == "delivered");
            ended.then_some(items)
        })
        .await
    }

    /// The policies that decided each attempt of a delivery, in order.
    async fn deciders(&self, d: &Value) -> Vec<String> {
        let full = self
            .get(&format!("/v1/deliveries/{}", d["id"].as_str().unwrap()))
            .await;
        full["attempt_history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["policy"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Publishes probes to the one subscriber that takes them until one's first attempt is
    /// decided by `policy`: the worker process has the change.
    async fn probe_until(&self, policy: &str, probes: &std::sync::atomic::AtomicU32) {
        eventually("the worker to decide by the change", async || {
            let n = probes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let id = format!("probe-{n}");
            self.post(
                "/v1/events",
                json!({"id": id, "type": "probe", "payload": {}}),
            )
            .await;
            let d = &self.ended(&id, 1).await[0];
            (self.deciders(d).await[0] == policy).then_some(())
        })
        .await
    }
}

/// The rollout is started and aborted through the api process; a separate worker process,
/// told by `NOTIFY`, decides by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_reaches_a_worker_process_on_postgres() {
    let Some(schema) = hookline_store::testing::PgSchema::create().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::start(|_, _| 520).await;
    let config = format!(
        "database = \"{}\"\nallow_private_destinations = true\n\
         [retry]\nbase_delay = \"50ms\"\nmax_delay = \"100ms\"\nmax_attempts = 3\n",
        schema.url()
    );
    let api = Process::spawn(dir.path(), "api", &config, "api").await;
    let worker = Process::spawn(dir.path(), "worker", &config, "worker").await;
    let remote = Remote {
        http: reqwest::Client::new(),
        base: api.base.clone(),
    };
    let cohort: BTreeSet<String> = ids().into_iter().filter(|s| in_share(s, 5_000)).collect();
    let prober = cohort.first().unwrap().clone();
    let bodies = ids()
        .into_iter()
        .map(|id| {
            let mut types = vec!["shipment.updated"];
            if id == prober {
                types.push("probe");
            }
            json!({"id": id, "url": rx.url(&format!("/{id}")), "event_types": types})
        })
        .collect();
    hookline_testkit::create_subscribers(&remote.http, &api.base, None, bodies, 4)
        .await
        .unwrap();
    let default = remote.get("/v1/policies/default").await;
    let mut retryable = default["classification"]["retryable"]
        .as_array()
        .unwrap()
        .clone();
    retryable.push(json!(520));
    remote
        .post(
            "/v1/policies",
            json!({"name": "retry-520", "classification": {"retryable": retryable}}),
        )
        .await;
    let rollout = remote
        .post(
            "/v1/rollouts",
            json!({"policy": "retry-520", "percent": 50}),
        )
        .await;
    let id = rollout["id"].as_str().unwrap();
    let probes = std::sync::atomic::AtomicU32::new(0);
    remote.probe_until("retry-520", &probes).await;

    let publish = |event: &'static str| {
        remote.post(
            "/v1/events",
            json!({"id": event, "type": "shipment.updated", "payload": {}}),
        )
    };
    publish("e1").await;
    for d in remote.ended("e1", SUBSCRIBERS).await {
        if cohort.contains(subscriber(&d)) {
            assert_eq!(
                (attempts(&d), &d["dead_reason"]),
                (3, &json!("attempts_exhausted"))
            );
            assert_eq!(remote.deciders(&d).await, ["retry-520"; 3]);
        } else {
            assert_eq!(
                (attempts(&d), &d["dead_reason"]),
                (1, &json!("permanent_failure"))
            );
        }
    }
    let c = remote.get(&format!("/v1/rollouts/{id}/comparison")).await;
    assert_eq!(c["candidate"]["retry_rate"], 2.0, "{c}");
    assert_eq!(c["baseline"]["retry_rate"], 0.0, "{c}");

    remote
        .post(&format!("/v1/rollouts/{id}/abort"), json!({}))
        .await;
    remote.probe_until("default", &probes).await;
    publish("e2").await;
    for d in remote.ended("e2", SUBSCRIBERS).await {
        assert_eq!(
            (attempts(&d), &d["dead_reason"]),
            (1, &json!("permanent_failure"))
        );
    }
    worker.terminate().await.unwrap();
    api.terminate().await.unwrap();
    schema.drop_schema().await;
}

/// The store enforces one window for every delivery: a candidate with another window goes to
/// everyone or to no one, and while it has everyone its window is the one enforced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_with_another_window_goes_to_everyone_at_once() {
    let app = TestApp::start(CONFIG).await;
    let rx = Receiver::start(|_, _| 200).await;
    app.subscriber("waits", &rx.url("/waits")).await;
    let body = json!({"name": "short", "retry": {"delivery_window": "1h"}});
    call_ok(&app, "POST", "/v1/policies", Some(body), 201).await;
    let (status, answer) = app
        .call(
            "POST",
            "/v1/rollouts",
            Some(json!({"policy": "short", "percent": 50})),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("percent:"),
        "{answer}"
    );
    assert_eq!(
        app.call("GET", "/v1/rollouts", None).await.1["items"],
        json!([])
    );

    let rollout = call_ok(
        &app,
        "POST",
        "/v1/rollouts",
        Some(json!({"policy": "short", "percent": 100})),
        201,
    )
    .await;
    let id = rollout["id"].as_str().unwrap();
    let (status, _) = app
        .call(
            "PATCH",
            &format!("/v1/rollouts/{id}"),
            Some(json!({"percent": 99})),
        )
        .await;
    assert_eq!(status, 422);
    // A delivery waiting for a paused subscriber dies when the candidate's hour ends, not the
    // default's day.
    app.call(
        "PATCH",
        "/v1/subscribers/waits",
        Some(json!({"status": "paused"})),
    )
    .await;
    let published = app.publish("e1", "shipment.updated").await;
    assert_eq!(published["deliveries"], 1);
    app.clock.advance(Duration::from_secs(3_601));
    let (_, page) = app.call("GET", "/v1/deliveries?event_id=e1", None).await;
    let delivery = page["items"][0]["id"].as_str().unwrap().to_owned();
    let dead = app
        .delivery_when(&delivery, "the window to end", |d| state(d) == "dead")
        .await;
    assert_eq!(
        (&dead["dead_reason"], &dead["waiting_on"]),
        (&json!("window_expired"), &json!("paused"))
    );
    app.stop().await;
}

/// Errors axum answers by itself (a method a route does not serve, a path that is not UTF-8)
/// carry the error envelope like every other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_carries_the_envelope() {
    let app = TestApp::start("").await;
    let response = app
        .http
        .delete(format!("{}/v1/rollouts/ro_x", app.base()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    assert!(response.headers().contains_key("allow"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed", "{body}");
    let (status, body) = app.call("GET", "/v1/policies/%ff", None).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("bad_request")),
        "{body}"
    );
    // A percent is read as written.
    let (status, body) = app
        .call(
            "POST",
            "/v1/rollouts",
            Some(json!({"policy": "p", "percent": 1e-3})),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    app.stop().await;
}
