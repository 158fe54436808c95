//! The drill's phases, in order: create the subscribers, (1) baseline, (2) failure (and, with
//! `--sustained`, the sustained outage), (3) restore and drain, (4) crash and restart. Each
//! adds its latencies, checks and summary to the [`Findings`], which end as the report.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use hookline_testkit::{now_ms, rfc3339_ms};
use serde_json::{json, Value};

use super::report::{latencies, row, summary};
use super::svg::svg;
use super::{progress, spawn, wait_healthy, Drill, DrillArgs};

/// Events a phase published: id and when.
type Events = Vec<(String, i64)>;

/// What every phase works from.
pub(super) struct Plan<'a> {
    args: &'a DrillArgs,
    policy: &'a crate::config::Config,
    /// Subscriber ids; the first `bad_count` (named `bad-...`) are made unavailable.
    subs: Vec<String>,
    bad_count: usize,
    interval: Duration,
    slo: Duration,
}

impl<'a> Plan<'a> {
    pub fn new(
        args: &'a DrillArgs,
        policy: &'a crate::config::Config,
        started: i64,
    ) -> Result<Self, String> {
        let bad_count = ((args.subscribers as f64) * args.unhealthy).round() as usize;
        let subs = (0..args.subscribers)
            .map(|i| {
                let cohort = if i < bad_count { "bad" } else { "good" };
                format!("{cohort}-{i}-{started}")
            })
            .collect();
        Ok(Plan {
            args,
            policy,
            subs,
            bad_count,
            interval: crate::config::parse_duration(&args.interval)?,
            slo: crate::config::parse_duration(&args.slo)?,
        })
    }

    fn healthy(&self) -> impl Iterator<Item = &String> {
        self.subs.iter().filter(|s| s.starts_with("good-"))
    }
}

/// What the phases found, for the report.
#[derive(Default)]
pub(super) struct Findings {
    points: Vec<Value>,
    checks: Vec<(String, bool)>,
    phases: serde_json::Map<String, Value>,
}

impl Findings {
    fn check(&mut self, what: String, passed: bool) {
        self.checks.push((what, passed));
    }

    /// Prints the table and the checks, writes `--json` and `--svg`; whether every check passed.
    pub fn report(
        self,
        base: &Value,
        (drain_ms, amplification): (u64, f64),
        args: &DrillArgs,
        started: i64,
    ) -> Result<bool, String> {
        let passed = self.checks.iter().all(|(_, ok)| *ok);
        let healthy = &self.phases["failure"]["healthy_first_attempt"];
        println!(
            "{}",
            crate::cli::table::render(
                &["PHASE", "WHO", "N", "P50 MS", "P95 MS", "P99 MS"],
                &[
                    row("baseline", "all", base),
                    row("failure", "healthy", healthy)
                ]
            )
        );
        println!(
            "drain after restore: {drain_ms} ms; retry amplification observed: \
             {amplification:.2} attempts per delivery\n"
        );
        for (check, ok) in &self.checks {
            println!("{} {check}", if *ok { "PASS" } else { "FAIL" });
        }
        let checks: Vec<Value> = self
            .checks
            .iter()
            .map(|(c, ok)| json!({"check": c, "passed": ok}))
            .collect();
        let report = json!({"phases": self.phases, "checks": checks, "passed": passed});
        if let Some(path) = &args.json {
            std::fs::write(path, serde_json::to_string_pretty(&report).expect("json"))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        if let Some(path) = &args.svg {
            std::fs::write(path, svg(&self.points, started))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(passed)
    }
}

/// Creates the subscribers, 64 requests at a time.
pub(super) async fn create_subscribers(drill: &Drill, plan: &Plan<'_>) -> Result<(), String> {
    progress(&format!(
        "creating {} subscribers ({} to be made unavailable)",
        plan.subs.len(),
        plan.bad_count
    ));
    let bodies = plan
        .subs
        .iter()
        .map(|id| {
            let cohort = if id.starts_with("bad-") {
                "bad"
            } else {
                "good"
            };
            json!({"id": id, "url": format!("{}/ok/{cohort}/{id}", drill.sink),
                   "event_types": ["drill"]})
        })
        .collect();
    let token = drill.token.as_deref();
    hookline_testkit::create_subscribers(&drill.http, &drill.api, token, bodies, 64).await?;
    Ok(())
}

/// (1) Everyone healthy: the latency every later phase is measured against.
pub(super) async fn baseline(
    drill: &Drill,
    plan: &Plan<'_>,
    found: &mut Findings,
) -> Result<(Events, Value), String> {
    progress(&format!(
        "phase 1/4 baseline: {} events, {:?} apart",
        plan.args.events, plan.interval
    ));
    let events = drill
        .publish("baseline", plan.args.events, plan.interval)
        .await?;
    drill.settle(&events, plan.slo).await?;
    let receipts = drill.receipts().await?;
    let (healthy, bad) = latencies(
        &events,
        &receipts,
        &plan.subs,
        &mut found.points,
        "baseline",
    );
    let base = summary([healthy, bad].concat());
    found
        .phases
        .insert("baseline".into(), json!({"first_attempt": base}));
    Ok((events, base))
}

/// (2) The unavailable cohort hangs (or answers 503): healthy subscribers' first attempts must
/// not be delayed.
pub(super) async fn failure(
    drill: &Drill,
    plan: &Plan<'_>,
    base: &Value,
    found: &mut Findings,
) -> Result<Events, String> {
    let mode = &plan.args.mode;
    progress(&format!(
        "phase 2/4 failure: {} destinations {mode}",
        plan.bad_count
    ));
    drill
        .control(if mode == "hang" {
            json!("hang")
        } else {
            json!(503)
        })
        .await?;
    let events = drill
        .publish("failure", plan.args.events, plan.interval)
        .await?;
    // Healthy deliveries: wait for them (the unavailable ones keep retrying).
    let deadline = Instant::now() + plan.slo;
    let expected = events.len() * plan.healthy().count();
    loop {
        let r = drill.receipts().await?;
        let got = events
            .iter()
            .flat_map(|(e, _)| plan.healthy().map(move |s| format!("{e}:{s}")))
            .filter(|id| r.contains_key(id))
            .count();
        if got >= expected || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let receipts = drill.receipts().await?;
    let (healthy, _) = latencies(&events, &receipts, &plan.subs, &mut found.points, "failure");
    let healthy = summary(healthy);
    let base_p99 = base["p99_ms"].as_f64().unwrap_or(0.0);
    let p99 = healthy["p99_ms"].as_f64().unwrap_or(f64::MAX);
    found.check(
        format!(
            "healthy p99 first-attempt latency {p99:.0} ms <= 1.25 x baseline p99 \
             {base_p99:.0} ms + 50 ms"
        ),
        p99 <= 1.25 * base_p99 + 50.0,
    );
    found.check(
        format!(
            "every healthy delivery arrived within the SLO ({:?})",
            plan.slo
        ),
        healthy["n"].as_u64() == Some(expected as u64),
    );
    found
        .phases
        .insert("failure".into(), json!({"healthy_first_attempt": healthy}));
    Ok(events)
}

/// (2b) The sustained outage: the unavailable cohort stays down across three attempt timeouts
/// and a breaker cool-down while events keep coming; healthy deliveries must keep their
/// objective, and every unavailable delivery must end (dead, with a reason) inside its window,
/// however long it waited behind its breaker or in the slow lane.
pub(super) async fn sustained(
    drill: &Drill,
    plan: &Plan<'_>,
    base: &Value,
    found: &mut Findings,
) -> Result<(), String> {
    let (interval, slo, policy) = (plan.interval, plan.slo, plan.policy);
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
    let receipts = drill.receipts().await?;
    let (healthy, _) = latencies(
        &events,
        &receipts,
        &plan.subs,
        &mut found.points,
        "sustained",
    );
    let healthy_n = healthy.len();
    let healthy = summary(healthy);
    let base_p99 = base["p99_ms"].as_f64().unwrap_or(0.0);
    let p99 = healthy["p99_ms"].as_f64().unwrap_or(f64::MAX);
    let expected = events.len() * plan.healthy().count();
    found.check(
        format!(
            "sustained: healthy p99 first-attempt latency {p99:.0} ms within the SLO ({slo:?}; \
             baseline p99 {base_p99:.0} ms); {healthy_n} of {expected} arrived"
        ),
        healthy_n == expected && p99 <= slo.as_millis() as f64,
    );
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
    found.check(
        format!(
            "sustained: every unavailable delivery ended inside its window with a reason \
             ({ended} ended, {open} still open, {late} late, {unexplained} without a reason)"
        ),
        open == 0 && late == 0 && unexplained == 0 && ended > 0,
    );
    found.phases.insert(
        "sustained".into(),
        json!({"hold_ms": hold.as_millis() as u64, "events": events.len(),
               "healthy_first_attempt": healthy, "unavailable_ended": ended,
               "unavailable_late": late}),
    );
    Ok(())
}

/// (3) The unavailable cohort recovers: the backlog must drain. The drain time, and the
/// attempts per delivery the sink saw.
pub(super) async fn restore(
    drill: &Drill,
    plan: &Plan<'_>,
    failed: &Events,
    found: &mut Findings,
) -> Result<(u64, f64), String> {
    progress("phase 3/4 restore: measuring the drain");
    drill.control(Value::Null).await?;
    let restored = Instant::now();
    let drained = drill.settle(failed, plan.slo * 4).await?;
    let drain_ms = restored.elapsed().as_millis() as u64;
    let stats = drill.sink_stats().await?;
    let amplification = stats["received"].as_f64().unwrap_or(0.0)
        / stats["unique"].as_f64().unwrap_or(1.0).max(1.0);
    found.check(format!("the backlog drained ({drain_ms} ms)"), drained);
    found.phases.insert(
        "restore".into(),
        json!({"drain_ms": drain_ms, "retry_amplification": amplification}),
    );
    Ok((drain_ms, amplification))
}

/// (4) SIGKILL the embedded hookline while deliveries wait for a retry, restart it: every
/// waiting delivery keeps its `run_at`, attempts and first_seen, and nothing is lost.
pub(super) async fn crash(
    drill: &Drill,
    plan: &Plan<'_>,
    (child, config): (&mut Child, &Path),
    earlier: Events,
    found: &mut Findings,
) -> Result<(), String> {
    progress("phase 4/4 crash: SIGKILL while deliveries wait for a retry, then restart");
    drill.control(json!(503)).await?;
    let crash_events = drill.publish("crash", 1, plan.interval).await?;
    let event = crash_events[0].0.clone();
    let deadline = Instant::now() + plan.slo;
    let before = loop {
        let s = drill.scheduled(&event).await?;
        if s.len() >= plan.bad_count || Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    child.kill().map_err(|e| e.to_string())?;
    let _ = child.wait();
    *child = spawn(config)?;
    wait_healthy(&drill.api).await?;
    let after = drill.scheduled(&event).await?;
    // Deliveries whose retry was still ahead when we looked again: nothing may have touched
    // them. (One that came due meanwhile was rightly claimed, or deferred by a breaker still
    // open from an earlier phase.)
    let looked = now_ms();
    let waiting: Vec<&Value> = before
        .iter()
        .filter(|d| rfc3339_ms(&d[1]).is_some_and(|t| t > looked))
        .collect();
    let unchanged = waiting.iter().all(|d| after.contains(d));
    found.check(
        format!(
            "run_at, attempts and first_seen unchanged across SIGKILL + restart ({} delayed \
             deliveries)",
            waiting.len()
        ),
        !waiting.is_empty() && unchanged,
    );
    drill.control(Value::Null).await?;
    let everything = [earlier, crash_events].concat();
    let ended = drill.settle(&everything, plan.slo * 4).await?;
    let mut lost = 0;
    for (id, _) in &everything {
        let e = drill.get(&format!("/v1/events/{id}")).await?;
        lost += e["deliveries"].as_u64().unwrap_or(0)
            - e["counts"]["delivered"].as_u64().unwrap_or(0)
            - e["counts"]["dead"].as_u64().unwrap_or(0);
    }
    found.check(
        format!("nothing lost: every delivery of every event ended ({lost} open)"),
        ended && lost == 0,
    );
    Ok(())
}
