//! `hookline drill`: the failure drill, automated. (1) baseline, (2) hold a share of the
//! destinations unavailable and check healthy subscribers' first attempts are not delayed,
//! (with `--sustained`: keep them down across several attempt timeouts and a breaker
//! cool-down, and check every one of their deliveries ends inside its window), (3) restore
//! them and measure the drain, (4) SIGKILL hookline while deliveries wait for a retry, restart
//! it, and check every `run_at` is unchanged and nothing is lost.

mod report;
mod svg;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use hookline_testkit::process::wait_healthy;
use hookline_testkit::sink::{router, Secrets};
use hookline_testkit::{now_ms, rfc3339_ms, ScratchDir};
use serde_json::{json, Value};

use super::DrillArgs;
use report::{latencies, row, summary};
use svg::svg;

fn progress(message: &str) {
    eprintln!("drill: {message}");
}

/// The hookline under drill: a child process the drill can kill, or a running one.
enum Target {
    Embedded {
        child: Child,
        config: PathBuf,
        _dir: ScratchDir,
    },
    Remote,
}

struct Drill {
    api: String,
    sink: String,
    http: reqwest::Client,
    token: Option<String>,
}

impl Drill {
    fn req(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    async fn get(&self, path: &str) -> Result<Value, String> {
        let r = self
            .req(self.http.get(format!("{}{path}", self.api)))
            .send()
            .await;
        r.map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())
    }

    async fn post(&self, path: &str, body: Value) -> Result<(u16, Value), String> {
        let r = self
            .req(self.http.post(format!("{}{path}", self.api)).json(&body))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = r.status().as_u16();
        Ok((status, r.json().await.unwrap_or(Value::Null)))
    }

    async fn control(&self, fail: Value) -> Result<(), String> {
        self.http
            .post(format!("{}/control", self.sink))
            .json(&json!({"prefix": "/ok/bad/", "fail": fail}))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    async fn sink_stats(&self) -> Result<Value, String> {
        self.http
            .get(format!("{}/stats", self.sink))
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())
    }

    /// First receipt time of each webhook-id at the sink.
    async fn receipts(&self) -> Result<HashMap<String, i64>, String> {
        let stats = self.sink_stats().await?;
        let mut first = HashMap::new();
        for r in stats["receipts"].as_array().into_iter().flatten() {
            if let (Some(id), Some(at)) = (r[0].as_str(), r[1].as_i64()) {
                first.entry(id.to_owned()).or_insert(at);
            }
        }
        Ok(first)
    }

    /// Publishes `events` events `interval` apart; returns (event id, publish time).
    async fn publish(
        &self,
        phase: &str,
        events: usize,
        interval: Duration,
    ) -> Result<Vec<(String, i64)>, String> {
        let mut published = Vec::new();
        for e in 0..events {
            let id = format!("drill-{phase}-{e}-{}", now_ms());
            let at = now_ms();
            let (status, body) = self
                .post(
                    "/v1/events",
                    json!({"id": id, "type": "drill", "payload": {"phase": phase, "n": e}}),
                )
                .await?;
            if status != 202 {
                return Err(format!("publishing {id} answered {status}: {body}"));
            }
            published.push((id, at));
            if e + 1 < events {
                tokio::time::sleep(interval).await;
            }
        }
        Ok(published)
    }

    /// The run_at, attempts and first_seen of an event's deliveries waiting for a later time:
    /// a retry, or a breaker still open (from an earlier phase) that deferred them.
    async fn scheduled(&self, event: &str) -> Result<Vec<Value>, String> {
        let now = now_ms();
        let page = self
            .get(&format!(
                "/v1/deliveries?event_id={event}&state=scheduled&limit=1000"
            ))
            .await?;
        Ok(page["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter(|x| rfc3339_ms(&x["next_attempt_at"]).is_some_and(|t| t > now))
            .map(|x| {
                json!([
                    x["id"],
                    x["next_attempt_at"],
                    x["attempts"],
                    x["first_seen"]
                ])
            })
            .collect())
    }

    /// Every delivery of an event, page by page.
    async fn deliveries_of(&self, event: &str) -> Result<Vec<Value>, String> {
        let mut all = Vec::new();
        let mut cursor = String::new();
        loop {
            let page = self
                .get(&format!(
                    "/v1/deliveries?event_id={event}&limit=1000{cursor}"
                ))
                .await?;
            all.extend(page["items"].as_array().cloned().unwrap_or_default());
            match page["next_cursor"].as_str() {
                Some(next) => cursor = format!("&cursor={next}"),
                None => return Ok(all),
            }
        }
    }

    /// Waits until every delivery of `events` has ended, or `limit` passes.
    async fn settle(&self, events: &[(String, i64)], limit: Duration) -> Result<bool, String> {
        let deadline = Instant::now() + limit;
        loop {
            let mut open = 0;
            for (id, _) in events {
                let e = self.get(&format!("/v1/events/{id}")).await?;
                open += e["counts"]["scheduled"].as_u64().unwrap_or(1)
                    + e["counts"]["in_flight"].as_u64().unwrap_or(1);
            }
            if open == 0 {
                return Ok(true);
            }
            if Instant::now() > deadline {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// The longest any one of the drill's own requests (to hookline or its sink) may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn run(args: DrillArgs) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let sink = format!(
        "http://{}",
        listener.local_addr().map_err(|e| e.to_string())?
    );
    tokio::spawn(async move { axum::serve(listener, router(Secrets::None)).await });
    let (api, mut target, policy) = match &args.api {
        Some(api) => {
            let policy = crate::config::Config::load(args.config.as_deref(), Default::default())
                .map_err(|e| e.to_string())?;
            (api.trim_end_matches('/').to_owned(), Target::Remote, policy)
        }
        None => start_embedded(&args).await?,
    };
    let drill = Drill {
        api,
        sink,
        // A request that never answers must fail the drill, not stall it. No pooled
        // connections: the drill kills the hookline they lead to, and a client request that
        // waits for a pooled connection can hang (hyperium/hyper#2312).
        http: reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .pool_max_idle_per_host(0)
            .build()
            .map_err(|e| e.to_string())?,
        token: args.token.clone(),
    };
    let started = now_ms();
    let interval = crate::config::parse_duration(&args.interval)?;
    let slo = crate::config::parse_duration(&args.slo)?;
    let bad_count = ((args.subscribers as f64) * args.unhealthy).round() as usize;
    progress(&format!(
        "creating {} subscribers ({bad_count} to be made unavailable)",
        args.subscribers
    ));
    let subs: Vec<String> = (0..args.subscribers)
        .map(|i| {
            if i < bad_count {
                format!("bad-{i}-{started}")
            } else {
                format!("good-{i}-{started}")
            }
        })
        .collect();
    for chunk in subs.chunks(64) {
        let mut tasks = tokio::task::JoinSet::new();
        for id in chunk {
            let body = json!({"id": id, "url": format!("{}/ok/{}/{id}", drill.sink, if id.starts_with("bad-") { "bad" } else { "good" }), "event_types": ["drill"]});
            let (http, api, token) = (drill.http.clone(), drill.api.clone(), drill.token.clone());
            tasks.spawn(async move {
                let mut r = http.post(format!("{api}/v1/subscribers")).json(&body);
                if let Some(t) = token {
                    r = r.bearer_auth(t)
                }
                r.send().await.map(|r| r.status().as_u16())
            });
        }
        while let Some(done) = tasks.join_next().await {
            let status = done
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            if status != 201 {
                return Err(format!("creating a subscriber answered {status}"));
            }
        }
    }

    let mut points = Vec::new();
    let mut checks: Vec<(String, bool)> = Vec::new();
    let mut phases = serde_json::Map::new();

    progress(&format!(
        "phase 1/4 baseline: {} events, {:?} apart",
        args.events, interval
    ));
    let base_events = drill.publish("baseline", args.events, interval).await?;
    drill.settle(&base_events, slo).await?;
    let (base_healthy, base_bad) = latencies(
        &base_events,
        &drill.receipts().await?,
        &subs,
        &mut points,
        "baseline",
    );
    let mut all_base = base_healthy.clone();
    all_base.extend(base_bad);
    let base = summary(all_base);
    phases.insert("baseline".into(), json!({"first_attempt": base}));

    progress(&format!(
        "phase 2/4 failure: {bad_count} destinations {}",
        args.mode
    ));
    drill
        .control(if args.mode == "hang" {
            json!("hang")
        } else {
            json!(503)
        })
        .await?;
    let fail_events = drill.publish("failure", args.events, interval).await?;
    // Healthy deliveries: wait for them (the unavailable ones keep retrying).
    let deadline = Instant::now() + slo;
    let expected = fail_events.len() * (subs.len() - bad_count);
    loop {
        let r = drill.receipts().await?;
        let got = fail_events
            .iter()
            .flat_map(|(e, _)| {
                subs.iter()
                    .filter(|s| s.starts_with("good-"))
                    .map(move |s| format!("{e}:{s}"))
            })
            .filter(|id| r.contains_key(id))
            .count();
        if got >= expected || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (fail_healthy, _) = latencies(
        &fail_events,
        &drill.receipts().await?,
        &subs,
        &mut points,
        "failure",
    );
    let healthy = summary(fail_healthy);
    let base_p99 = base["p99_ms"].as_f64().unwrap_or(0.0);
    let p99 = healthy["p99_ms"].as_f64().unwrap_or(f64::MAX);
    checks.push((format!("healthy p99 first-attempt latency {p99:.0} ms <= 1.25 x baseline p99 {base_p99:.0} ms + 50 ms"), p99 <= 1.25 * base_p99 + 50.0));
    checks.push((
        format!("every healthy delivery arrived within the SLO ({:?})", slo),
        healthy["n"].as_u64() == Some(expected as u64),
    ));
    phases.insert("failure".into(), json!({"healthy_first_attempt": healthy}));

    if args.sustained {
        let outcome = sustained(&drill, &args, &policy, &subs, &base).await?;
        checks.extend(outcome.checks);
        points.extend(outcome.points);
        phases.insert("sustained".into(), outcome.phase);
    }

    progress("phase 3/4 restore: measuring the drain");
    drill.control(Value::Null).await?;
    let restored = Instant::now();
    let drained = drill.settle(&fail_events, slo * 4).await?;
    let drain_ms = restored.elapsed().as_millis() as u64;
    let stats = drill.sink_stats().await?;
    let amplification = stats["received"].as_f64().unwrap_or(0.0)
        / stats["unique"].as_f64().unwrap_or(1.0).max(1.0);
    checks.push((format!("the backlog drained ({drain_ms} ms)"), drained));
    phases.insert(
        "restore".into(),
        json!({"drain_ms": drain_ms, "retry_amplification": amplification}),
    );

    match &mut target {
        Target::Remote => {
            progress("phase 4/4 skipped: restarting needs the embedded hookline (no --api)")
        }
        Target::Embedded { child, config, .. } => {
            progress("phase 4/4 crash: SIGKILL while deliveries wait for a retry, then restart");
            drill.control(json!(503)).await?;
            let crash_events = drill.publish("crash", 1, interval).await?;
            let event = crash_events[0].0.clone();
            let deadline = Instant::now() + slo;
            let before = loop {
                let s = drill.scheduled(&event).await?;
                if s.len() >= bad_count || Instant::now() > deadline {
                    break s;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            child.kill().map_err(|e| e.to_string())?;
            let _ = child.wait();
            *child = spawn(config)?;
            wait_healthy(&drill.api).await?;
            let after = drill.scheduled(&event).await?;
            // Deliveries whose retry was still ahead when we looked again: nothing may have
            // touched them. (One that came due meanwhile was rightly claimed, or deferred by
            // a breaker still open from an earlier phase.)
            let looked = now_ms();
            let waiting: Vec<&Value> = before
                .iter()
                .filter(|d| rfc3339_ms(&d[1]).is_some_and(|t| t > looked))
                .collect();
            let unchanged = waiting.iter().all(|d| after.contains(d));
            checks.push((format!("run_at, attempts and first_seen unchanged across SIGKILL + restart ({} delayed deliveries)", waiting.len()), !waiting.is_empty() && unchanged));
            drill.control(Value::Null).await?;
            let mut everything = base_events.clone();
            everything.extend(fail_events.clone());
            everything.extend(crash_events);
            let ended = drill.settle(&everything, slo * 4).await?;
            let mut lost = 0;
            for (id, _) in &everything {
                let e = drill.get(&format!("/v1/events/{id}")).await?;
                lost += e["deliveries"].as_u64().unwrap_or(0)
                    - e["counts"]["delivered"].as_u64().unwrap_or(0)
                    - e["counts"]["dead"].as_u64().unwrap_or(0);
            }
            checks.push((
                format!("nothing lost: every delivery of every event ended ({lost} open)"),
                ended && lost == 0,
            ));
        }
    }

    let passed = checks.iter().all(|(_, ok)| *ok);
    println!(
        "{}",
        super::table::render(
            &["PHASE", "WHO", "N", "P50 MS", "P95 MS", "P99 MS"],
            &[
                row("baseline", "all", &base),
                row(
                    "failure",
                    "healthy",
                    &phases["failure"]["healthy_first_attempt"]
                ),
            ]
        )
    );
    println!("drain after restore: {drain_ms} ms; retry amplification observed: {amplification:.2} attempts per delivery\n");
    for (check, ok) in &checks {
        println!("{} {check}", if *ok { "PASS" } else { "FAIL" });
    }
    let report = json!({"phases": phases, "checks": checks.iter().map(|(c, ok)| json!({"check": c, "passed": ok})).collect::<Vec<_>>(), "passed": passed});
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report).expect("json"))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &args.svg {
        std::fs::write(path, svg(&points, started))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Target::Embedded { mut child, .. } = target {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let _ = child.wait();
    }
    if passed {
        Ok(())
    } else {
        Err("the drill failed a check".into())
    }
}

/// The policy `--sustained` gives the embedded hookline when no `--config` is given: short
/// enough that three attempt timeouts, a breaker cool-down and a whole window fit in a drill.
const SUSTAINED_POLICY: &str = "[delivery]\nattempt_timeout = \"2s\"\n\
                                [retry]\ndelivery_window = \"60s\"\n\
                                [breaker]\ncool_down = \"5s\"\n";

/// What the sustained phase adds to the report.
struct Sustained {
    checks: Vec<(String, bool)>,
    points: Vec<Value>,
    phase: Value,
}

/// The sustained outage: the unavailable cohort stays down across three attempt timeouts and
/// a breaker cool-down while events keep coming; healthy deliveries must keep their objective,
/// and every unavailable delivery must end (dead, with a reason) inside its window, however
/// long it waited behind its breaker or in the slow lane.
async fn sustained(
    drill: &Drill,
    args: &DrillArgs,
    policy: &crate::config::Config,
    subs: &[String],
    base: &Value,
) -> Result<Sustained, String> {
    let (mut checks, mut points) = (Vec::new(), Vec::new());
    let interval = crate::config::parse_duration(&args.interval)?;
    let slo = crate::config::parse_duration(&args.slo)?;
    let timeout = policy.delivery.attempt_timeout;
    let hold = (timeout * 3).max(policy.breaker.cool_down) + interval;
    let window = policy.retry.delivery_window();
    progress(&format!(
        "phase 2b/4 sustained: unavailable for {hold:?} (3 x {timeout:?} attempt timeout, \
         {:?} breaker cool-down), window {window:?}",
        policy.breaker.cool_down
    ));
    let started = Instant::now();
    let mut events = Vec::new();
    while started.elapsed() < hold {
        events.extend(drill.publish("sustained", 1, interval).await?);
        tokio::time::sleep(interval).await;
    }
    let (healthy, _) = latencies(
        &events,
        &drill.receipts().await?,
        subs,
        &mut points,
        "sustained",
    );
    let healthy_n = healthy.len();
    let healthy = summary(healthy);
    let base_p99 = base["p99_ms"].as_f64().unwrap_or(0.0);
    let p99 = healthy["p99_ms"].as_f64().unwrap_or(f64::MAX);
    let expected = events.len() * subs.iter().filter(|s| s.starts_with("good-")).count();
    checks.push((
        format!(
            "sustained: healthy p99 first-attempt latency {p99:.0} ms within the SLO ({slo:?}; \
             baseline p99 {base_p99:.0} ms); {healthy_n} of {expected} arrived"
        ),
        healthy_n == expected && p99 <= slo.as_millis() as f64,
    ));
    // Every unavailable delivery of this phase must end by its window's end (plus one attempt
    // timeout, for an attempt in flight at that moment, and the sweep's second).
    let grace = timeout + Duration::from_secs(2);
    let deadline = Instant::now() + window + grace + Duration::from_secs(5);
    let (mut open, mut late, mut unexplained, mut ended);
    loop {
        (open, late, unexplained, ended) = (0, 0, 0, 0);
        for (event, _) in &events {
            for d in drill.deliveries_of(event).await? {
                if !d["subscriber_id"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("bad-"))
                {
                    continue;
                }
                match d["state"].as_str() {
                    Some("dead") => {
                        ended += 1;
                        let ms = |k: &str| rfc3339_ms(&d[k]).unwrap_or(0);
                        let limit = ms("window_start") + (window + grace).as_millis() as i64;
                        if ms("dead_at") > limit {
                            late += 1;
                        }
                        if d["dead_reason"].is_null() {
                            unexplained += 1;
                        }
                    }
                    Some("delivered") => ended += 1,
                    _ => open += 1,
                }
            }
        }
        if open == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    checks.push((
        format!(
            "sustained: every unavailable delivery ended inside its window with a reason \
             ({ended} ended, {open} still open, {late} late, {unexplained} without a reason)"
        ),
        open == 0 && late == 0 && unexplained == 0 && ended > 0,
    ));
    let phase = json!({"hold_ms": hold.as_millis() as u64, "events": events.len(),
                       "healthy_first_attempt": healthy, "unavailable_ended": ended,
                       "unavailable_late": late});
    Ok(Sustained {
        checks,
        points,
        phase,
    })
}

async fn start_embedded(
    args: &DrillArgs,
) -> Result<(String, Target, crate::config::Config), String> {
    let dir = ScratchDir::new("hookline-drill").map_err(|e| e.to_string())?;
    let port = hookline_testkit::free_port().map_err(|e| e.to_string())?;
    let mut config = match &args.config {
        Some(path) => {
            std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None if args.sustained => SUSTAINED_POLICY.to_owned(),
        None => String::new(),
    };
    // The drill owns these: its own port, its own database, its sink on loopback.
    config = format!("listen = \"127.0.0.1:{port}\"\ndatabase = \"sqlite://{}\"\nallow_private_destinations = true\n{config}", dir.path().join("drill.db").display());
    let path = dir.path().join("drill.toml");
    std::fs::write(&path, config).map_err(|e| e.to_string())?;
    let policy =
        crate::config::Config::load(Some(&path), Default::default()).map_err(|e| e.to_string())?;
    let child = spawn(&path)?;
    let api = format!("http://127.0.0.1:{port}");
    wait_healthy(&api).await?;
    Ok((
        api,
        Target::Embedded {
            child,
            config: path,
            _dir: dir,
        },
        policy,
    ))
}

/// This very binary, serving the drill's config.
fn spawn(config: &std::path::Path) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    hookline_testkit::process::serve(&exe, config, "all")
}
