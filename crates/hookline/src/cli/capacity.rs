//! `hookline capacity`: the capacity arithmetic before deploying. New attempts plus retry
//! attempts (at the failure rate given, and at the policy's worst case) against the throughput
//! available: given, read from a running hookline, or measured here with a short load test
//! against the mix of answers given or found in the store's recent attempts.

use anyhow::anyhow;
use std::path::Path;
use std::time::{Duration, Instant};

use hookline_engine::clock::Clock;
use hookline_policy::{
    drain_seconds, expected_attempts, rate_with_unanswered, Demand, Evidence, Shown,
};
use serde_json::{json, Value};

use hookline_client::api::{DeliveryQuery, NewEvent};

use super::client::read_json;
use super::{table, ApiArg, CapacityArgs, Output};
use crate::capacity::whole_seconds;
use crate::config::{Config, Overrides};

/// Where the available throughput came from.
enum Available {
    Given(f64),
    Nominal { workers: u32, per_worker: f64 },
    Running(f64),
    Measured(Measurement),
}

struct Measurement {
    attempts: u64,
    elapsed: Duration,
}

/// What the load's attempts look like: the answer times of those answered, and the shares that
/// fail retryably and that get no answer.
struct Mix {
    answer_times: Vec<Duration>,
    failure_rate: f64,
    unanswered: f64,
    /// Where it came from, for the reader.
    source: String,
}

/// Quantiles read from the history: the measuring sink's subscribers each answer after one.
const HISTORY_QUANTILES: usize = 100;
/// At most this many recent attempts are read for --from-history.
const HISTORY_LIMIT: u32 = 100_000;
const HOUR_MS: i64 = 3_600_000;

impl Mix {
    async fn of(args: &CapacityArgs, config: &Config) -> anyhow::Result<Mix> {
        if args.from_history {
            return Mix::from_history(config).await;
        }
        if !(0.0..=1.0).contains(&args.failure_rate) {
            return Err(anyhow!(
                "--failure-rate must be from 0 to 1, not {}",
                args.failure_rate
            ));
        }
        if !(0.0..=args.failure_rate).contains(&args.timeout_rate) {
            return Err(anyhow!(
                "--timeout-rate must be from 0 to --failure-rate ({}): a timeout is a \
                 failure, not {}",
                args.failure_rate,
                args.timeout_rate
            ));
        }
        let answer_times = args
            .answer_times
            .iter()
            .map(|t| {
                crate::config::parse_duration(t)
                    .ok()
                    .filter(|d| *d <= config.delivery.attempt_timeout)
                    .ok_or_else(|| {
                        anyhow!(
                            "--answer-times: {t:?} is not a duration within the attempt \
                             timeout ({}), like 20ms or 1s",
                            humantime::format_duration(config.delivery.attempt_timeout)
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Mix {
            answer_times,
            failure_rate: args.failure_rate,
            unanswered: args.timeout_rate,
            source: "the flags".into(),
        })
    }

    async fn from_history(config: &Config) -> anyhow::Result<Mix> {
        let store =
            hookline_store::open_existing(&config.database, &config.store_options()).await?;
        let now = hookline_engine::clock::SystemClock.now_ms();
        let h = store
            .attempt_history(now.saturating_sub(HOUR_MS), HISTORY_LIMIT)
            .await?;
        if h.attempts == 0 {
            return Err(anyhow!(
                "no attempts in the last hour in {}: give --failure-rate, --timeout-rate and \
                 --answer-times instead",
                config.database
            ));
        }
        let n = h.answered_ms.len();
        let answer_times = if n == 0 {
            Vec::new()
        } else {
            (0..HISTORY_QUANTILES)
                // The middle of each hundredth: the slowest answers are in it too.
                .map(|i| {
                    Duration::from_millis(
                        h.answered_ms[((2 * i + 1) * n) / (2 * HISTORY_QUANTILES)],
                    )
                })
                .collect()
        };
        let share = |k: u64| k as f64 / h.attempts as f64;
        Ok(Mix {
            answer_times,
            failure_rate: share(h.failed),
            unanswered: share(h.unanswered),
            source: format!("the last hour's {} attempts in the store", h.attempts),
        })
    }

    fn describe(&self) -> String {
        let times = match (
            self.answer_times.iter().min(),
            self.answer_times.iter().max(),
        ) {
            (Some(lo), Some(hi)) => {
                let mut sorted = self.answer_times.clone();
                sorted.sort();
                format!(
                    "answers in {} to {} (median {})",
                    humantime::format_duration(*lo),
                    humantime::format_duration(*hi),
                    humantime::format_duration(sorted[sorted.len() / 2])
                )
            }
            _ => "answers at once".into(),
        };
        format!(
            "{:.1}% failing retryably, {:.1}% unanswered (each costs the attempt timeout), {times}; \
             from {}",
            100.0 * self.failure_rate,
            100.0 * self.unanswered,
            self.source
        )
    }

    /// The path the measuring sink serves subscriber `i` of `n` on: its answer time, and a
    /// 503 for the share of answered attempts that fail (spread evenly over the times).
    fn path(&self, i: usize, n: usize) -> String {
        let delay = match self.answer_times.len() {
            0 => 0,
            len => self.answer_times[i * len / n].as_millis(),
        };
        let answered = 1.0 - self.unanswered;
        let failing = if answered > 0.0 {
            ((self.failure_rate - self.unanswered) / answered).clamp(0.0, 1.0)
        } else {
            0.0
        };
        // Subscriber i fails when the running count of failing ones steps up at i.
        let fails = ((i + 1) as f64 * failing).floor() > (i as f64 * failing).floor();
        let answer = if fails { "status/503" } else { "ok" };
        format!("/slow/{delay}/{answer}/m-{i}")
    }
}

impl Available {
    fn per_s(&self) -> f64 {
        match self {
            Available::Given(r) | Available::Running(r) => *r,
            Available::Nominal {
                workers,
                per_worker,
            } => f64::from(*workers) * per_worker,
            Available::Measured(m) => m.attempts as f64 / m.elapsed.as_secs_f64().max(1e-3),
        }
    }

    fn source(&self) -> String {
        match self {
            Available::Given(_) => "given (--service-rate)".into(),
            Available::Nominal {
                workers,
                per_worker,
            } => format!(
                "nominal: {workers} workers x {} attempts/s. Not measured: request latency, \
                 subscriber limits and ordinary traffic use the same budget (--measure)",
                rate(*per_worker)
            ),
            Available::Running(_) => "sustainable rate of the running hookline (--api)".into(),
            Available::Measured(m) => format!(
                "measured here (embedded SQLite, this config's delivery settings): {} answered \
                 attempts to a loopback sink in {:.2} s",
                m.attempts,
                m.elapsed.as_secs_f64()
            ),
        }
    }
}

/// The configuration `serve` would run with: the file, and the database `HOOKLINE_DATABASE`
/// names (which decides the default delivery slots).
fn load(config: Option<&Path>) -> anyhow::Result<Config> {
    let database = std::env::var("HOOKLINE_DATABASE").ok();
    Ok(Config::load(
        config,
        Overrides {
            database,
            ..Overrides::default()
        },
    )?)
}

pub async fn run(args: CapacityArgs, output: Output) -> anyhow::Result<()> {
    let config = load(args.config.as_deref())?;
    for (name, v) in [
        ("--events-per-second", args.events_per_second),
        ("--fanout", args.fanout),
    ] {
        if !(0.0..=1e9).contains(&v) {
            return Err(super::usage(format!(
                "{name} must be a number from 0 to 1e9, not {v:?}"
            )));
        }
    }
    // Checked here, not by clap: `--measure` has a default, which satisfies clap's `requires`.
    for (flag, given) in [
        ("--save", args.save),
        ("--answer-times", !args.answer_times.is_empty()),
    ] {
        if given && !args.measure {
            return Err(super::usage(format!(
                "{flag} needs --measure: it is about the measuring load"
            )));
        }
    }
    let mix = Mix::of(&args, &config).await?;
    let positive = |name: &str, v: f64| {
        if (0.001..=1e9).contains(&v) {
            Ok(v)
        } else {
            Err(anyhow!("{name} must be from 0.001 to 1e9, not {v:?}"))
        }
    };
    let mut budget = Budget {
        max_attempts: config.retry.max_attempts(),
        window: config.retry.delivery_window(),
    };
    let available = match (args.service_rate, args.workers, args.attempts_per_worker) {
        (Some(rate), _, _) => Available::Given(positive("--service-rate", rate)?),
        (None, Some(workers), Some(per_worker)) if workers > 0 => Available::Nominal {
            workers,
            per_worker: positive("--attempts-per-worker", per_worker)?,
        },
        (None, Some(_), _) => return Err(anyhow!("--workers must be at least 1")),
        _ if args.measure => Available::Measured(measure(args.config.as_deref(), &mix).await?),
        _ => {
            let (rate, in_force) = running(&args.api).await?;
            budget = in_force;
            Available::Running(rate)
        }
    };
    let (mut text, mut document, verdict) = render(&args, &config, &available, budget, &mix);
    if args.save {
        text += &save(&config, available.per_s()).await?;
        document["saved_rate_per_s"] = json!(available.per_s());
    }
    output.print(&document, |_| text);
    match verdict {
        Verdict::Fits => Ok(()),
        // Non-zero so a deploy script or CI step stops on it, not only a reader of the table.
        Verdict::Over { by } => Err(anyhow!(
            "OVER: the load at the given failure rate needs {} attempts/s more than available",
            rate(by)
        )),
    }
}

/// Whether the load at the given failure rate fits the available rate. The worst-case column
/// (every attempt failing) is not the verdict: with a budget of several attempts it is over
/// for almost any real load, and it is what the admission limits are for.
enum Verdict {
    Fits,
    Over { by: f64 },
}

/// The attempt budget and window the arithmetic uses: the config's, or a running hookline's
/// policy in force.
#[derive(Clone, Copy)]
struct Budget {
    max_attempts: u32,
    window: Duration,
}

/// The sustainable rate a running hookline measures, and its policy in force.
async fn running(api: &ApiArg) -> anyhow::Result<(f64, Budget)> {
    let c = api.client()?.capacity().await?;
    let rate = c
        .sustainable_rate_per_s
        .filter(|r| *r > 0.0)
        .ok_or_else(|| {
            anyhow!(
                "the hookline at {} has no measured rate yet (idle or just started): give \
                 --service-rate, or --measure",
                api.api
            )
        })?;
    // From another process: a window too large for a `Duration` is refused, not a panic.
    let window = Duration::try_from_secs_f64(c.delivery_window_s)
        .ok()
        .filter(|w| !w.is_zero());
    let budget = match window {
        Some(window) if c.max_attempts >= 1 => Budget {
            max_attempts: c.max_attempts,
            window,
        },
        _ => {
            return Err(anyhow!(
                "the API at {} answered no policy in force",
                api.api
            ))
        }
    };
    Ok((rate, budget))
}

fn rate(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn human(seconds: f64) -> String {
    humantime::format_duration(whole_seconds(seconds)).to_string()
}

fn render(
    args: &CapacityArgs,
    config: &Config,
    available: &Available,
    budget: Budget,
    mix: &Mix,
) -> (String, Value, Verdict) {
    let m = budget.max_attempts;
    let at_rate = Demand::of(args.events_per_second, args.fanout, mix.failure_rate, m);
    let worst = Demand::of(args.events_per_second, args.fanout, 1.0, m);
    // What the slots sustain when the unanswered attempts each hold one for the timeout: at
    // the mix's share, and in the worst case, where every attempt fails the costliest way.
    let answered = available.per_s();
    let slots = config.delivery.concurrency as f64;
    let timeout = config.delivery.attempt_timeout.as_secs_f64();
    let have = rate_with_unanswered(answered, mix.unanswered, slots, timeout);
    let have_worst = rate_with_unanswered(answered, 1.0, slots, timeout);
    let mut out = format!(
        "{} events/s x {} subscribers; retry policy: max_attempts {m} (one delivery costs up to \
         {m} attempts), delivery window {}\nattempts: {}\navailable: {} attempts/s \
         ({} answered attempts/s, {})\n\n",
        rate(args.events_per_second),
        rate(args.fanout),
        humantime::format_duration(budget.window),
        mix.describe(),
        rate(have),
        rate(answered),
        available.source()
    );
    let column = |d: &Demand, have: f64| {
        let left = have - d.total_per_s();
        vec![
            rate(d.new_per_s),
            rate(d.retry_per_s),
            rate(d.total_per_s()),
            rate(have),
            format!("{:.0}%", 100.0 * d.total_per_s() / have),
            if left >= 0.0 {
                format!("fits ({} spare)", rate(left))
            } else {
                format!("OVER by {}", rate(-left))
            },
        ]
    };
    let (a, w) = (column(&at_rate, have), column(&worst, have_worst));
    // The same numbers for -o json, unrounded.
    let side = |d: &Demand, have: f64| {
        json!({
            "new_attempts_per_s": d.new_per_s,
            "retry_attempts_per_s": d.retry_per_s,
            "required_attempts_per_s": d.total_per_s(),
            "available_attempts_per_s": have,
            "share_of_available": d.total_per_s() / have,
            "fits": d.total_per_s() <= have,
        })
    };
    let mut document = json!({
        "events_per_second": args.events_per_second,
        "fanout": args.fanout,
        "max_attempts": m,
        "delivery_window_s": budget.window.as_secs_f64(),
        "mix": {
            "failure_rate": mix.failure_rate,
            "timeout_rate": mix.unanswered,
            "answer_times_ms": mix.answer_times.iter().map(|t| super::schedule::ms(*t)).collect::<Vec<_>>(),
            "source": mix.source,
        },
        "available": {
            "attempts_per_s": have,
            "answered_attempts_per_s": answered,
            "source": available.source(),
        },
        "at_failure_rate": side(&at_rate, have),
        "worst_case": side(&worst, have_worst),
    });
    let names = [
        "new attempts/s",
        "retry attempts/s",
        "required attempts/s",
        "available attempts/s",
        "of available",
        "verdict",
    ];
    let rows: Vec<Vec<String>> = names
        .iter()
        .enumerate()
        .map(|(i, name)| vec![name.to_string(), a[i].clone(), w[i].clone()])
        .collect();
    let failing = format!("{:.0}% failing", 100.0 * mix.failure_rate + 0.0);
    out += &table::render(
        &["", &failing, "worst case (every attempt times out)"],
        &rows,
    );
    if let Some(backlog) = args.backlog {
        let window = budget.window.as_secs_f64();
        let mut drains = serde_json::Map::new();
        out += "\n";
        for (key, what, failure, demand, have) in [
            (
                "at_failure_rate",
                failing.as_str(),
                mix.failure_rate,
                &at_rate,
                have,
            ),
            ("worst_case", "worst case", 1.0, &worst, have_worst),
        ] {
            let attempts = backlog as f64 * expected_attempts(failure, m);
            let drain = drain_seconds(attempts, have, demand.total_per_s());
            drains.insert(
                key.into(),
                json!({"drain_s": drain, "inside_window": drain.is_some_and(|s| s <= window)}),
            );
            out += &match drain {
                Some(s) if s <= window => format!(
                    "a backlog of {backlog} deliveries drains in {} at {what}, inside the window\n",
                    human(s)
                ),
                Some(s) => format!(
                    "a backlog of {backlog} deliveries takes {} at {what}: PAST the {} window \
                     (deliveries will die window_expired)\n",
                    human(s),
                    humantime::format_duration(budget.window)
                ),
                None => format!(
                    "a backlog of {backlog} deliveries NEVER drains at {what}: new traffic \
                     alone takes everything\n"
                ),
            };
        }
        document["backlog"] = json!({"deliveries": backlog, "drain": drains});
    }
    let levers = levers(config, budget, &at_rate, &worst, have, have_worst);
    out += "\nlevers:\n";
    out += &levers;
    document["levers"] = levers
        .lines()
        .map(|l| l.trim_start_matches("- "))
        .collect::<Vec<_>>()
        .into();
    let verdict = match at_rate.total_per_s() - have {
        by if by > 0.0 => Verdict::Over { by },
        _ => Verdict::Fits,
    };
    document["verdict"] = json!(match verdict {
        Verdict::Fits => "fits",
        Verdict::Over { .. } => "over",
    });
    (out, document, verdict)
}

/// Records `per_s` answered attempts/s as what the process has shown, in the configured store:
/// the next `serve` projects admission with it. Answers the line that says so.
async fn save(config: &Config, per_s: f64) -> anyhow::Result<String> {
    let store = hookline_store::open_existing(&config.database, &config.store_options()).await?;
    // A lower bound, not a saturated measurement: one process on scratch SQLite says what the
    // deployment can at least do; the floor still applies, and what the processes show raises it.
    let shown = Shown {
        per_s,
        evidence: Evidence::AtLeast,
    };
    store
        .record_shown(hookline_engine::clock::SystemClock.now_ms(), shown)
        .await?;
    Ok(format!(
        "\nsaved in {}: admission projects with {} attempts/s (shown_rate_per_s) until the \
         processes measure otherwise\n",
        config.database,
        rate(per_s)
    ))
}

/// What changes the answer, in the order an operator would reach for it.
fn levers(
    config: &Config,
    budget: Budget,
    at_rate: &Demand,
    worst: &Demand,
    have: f64,
    have_worst: f64,
) -> String {
    let m = budget.max_attempts;
    let mut out = String::new();
    if at_rate.total_per_s() > have {
        out += &format!(
            "- even at the given failure rate the load needs {} attempts/s: add workers or \
             raise delivery.concurrency ({} per process now), then measure again (--measure)\n",
            rate(at_rate.total_per_s()),
            config.delivery.concurrency
        );
    }
    if worst.total_per_s() > have_worst && worst.new_per_s > 0.0 {
        // `as` saturates: a quotient past u32::MAX fits as many attempts as can be configured.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let fits = (have_worst / worst.new_per_s).floor() as u32;
        out += &if fits >= 1 {
            format!(
                "- attempt budget: max_attempts {m} multiplies every delivery by up to {m}; \
                 max_attempts = {} keeps the worst case inside the available rate\n",
                fits.min(m)
            )
        } else {
            format!(
                "- attempt budget: even one attempt per delivery is more than the slots sustain \
                 when every attempt times out ({} attempts/s: delivery.concurrency {} over \
                 delivery.attempt_timeout {}); admission and per-destination concurrency are \
                 what hold that case\n",
                rate(have_worst),
                config.delivery.concurrency,
                humantime::format_duration(config.delivery.attempt_timeout)
            )
        };
        out += &format!(
            "- per-destination concurrency: delivery.max_in_flight_per_subscriber = {} bounds \
             what failing destinations take from healthy ones (a retry also needs one of the \
             {:.0}% retry slots)\n",
            config.delivery.max_in_flight_per_subscriber,
            100.0 * (1.0 - config.delivery.first_attempt_share)
        );
    }
    out += &format!(
        "- admission: [admission] max_backlog = {} and max_projected_drain = {} refuse \
         fan-out (503 over_capacity) before the backlog outgrows the window\n",
        config.admission.max_backlog,
        humantime::format_duration(config.admission.max_projected_drain(budget.window))
    );
    out
}

/// A short, bounded load test of this configuration on this machine: an in-process hookline
/// on a scratch database delivering to an in-process sink on loopback.
async fn measure(config: Option<&Path>, mix: &Mix) -> anyhow::Result<Measurement> {
    const SUBSCRIBERS: usize = 100;
    const EVENTS: u32 = 50;
    // Bounded, and long enough for each subscriber's events one after another at its answer
    // time.
    let slowest = mix.answer_times.iter().max().copied().unwrap_or_default();
    let limit = Duration::from_secs(120).saturating_add(slowest.saturating_mul(EVENTS));
    let sink = hookline_testkit::sink::spawn_on_loopback().await?;
    let dir = hookline_testkit::ScratchDir::new("hookline-capacity")?;
    let mut config = load(config)?;
    // Its own port, database and loopback sink; everything else as configured.
    config.listen = "127.0.0.1:0".parse().expect("a loopback address");
    config.database = format!("sqlite://{}", dir.path().join("capacity.db").display());
    config.api_tokens.clear();
    // Measuring, not protecting: the configured limits must not cut the load short, and the
    // failing share of the mix must keep being attempted, not deferred behind breakers.
    config.admission.max_backlog = u64::MAX;
    config.admission.max_projected_drain = Some(Duration::MAX);
    config.breaker.failures = u32::MAX;
    // One loopback origin stands for the subscribers' many hosts: the cap per host would
    // measure itself, not the slots.
    config.delivery.max_in_flight_per_host = 0;
    config.guards = hookline_engine::destination::Guards::new(
        hookline_engine::destination::Guard::default(),
        hookline_engine::destination::TenantDestinations::AsPlatform,
    );
    // Both ends of every attempt are in this process: hookline's and the sink's.
    crate::open_files::check(
        crate::open_files::needed(&config, crate::app::Role::All)
            .saturating_add(crate::open_files::receiving(&config)),
    );
    let app = crate::app::start(
        &config,
        std::sync::Arc::new(hookline_engine::clock::SystemClock),
        crate::app::Role::All,
    )
    .await?;
    let api = format!("http://{}", app.addr);
    let http = reqwest::Client::new();
    let bodies = (0..SUBSCRIBERS)
        .map(|i| json!({"id": format!("m-{i}"), "url": format!("{sink}{}", mix.path(i, SUBSCRIBERS))}))
        .collect();
    hookline_testkit::create_subscribers(&http, &api, None, bodies, 8).await?;
    let started = Instant::now();
    // A refused publish ends the measurement: not retried.
    let client = hookline_client::Client::new(&api)?.with_retry(hookline_client::Retry::never());
    for e in 0..EVENTS {
        let event = NewEvent {
            id: Some(format!("m-{e}")),
            event_type: "capacity.measure".to_owned(),
            payload: Some(json!({"n": e})),
            ..NewEvent::default()
        };
        client
            .publish(&event)
            .await
            .map_err(|refused| match refused.status() {
                Some(status) => anyhow!("the measuring hookline refused a publish: {status}"),
                None => refused.into(),
            })?;
    }
    let total = SUBSCRIBERS as u64 * u64::from(EVENTS);
    // Every first attempt has reached the sink and none is still under way: each has been
    // answered (a slow answer counts its time, a 503 its retry later, outside the measurement).
    let attempts = loop {
        let stats = read_json(http.get(format!("{sink}/stats"))).await?;
        if stats["unique"].as_u64().unwrap_or(0) >= total {
            let in_flight = client
                .list_deliveries(&DeliveryQuery {
                    state: Some("in_flight".to_owned()),
                    limit: Some(1),
                    ..DeliveryQuery::default()
                })
                .await?;
            if in_flight.items.is_empty() {
                break stats["received"].as_u64().unwrap_or(total);
            }
        }
        if started.elapsed() > limit {
            app.shutdown().await;
            return Err(anyhow!("the measuring load did not finish in {limit:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let elapsed = started.elapsed();
    app.shutdown().await;
    Ok(Measurement { attempts, elapsed })
}
