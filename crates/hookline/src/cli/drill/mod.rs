//! `hookline drill`: the failure drill, automated. (1) baseline, (2) hold a share of the
//! destinations unavailable and check healthy subscribers' first attempts are not delayed,
//! (with `--sustained`: keep them down across several attempt timeouts and a breaker
//! cool-down, and check every one of their deliveries ends inside its window), (3) restore
//! them and measure the drain, (4) SIGKILL hookline while deliveries wait for a retry, restart
//! it, and check every `run_at` is unchanged and nothing is lost. Between (3) and (4), (3b)
//! points many subscribers at one host of their own that fails and recovers, and checks the
//! host never saw more attempts at once than its cap.
//!
//! The sink listens on many loopback ports, each an origin that stands for a host: hookline
//! caps attempts in flight per origin (`delivery.max_in_flight_per_host`), so one port for
//! every subscriber would make the cap, not the slots, decide the main phases (the unavailable
//! cohort would hold the one host's places the healthy one needs). Each cohort gets origins of
//! its own, each carrying no more subscribers than the cap holds at their own caps
//! (`phases::Sizes::per_origin`), so the cap never binds in the main phases while the drill
//! runs the user's settings unchanged; phase 3b is where it binds, on purpose.

mod phases;
mod report;
mod svg;

use anyhow::{anyhow, Context};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hookline_testkit::process::Process;
use hookline_testkit::{now_ms, rfc3339_ms, ScratchDir};
use serde_json::{json, Value};
use tokio::signal::unix::{signal, SignalKind};

use super::client::read_json;
use super::{DrillArgs, Output};

fn progress(message: &str) {
    crate::logs::say(
        tracing::Level::INFO,
        module_path!(),
        message,
        &format!("drill: {message}"),
    );
}

/// The hookline under drill: a child process the drill can kill, or a running one.
enum Target {
    Embedded {
        /// Killed when dropped: a drill that fails or is interrupted leaves no hookline behind.
        server: Process,
        config: PathBuf,
        _dir: ScratchDir,
    },
    Remote,
}

struct Drill {
    api: String,
    /// The sink's control and stats (any of its origins serves them).
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

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        read_json(self.req(self.http.get(format!("{}{path}", self.api)))).await
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<(u16, Value)> {
        let r = self
            .req(self.http.post(format!("{}{path}", self.api)).json(&body))
            .send()
            .await?;
        let status = r.status().as_u16();
        Ok((status, r.json().await.unwrap_or(Value::Null)))
    }

    /// Makes every destination of `cohort` fail (`fail`: 503 or "hang"), or recover (null).
    async fn control(&self, cohort: phases::Cohort, fail: Value) -> anyhow::Result<()> {
        self.http
            .post(format!("{}/control", self.sink))
            .json(&json!({"prefix": format!("/ok/{}/", cohort.name()), "fail": fail}))
            .send()
            .await?;
        Ok(())
    }

    async fn sink_stats(&self) -> anyhow::Result<Value> {
        read_json(self.http.get(format!("{}/stats", self.sink))).await
    }

    /// First receipt time of each webhook-id at the sink.
    async fn receipts(&self) -> anyhow::Result<HashMap<String, i64>> {
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
    ) -> anyhow::Result<Vec<(String, i64)>> {
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
                return Err(anyhow!("publishing {id} answered {status}: {body}"));
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
    async fn scheduled(&self, event: &str) -> anyhow::Result<Vec<Value>> {
        let now = now_ms();
        Ok(self
            .deliveries(&format!("event_id={event}&state=scheduled"))
            .await?
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

    /// Every delivery `filter` (a query string) selects, page by page.
    async fn deliveries(&self, filter: &str) -> anyhow::Result<Vec<Value>> {
        let mut all = Vec::new();
        let mut cursor = String::new();
        loop {
            let page = self
                .get(&format!("/v1/deliveries?{filter}&limit=1000{cursor}"))
                .await?;
            all.extend(page["items"].as_array().cloned().unwrap_or_default());
            match page["next_cursor"].as_str() {
                Some(next) => cursor = format!("&cursor={next}"),
                None => return Ok(all),
            }
        }
    }

    /// Waits until every delivery of `events` has ended, or `limit` passes.
    async fn settle(&self, events: &[(String, i64)], limit: Duration) -> anyhow::Result<bool> {
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

/// Runs the drill until it ends or SIGINT / SIGTERM arrives. Either way the hookline it
/// started is stopped: an interrupted drill drops its run, and with it the child
/// (`Target::Embedded`).
pub async fn run(args: DrillArgs, output: Output) -> anyhow::Result<()> {
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        result = drill(args, output) => result,
        _ = int.recv() => Err(anyhow!("interrupted (SIGINT); the drill's hookline is stopped")),
        _ = term.recv() => Err(anyhow!("terminated (SIGTERM); the drill's hookline is stopped")),
    }
}

async fn drill(args: DrillArgs, output: Output) -> anyhow::Result<()> {
    let sizes = phases::Sizes::new(&args)?;
    let (api, mut target, policy) = match &args.api {
        Some(api) => {
            let policy = crate::config::Config::load(args.config.as_deref(), Default::default())?;
            (api.trim_end_matches('/').to_owned(), Target::Remote, policy)
        }
        None => start_embedded(&args).await?,
    };
    // The sink in this process receives every attempt the hookline under test has in flight,
    // on a listener per origin.
    let ports = sizes.origins(&policy);
    crate::open_files::check(
        crate::open_files::receiving(&policy)
            .saturating_add(crate::open_files::BESIDES_CONNECTIONS)
            .saturating_add(ports as u64),
    );
    let origins = hookline_testkit::sink::spawn_on_loopback_ports(ports).await?;
    let drill = Drill {
        api,
        sink: origins[0].clone(),
        // A request that never answers must fail the drill, not stall it. No pooled
        // connections: the drill kills the hookline they lead to, and a client request that
        // waits for a pooled connection can hang (hyperium/hyper#2312).
        http: reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .pool_max_idle_per_host(0)
            .build()?,
        token: args.token.clone(),
    };
    let started = now_ms();
    let plan = phases::Plan::new(&args, &policy, &sizes, &origins, started)?;
    phases::create_subscribers(&drill, plan.main()).await?;
    let mut found = phases::Findings::default();
    let (base_events, base) = phases::baseline(&drill, &plan, &mut found).await?;
    let fail_events = phases::failure(&drill, &plan, &base, &mut found).await?;
    if args.sustained {
        phases::sustained(&drill, &plan, &base, &mut found).await?;
    }
    let restored = phases::restore(&drill, &plan, &fail_events, &mut found).await?;
    if plan.has_shared_host() {
        phases::shared_host(&drill, &plan, &base, &mut found).await?;
    }
    match &mut target {
        Target::Remote => {
            progress("phase 4/4 skipped: restarting needs the embedded hookline (no --api)")
        }
        Target::Embedded { server, config, .. } => {
            let earlier = [base_events, fail_events].concat();
            phases::crash(&drill, &plan, (server, config), earlier, &mut found).await?;
        }
    }
    let passed = found.report(&base, restored, &args, started, output)?;
    if let Target::Embedded { server, .. } = target {
        let _ = server.terminate().await;
    }
    if passed {
        Ok(())
    } else {
        Err(anyhow!("the drill failed a check"))
    }
}

/// The backoff the embedded hookline runs when no `--config` is given: retries seconds apart,
/// so a drill's drain after restore takes seconds, not the default policy's hour-long waits.
const DRILL_BACKOFF: &str = "base_delay = \"2s\"\nmax_delay = \"5m\"\nmax_attempts = 6\n";

/// The drill's config without `--config`: its backoff in a 30-minute window; with
/// `--sustained`, short enough that three attempt timeouts, a breaker cool-down and a whole
/// window fit in a drill.
fn drill_policy(args: &DrillArgs) -> String {
    if args.sustained {
        format!(
            "[delivery]\nattempt_timeout = \"2s\"\n[retry]\n{DRILL_BACKOFF}\
             delivery_window = \"60s\"\n[breaker]\ncool_down = \"5s\"\n"
        )
    } else {
        format!("[retry]\n{DRILL_BACKOFF}delivery_window = \"30m\"\n")
    }
}

async fn start_embedded(
    args: &DrillArgs,
) -> anyhow::Result<(String, Target, crate::config::Config)> {
    let dir = ScratchDir::new("hookline-drill")?;
    let port = hookline_testkit::free_port()?;
    let mut config = match &args.config {
        Some(path) => std::fs::read_to_string(path).with_context(|| path.display().to_string())?,
        None => drill_policy(args),
    };
    // The drill owns these: its own port, its own database, its sink on loopback.
    config = format!("listen = \"127.0.0.1:{port}\"\ndatabase = \"sqlite://{}\"\nallow_private_destinations = true\n{config}", dir.path().join("drill.db").display());
    let path = dir.path().join("drill.toml");
    std::fs::write(&path, config)?;
    let policy = crate::config::Config::load(Some(&path), Default::default())?;
    let server = spawn(&path, format!("http://127.0.0.1:{port}")).await?;
    progress(&format!(
        "hookline started (pid {}) at {}",
        server.pid(),
        server.base
    ));
    Ok((
        server.base.clone(),
        Target::Embedded {
            server,
            config: path,
            _dir: dir,
        },
        policy,
    ))
}

/// This very binary, serving the drill's config (which listens at `base`), once healthy.
async fn spawn(config: &std::path::Path, base: String) -> anyhow::Result<Process> {
    let exe = std::env::current_exe()?;
    Process::serve(&exe, config, "all", base).await
}
