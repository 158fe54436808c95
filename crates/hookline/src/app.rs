//! One running hookline: the store, the dispatcher and the HTTP API, started and stopped
//! together. `serve` runs one of these; tests run them in-process with a manual clock.

use std::net::SocketAddr;
use std::sync::Arc;

use hookline_engine::clock::Clock;
use hookline_engine::dispatcher::{Dispatcher, DispatcherHandle, DispatcherParts};
use hookline_engine::policy::{Policy, DEFAULT_POLICY};
use hookline_store::{Store, StoreError};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::api::{self, ApiContext};
use crate::capacity::Capacity;
use crate::config::Config;
use crate::policies::PolicyExt;
use crate::rollouts::Policies;

/// Which parts of hookline this process runs. Several processes on one PostgreSQL split the work:
/// `api` processes accept and serve reads but never claim; `worker` processes claim and deliver
/// and serve only `/healthz` and `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Role {
    #[default]
    All,
    Api,
    Worker,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "--role {0:?} splits hookline across processes, which needs a shared PostgreSQL \
         database; one process owns a SQLite file, so run --role all"
    )]
    RoleNeedsPostgres(Role),
    #[error(
        "refusing to serve an open API on {0}: no api_tokens are configured. Add tokens \
         (hookline token new --name NAME --scope admin) or listen on a loopback address"
    )]
    OpenApiOnNetwork(SocketAddr),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("operational.url: {0}")]
    OperationalEndpoint(String),
    #[error("{0}")]
    Traces(#[from] crate::traces::ExportError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

pub struct RunningApp {
    /// Where the API listens (the real port when the config asked for port 0).
    pub addr: SocketAddr,
    pub store: Arc<dyn Store>,
    dispatcher: Option<DispatcherHandle>,
    server: JoinHandle<()>,
    stop_server: tokio::sync::watch::Sender<bool>,
    gauges: JoinHandle<()>,
    policies_kept: JoinHandle<()>,
    catalog_kept: JoinHandle<()>,
    measuring: JoinHandle<()>,
    /// The operational events' and the lifecycle's watcher, where deliveries are made.
    watching: Option<JoinHandle<()>>,
    /// Stops the gauges and the policies' and the catalog's refresh.
    stop_gauges: tokio::sync::watch::Sender<bool>,
    /// Spans on their way to `[telemetry] otlp_endpoint`, when tracing is on.
    exporting: Option<crate::traces::Exporting>,
}

/// What start-up refuses from the configuration alone, before anything is opened: kept apart
/// so `hookline config check` refuses exactly what `start` would.
pub fn check(config: &Config, role: Role) -> Result<(), StartError> {
    let shared = hookline_store::Backend::of(&config.database).is_ok_and(|b| b.shared);
    if role != Role::All && !shared {
        return Err(StartError::RoleNeedsPostgres(role));
    }
    if config.api_tokens.is_empty() && !config.listen.ip().is_loopback() {
        return Err(StartError::OpenApiOnNetwork(config.listen));
    }
    Ok(())
}

pub async fn start(
    config: &Config,
    clock: Arc<dyn Clock>,
    role: Role,
) -> Result<RunningApp, StartError> {
    check(config, role)?;
    crate::telemetry::handle();
    let (traces, exporting) = crate::traces::start(&config.telemetry)?;
    let store =
        hookline_store::open_with(&config.database, &config.serving_store_options()).await?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: config.listen,
        source,
    })?;
    // Read before the first claim, so the policy promoted last decides from the start.
    let policies = Policies::new(store.clone(), Policy::default_of(config));
    let in_force = policies.refresh().await?;
    if in_force.default.name != DEFAULT_POLICY {
        tracing::info!(
            policy = %in_force.default.name,
            "a promoted policy is in force; [retry] and [breaker] define the policy named default"
        );
    }
    let catalog = crate::catalog::Catalog::load(store.clone(), config.unregistered_types).await?;
    if let Some(endpoint) = &config.operational.endpoint {
        configure_operational_endpoint(store.as_ref(), config, endpoint, clock.now_ms()).await?;
    }
    let capacity = Capacity::start(
        store.clone(),
        clock.clone(),
        policies.clone(),
        config.admission,
    )
    .await?;
    let failed_commits = Arc::new(hookline_engine::health::FailedCommits::default());
    let dispatcher = (role != Role::Api).then(|| {
        Dispatcher::spawn(DispatcherParts {
            store: store.clone(),
            clock: clock.clone(),
            policies: policies.in_force(),
            delivery: config.delivery.clone(),
            guards: config.guards.clone(),
            labels: hookline_engine::telemetry::Labels {
                latency: config.metrics.latency_labels,
                tenant: config.metrics.tenant_labels,
            },
            meter: capacity.meter.clone(),
            failed_commits: failed_commits.clone(),
            traces: traces.clone(),
        })
    });
    if let Some(d) = &dispatcher {
        capacity.sample(d.slots());
    }
    let (stop_gauges, gauges_stopped) = tokio::sync::watch::channel(false);
    let queue = Arc::new(crate::telemetry::QueueSnapshot::default());
    let gauges = tokio::spawn(crate::telemetry::refresh_gauges(
        crate::telemetry::QueueGauges {
            store: store.clone(),
            clock: clock.clone(),
            every: config.metrics.refresh_interval,
            caps: config.delivery.in_flight_caps(),
            held_back: dispatcher.as_ref().map(DispatcherHandle::held_back),
            snapshot: queue.clone(),
        },
        gauges_stopped.clone(),
    ));
    let policies_kept = tokio::spawn(crate::rollouts::keep_current(
        policies.clone(),
        clock.clone(),
        gauges_stopped.clone(),
    ));
    let catalog_kept = tokio::spawn(crate::catalog::keep_current(
        catalog.clone(),
        clock.clone(),
        gauges_stopped.clone(),
    ));
    let watching = dispatcher.as_ref().map(|d| {
        let watcher = crate::operational::Watcher {
            store: store.clone(),
            clock: clock.clone(),
            config: config.operational.clone(),
            wake: d.waker(),
            spikes_told: Default::default(),
        };
        tokio::spawn(watcher.keep_watching(gauges_stopped.clone()))
    });
    let measuring = tokio::spawn(crate::capacity::keep_measuring(
        capacity.clone(),
        gauges_stopped,
    ));
    let health = hookline_engine::health::Health::new(
        store.clone(),
        clock.clone(),
        dispatcher.as_ref().map(DispatcherHandle::liveness),
        failed_commits,
    );
    let ctx = Arc::new(ApiContext {
        store: store.clone(),
        clock,
        guards: config.guards.clone(),
        max_payload_bytes: config.max_payload_bytes,
        // An api-only process has no dispatcher to wake; the store's NOTIFY wakes the workers.
        wake: dispatcher
            .as_ref()
            .map_or_else(Default::default, |d| d.waker()),
        api_tokens: config.api_tokens.clone(),
        metrics_open: config.metrics.open,
        tenant_labels: config.metrics.tenant_labels,
        listen: config.listen,
        health,
        policies,
        capacity,
        attempt_timeout: config.delivery.attempt_timeout,
        queue,
        caps: config.delivery.in_flight_caps(),
        drill_reports: config.drill_reports.clone(),
        operational_from_file: config.operational.endpoint.is_some(),
        portal_frame_ancestors: config.portal_frame_ancestors.clone(),
        catalog,
        traces,
    });
    let router = match role {
        Role::Worker => api::health_router(ctx),
        Role::All | Role::Api => api::router(ctx),
    };
    let (stop_server, stopped) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(crate::server::serve(listener, router, config.http, stopped));
    Ok(RunningApp {
        addr,
        store,
        dispatcher,
        server,
        stop_server,
        gauges,
        policies_kept,
        catalog_kept,
        measuring,
        watching,
        stop_gauges,
        exporting,
    })
}

/// `[operational] url` and `secret`, applied to the endpoint at start: the file wins over what
/// `POST /v1/operational-endpoint` set (which refuses while the file sets one). The URL passes
/// the platform's SSRF guard like any subscriber's.
async fn configure_operational_endpoint(
    store: &dyn hookline_store::Store,
    config: &Config,
    endpoint: &crate::config::ConfiguredEndpoint,
    now: hookline_policy::UnixMs,
) -> Result<(), StartError> {
    let url = config
        .guards
        .of(None)
        .check_url(&endpoint.url)
        .await
        .map_err(|e| StartError::OperationalEndpoint(e.to_string()))?;
    crate::operational::set_endpoint(store, url.to_string(), Some(endpoint.secret.clone()), now)
        .await?;
    Ok(())
}

impl RunningApp {
    /// Stops accepting requests and claiming deliveries, lets in-flight requests and attempts
    /// finish, and commits their outcomes; then exports the spans left.
    pub async fn shutdown(self) {
        let _ = self.stop_server.send(true);
        let _ = self.stop_gauges.send(true);
        let _ = self.gauges.await;
        let _ = self.policies_kept.await;
        let _ = self.catalog_kept.await;
        let _ = self.measuring.await;
        if let Some(watching) = self.watching {
            let _ = watching.await;
        }
        let dispatcher = async {
            if let Some(d) = self.dispatcher {
                d.shutdown().await;
            }
        };
        let (server, ()) = tokio::join!(self.server, dispatcher);
        if let Err(e) = server {
            tracing::error!(error = %e, "the HTTP server failed");
        }
        if let Some(exporting) = self.exporting {
            exporting.shutdown().await;
        }
    }
}
