//! The command line: `serve`, `schedule`, `dlq`, and the rest. Global flags: `--log-format`
//! (the log on stderr) and `--output` (what a listing or report prints on stdout).

mod capacity;
mod client;
mod config;
mod dlq;
mod drill;
mod output;
mod policy;
mod resend;
mod rollout;
mod schedule;
mod serve;
mod store;
mod table;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use hookline_engine::signer::SigningKey;
use hookline_testkit::sink::{Secrets, Signatures};

use crate::app::Role;
use crate::config::{Config, LogFormat, Overrides};
pub use output::Output;

/// What `hookline --help` ends with: what the exit status says, for scripts and CI steps.
const EXIT_CODES: &str = "\
Exit codes:
  0  ok
  1  failure, or a verdict against: a check failed (drill, migrate --status incompatible),
     the load does not fit (capacity), the candidate ends significantly more deliveries dead
     (rollout compare), the API refused the request
  2  usage: an unknown flag, a missing or malformed argument, a flag the command cannot honour";

/// A command line the command cannot run as given (a flag's value out of range, flags that do
/// not go together): exit code 2, as clap's own usage errors.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// A [`Usage`] error, as `anyhow`'s.
fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(message.into()))
}

#[derive(Debug, Parser)]
#[command(
    name = "hookline",
    version,
    about = "Webhook fan-out delivery: at least once, bounded retries, isolated failures, audited dead-letter replay.",
    after_help = EXIT_CODES
)]
pub struct Cli {
    /// How the log on stderr is written: text (for a person) or json (one object a line:
    /// timestamp, level, target, message, fields). Default: the config file's `[log] format`,
    /// else text.
    #[arg(long, global = true, env = "HOOKLINE_LOG_FORMAT", value_enum)]
    log_format: Option<LogFormat>,
    /// What a command that lists or reports prints on stdout: table (for a person) or json
    /// (one JSON document, for a script).
    #[arg(
        long,
        short = 'o',
        global = true,
        value_enum,
        default_value_t = Output::Table
    )]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// The log's format: the flag (or `HOOKLINE_LOG_FORMAT`), else `[log] format` of the
    /// config file the command reads, else text. A config file that does not load leaves the
    /// log as text: the command itself then reports what is wrong with it.
    pub fn log_format(&self) -> LogFormat {
        self.log_format.unwrap_or_else(|| {
            Config::load(self.config_path(), Overrides::default())
                .map_or(LogFormat::Text, |config| config.log_format)
        })
    }

    /// The config file the command reads, if it reads one.
    fn config_path(&self) -> Option<&Path> {
        match &self.command {
            Command::Serve(args) | Command::Config(ConfigCommand::Check(args)) => {
                args.store.config.config.as_deref()
            }
            Command::Schedule(args) => args.config.as_deref(),
            Command::Migrate { store, .. }
            | Command::Backup { store, .. }
            | Command::Restore { store, .. }
            | Command::Prune { store, .. } => store.config.config.as_deref(),
            Command::Policy(PolicyCommand::Schedule { config, .. }) => config.as_deref(),
            Command::Capacity(args) => args.config.as_deref(),
            Command::Drill(args) => args.config.as_deref(),
            Command::Config(ConfigCommand::Defaults)
            | Command::Rollout(_)
            | Command::Dlq(_)
            | Command::Resend { .. }
            | Command::Token(_)
            | Command::Openapi
            | Command::Healthcheck { .. }
            | Command::Sink(_) => None,
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP API and the delivery workers in one process.
    Serve(ServeArgs),
    /// Print the retry schedule the configured policy implies, attempt by attempt.
    Schedule(ConfigArg),
    /// The configuration file with every default, and what each setting means.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Named retry policies, through the HTTP API.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Policy rollouts, through the HTTP API.
    #[command(subcommand)]
    Rollout(RolloutCommand),
    /// The capacity arithmetic before deploying: new and retry attempts against the throughput
    /// available (given, read from a running hookline, or measured here), and whether a backlog
    /// drains inside the window.
    Capacity(CapacityArgs),
    /// Apply the database migrations and exit (serve applies them too, safely, at start-up);
    /// --status only reports.
    Migrate {
        #[command(flatten)]
        store: StoreArgs,
        /// Print the schema version, the oldest hookline that can run on it and the pending
        /// migrations; change nothing.
        #[arg(long)]
        status: bool,
    },
    /// Take a consistent copy of the SQLite store into a new file, while hookline serves.
    Backup {
        #[command(flatten)]
        store: StoreArgs,
        /// The backup file to write (must not exist).
        #[arg(long)]
        to: PathBuf,
    },
    /// Replace the SQLite store with a backup; refused while anything has the store open.
    Restore {
        #[command(flatten)]
        store: StoreArgs,
        /// The backup file to restore from.
        #[arg(long)]
        from: PathBuf,
    },
    /// Delete delivered deliveries (and their attempt history) older than a duration, in small
    /// batches that never block workers for long.
    Prune {
        #[command(flatten)]
        store: StoreArgs,
        /// Prune deliveries delivered longer ago than this, e.g. "7d" or "72h".
        #[arg(long)]
        delivered_before: String,
        /// Rows deleted per transaction.
        #[arg(long, default_value_t = 1000)]
        batch: u32,
    },
    /// Inspect and replay the dead-letter queue of a running hookline.
    #[command(subcommand)]
    Dlq(DlqCommand),
    /// Send published events again to one subscriber that lost them (it answered 2xx and
    /// dropped them): new deliveries with fresh webhook-ids, previewed, then confirmed,
    /// bounded and audited.
    #[command(mut_arg("token", |token| token.help(
        "API token with admin scope (a resend makes deliveries; --dry-run needs it too), \
         when the API requires one."
    )))]
    Resend {
        /// The subscriber to send to (it gets its tenant's events of the types it takes now).
        #[arg(long)]
        subscriber: String,
        /// Events accepted at or after this (RFC 3339, UTC, e.g. 2026-12-05T09:00:00Z).
        #[arg(long)]
        since: String,
        /// Events accepted before this (RFC 3339, UTC); default: now.
        #[arg(long)]
        until: Option<String>,
        /// Only events of this type (repeat for several); default: every type it takes.
        #[arg(long = "event-type")]
        event_types: Vec<String>,
        /// How many events to resend at most, oldest first (1..=1000).
        #[arg(long)]
        limit: u32,
        /// Release at most this many per second.
        #[arg(long)]
        per_second: Option<f64>,
        /// Print the events a resend would send now, changing nothing.
        #[arg(long, conflicts_with = "yes")]
        dry_run: bool,
        /// Resend what the preview shows without asking.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        api: ApiArg,
    },
    /// Manage API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Print the API's OpenAPI 3.1 document (what `GET /openapi.json` serves), e.g. to
    /// generate a client.
    Openapi,
    /// Ask a running hookline's `GET /healthz`: exit 0 when it answers 200 (healthy), 1
    /// otherwise. A container's health check, where the image has no HTTP client of its own.
    Healthcheck {
        /// Base URL of the hookline to ask.
        #[arg(long, env = "HOOKLINE_API", default_value = "http://127.0.0.1:8080")]
        url: String,
        /// How long to wait for the answer.
        #[arg(long, default_value = "5s")]
        timeout: String,
    },
    /// Run a subscriber simulator for drills, demos and tests: behaviour by path
    /// (/ok, /status/<code>, /flaky/<n>, /slow/<ms>, /hang, /gone), POST /control to make a
    /// prefix fail or recover, GET /stats.
    Sink(SinkArgs),
    /// Run the failure drill: baseline, a share of destinations unavailable, restore and drain,
    /// then SIGKILL and restart while deliveries wait; prints a report, exits non-zero when a
    /// check fails.
    Drill(DrillArgs),
}

#[derive(Debug, Args)]
struct ConfigArg {
    /// TOML config file.
    #[arg(long, env = "HOOKLINE_CONFIG")]
    config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StoreArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Database URL: sqlite://PATH or postgres://... [default: sqlite://hookline.db].
    /// (`--help` never shows the variable's value: it may hold a password.)
    #[arg(long, env = "HOOKLINE_DATABASE", hide_env_values = true)]
    database: Option<String>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "HOOKLINE_LISTEN")]
    listen: Option<String>,
    /// What this process runs: all (API and workers), api (no claiming) or worker (claims and
    /// delivers; serves only /healthz and /metrics). Split roles need PostgreSQL.
    #[arg(long, env = "HOOKLINE_ROLE", value_enum, default_value_t = Role::All)]
    role: Role,
    /// Export traces (OpenTelemetry, OTLP over HTTP/protobuf) to this collector, e.g.
    /// http://127.0.0.1:4318 (spans go to its /v1/traces) [default: `[telemetry]
    /// otlp_endpoint`, else off].
    #[arg(long, env = "HOOKLINE_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
}

#[derive(Debug, Args)]
struct ApiArg {
    /// Base URL of the hookline API.
    #[arg(long, env = "HOOKLINE_API", default_value = "http://127.0.0.1:8080")]
    api: String,
    /// API token with read scope (or admin), when the API requires one.
    #[arg(long, env = "HOOKLINE_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

#[derive(Debug, Args)]
pub struct DrillArgs {
    /// Drill a running hookline instead of starting one (the crash phase is then skipped; the
    /// drill's sink must be reachable from it).
    #[arg(long)]
    api: Option<String>,
    /// API token for --api.
    #[arg(long, env = "HOOKLINE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Config for the hookline the drill starts (listen and database are the drill's own).
    /// Without it: retries from 2 s doubling to 5 m, 6 attempts, a 30 m window.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Subscribers the drill creates, each pointed at its own path on the drill's sink.
    #[arg(long, default_value_t = 2000)]
    subscribers: usize,
    /// Events per phase.
    #[arg(long, default_value_t = 5)]
    events: usize,
    /// Time between events.
    #[arg(long, default_value = "1s")]
    interval: String,
    /// Share of destinations made unavailable (0 to 1).
    #[arg(long, default_value_t = 0.1)]
    unhealthy: f64,
    /// How many destinations are made unavailable, instead of the --unhealthy share: isolation
    /// at a given number of broken subscribers (at most --subscribers, leaving one healthy).
    #[arg(long, conflicts_with = "unhealthy")]
    hanging: Option<usize>,
    /// Subscribers behind one host of their own that fails (--mode) and recovers while the
    /// healthy ones keep receiving (phase 3b): checks the host never sees more attempts at once
    /// than `delivery.max_in_flight_per_host` and every delivery to it ends. 0 skips the phase.
    #[arg(long, default_value_t = 200)]
    shared_host: usize,
    /// How they fail: hang (never answer) or 503.
    #[arg(long, default_value = "hang", value_parser = ["hang", "503"])]
    mode: String,
    /// The delivery objective healthy subscribers must meet.
    #[arg(long, default_value = "30s")]
    slo: String,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a chart of latency over time (SVG) here.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Add a sustained outage: hold the unavailable cohort down across three attempt timeouts
    /// and a breaker cool-down while events keep coming, then check healthy deliveries kept
    /// their objective and every unavailable delivery ended inside its window with a reason.
    /// Without --config the embedded hookline then runs a drill-sized policy (2 s attempt
    /// timeout, 5 s breaker cool-down, 60 s window).
    #[arg(long)]
    sustained: bool,
}

#[derive(Debug, Args)]
struct SinkArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: std::net::SocketAddr,
    /// Check every signature with this secret (whsec_...).
    #[arg(
        long,
        env = "HOOKLINE_SINK_SECRET",
        hide_env_values = true,
        conflicts_with = "secrets_from"
    )]
    secret: Option<String>,
    /// Check signatures with each subscriber's secret, fetched from this hookline API.
    #[arg(long)]
    secrets_from: Option<String>,
    /// Token for --secrets-from (admin scope).
    #[arg(long, env = "HOOKLINE_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Print a policy's retry schedule attempt by attempt, as `hookline schedule` does for the
    /// configured one (`default` is the configured one).
    Schedule {
        /// The policy's name.
        name: String,
        #[command(flatten)]
        api: ApiArg,
        /// Config whose attempt timeout the schedule assumes.
        #[arg(long, env = "HOOKLINE_CONFIG")]
        config: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub struct CapacityArgs {
    /// Config whose retry policy, concurrency and admission limits to use.
    #[arg(long, env = "HOOKLINE_CONFIG")]
    config: Option<PathBuf>,
    /// Events published per second.
    #[arg(long)]
    events_per_second: f64,
    /// Subscribers each event fans out to.
    #[arg(long)]
    fanout: f64,
    /// The share of attempts that fail retryably (0 to 1), timeouts included.
    #[arg(long, default_value_t = 0.0, conflicts_with = "from_history")]
    failure_rate: f64,
    /// Of the attempts, the share that get no answer (0 to --failure-rate): each holds a
    /// delivery slot for the whole attempt timeout.
    #[arg(long, default_value_t = 0.0, conflicts_with = "from_history")]
    timeout_rate: f64,
    /// How long answered attempts take to answer, as a list (`20ms,50ms,200ms,1s`): with
    /// --measure the loopback sink's subscribers answer after these, spread over them
    /// (default: at once).
    #[arg(long, value_delimiter = ',', conflicts_with = "from_history")]
    answer_times: Vec<String>,
    /// Take the failure and timeout rates and the answer times from the attempts of the last
    /// hour in the configured database (`HOOKLINE_DATABASE`, or the config's `database`).
    #[arg(long)]
    from_history: bool,
    /// With --measure: record the measured rate in the configured database as what the
    /// process has shown, so admission projects with it from the next start instead of
    /// `[admission] min_service_rate`.
    #[arg(long)]
    save: bool,
    /// Attempts per second available; without it (or --workers, or --measure) the sustainable
    /// rate a running hookline measures, read from --api.
    #[arg(long, conflicts_with_all = ["workers", "measure"])]
    service_rate: Option<f64>,
    /// Workers, for a nominal rate of --workers x --attempts-per-worker (the brief's "20
    /// workers x 10 attempts/s"): nominal, not measured.
    #[arg(long, requires = "attempts_per_worker", conflicts_with = "measure")]
    workers: Option<u32>,
    /// Attempts per second one worker makes (with --workers).
    #[arg(long, requires = "workers", conflicts_with_all = ["service_rate", "measure"])]
    attempts_per_worker: Option<f64>,
    /// Deliveries already waiting: does this backlog drain inside the window while the new
    /// traffic goes on?
    #[arg(long)]
    backlog: Option<u64>,
    /// Measure the available rate here: a short, bounded load test of this config (an
    /// in-process hookline on a scratch database, 5,000 first attempts to a loopback sink that
    /// answers as --answer-times and --failure-rate say, or as --from-history found).
    #[arg(long)]
    measure: bool,
    #[command(flatten)]
    api: ApiArg,
}

#[derive(Debug, Subcommand)]
enum RolloutCommand {
    /// Print how the rollout's cohort and the baseline compare: first-attempt latency, retry
    /// and terminal rates (with their significance), dead letters by reason.
    Compare {
        /// The rollout's id (ro_...).
        id: String,
        #[command(flatten)]
        api: ApiArg,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print the configuration file with every default (a starting point for your own).
    Defaults,
    /// Run every check `serve` gives the configuration (parsing, each value, the retry
    /// schedule against its window, the role) without opening the database or starting
    /// anything; exits non-zero on what `serve` would refuse. Takes `serve`'s flags.
    Check(ServeArgs),
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Print a fresh token and the config lines that accept it (only its hash is stored).
    New {
        /// The token's name: recorded in the replay audit and on published events.
        #[arg(long)]
        name: String,
        /// What it may do: admin (everything), publish (POST /v1/events and reading its own
        /// events) or read (every GET but subscriber secrets).
        #[arg(long, value_enum)]
        scope: crate::tokens::Scope,
        /// A tenant's token: it sees and acts on that tenant's objects only, and never the
        /// platform's (tenants, policies, rollouts, capacity, metrics). The tenant need not
        /// exist yet.
        #[arg(long)]
        tenant: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum DlqCommand {
    /// List dead letters, oldest first, filtered by reason and subscriber.
    List {
        /// Only this reason (permanent_failure, attempts_exhausted, window_expired,
        /// next_delay_exceeds_window, subscription_revoked).
        #[arg(long)]
        reason: Option<String>,
        /// Only this subscriber.
        #[arg(long)]
        subscriber: Option<String>,
        /// At most this many rows (1..=1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Continue from a previous page's cursor.
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        api: ApiArg,
    },
    /// Replay dead letters of one reason, in a bounded, audited batch.
    #[command(mut_arg("token", |token| token.help(
        "API token with admin scope (a replay changes the queue; --dry-run needs only read), \
         when the API requires one."
    )))]
    Replay {
        /// The reason to replay.
        #[arg(long)]
        reason: String,
        /// Only this subscriber's dead letters.
        #[arg(long)]
        subscriber: Option<String>,
        /// How many to replay at most (1..=1000).
        #[arg(long)]
        limit: u32,
        /// Release at most this many per second.
        #[arg(long)]
        per_second: Option<f64>,
        /// Print the deliveries a replay would release now (the same as `dlq list` with the
        /// same filter and limit), changing nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        api: ApiArg,
    },
}

fn token_new(
    name: &str,
    scope: crate::tokens::Scope,
    tenant: Option<&str>,
    output: Output,
) -> anyhow::Result<()> {
    use clap::ValueEnum;
    if name.is_empty() {
        return Err(usage("--name must not be empty"));
    }
    if let Some(tenant) = tenant {
        crate::api::validate::tenant_id(tenant)
            .map_err(|e| usage(format!("--tenant: {}", e.message)))?;
    }
    let token = crate::tokens::new_token();
    let hash = crate::tokens::sha256_hex(&token);
    let scope = scope.to_possible_value().expect("every scope has a name");
    let made = serde_json::json!({
        "token": token, "name": name, "sha256": hash, "scope": scope.get_name(), "tenant": tenant,
    });
    output.print(&made, |_| {
        let mut text = format!(
            "token (shown once; give it to the client, keep it secret):\n  {token}\n\n\
             add to the config file:\n\n\
             [[api_tokens]]\nname = {name:?}\nsha256 = \"{hash}\"\nscope = \"{}\"\n",
            scope.get_name()
        );
        if let Some(tenant) = tenant {
            text += &format!(
                "tenant = {tenant:?}\n# with tenants' tokens, /metrics must need a token: set \
                 [metrics] open = false\n"
            );
        }
        text
    });
    Ok(())
}

/// The error, then each cause its text does not already say: many errors write their cause
/// into their own text, and `{:#}` would say it twice.
fn with_causes(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text = format!("{text}: {cause}");
        }
    }
    text
}

/// Runs the parsed command line; errors are printed here and become the exit code.
pub async fn run(cli: Cli) -> ExitCode {
    let output = cli.output;
    let result = if output == Output::Json && !cli.command.reports() {
        Err(usage(
            "-o json: this command prints no listing or report on stdout (for its log on \
             stderr as JSON: --log-format json)",
        ))
    } else {
        run_command(cli.command, output).await
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let usage = error.is::<Usage>();
            let text = with_causes(&error);
            let hint = if usage {
                "\n\nFor more information, try '--help'."
            } else {
                ""
            };
            crate::logs::say(
                tracing::Level::ERROR,
                module_path!(),
                &text,
                &format!("error: {text}{hint}"),
            );
            if usage {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

impl Command {
    /// Whether the command prints a listing or a report on stdout, which `-o` shapes.
    fn reports(&self) -> bool {
        !matches!(
            self,
            Command::Serve(_)
                | Command::Sink(_)
                | Command::Config(ConfigCommand::Defaults)
                | Command::Openapi
                | Command::Healthcheck { .. }
        )
    }
}

async fn run_command(command: Command, output: Output) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => serve::run(args).await,
        Command::Schedule(args) => schedule::run(args.config.as_deref(), output),
        Command::Migrate {
            store: args,
            status,
        } => {
            if status {
                store::migrate_status(args, output).await
            } else {
                store::migrate(args, output).await
            }
        }
        Command::Backup { store: args, to } => store::backup(args, to, output).await,
        Command::Restore { store: args, from } => store::restore(args, from, output).await,
        Command::Prune {
            store: args,
            delivered_before,
            batch,
        } => store::prune(args, &delivered_before, batch, output).await,
        Command::Dlq(DlqCommand::List {
            reason,
            subscriber,
            limit,
            cursor,
            api,
        }) => dlq::list(&api, reason, subscriber, limit, cursor, output).await,
        Command::Dlq(DlqCommand::Replay {
            reason,
            subscriber,
            limit,
            per_second,
            dry_run,
            api,
        }) => {
            let mode = if dry_run {
                dlq::ReplayMode::DryRun
            } else {
                dlq::ReplayMode::Replay
            };
            dlq::replay(&api, reason, subscriber, limit, per_second, mode, output).await
        }
        Command::Resend {
            subscriber,
            since,
            until,
            event_types,
            limit,
            per_second,
            dry_run,
            yes,
            api,
        } => {
            let confirm = match (dry_run, yes) {
                (true, _) => resend::Confirm::DryRun,
                (false, true) => resend::Confirm::Yes,
                (false, false) => resend::Confirm::Ask,
            };
            let asked = resend::Asked {
                subscriber,
                since,
                until,
                event_types,
                limit,
                per_second,
            };
            resend::run(&api, asked, confirm, output).await
        }
        Command::Token(TokenCommand::New {
            name,
            scope,
            tenant,
        }) => token_new(&name, scope, tenant.as_deref(), output),
        Command::Openapi => {
            println!("{}", crate::api::openapi::document());
            Ok(())
        }
        Command::Healthcheck { url, timeout } => client::healthcheck(&url, &timeout).await,
        Command::Policy(PolicyCommand::Schedule { name, api, config }) => {
            policy::schedule(&name, &api, config.as_deref(), output).await
        }
        Command::Rollout(RolloutCommand::Compare { id, api }) => {
            rollout::compare(&id, &api, output).await
        }
        Command::Capacity(args) => capacity::run(args, output).await,
        Command::Config(ConfigCommand::Defaults) => {
            print!("{}", crate::config::DEFAULTS);
            Ok(())
        }
        Command::Config(ConfigCommand::Check(args)) => config::check(args, output),
        Command::Drill(args) => drill::run(args, output).await,
        Command::Sink(args) => {
            let secrets = match (args.secret, args.secrets_from) {
                (Some(secret), _) => Some(Secrets::One(secret)),
                (None, Some(api)) => Some(Secrets::FromApi {
                    api,
                    token: args.token,
                }),
                (None, None) => None,
            };
            // hookline's own signer: the tests hold it to the reference implementation, which
            // the service binary does not link.
            let signatures = secrets.map_or(Signatures::Unchecked, |secrets| Signatures::Checked {
                secrets,
                sign: |secret, id, timestamp, body| {
                    SigningKey::from_secret(secret)
                        .ok()
                        .map(|key| key.sign(id, timestamp, body))
                },
            });
            hookline_testkit::sink::serve(args.listen, signatures).await
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::{with_causes, Cli};

    /// A cause is said once: after the error when its text leaves it out, not again when the
    /// text already says it.
    #[test]
    fn an_error_says_each_cause_once() {
        let io = || std::io::Error::other("disk on fire");
        let context = anyhow::Error::new(io()).context("reading the config");
        assert_eq!(with_causes(&context), "reading the config: disk on fire");
        #[derive(Debug, thiserror::Error)]
        #[error("cannot read hookline.toml: {source}")]
        struct Read {
            source: std::io::Error,
        }
        let said = anyhow::Error::new(Read { source: io() });
        assert_eq!(
            with_causes(&said),
            "cannot read hookline.toml: disk on fire"
        );
    }

    /// `text` with every run of whitespace one space: clap wraps and indents what it prints.
    fn normalised(text: &str) -> String {
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// Every command under `cmd` (itself included), each with its path (`hookline dlq replay`).
    fn every_command(cmd: &clap::Command, path: &str) -> Vec<(String, clap::Command)> {
        let path = format!("{path} {}", cmd.get_name()).trim().to_owned();
        let mut all = vec![(path.clone(), cmd.clone())];
        for sub in cmd.get_subcommands() {
            all.extend(every_command(sub, &path));
        }
        all
    }

    /// What each `--help` prints is what the doc comments say, as written (clap reads some
    /// text as its own: `{n}` becomes a line break), and every flag and argument says what
    /// it is.
    #[test]
    fn every_help_prints_its_text_as_written_and_describes_every_flag() {
        let mut root = Cli::command();
        root.build();
        for (path, cmd) in every_command(&root, "") {
            let help = normalised(&cmd.clone().render_long_help().to_string());
            if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
                let about = normalised(&about.to_string());
                assert!(
                    help.contains(&about),
                    "{path} --help garbles {about:?}:\n{help}"
                );
            }
            for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                let id = arg.get_id();
                let text = arg.get_long_help().or(arg.get_help());
                let text = normalised(&text.map(ToString::to_string).unwrap_or_default());
                assert!(!text.is_empty(), "{path} {id}: no description");
                assert!(help.contains(&text), "{path} {id} --help garbles {text:?}");
            }
        }
    }

    /// `--token` says which scope the command needs: admin only where it changes something.
    #[test]
    fn token_help_names_the_scope_its_command_needs() {
        let mut root = Cli::command();
        root.build();
        for (path, cmd) in every_command(&root, "") {
            let Some(token) = cmd.get_arguments().find(|a| a.get_id() == "token") else {
                continue;
            };
            let help = token
                .get_help()
                .map(ToString::to_string)
                .unwrap_or_default();
            if path == "hookline dlq replay" || path == "hookline resend" {
                assert!(help.contains("admin scope"), "{path}: {help}");
            } else {
                assert!(
                    !help.contains("replay"),
                    "{path} --token speaks of replays: {help}"
                );
            }
        }
    }
}
