//! Configuration: defaults, overridden by the TOML file, overridden by flags and environment.
//! Everything is checked at start-up, and a bad value is refused with a message naming its key,
//! so a typo can never silently become a default.
//!
//! Every default is written once, in `defaults.toml`: the file a user writes is laid over it
//! (table by table), `hookline config defaults` prints it, and a test holds the
//! configuration block of `docs/GUIDE.md` to it.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use hookline_engine::config::DeliveryConfig;
use hookline_engine::destination::{Guard, Guards, TenantDestinations};
use hookline_engine::telemetry::{LatencyLabels, TenantLabels};
use hookline_policy::{BreakerConfig, FailingStreak, Jitter, RetryPolicy};
use serde::Deserialize;

use crate::tokens::{ApiToken, Scope};
use ipnet::IpNet;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("config key `{key}`: {message}")]
    Invalid { key: &'static str, message: String },
}

fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}

/// The file as written. Every field is optional; unknown keys are refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    database: Option<String>,
    database_pool_size: Option<u64>,
    allow_private_destinations: Option<bool>,
    allowed_networks: Option<Vec<String>>,
    https_only: Option<bool>,
    max_payload_bytes: Option<u64>,
    #[serde(default)]
    api_tokens: Vec<TokenFile>,
    #[serde(default)]
    delivery: DeliveryFile,
    #[serde(default)]
    retry: RetryFile,
    #[serde(default)]
    metrics: MetricsFile,
    #[serde(default)]
    breaker: BreakerFile,
    #[serde(default)]
    http: HttpFile,
    #[serde(default)]
    admission: AdmissionFile,
    #[serde(default)]
    console: ConsoleFile,
    #[serde(default)]
    portal: PortalFile,
    #[serde(default)]
    tenants: TenantsFile,
    #[serde(default)]
    events: EventsFile,
    #[serde(default)]
    log: LogFile,
    #[serde(default)]
    operational: OperationalFile,
    #[serde(default)]
    lifecycle: LifecycleFile,
    #[serde(default)]
    telemetry: TelemetryFile,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TelemetryFile {
    otlp_endpoint: Option<String>,
}

/// `[telemetry]`: where traces go.
#[derive(Debug, Clone, Default)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP collector's base URL (spans go to `<it>/v1/traces`); `None`: tracing is
    /// off.
    pub otlp_endpoint: Option<url::Url>,
}

impl TelemetryConfig {
    /// Where spans are posted: the endpoint's `/v1/traces`, as OpenTelemetry's
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` is read.
    pub fn traces_url(&self) -> Option<String> {
        let endpoint = self.otlp_endpoint.as_ref()?;
        Some(format!(
            "{}/v1/traces",
            endpoint.as_str().trim_end_matches('/')
        ))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct OperationalFile {
    url: Option<String>,
    secret: Option<String>,
    failing_after: Option<u64>,
    dead_letter_spike: Option<u64>,
    spike_window: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LifecycleFile {
    disable_after: Option<DurationOrZero>,
}

/// A duration as text, or the number 0 (`disable_after = 0`: never).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum DurationOrZero {
    Text(String),
    Number(i64),
}

/// `[operational]` and `[lifecycle]`: what hookline tells of its subscribers, and when it
/// pauses one.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationalConfig {
    /// `[operational] url` and `secret`; `None`: whatever `POST /v1/operational-endpoint` set.
    pub endpoint: Option<ConfiguredEndpoint>,
    /// Failed attempts in a row that make a subscriber failing.
    pub failing_after: u32,
    /// Dead letters of one reason within `spike_window` that are a spike; `None`: never told.
    pub dead_letter_spike: Option<u64>,
    pub spike_window: Duration,
    /// `[lifecycle] disable_after`; `None`: never.
    pub disable_after: Option<Duration>,
}

/// The operational endpoint as the configuration file sets it.
#[derive(Clone, PartialEq)]
pub struct ConfiguredEndpoint {
    pub url: String,
    pub secret: String,
}

/// Not the secret: configurations are logged.
impl std::fmt::Debug for ConfiguredEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfiguredEndpoint")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// `[telemetry] otlp_endpoint`: an http or https URL of a collector, as its base (no query,
/// fragment or credentials: a collector's credentials go in `OTEL_EXPORTER_OTLP_HEADERS`, never
/// in a URL that shows in `hookline config` and the logs).
fn otlp_endpoint(text: &str) -> Result<url::Url, ConfigError> {
    const KEY: &str = "telemetry.otlp_endpoint";
    const LIKE: &str = "a collector's URL like \"http://127.0.0.1:4318\"";
    let url =
        url::Url::parse(text).map_err(|e| invalid(KEY, format!("{text:?} is not {LIKE} ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
        return Err(invalid(
            KEY,
            format!("{text:?} is not {LIKE}: http or https, and a host"),
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid(
            KEY,
            format!("{text:?} has a query or fragment: give the collector's base URL"),
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            KEY,
            "holds credentials: give them in OTEL_EXPORTER_OTLP_HEADERS instead",
        ));
    }
    Ok(url)
}

/// `[operational]` and `[lifecycle]` as written: each checked, naming its key.
fn operational(o: OperationalFile, l: LifecycleFile) -> Result<OperationalConfig, ConfigError> {
    let url = given("operational.url", o.url)?;
    let secret = given("operational.secret", o.secret)?;
    let endpoint = match (url.is_empty(), secret.is_empty()) {
        (true, true) => None,
        (true, false) => {
            return Err(invalid(
                "operational.secret",
                "is set without operational.url: set both, or neither",
            ))
        }
        (false, true) => {
            return Err(invalid(
                "operational.secret",
                "is required with operational.url (a whsec_... secret; \
                 `openssl rand -base64 32` makes the part after whsec_)",
            ))
        }
        (false, false) => {
            url::Url::parse(&url)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https"))
                .ok_or_else(|| {
                    invalid("operational.url", format!("{url:?} is not an http(s) URL"))
                })?;
            hookline_engine::signer::SigningKey::from_secret(&secret)
                .map_err(|e| invalid("operational.secret", e.to_string()))?;
            Some(ConfiguredEndpoint { url, secret })
        }
    };
    let spike = given("operational.dead_letter_spike", o.dead_letter_spike)?;
    let disable_after = match given("lifecycle.disable_after", l.disable_after)? {
        DurationOrZero::Number(0) => Duration::ZERO,
        DurationOrZero::Number(n) => {
            return Err(invalid(
                "lifecycle.disable_after",
                format!("{n} has no unit: write a duration like \"72h\", or 0 for never"),
            ))
        }
        DurationOrZero::Text(text) => {
            parse_duration(&text).map_err(|e| invalid("lifecycle.disable_after", e.to_string()))?
        }
    };
    let failing_after: u32 = positive("operational.failing_after", o.failing_after)?;
    if failing_after > FailingStreak::MAX_COUNTED {
        return Err(invalid(
            "operational.failing_after",
            format!(
                "must be at most {}: failed attempts are counted up to that",
                FailingStreak::MAX_COUNTED
            ),
        ));
    }
    Ok(OperationalConfig {
        endpoint,
        failing_after,
        spike_window: duration("operational.spike_window", o.spike_window)?,
        dead_letter_spike: (spike > 0).then_some(spike),
        disable_after: (!disable_after.is_zero()).then_some(disable_after),
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogFile {
    format: Option<String>,
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line a record, for a person (colour codes only on a terminal).
    Text,
    /// One JSON object a line (timestamp, level, target, message, fields), for log shippers.
    Json,
}

impl LogFormat {
    /// `[log] format` as written.
    fn parse(text: &str) -> Option<LogFormat> {
        match text {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsFile {
    require_registered_types: Option<bool>,
}

/// What a publish of a type the event type catalog does not hold gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnregisteredTypes {
    /// Published like any other (`[events] require_registered_types = false`).
    Accepted,
    /// 422 `unregistered_type`, nothing stored.
    Refused,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantsFile {
    destinations: Option<TenantDestinationsFile>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum TenantDestinationsFile {
    Public,
    AsPlatform,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsoleFile {
    drill_reports: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PortalFile {
    frame_ancestors: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AdmissionFile {
    max_backlog: Option<u64>,
    max_projected_drain: Option<String>,
    min_service_rate: Option<f64>,
}

/// What a publish is held to before its fan-out is accepted.
#[derive(Debug, Clone, Copy)]
pub struct AdmissionConfig {
    /// Deliveries not yet ended, across every process, a fan-out may not take the backlog past.
    pub max_backlog: u64,
    /// How long the backlog may take to drain at the measured sustainable rate (`None`: half
    /// the delivery window in force).
    pub max_projected_drain: Option<Duration>,
    /// Attempts per second a fresh install is trusted to sustain before it has shown more
    /// (default: every slot busy with an attempt that runs to its timeout).
    pub min_service_rate: f64,
}

impl AdmissionConfig {
    /// The drain limit for deliveries of `window`.
    pub fn max_projected_drain(&self, window: Duration) -> Duration {
        self.max_projected_drain.unwrap_or(window / 2)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    header_read_timeout: Option<String>,
    body_read_timeout: Option<String>,
    idle_timeout: Option<String>,
    max_connections: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BreakerFile {
    failures: Option<u64>,
    cool_down: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricsFile {
    refresh_interval: Option<String>,
    per_subscriber_labels: Option<bool>,
    per_tenant_labels: Option<bool>,
    open: Option<bool>,
}

#[derive(Debug, Clone)]
pub struct MetricsConfig {
    /// How often gauges that need a store query are refreshed.
    pub refresh_interval: Duration,
    /// Label delivery latency by subscriber (switch off for very large fleets).
    pub latency_labels: LatencyLabels,
    /// Label attempts, first-attempt latency and publishes by tenant.
    pub tenant_labels: TenantLabels,
    /// Serve `/metrics` without a token.
    pub open: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    name: String,
    sha256: String,
    scope: Scope,
    /// The tenant it acts for (tokens are config, tenants are data: it may name one that does
    /// not exist yet, and sees nothing until then).
    tenant: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeliveryFile {
    concurrency: Option<u64>,
    attempt_timeout: Option<String>,
    max_in_flight_per_subscriber: Option<u64>,
    max_in_flight_per_host: Option<u64>,
    first_attempt_share: Option<f64>,
    slow_after: Option<String>,
    slow_lane: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryFile {
    base_delay: Option<String>,
    max_delay: Option<String>,
    max_attempts: Option<u64>,
    delivery_window: Option<String>,
    jitter: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub database: String,
    /// PostgreSQL connections this process keeps.
    pub database_pool_size: usize,
    /// The SSRF guards: `allow_private_destinations`, `allowed_networks`, `https_only` for the
    /// platform's subscribers, and `[tenants] destinations` for tenants'.
    pub guards: Guards,
    pub max_payload_bytes: usize,
    pub delivery: DeliveryConfig,
    pub retry: RetryPolicy,
    /// Bearer tokens the API accepts; none means the API is open (loopback only).
    pub api_tokens: Vec<ApiToken>,
    pub metrics: MetricsConfig,
    /// The per-subscriber circuit breaker; its cool-down never grows past `retry.max_delay`.
    pub breaker: BreakerConfig,
    /// Timeouts and the connection cap of the API's HTTP server.
    pub http: crate::server::HttpLimits,
    pub admission: AdmissionConfig,
    /// Where the console looks for the latest `hookline drill --json` report.
    pub drill_reports: std::path::PathBuf,
    /// Origins whose pages may show the portal in a frame (its CSP's `frame-ancestors`); none
    /// when empty. Each is an origin as a browser writes it (`https://platform.example`).
    pub portal_frame_ancestors: Vec<String>,
    /// `[events] require_registered_types`.
    pub unregistered_types: UnregisteredTypes,
    /// `[log] format`; `--log-format` and `HOOKLINE_LOG_FORMAT` win over it.
    pub log_format: LogFormat,
    pub operational: OperationalConfig,
    /// `[telemetry]`; `--otlp-endpoint` and `HOOKLINE_OTLP_ENDPOINT` win over its endpoint.
    pub telemetry: TelemetryConfig,
}

/// Values given on the command line or in the environment; they win over the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<String>,
    pub database: Option<String>,
    pub otlp_endpoint: Option<String>,
}

/// Every default, with what it means: the documented configuration file.
pub const DEFAULTS: &str = include_str!("defaults.toml");

/// `over` laid on `base`: its keys win, tables merge key by key.
fn laid_over(mut base: toml::Table, over: toml::Table) -> toml::Table {
    for (key, value) in over {
        let merged = match (base.remove(&key), value) {
            (Some(toml::Value::Table(base)), toml::Value::Table(over)) => {
                toml::Value::Table(laid_over(base, over))
            }
            (_, value) => value,
        };
        base.insert(key, merged);
    }
    base
}

impl Config {
    /// How to open the store for maintenance beside the serving process (a command).
    pub fn store_options(&self) -> hookline_store::OpenOptions {
        hookline_store::OpenOptions {
            pool_size: self.database_pool_size,
            serving: false,
        }
    }

    /// How the process that publishes and claims (`serve`) opens the store: on SQLite, the
    /// only one that may.
    pub fn serving_store_options(&self) -> hookline_store::OpenOptions {
        hookline_store::OpenOptions {
            serving: true,
            ..self.store_options()
        }
    }

    /// Loads `path` (if any) and applies `overrides` on top.
    pub fn load(path: Option<&Path>, overrides: Overrides) -> Result<Self, ConfigError> {
        let file = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.display().to_string(),
                    source,
                })?;
                Self::parse_file(&text).map_err(|e| match e {
                    ConfigError::Parse { message, .. } => ConfigError::Parse {
                        path: path.display().to_string(),
                        message,
                    },
                    other => other,
                })?
            }
            None => Self::parse_file("")?,
        };
        Self::resolve(file, overrides)
    }

    /// [`Config::load`], then what `serve` refuses to start with beyond each value's own
    /// validity: a `[retry]` whose last attempt can never start inside its window (the rule
    /// named policies are held to). `serve` and `hookline config check` both call this, so the
    /// check finds exactly what start-up would refuse. `load` alone keeps such a policy, so
    /// `hookline schedule` can still show where it falls out of the window.
    pub fn load_for_serve(path: Option<&Path>, overrides: Overrides) -> Result<Self, ConfigError> {
        let config = Self::load(path, overrides)?;
        config
            .retry
            .fits_window(config.delivery.attempt_timeout)
            .map_err(|e| invalid("retry.max_attempts", e.to_string()))?;
        Ok(config)
    }

    /// Parses a config file's text with no overrides.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        Self::resolve(Self::parse_file(text)?, Overrides::default())
    }

    /// The file as written, checked (with line numbers in errors), then laid over the defaults.
    fn parse_file(text: &str) -> Result<FileConfig, ConfigError> {
        Self::parse_alone::<FileConfig>(text)?;
        let defaults: toml::Table = toml::from_str(DEFAULTS).expect("defaults.toml parses");
        let file: toml::Table = Self::parse_alone(text)?;
        toml::Value::Table(laid_over(defaults, file))
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse {
                path: "<config>".into(),
                message: e.message().to_string(),
            })
    }

    fn parse_alone<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: "<config>".into(),
            message: match e.span() {
                // Name the line: serde's messages ("expected u64") do not name the key.
                Some(span) => {
                    let line = text[..span.start].matches('\n').count() + 1;
                    let source = text.lines().nth(line - 1).unwrap_or_default().trim();
                    format!("line {line} (`{source}`): {}", e.message())
                }
                None => e.message().to_string(),
            },
        })
    }

    fn resolve(file: FileConfig, overrides: Overrides) -> Result<Self, ConfigError> {
        let listen = given("listen", overrides.listen.or(file.listen))?;
        let listen = listen.parse().map_err(|_| {
            invalid(
                "listen",
                format!("{listen:?} is not an address like 127.0.0.1:8080"),
            )
        })?;
        let database = given("database", overrides.database.or(file.database))?;
        let backend = hookline_store::Backend::of(&database)
            .map_err(|e| invalid("database", e.to_string()))?;
        let max_payload_bytes = positive("max_payload_bytes", file.max_payload_bytes)?;

        let d = file.delivery;
        let concurrency = match d.concurrency {
            Some(n) => positive("delivery.concurrency", Some(n))?,
            // `defaults.toml` says which, as the backend gives them.
            None => backend.default_slots,
        };
        let delivery = DeliveryConfig {
            concurrency: fits("delivery.concurrency", concurrency)?,
            slow_lane: fits("delivery.slow_lane", d.slow_lane.unwrap_or_default())?,
            attempt_timeout: duration("delivery.attempt_timeout", d.attempt_timeout)?,
            max_in_flight_per_subscriber: positive(
                "delivery.max_in_flight_per_subscriber",
                d.max_in_flight_per_subscriber,
            )?,
            max_in_flight_per_host: fits(
                "delivery.max_in_flight_per_host",
                given("delivery.max_in_flight_per_host", d.max_in_flight_per_host)?,
            )?,
            slow_after: duration("delivery.slow_after", d.slow_after)?,
            first_attempt_share: match given("delivery.first_attempt_share", d.first_attempt_share)?
            {
                s if (0.0..1.0).contains(&s) => s,
                s => {
                    return Err(invalid(
                        "delivery.first_attempt_share",
                        format!("{s} is not in [0, 1): retries need at least some slots"),
                    ))
                }
            },
        };

        let r = file.retry;
        let jitter = given("retry.jitter", r.jitter)?;
        let jitter = Jitter::parse(&jitter).ok_or_else(|| {
            invalid(
                "retry.jitter",
                format!("{jitter:?} is not one of \"equal\", \"full\", \"none\""),
            )
        })?;
        let max_attempts = given("retry.max_attempts", r.max_attempts)?;
        if max_attempts == 0 {
            return Err(invalid("retry.max_attempts", "must be at least 1"));
        }
        let max_attempts = fits("retry.max_attempts", max_attempts)?;
        let base_delay = duration("retry.base_delay", r.base_delay)?;
        let max_delay = duration("retry.max_delay", r.max_delay)?;
        let window = duration("retry.delivery_window", r.delivery_window)?;
        let retry = RetryPolicy::new(base_delay, max_delay, max_attempts, window, jitter)
            .map_err(|e| invalid(e.key(), e.to_string()))?;

        let api_tokens = tokens(file.api_tokens)?;
        let m = file.metrics;
        let metrics = MetricsConfig {
            refresh_interval: duration("metrics.refresh_interval", m.refresh_interval)?,
            latency_labels: if given("metrics.per_subscriber_labels", m.per_subscriber_labels)? {
                LatencyLabels::PerSubscriber
            } else {
                LatencyLabels::Unlabelled
            },
            tenant_labels: if given("metrics.per_tenant_labels", m.per_tenant_labels)? {
                TenantLabels::PerTenant
            } else {
                TenantLabels::Unlabelled
            },
            open: given("metrics.open", m.open)?,
        };
        if metrics.open && api_tokens.iter().any(|t| t.tenant.is_some()) {
            return Err(invalid(
                "metrics.open",
                "tenants' tokens are configured, and an open /metrics shows every tenant's \
                 series to anyone who reaches it: set [metrics] open = false (scrape it with a \
                 read token)",
            ));
        }
        let breaker = BreakerConfig {
            failures: positive("breaker.failures", file.breaker.failures)?,
            cool_down: duration("breaker.cool_down", file.breaker.cool_down)?,
            max_cool_down: retry.max_delay(),
        };
        let h = file.http;
        let http = crate::server::HttpLimits {
            header_read_timeout: limit("http.header_read_timeout", h.header_read_timeout)?,
            body_read_timeout: limit("http.body_read_timeout", h.body_read_timeout)?,
            idle_timeout: limit("http.idle_timeout", h.idle_timeout)?,
            max_connections: positive("http.max_connections", h.max_connections)?,
        };
        let a = file.admission;
        let admission = AdmissionConfig {
            max_backlog: positive("admission.max_backlog", a.max_backlog)?,
            max_projected_drain: match a.max_projected_drain {
                None => None,
                given => Some(duration("admission.max_projected_drain", given)?),
            },
            min_service_rate: match a.min_service_rate {
                Some(r) if r.is_finite() && r > 0.0 => r,
                Some(_) => {
                    return Err(invalid(
                        "admission.min_service_rate",
                        "must be a number of attempts per second greater than zero",
                    ))
                }
                None => slots_at_timeout(&delivery),
            },
        };
        let drill_reports = given("console.drill_reports", file.console.drill_reports)?;
        if drill_reports.is_empty() {
            return Err(invalid(
                "console.drill_reports",
                "must name a directory (\".\" for the working directory)",
            ));
        }
        let portal_frame_ancestors = given("portal.frame_ancestors", file.portal.frame_ancestors)?
            .iter()
            .map(|text| frame_ancestor(text))
            .collect::<Result<_, _>>()?;
        let unregistered_types = if given(
            "events.require_registered_types",
            file.events.require_registered_types,
        )? {
            UnregisteredTypes::Refused
        } else {
            UnregisteredTypes::Accepted
        };
        let log_format = given("log.format", file.log.format)?;
        let log_format = LogFormat::parse(&log_format).ok_or_else(|| {
            invalid(
                "log.format",
                format!("{log_format:?} is not one of \"text\", \"json\""),
            )
        })?;
        let telemetry = TelemetryConfig {
            otlp_endpoint: overrides
                .otlp_endpoint
                .or(file.telemetry.otlp_endpoint)
                .map(|text| otlp_endpoint(&text))
                .transpose()?,
        };
        Ok(Config {
            telemetry,
            operational: operational(file.operational, file.lifecycle)?,
            log_format,
            unregistered_types,
            drill_reports: drill_reports.into(),
            portal_frame_ancestors,
            admission,
            http,
            breaker,
            metrics,
            api_tokens,
            listen,
            database,
            database_pool_size: positive("database_pool_size", file.database_pool_size)?,
            guards: Guards::new(
                Guard {
                    enabled: !given(
                        "allow_private_destinations",
                        file.allow_private_destinations,
                    )?,
                    allowed_networks: networks(given("allowed_networks", file.allowed_networks)?)?,
                    https_only: given("https_only", file.https_only)?,
                },
                match given("tenants.destinations", file.tenants.destinations)? {
                    TenantDestinationsFile::Public => TenantDestinations::Public,
                    TenantDestinationsFile::AsPlatform => TenantDestinations::AsPlatform,
                },
            ),
            max_payload_bytes,
            delivery,
            retry,
        })
    }
}

fn tokens(file: Vec<TokenFile>) -> Result<Vec<ApiToken>, ConfigError> {
    let mut tokens: Vec<ApiToken> = Vec::with_capacity(file.len());
    for t in file {
        if t.name.is_empty() || tokens.iter().any(|other| other.name == t.name) {
            return Err(invalid(
                "api_tokens.name",
                format!("{:?} is empty or not unique", t.name),
            ));
        }
        let sha256 = parse_sha256(&t.sha256).ok_or_else(|| {
            invalid(
                "api_tokens.sha256",
                format!(
                    "token {:?}: expected 64 hex characters, the SHA-256 of the token",
                    t.name
                ),
            )
        })?;
        if let Some(tenant) = &t.tenant {
            crate::api::validate::tenant_id(tenant).map_err(|e| {
                invalid(
                    "api_tokens.tenant",
                    format!("token {:?}: {}", t.name, e.message),
                )
            })?;
        }
        tokens.push(ApiToken {
            name: t.name,
            sha256,
            scope: t.scope,
            tenant: t.tenant,
        });
    }
    Ok(tokens)
}

fn networks(cidrs: Vec<String>) -> Result<Vec<IpNet>, ConfigError> {
    cidrs
        .iter()
        .map(|c| {
            c.parse::<IpNet>().map_err(|_| {
                invalid(
                    "allowed_networks",
                    format!("{c:?} is not a network like \"10.1.0.0/16\" or \"fd00::/8\""),
                )
            })
        })
        .collect()
}

/// An origin that may frame the portal, exactly as a browser serializes it (scheme, host, and
/// a port other than the scheme's), since it goes into the portal's CSP as written: anything
/// else a CSP source could say (a path, a wildcard, `'self'`, `*`, a scheme alone) would let
/// more pages frame it than the one named.
fn frame_ancestor(text: &str) -> Result<String, ConfigError> {
    const KEY: &str = "portal.frame_ancestors";
    const LIKE: &str = "an origin like \"https://platform.example\"";
    let url =
        url::Url::parse(text).map_err(|e| invalid(KEY, format!("{text:?} is not {LIKE} ({e})")))?;
    let plain_host = match url.host() {
        Some(url::Host::Domain(domain)) => domain
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'),
        Some(url::Host::Ipv4(_) | url::Host::Ipv6(_)) => true,
        None => false,
    };
    if !matches!(url.scheme(), "https" | "http") || !plain_host {
        return Err(invalid(
            KEY,
            format!("{text:?} is not {LIKE}: http or https, and a host without wildcards"),
        ));
    }
    let origin = url.origin().ascii_serialization();
    if origin != text {
        return Err(invalid(
            KEY,
            format!(
                "{text:?} is not an origin: write {origin:?} (scheme, host and port only, no \
                 path, no user, no default port)"
            ),
        ));
    }
    Ok(origin)
}

fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// A value the file or `defaults.toml` gives (every key has a default there; a test holds it).
fn given<T>(key: &'static str, value: Option<T>) -> Result<T, ConfigError> {
    value.ok_or_else(|| invalid(key, "has no value and no default"))
}

/// The attempts per second the slots complete even when every attempt runs to its timeout:
/// the least they guarantee, measured nothing (the slow lane only adds to it).
fn slots_at_timeout(delivery: &DeliveryConfig) -> f64 {
    delivery.concurrency as f64 / delivery.attempt_timeout.as_secs_f64().max(0.001)
}

/// The number at `key`, which must be more than zero, as the type the configuration holds it
/// in.
fn positive<T: TryFrom<u64>>(key: &'static str, value: Option<u64>) -> Result<T, ConfigError> {
    match given(key, value)? {
        0 => Err(invalid(key, "must be greater than zero")),
        v => fits(key, v),
    }
}

/// The number at `key` as the type the configuration holds it in: one too large for it is
/// refused, not cut down to another.
fn fits<T: TryFrom<u64>>(key: &'static str, value: u64) -> Result<T, ConfigError> {
    T::try_from(value).map_err(|_| invalid(key, "is too large"))
}

fn duration(key: &'static str, value: Option<String>) -> Result<Duration, ConfigError> {
    let text = given(key, value)?;
    let d = parse_duration(&text).map_err(|e| invalid(key, e.to_string()))?;
    if d.is_zero() {
        return Err(invalid(key, "must be greater than zero"));
    }
    Ok(d)
}

/// A server timeout: above zero, at most a day.
fn limit(key: &'static str, value: Option<String>) -> Result<Duration, ConfigError> {
    const DAY: Duration = Duration::from_secs(24 * 3600);
    match duration(key, value)? {
        d if d > DAY => Err(invalid(key, "must be at most 24h")),
        d => Ok(d),
    }
}

/// Durations like "250ms", "2s", "5m", "1h30m", "24h".
pub fn parse_duration(text: &str) -> Result<Duration, NotADuration> {
    humantime::parse_duration(text.trim()).map_err(|source| NotADuration {
        text: text.to_owned(),
        source,
    })
}

/// A text that `parse_duration` does not read, with what it tripped on.
#[derive(Debug, thiserror::Error)]
#[error("{text:?} is not a duration like \"250ms\", \"2s\" or \"5m\" ({source})")]
pub struct NotADuration {
    text: String,
    source: humantime::DurationError,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_file_parses_to_the_defaults() {
        let c = Config::from_toml(DEFAULTS).unwrap();
        let d = Config::from_toml("").unwrap();
        assert_eq!(format!("{c:?}"), format!("{d:?}"));
        assert_eq!(
            c.delivery.concurrency, 512,
            "on SQLite, the default database"
        );
        assert_eq!(c.delivery.slow_lane, 8192);
        assert_eq!(c.retry.max_delay(), Duration::from_secs(3600));
        assert_eq!(c.http.idle_timeout, Duration::from_secs(75));
    }

    /// The default `[retry]` comes from a delivery SLO (docs/GUIDE.md, "Retries from your
    /// delivery SLO"): a subscriber down for 8 hours still gets its deliveries, every delivery
    /// ends within a day, and a blip is retried within a minute. Checked on the schedule
    /// arithmetic itself, so a change to the defaults or to the backoff that breaks the promise
    /// fails here.
    #[test]
    fn the_default_retry_rides_out_an_eight_hour_outage_inside_a_day() {
        let c = Config::from_toml("").unwrap();
        let hour = Duration::from_secs(3600);
        assert_eq!(c.retry.delivery_window(), 24 * hour);
        let s = c.retry.schedule(c.delivery.attempt_timeout);
        let last = s.rows.last().unwrap();
        // EARLIEST is the worst jitter for the outage: every wait at its shortest.
        assert!(last.earliest >= 8 * hour, "{last:?}");
        // LATEST (longest jitter, every attempt to its timeout) still starts inside the window.
        assert_eq!(last.fit, hookline_policy::WindowFit::Always, "{last:?}");
        assert_eq!(s.worst_case_attempts, c.retry.max_attempts());
        let first_retry = &s.rows[1];
        assert!(
            first_retry.latest < Duration::from_secs(60),
            "{first_retry:?}"
        );
        assert!(c.retry.fits_window(c.delivery.attempt_timeout).is_ok());
    }

    /// With no `delivery.concurrency`, the slots follow the database (as `defaults.toml`
    /// says, in the numbers used); one set in the file is used on either.
    #[test]
    fn the_default_slots_follow_the_database() {
        let on = |database: &str, delivery: &str| {
            Config::from_toml(&format!(
                "database = \"{database}\"\n[delivery]\n{delivery}"
            ))
            .unwrap()
            .delivery
        };
        let (sqlite_url, postgres_url) = ("sqlite:///var/lib/h.db", "postgres://app@db/h");
        let (sqlite, postgres) = (on(sqlite_url, ""), on(postgres_url, ""));
        let slots =
            |url| usize::try_from(hookline_store::Backend::of(url).unwrap().default_slots).unwrap();
        let (on_sqlite, on_postgres) = (slots(sqlite_url), slots(postgres_url));
        assert!(on_postgres > on_sqlite);
        assert_eq!(sqlite.concurrency, on_sqlite);
        assert_eq!(postgres.concurrency, on_postgres);
        assert_eq!(on("postgresql://app@db/h", "").concurrency, on_postgres);
        assert!(
            DEFAULTS.contains(&format!("default {on_sqlite}\n"))
                && DEFAULTS.contains(&format!("on SQLite, {on_postgres} on PostgreSQL")),
            "defaults.toml names the numbers the backends give"
        );
        for database in ["sqlite://h.db", "postgres://app@db/h"] {
            assert_eq!(on(database, "concurrency = 300").concurrency, 300);
        }
    }

    /// The guide shows the configuration with its defaults (docs/GUIDE.md, "Configuration"); it
    /// is this file, word for word.
    #[test]
    fn the_readme_shows_the_defaults() {
        let guide = include_str!("../../../../docs/GUIDE.md");
        assert!(
            guide.contains(&format!("```toml\n{DEFAULTS}```")),
            "docs/GUIDE.md's configuration block differs from src/config/defaults.toml"
        );
    }

    /// Tracing is off unless `[telemetry] otlp_endpoint` names a collector; spans go to its
    /// `/v1/traces`. Anything but a collector's base URL is refused, naming the key.
    #[test]
    fn otlp_endpoint_is_a_collector_s_url_or_refused() {
        assert_eq!(Config::from_toml("").unwrap().telemetry.traces_url(), None);
        for (given, traces) in [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
            ("https://otel.example/", "https://otel.example/v1/traces"),
            (
                "https://gw.example/otlp",
                "https://gw.example/otlp/v1/traces",
            ),
        ] {
            let c = Config::from_toml(&format!("[telemetry]\notlp_endpoint = {given:?}")).unwrap();
            assert_eq!(c.telemetry.traces_url().as_deref(), Some(traces), "{given}");
        }
        for (bad, says) in [
            ("", "not a collector's URL"),
            ("127.0.0.1:4318", "not a collector's URL"),
            ("grpc://127.0.0.1:4317", "http or https"),
            ("http://127.0.0.1:4318?x=1", "query or fragment"),
            ("https://user:pw@otel.example", "OTEL_EXPORTER_OTLP_HEADERS"),
        ] {
            let e = refused(&format!("[telemetry]\notlp_endpoint = {bad:?}"));
            assert!(
                e.contains("`telemetry.otlp_endpoint`") && e.contains(says),
                "{bad}: {e}"
            );
            assert!(!e.contains("pw"), "{e}");
        }
        assert!(refused("[telemetry]\nendpoint = \"http://x\"").contains("unknown field"));
    }

    /// `[operational]` and `[lifecycle]`: defaults, "never" as 0, and each bad value refused
    /// naming its key.
    #[test]
    fn operational_settings_are_checked_naming_their_key() {
        let c = Config::from_toml("").unwrap().operational;
        assert_eq!(c.endpoint, None);
        assert_eq!(c.disable_after, Some(Duration::from_secs(72 * 3600)));
        assert_eq!((c.failing_after, c.dead_letter_spike), (5, Some(100)));
        let zero = Config::from_toml("[lifecycle]\ndisable_after = 0").unwrap();
        assert_eq!(zero.operational.disable_after, None);
        let never = Config::from_toml(
            "[lifecycle]\ndisable_after = \"0\"\n[operational]\ndead_letter_spike = 0",
        )
        .unwrap()
        .operational;
        assert_eq!((never.disable_after, never.dead_letter_spike), (None, None));
        let secret = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0";
        let set = Config::from_toml(&format!(
            "[operational]\nurl = \"https://ops.example/h\"\nsecret = \"{secret}\""
        ))
        .unwrap();
        assert_eq!(
            set.operational.endpoint.unwrap().url,
            "https://ops.example/h"
        );
        for (toml, key) in [
            (
                "[operational]\nurl = \"https://ops.example/h\"",
                "operational.secret",
            ),
            (
                format!("[operational]\nsecret = \"{secret}\"").as_str(),
                "operational.secret",
            ),
            (
                format!("[operational]\nurl = \"ftp://x\"\nsecret = \"{secret}\"").as_str(),
                "operational.url",
            ),
            (
                "[operational]\nurl = \"https://o.example\"\nsecret = \"nope\"",
                "operational.secret",
            ),
            (
                "[operational]\nfailing_after = 0",
                "operational.failing_after",
            ),
            (
                "[operational]\nfailing_after = 101",
                "operational.failing_after",
            ),
            ("[lifecycle]\ndisable_after = 72", "lifecycle.disable_after"),
            (
                "[operational]\nspike_window = \"0s\"",
                "operational.spike_window",
            ),
            (
                "[lifecycle]\ndisable_after = \"soon\"",
                "lifecycle.disable_after",
            ),
            ("[lifecycle]\nwhen = 1", "when"),
        ] {
            assert!(refused(toml).contains(key), "{toml}: {}", refused(toml));
        }
    }

    /// `[log] format` is text unless the file says json; anything else is refused, naming
    /// the key.
    #[test]
    fn log_format_is_text_json_or_refused() {
        assert_eq!(Config::from_toml("").unwrap().log_format, LogFormat::Text);
        let c = Config::from_toml("[log]\nformat = \"json\"").unwrap();
        assert_eq!(c.log_format, LogFormat::Json);
        let e = refused("[log]\nformat = \"logfmt\"");
        assert!(e.contains("`log.format`") && e.contains("logfmt"), "{e}");
        let e = refused("[log]\nlevel = \"debug\"");
        assert!(e.contains("level"), "{e}");
    }

    /// A section the file names replaces nothing it does not name.
    #[test]
    fn a_file_overrides_key_by_key() {
        let c =
            Config::from_toml("[delivery]\nconcurrency = 8\n[http]\nmax_connections = 9").unwrap();
        assert_eq!((c.delivery.concurrency, c.http.max_connections), (8, 9));
        assert_eq!(c.delivery.attempt_timeout, Duration::from_secs(10));
        assert_eq!(c.http.header_read_timeout, Duration::from_secs(10));
    }

    /// The floor a fresh install projects with follows its slots unless it is given.
    #[test]
    fn min_service_rate_defaults_to_the_slots_at_their_timeout() {
        let c = Config::from_toml("[delivery]\nconcurrency = 8\nattempt_timeout = \"4s\"").unwrap();
        assert_eq!(c.admission.min_service_rate, 2.0);
        let c = Config::from_toml("[admission]\nmin_service_rate = 0.5").unwrap();
        assert_eq!(c.admission.min_service_rate, 0.5);
        for bad in ["0", "-1", "nan"] {
            let e = Config::from_toml(&format!("[admission]\nmin_service_rate = {bad}"));
            assert!(e.is_err(), "{bad}");
        }
    }

    fn refused(text: &str) -> String {
        Config::from_toml(text).unwrap_err().to_string()
    }

    /// A database URL no backend opens is refused when the configuration loads, naming the key,
    /// not when the store is opened.
    #[test]
    fn a_database_no_backend_opens_is_refused() {
        for (url, says) in [
            ("mysql://app@db/h", "unsupported URL"),
            ("sqlite://", "needs a file path"),
        ] {
            let e = refused(&format!("database = \"{url}\""));
            assert!(e.contains("`database`") && e.contains(says), "{url}: {e}");
        }
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        assert!(refused("colour = \"red\"").contains("unknown field `colour`"));
        assert!(refused("[retry]\nbackoff = \"2s\"").contains("unknown field `backoff`"));
        assert!(refused("[retry]\nmax_attempts = 0").contains("retry.max_attempts"));
        assert!(refused("[retry]\nbase_delay = \"2h\"").contains("retry.base_delay"));
        assert!(refused("[retry]\nbase_delay = \"soon\"").contains("retry.base_delay"));
        assert!(refused("[retry]\ndelivery_window = \"0s\"").contains("retry.delivery_window"));
        assert!(refused("[retry]\njitter = \"lots\"").contains("retry.jitter"));
        assert!(refused("[delivery]\nconcurrency = 0").contains("delivery.concurrency"));
        assert!(refused("[delivery]\nattempt_timeout = 5").contains("invalid type"));
        assert!(refused("listen = \"everywhere\"").contains("listen"));
        assert!(refused("max_payload_bytes = 0").contains("max_payload_bytes"));
        assert!(refused("database_pool_size = 0").contains("database_pool_size"));
        assert!(refused("[breaker]\nfailures = 0").contains("breaker.failures"));
        assert!(refused("[delivery]\nfirst_attempt_share = 1.0").contains("first_attempt_share"));
        let registered = refused("[events]\nrequire_registered_types = \"yes\"");
        assert!(
            registered.contains("require_registered_types"),
            "{registered}"
        );
        assert!(refused("[events]\nrequire_schemas = true").contains("unknown field"));
        assert_eq!(
            Config::from_toml("").unwrap().unregistered_types,
            UnregisteredTypes::Accepted
        );
        let required = Config::from_toml("[events]\nrequire_registered_types = true").unwrap();
        assert_eq!(required.unregistered_types, UnregisteredTypes::Refused);
        let c =
            Config::from_toml("[delivery]\nconcurrency = 10\nfirst_attempt_share = 0.7").unwrap();
        assert_eq!(c.delivery.retry_slots(), 3);
        assert_eq!(Config::from_toml("").unwrap().delivery.retry_slots(), 256);
        // The slow lane does not follow concurrency; 0 switches it off.
        assert_eq!(c.delivery.slow_lane, 8192);
        let off = Config::from_toml("[delivery]\nslow_lane = 0").unwrap();
        assert_eq!(off.delivery.slow_lane, 0);
        assert!(refused("[delivery]\nslow_lane = -1").contains("slow_lane"));
        assert!(refused("[breaker]\ncool_down = \"later\"").contains("breaker.cool_down"));
        assert!(refused("[http]\nmax_connections = 0").contains("http.max_connections"));
        assert!(refused("[http]\nidle_timeout = \"0s\"").contains("http.idle_timeout"));
        assert!(refused("[http]\nheader_read_timeout = \"2d\"").contains("header_read_timeout"));
        assert!(refused("[http]\nbody_read_timeout = \"9999999y\"").contains("body_read_timeout"));
        assert!(refused("[http]\nwrite_timeout = \"1s\"").contains("unknown field"));
        assert!(refused("allowed_networks = [\"10.0.0.0/33\"]").contains("allowed_networks"));
        let open =
            Config::from_toml("allowed_networks = [\"10.1.0.0/16\"]\nhttps_only = true").unwrap();
        assert!(open.guards.platform.enabled && open.guards.platform.https_only);
        assert!(open.guards.platform.permits("10.1.2.3".parse().unwrap()));
        // Tenants' subscribers reach public addresses only, unless told otherwise.
        assert!(!open.guards.tenants.permits("10.1.2.3".parse().unwrap()));
        assert!(open.guards.tenants.https_only);
        let local = Config::from_toml(
            "allow_private_destinations = true\n[tenants]\ndestinations = \"as_platform\"",
        )
        .unwrap();
        assert!(local.guards.tenants.permits("127.0.0.1".parse().unwrap()));
        assert!(refused("[tenants]\ndestinations = \"anywhere\"").contains("unknown variant"));
        let token = |name: &str, sha: &str, scope: &str| {
            format!("[[api_tokens]]\nname = \"{name}\"\nsha256 = \"{sha}\"\nscope = \"{scope}\"\n")
        };
        let good = "ab".repeat(32);
        assert!(refused(&token("ci", "abc", "admin")).contains("api_tokens.sha256"));
        assert!(refused(&token("ci", &"zz".repeat(32), "admin")).contains("api_tokens.sha256"));
        assert!(refused(&token("ci", &good, "root")).contains("unknown variant"));
        let twice = token("ci", &good, "admin") + &token("ci", &good, "read");
        assert!(refused(&twice).contains("api_tokens.name"));
        let ok = Config::from_toml(&token("ci", &good, "publish")).unwrap();
        assert_eq!(ok.api_tokens[0].sha256, [0xab; 32]);
        assert_eq!(ok.api_tokens[0].scope, Scope::Publish);
        assert_eq!(ok.api_tokens[0].tenant, None);
        // A tenant's token names a tenant by the tenant id rules (it need not exist yet).
        let of = |tenant: &str| {
            token("acme", &good, "admin")
                + &format!("tenant = \"{tenant}\"\n[metrics]\nopen = false\n")
        };
        let acme = Config::from_toml(&of("merchant-acme")).unwrap();
        assert_eq!(acme.api_tokens[0].tenant.as_deref(), Some("merchant-acme"));
        for bad in ["", "a:b", "..", &"x".repeat(129)] {
            assert!(refused(&of(bad)).contains("api_tokens.tenant"), "{bad:?}");
        }
        // An open /metrics would show every tenant's series to anyone: refused with them.
        let open = token("acme", &good, "admin") + "tenant = \"merchant-acme\"\n";
        assert!(refused(&open).contains("metrics.open"));
    }

    /// The portal's framers go into its CSP as written: only origins, each as a browser writes
    /// it, are taken; anything a CSP source could say beyond one origin is refused.
    #[test]
    fn the_portal_s_frame_ancestors_are_origins() {
        assert!(Config::from_toml("")
            .unwrap()
            .portal_frame_ancestors
            .is_empty());
        let framers = "[portal]\nframe_ancestors = [\"https://platform.example\", \
                       \"http://127.0.0.1:3000\", \"https://xn--bcher-kva.example\"]";
        assert_eq!(
            Config::from_toml(framers).unwrap().portal_frame_ancestors,
            [
                "https://platform.example",
                "http://127.0.0.1:3000",
                "https://xn--bcher-kva.example"
            ]
        );
        for (bad, says) in [
            (
                "https://platform.example/",
                "write \"https://platform.example\"",
            ),
            ("https://platform.example/portal", "no path"),
            ("https://ops@platform.example", "no user"),
            ("https://platform.example:443", "no default port"),
            (
                "HTTPS://Platform.example",
                "write \"https://platform.example\"",
            ),
            (
                "https://bücher.example",
                "write \"https://xn--bcher-kva.example\"",
            ),
            ("https://*.platform.example", "without wildcards"),
            ("*", "not an origin like"),
            ("'self'", "not an origin like"),
            ("https:", "not an origin like"),
            ("data:text/html,x", "http or https"),
            ("https://a.example; script-src *", "not an origin like"),
            ("https://a.example https://b.example", "not an origin like"),
        ] {
            let e = refused(&format!("[portal]\nframe_ancestors = [{bad:?}]"));
            assert!(
                e.contains("portal.frame_ancestors") && e.contains(says),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn overrides_win_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:1\"\ndatabase = \"sqlite://a.db\"",
        )
        .unwrap();
        let c = Config::load(
            Some(&path),
            Overrides {
                listen: Some("127.0.0.1:2".into()),
                database: None,
                otlp_endpoint: Some("http://127.0.0.1:4318".into()),
            },
        )
        .unwrap();
        assert_eq!(c.listen.port(), 2);
        assert_eq!(c.database, "sqlite://a.db");
        assert_eq!(
            c.telemetry.traces_url().as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        let missing = Config::load(Some(&dir.path().join("nope.toml")), Overrides::default());
        assert!(missing.unwrap_err().to_string().contains("nope.toml"));
    }
}
