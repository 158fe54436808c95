//! The drill's phases, in order: create the subscribers, (1) baseline, (2) failure (and, with
//! `--sustained`, the sustained outage), (3) restore and drain, (3b) the shared host failing and
//! recovering, (4) crash and restart. Each adds its latencies, checks and summary to the
//! [`Findings`], which end as the report.

use anyhow::{anyhow, Context};
use std::path::Path;
use std::time::{Duration, Instant};

use hookline_policy::duration_ms;
use hookline_testkit::process::Process;
use hookline_testkit::{now_ms, rfc3339_ms};
use serde_json::{json, Value};

use super::report::{latencies, row, summary};
use super::svg::svg;
use super::{progress, spawn, Drill, DrillArgs};

/// Events a phase published: id and when.
type Events = Vec<(String, i64)>;

/// The drill's groups of subscribers. A subscriber's URL path starts with `/ok/{name}/`, which
/// is how the sink fails a whole cohort at once (its id starts with the name too, for people).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cohort {
    /// Never made to fail: whose first attempts the checks judge.
    Good,
    /// Made unavailable in phases 2 and 4 (`--unhealthy`, `--hanging`).
    Bad,
    /// Behind the one host of phase 3b (`--shared-host`).
    Shared,
}

impl Cohort {
    pub fn name(self) -> &'static str {
        match self {
            Cohort::Good => "good",
            Cohort::Bad => "bad",
            Cohort::Shared => "shared",
        }
    }
}

/// How many subscribers each cohort has, from the arguments, checked before anything starts.
pub(super) struct Sizes {
    bad: usize,
    good: usize,
    shared: usize,
}

/// `share` (0 to 1) of `total`, rounded: within 0..=total.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn share_of(total: usize, share: f64) -> usize {
    (total as f64 * share).round() as usize
}

impl Sizes {
    pub fn new(args: &DrillArgs) -> anyhow::Result<Self> {
        let total = args.subscribers;
        let bad = match args.hanging {
            Some(n) if n > total => {
                return Err(anyhow!(
                    "--hanging {n} is more than --subscribers {total}: the hanging destinations                      are some of the subscribers; raise --subscribers"
                ))
            }
            Some(n) => n,
            None if (0.0..=1.0).contains(&args.unhealthy) => share_of(total, args.unhealthy),
            None => {
                return Err(anyhow!(
                    "--unhealthy {} is not a share between 0 and 1",
                    args.unhealthy
                ))
            }
        };
        if bad >= total {
            return Err(anyhow!(
                "{bad} unavailable of {total} subscribers leaves none healthy to measure:                  raise --subscribers or lower --hanging/--unhealthy"
            ));
        }
        Ok(Sizes {
            bad,
            good: total - bad,
            shared: args.shared_host,
        })
    }

    /// Subscribers one origin of a main cohort carries: as many as the cap per host holds when
    /// each has its own cap's worth of attempts in flight, so the host cap never binds in the
    /// main phases (all on one origin when the cap is off).
    fn per_origin(policy: &crate::config::Config) -> usize {
        let d = &policy.delivery;
        match d.max_in_flight_per_host {
            0 => usize::MAX,
            cap => (cap / d.max_in_flight_per_subscriber).max(1) as usize,
        }
    }

    /// Origins (sink ports) the plan needs: each main cohort's, and the shared host's.
    pub fn origins(&self, policy: &crate::config::Config) -> usize {
        let per = Self::per_origin(policy);
        self.bad.div_ceil(per) + self.good.div_ceil(per) + usize::from(self.shared > 0)
    }
}

/// One of the drill's subscribers.
pub(super) struct Subscriber {
    pub id: String,
    pub cohort: Cohort,
    url: String,
}

impl Subscriber {
    fn new(cohort: Cohort, i: usize, started: i64, origin: &str) -> Self {
        let name = cohort.name();
        let id = format!("{name}-{i}-{started}");
        Subscriber {
            url: format!("{origin}/ok/{name}/{id}"),
            id,
            cohort,
        }
    }
}

/// What every phase works from.
pub(super) struct Plan<'a> {
    args: &'a DrillArgs,
    policy: &'a crate::config::Config,
    /// The main phases' subscribers, the unavailable cohort first; then the shared host's.
    subs: Vec<Subscriber>,
    main_count: usize,
    bad_count: usize,
    /// The origin every subscriber of the shared host points to (empty without them).
    shared_origin: String,
    interval: Duration,
    slo: Duration,
}

impl<'a> Plan<'a> {
    /// `origins`: the sink's, as many as [`Sizes::origins`] asked for.
    pub fn new(
        args: &'a DrillArgs,
        policy: &'a crate::config::Config,
        sizes: &Sizes,
        origins: &[String],
        started: i64,
    ) -> anyhow::Result<Self> {
        let per = Sizes::per_origin(policy);
        let mut next = origins.iter();
        let mut subs = Vec::new();
        for (cohort, n) in [(Cohort::Bad, sizes.bad), (Cohort::Good, sizes.good)] {
            let mut origin = "";
            for i in 0..n {
                if i % per == 0 {
                    origin = next.next().context("the sink has too few origins")?;
                }
                subs.push(Subscriber::new(cohort, subs.len(), started, origin));
            }
        }
        let main_count = subs.len();
        let shared_origin = match sizes.shared {
            0 => String::new(),
            _ => next.next().context("the sink has too few origins")?.clone(),
        };
        for i in 0..sizes.shared {
            subs.push(Subscriber::new(Cohort::Shared, i, started, &shared_origin));
        }
        Ok(Plan {
            args,
            policy,
            subs,
            main_count,
            bad_count: sizes.bad,
            shared_origin,
            interval: crate::config::parse_duration(&args.interval).context("--interval")?,
            slo: crate::config::parse_duration(&args.slo).context("--slo")?,
        })
    }

    /// The subscribers of the main phases (1 to 4).
    pub fn main(&self) -> &[Subscriber] {
        &self.subs[..self.main_count]
    }

    /// The subscribers of the shared host (phase 3b).
    fn shared(&self) -> &[Subscriber] {
        &self.subs[self.main_count..]
    }

    pub fn has_shared_host(&self) -> bool {
        !self.shared().is_empty()
    }

    fn healthy(&self) -> impl Iterator<Item = &Subscriber> {
        self.subs.iter().filter(|s| s.cohort == Cohort::Good)
    }

    /// How `--mode` makes a cohort fail, for the sink's control.
    fn failure(&self) -> Value {
        if self.args.mode == "hang" {
            json!("hang")
        } else {
            json!(503)
        }
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

    /// Prints the table and the checks (with `-o json`, the report `--json` writes), writes
    /// `--json` and `--svg`; whether every check passed.
    pub fn report(
        self,
        base: &Value,
        (drain_ms, amplification): (i64, f64),
        args: &DrillArgs,
        started: i64,
        output: crate::cli::Output,
    ) -> anyhow::Result<bool> {
        let passed = self.checks.iter().all(|(_, ok)| *ok);
        let mut rows = vec![row("baseline", "all", base)];
        for (phase, name) in [("failure", "failure"), ("shared_host", "shared host")] {
            if let Some(p) = self.phases.get(phase) {
                rows.push(row(name, "healthy", &p["healthy_first_attempt"]));
            }
        }
        let checks: Vec<Value> = self
            .checks
            .iter()
            .map(|(c, ok)| json!({"check": c, "passed": ok}))
            .collect();
        let report = json!({"phases": self.phases, "checks": checks, "passed": passed});
        output.print(&report, |_| {
            let mut text = crate::cli::table::render(
                &["PHASE", "WHO", "N", "P50 MS", "P95 MS", "P99 MS"],
                &rows,
            );
            text += &format!(
                "\ndrain after restore: {drain_ms} ms; retry amplification observed: \
                 {amplification:.2} attempts per delivery\n\n"
            );
            for (check, ok) in &self.checks {
                text += &format!("{} {check}\n", if *ok { "PASS" } else { "FAIL" });
            }
            text
        });
        if let Some(path) = &args.json {
            std::fs::write(path, serde_json::to_string_pretty(&report).expect("json"))
                .with_context(|| path.display().to_string())?;
        }
        if let Some(path) = &args.svg {
            std::fs::write(path, svg(&self.points, started))
                .with_context(|| path.display().to_string())?;
        }
        Ok(passed)
    }
}

/// Creates `subs`, 64 requests at a time.
pub(super) async fn create_subscribers(drill: &Drill, subs: &[Subscriber]) -> anyhow::Result<()> {
    let origins: std::collections::HashSet<&str> = subs
        .iter()
        .filter_map(|s| s.url.split("/ok/").next())
        .collect();
    let plural = if origins.len() == 1 { "" } else { "s" };
    progress(&format!(
        "creating {} subscribers on {} origin{plural}",
        subs.len(),
        origins.len()
    ));
    let bodies = subs
        .iter()
        .map(|s| json!({"id": s.id, "url": s.url, "event_types": ["drill"]}))
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
) -> anyhow::Result<(Events, Value)> {
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
        plan.main(),
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
) -> anyhow::Result<Events> {
    let mode = &plan.args.mode;
    progress(&format!(
        "phase 2/4 failure: {} destinations {mode}",
        plan.bad_count
    ));
    drill.control(Cohort::Bad, plan.failure()).await?;
    let events = drill
        .publish("failure", plan.args.events, plan.interval)
        .await?;
    let judged = Judged {
        phase: "failure",
        label: "",
        events: &events,
    };
    let healthy = judge_healthy(drill, plan, base, judged, found).await?;
    found
        .phases
        .insert("failure".into(), json!({"healthy_first_attempt": healthy}));
    Ok(events)
}

/// A phase whose healthy first attempts are judged against the baseline.
struct Judged<'e> {
    /// The phase's name on the chart's points.
    phase: &'static str,
    /// What its checks' names start with.
    label: &'static str,
    events: &'e Events,
}

/// Waits (up to the SLO) for the healthy cohort's deliveries of the phase's events (the others
/// may keep retrying), and judges them by the isolation criterion and the SLO; their summary.
async fn judge_healthy(
    drill: &Drill,
    plan: &Plan<'_>,
    base: &Value,
    judged: Judged<'_>,
    found: &mut Findings,
) -> anyhow::Result<Value> {
    let Judged {
        phase,
        label,
        events,
    } = judged;
    let deadline = Instant::now() + plan.slo;
    let expected = events.len() * plan.healthy().count();
    loop {
        let r = drill.receipts().await?;
        let got = events
            .iter()
            .flat_map(|(e, _)| plan.healthy().map(move |s| format!("{e}:{}", s.id)))
            .filter(|id| r.contains_key(id))
            .count();
        if got >= expected || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let receipts = drill.receipts().await?;
    let (healthy, _) = latencies(events, &receipts, &plan.subs, &mut found.points, phase);
    let healthy = summary(healthy);
    let base_p99 = base["p99_ms"].as_f64().unwrap_or(0.0);
    let p99 = healthy["p99_ms"].as_f64().unwrap_or(f64::MAX);
    found.check(
        format!(
            "{label}healthy p99 first-attempt latency {p99:.0} ms <= 1.25 x baseline p99 \
             {base_p99:.0} ms + 50 ms"
        ),
        p99 <= 1.25 * base_p99 + 50.0,
    );
    found.check(
        format!(
            "{label}every healthy delivery arrived within the SLO ({:?})",
            plan.slo
        ),
        healthy["n"].as_u64() == Some(expected as u64),
    );
    Ok(healthy)
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
) -> anyhow::Result<()> {
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
        plan.main(),
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
        for d in deliveries_to(drill, plan, Cohort::Bad, &events).await? {
            match d["state"].as_str() {
                Some("dead") => {
                    ended += 1;
                    let ms = |k: &str| rfc3339_ms(&d[k]).unwrap_or(0);
                    let limit = ms("window_start").saturating_add(duration_ms(window + grace));
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
        json!({"hold_ms": duration_ms(hold), "events": events.len(),
               "healthy_first_attempt": healthy, "unavailable_ended": ended,
               "unavailable_late": late}),
    );
    Ok(())
}

/// Every delivery of `events` to a subscriber of `cohort`.
async fn deliveries_to(
    drill: &Drill,
    plan: &Plan<'_>,
    cohort: Cohort,
    events: &Events,
) -> anyhow::Result<Vec<Value>> {
    let ids: std::collections::HashSet<&str> = plan
        .subs
        .iter()
        .filter(|s| s.cohort == cohort)
        .map(|s| s.id.as_str())
        .collect();
    let mut found = Vec::new();
    for (event, _) in events {
        let all = drill.deliveries(&format!("event_id={event}")).await?;
        found.extend(
            all.into_iter()
                .filter(|d| d["subscriber_id"].as_str().is_some_and(|s| ids.contains(s))),
        );
    }
    Ok(found)
}

/// (3) The unavailable cohort recovers: the backlog must drain. The drain time, and the
/// attempts per delivery the sink saw.
pub(super) async fn restore(
    drill: &Drill,
    plan: &Plan<'_>,
    failed: &Events,
    found: &mut Findings,
) -> anyhow::Result<(i64, f64)> {
    progress("phase 3/4 restore: measuring the drain");
    drill.control(Cohort::Bad, Value::Null).await?;
    let restored = Instant::now();
    let drained = drill.settle(failed, plan.slo * 4).await?;
    let drain_ms = duration_ms(restored.elapsed());
    let stats = drill.sink_stats().await?;
    let amplification = stats["received"].as_f64().unwrap_or(0.0)
        / stats["unique"].as_f64().unwrap_or(1.0).max(1.0);
    found.check(format!("the backlog drained ({drain_ms} ms)"), drained);
    let most = most_in_flight(&stats, |origin| origin != plan.shared_origin);
    host_cap_check(found, plan, "no host of the main phases saw", most);
    found.phases.insert(
        "restore".into(),
        json!({"drain_ms": drain_ms, "retry_amplification": amplification,
               "most_in_flight_at_a_host": most}),
    );
    Ok((drain_ms, amplification))
}

/// The most requests the sink's origins that `counted` selects saw at once, at any one of them.
fn most_in_flight(stats: &Value, counted: impl Fn(&str) -> bool) -> u64 {
    stats["origins"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(origin, _)| counted(origin))
        .filter_map(|(_, c)| c["max_in_flight"].as_u64())
        .max()
        .unwrap_or(0)
}

/// The check that a host never saw more attempts at once than `delivery.max_in_flight_per_host`
/// (none when the cap is off: the figure is still in the report).
fn host_cap_check(found: &mut Findings, plan: &Plan<'_>, who: &str, most: u64) {
    let cap = plan.policy.delivery.max_in_flight_per_host;
    if cap > 0 {
        found.check(
            format!(
                "{who} more attempts at once than its cap (max_in_flight_per_host {cap}; \
                 most seen: {most})"
            ),
            most <= u64::from(cap),
        );
    }
}

/// (3b) `--shared-host` subscribers behind one host of their own, which fails (`--mode`) while
/// an event goes out every `--interval` and the healthy cohort keeps receiving, stays down for
/// one attempt timeout more (so that attempts to it time out or fail, retries and breakers pile
/// up behind it), then recovers. Healthy first attempts must meet the isolation criterion; the
/// host must never see more attempts at once than its cap, during the outage or the recovery
/// (when breakers half-open and retries come due together); every delivery to it must end.
pub(super) async fn shared_host(
    drill: &Drill,
    plan: &Plan<'_>,
    base: &Value,
    found: &mut Findings,
) -> anyhow::Result<()> {
    let (shared, mode) = (plan.shared(), &plan.args.mode);
    let cap = plan.policy.delivery.max_in_flight_per_host;
    progress(&format!(
        "phase 3b/4 shared host: {} subscribers on {} ({mode}, then recovering; cap {cap})",
        shared.len(),
        plan.shared_origin
    ));
    create_subscribers(drill, shared).await?;
    drill.control(Cohort::Shared, plan.failure()).await?;
    let failed = Instant::now();
    let events = drill
        .publish("shared", plan.args.events, plan.interval)
        .await?;
    let judged = Judged {
        phase: "shared host",
        label: "shared host: ",
        events: &events,
    };
    let healthy = judge_healthy(drill, plan, base, judged, found).await?;
    tokio::time::sleep(plan.policy.delivery.attempt_timeout).await;
    drill.control(Cohort::Shared, Value::Null).await?;
    let (hold, recovered) = (failed.elapsed(), Instant::now());
    let settled = drill.settle(&events, plan.slo * 4).await?;
    let recovery_ms = duration_ms(recovered.elapsed());
    let (mut delivered, mut dead, mut unexplained, mut open) = (0, 0, 0, 0);
    for d in deliveries_to(drill, plan, Cohort::Shared, &events).await? {
        match d["state"].as_str() {
            Some("delivered") => delivered += 1,
            Some("dead") if d["dead_reason"].is_null() => unexplained += 1,
            Some("dead") => dead += 1,
            _ => open += 1,
        }
    }
    found.check(
        format!(
            "shared host: every delivery ended ({delivered} delivered, {dead} dead with a \
             reason, {unexplained} dead without one, {open} still open after {recovery_ms} ms)"
        ),
        settled && open == 0 && unexplained == 0 && delivered + dead > 0,
    );
    let stats = drill.sink_stats().await?;
    let most = most_in_flight(&stats, |origin| origin == plan.shared_origin);
    host_cap_check(found, plan, "shared host: never saw", most);
    found.phases.insert(
        "shared_host".into(),
        json!({"subscribers": shared.len(), "hold_ms": duration_ms(hold),
               "healthy_first_attempt": healthy, "cap": cap, "most_in_flight": most,
               "recovery_ms": recovery_ms, "delivered": delivered, "dead": dead,
               "open": open}),
    );
    Ok(())
}

/// (4) SIGKILL the embedded hookline while deliveries wait for a retry, restart it: every
/// waiting delivery keeps its `run_at`, attempts and first_seen, and nothing is lost.
pub(super) async fn crash(
    drill: &Drill,
    plan: &Plan<'_>,
    (server, config): (&mut Process, &Path),
    earlier: Events,
    found: &mut Findings,
) -> anyhow::Result<()> {
    progress("phase 4/4 crash: SIGKILL while deliveries wait for a retry, then restart");
    drill.control(Cohort::Bad, json!(503)).await?;
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
    server.kill_9();
    *server = spawn(config, drill.api.clone()).await?;
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
    drill.control(Cohort::Bad, Value::Null).await?;
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
