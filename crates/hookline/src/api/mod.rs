//! The HTTP API. Handlers validate everything before touching the store, so a bad request
//! changes nothing; the store answers `publish` only after the event and all its deliveries are
//! committed, which is when `POST /v1/events` may say 202.

pub mod auth;
mod browser;
mod console;
mod deliveries;
mod drill;
mod error;
mod event_types;
mod events;
#[cfg(test)]
mod fuzz;
mod metered;
pub mod openapi;
mod operational;
mod overview;
mod policies;
mod resends;
mod rollouts;

mod subscribers;
mod tenancy;
mod tenants;
pub(crate) mod validate;
pub(crate) mod views;

use hookline_api::PageQuery;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::{middleware, Json, Router};
use hookline_store::Store;
use serde::Serialize;
use tokio::sync::Notify;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use error::ApiError;
use hookline_engine::clock::Clock;

/// Room for the event envelope (id, type, version) around a payload of the maximum size.
const ENVELOPE_BYTES: usize = 64 * 1024;
pub const MAX_PAGE: u32 = 1000;
pub const DEFAULT_PAGE: u32 = 100;

pub struct ApiContext {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    /// Which destinations subscribers may name (the platform's, and tenants').
    pub guards: hookline_engine::destination::Guards,
    pub max_payload_bytes: usize,
    /// Wakes the dispatcher when something may have become due.
    pub wake: Arc<Notify>,
    /// Empty: the API is open (loopback only).
    pub api_tokens: Vec<auth::ApiToken>,
    /// `/metrics` needs no token.
    pub metrics_open: bool,
    /// Whether publishes are counted by tenant.
    pub tenant_labels: hookline_engine::telemetry::TenantLabels,
    /// Where this process listens: in open mode, requests must be addressed to it (or to a
    /// loopback name).
    pub listen: std::net::SocketAddr,
    pub health: hookline_engine::health::Health,
    /// The policies in force (new policies take what they leave out from the one in force for
    /// everyone); a rollout's change replaces them at once.
    pub policies: Arc<crate::rollouts::Policies>,
    /// The live capacity model; admission holds every publish to it.
    pub capacity: Arc<crate::capacity::Capacity>,
    /// For the schedule arithmetic a new policy must pass.
    pub attempt_timeout: std::time::Duration,
    /// The queue figures the gauges read last, for `/v1/overview`.
    pub queue: Arc<crate::telemetry::QueueSnapshot>,
    /// The dispatcher's caps (for a first queue read).
    pub caps: hookline_store::InFlightCaps,
    /// `[operational] url` sets the operational endpoint: the API's changes to it are refused.
    pub operational_from_file: bool,
    /// Where `/v1/drill/latest` looks.
    pub drill_reports: std::path::PathBuf,
    /// Origins whose pages may frame `/portal` (checked origins; none when empty).
    pub portal_frame_ancestors: Vec<String>,
    /// The event type catalog, kept in memory: what a publish is checked against.
    pub catalog: Arc<crate::catalog::Catalog>,
    /// Where publish and fan-out spans go (`[telemetry]`; `Traces::OFF`: nowhere).
    pub traces: hookline_engine::traces::Traces,
}

pub type ApiState = State<Arc<ApiContext>>;

/// What a handler answers: a status and a JSON body of type `T`, or the error envelope.
pub type Answer<T> = Result<(StatusCode, Json<T>), ApiError>;

/// What a worker-only process serves: its health and its metrics, nothing else.
pub fn health_router(ctx: Arc<ApiContext>) -> Router {
    let (router, doc) = OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(metrics))
        .split_for_parts();
    router
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            ctx.clone(),
            auth::require_token,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::new(metered::RouteTemplates::of(&doc)),
            metered::metered,
        ))
        .with_state(ctx)
}

/// The Prometheus exposition (open unless `metrics.open = false`).
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", tag = "operations", security((), ("bearer" = [])),
    responses((status = 200, description = "Metrics in the Prometheus text format", content_type = "text/plain", body = String)))]
async fn metrics() -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        crate::telemetry::render(),
    )
}

/// Every route the API serves, each added with its description: no route is served without
/// being in the OpenAPI document (`GET /openapi.json`).
pub fn routes() -> OpenApiRouter<Arc<ApiContext>> {
    OpenApiRouter::with_openapi(openapi::base())
        .routes(routes!(healthz))
        .routes(routes!(metrics))
        .routes(routes!(openapi::document_json))
        .routes(routes!(console::page))
        .routes(routes!(console::file))
        .routes(routes!(console::portal))
        .routes(routes!(overview::whoami))
        .routes(routes!(overview::overview))
        .routes(routes!(tenants::create, tenants::list))
        .routes(routes!(tenants::get, tenants::update, tenants::delete))
        .routes(routes!(tenants::create_portal_session))
        .routes(routes!(tenants::revoke_portal_session))
        .routes(routes!(subscribers::create, subscribers::list))
        .routes(routes!(
            subscribers::get,
            subscribers::update,
            subscribers::revoke
        ))
        .routes(routes!(subscribers::secret))
        .routes(routes!(subscribers::headers))
        .routes(routes!(subscribers::rotate_secret))
        .routes(routes!(subscribers::send_test_event))
        .routes(routes!(event_types::create, event_types::list))
        .routes(routes!(event_types::get, event_types::update))
        .routes(routes!(events::publish, events::list))
        .routes(routes!(events::get))
        .routes(routes!(deliveries::list))
        .routes(routes!(deliveries::get))
        .routes(routes!(deliveries::list_dead_letters))
        .routes(routes!(deliveries::dead_letter_groups))
        .routes(routes!(deliveries::replay))
        .routes(routes!(deliveries::list_replays))
        .routes(routes!(deliveries::get_replay))
        .routes(routes!(
            operational::set,
            operational::get,
            operational::stop
        ))
        .routes(routes!(resends::create, resends::list))
        .routes(routes!(resends::get))
        .routes(routes!(policies::create, policies::list))
        .routes(routes!(policies::get))
        .routes(routes!(capacity))
        .routes(routes!(rollouts::start, rollouts::list))
        .routes(routes!(rollouts::get, rollouts::patch))
        .routes(routes!(rollouts::promote))
        .routes(routes!(rollouts::abort))
        .routes(routes!(rollouts::comparison))
        .routes(routes!(drill::latest))
        .routes(routes!(drill::chart))
}

pub fn router(ctx: Arc<ApiContext>) -> Router {
    let body_limit = ctx.max_payload_bytes + ENVELOPE_BYTES;
    let (router, doc) = routes().split_for_parts();
    router
        .fallback(not_found)
        .layer(middleware::from_fn(error::in_the_envelope))
        .layer(middleware::from_fn_with_state(
            ctx.clone(),
            auth::require_token,
        ))
        .layer(middleware::from_fn_with_state(ctx.clone(), browser::guard))
        .layer(middleware::from_fn(no_query_where_none_is_read))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(catch_panics())
        // Outermost: every answer is counted, the refusals of the layers above included.
        .layer(middleware::from_fn_with_state(
            Arc::new(metered::RouteTemplates::of(&doc)),
            metered::metered,
        ))
        .with_state(ctx)
}

/// A handler that panics anyway answers 500 in the usual envelope, and the panic is logged:
/// no client ever sees a connection dropped without an answer.
fn catch_panics() -> tower_http::catch_panic::CatchPanicLayer<
    fn(Box<dyn std::any::Any + Send + 'static>) -> axum::response::Response,
> {
    fn answer(panic: Box<dyn std::any::Any + Send + 'static>) -> axum::response::Response {
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        tracing::error!(panic = message, "a request handler panicked");
        axum::response::IntoResponse::into_response(ApiError::internal(
            "hookline failed to answer this request; the failure is logged",
        ))
    }
    tower_http::catch_panic::CatchPanicLayer::custom(answer as fn(_) -> _)
}

/// Routes that ignore query parameters rather than refuse them: probes and scrapers add their
/// own, and a link to the console or the portal may carry a tracking parameter.
pub const IGNORES_QUERIES: [&str; 4] = ["/healthz", "/metrics", "/console", "/portal"];

/// The routes that read query parameters (and refuse unknown ones themselves).
const QUERIED: [&str; 11] = [
    "/v1/tenants",
    "/v1/event-types",
    "/v1/events",
    "/v1/subscribers",
    "/v1/deliveries",
    "/v1/dead-letters",
    "/v1/dead-letters/groups",
    "/v1/replays",
    "/v1/resends",
    "/v1/policies",
    "/v1/rollouts",
];

/// Query parameters on a route that reads none are a mistake to report (422, naming them),
/// like unknown JSON fields, not something to drop silently.
async fn no_query_where_none_is_read(
    request: axum::extract::Request,
    next: middleware::Next,
) -> axum::response::Response {
    let uri = request.uri();
    if let Some(query) = uri.query().filter(|q| !q.is_empty()) {
        let operational = IGNORES_QUERIES.contains(&uri.path());
        let reads_queries = operational
            || (request.method() == axum::http::Method::GET
                && QUERIED.contains(&uri.path().trim_end_matches('/')));
        if !reads_queries {
            let names: Vec<&str> = query
                .split('&')
                .map(|pair| pair.split('=').next().unwrap_or(pair))
                .collect();
            return axum::response::IntoResponse::into_response(ApiError::invalid(format!(
                "{} {} takes no query parameters, not {}",
                request.method(),
                uri.path(),
                names.join(", ")
            )));
        }
    }
    next.run(request).await
}

/// The live capacity model and whether publishes are admitted (refreshed once a second).
#[utoipa::path(get, path = "/v1/capacity", operation_id = "get_capacity", tag = "operations",
    responses((status = 200, description = "The capacity model", body = crate::capacity::CapacityView)))]
async fn capacity(State(ctx): ApiState) -> Json<crate::capacity::CapacityView> {
    Json(ctx.capacity.view())
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
enum HealthStatus {
    Ok,
    Degraded,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
enum DispatcherState {
    Running,
    Stopped,
}

#[derive(Serialize, ToSchema)]
struct Health {
    status: HealthStatus,
    /// `ok`, or why the store failed its check.
    store: String,
    /// `null` in a `--role api` process, which has none.
    #[schema(required = true)]
    dispatcher: Option<DispatcherState>,
}

/// 200 `ok` while the store commits and the dispatcher runs; 503 `degraded` naming the cause
/// otherwise, so a load balancer stops sending publishes that would fail. Open, even with
/// tokens.
#[utoipa::path(get, path = "/healthz", operation_id = "health", tag = "operations", security(()),
    responses(
        (status = 200, description = "Healthy", body = Health),
        (status = 503, description = "Degraded: the store does not commit, or the dispatcher stopped", body = Health),
    ))]
async fn healthz(State(ctx): ApiState) -> (StatusCode, Json<Health>) {
    let report = ctx.health.check().await;
    let (code, status) = if report.healthy() {
        (StatusCode::OK, HealthStatus::Ok)
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, HealthStatus::Degraded)
    };
    let dispatcher = report.dispatcher_running.map(|running| {
        if running {
            DispatcherState::Running
        } else {
            DispatcherState::Stopped
        }
    });
    (
        code,
        Json(Health {
            status,
            store: report.store.err().unwrap_or_else(|| "ok".to_owned()),
            dispatcher,
        }),
    )
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

pub fn page_limit(limit: Option<u32>) -> Result<u32, ApiError> {
    match limit.unwrap_or(DEFAULT_PAGE) {
        n @ 1..=MAX_PAGE => Ok(n),
        n => Err(ApiError::invalid(format!(
            "limit must be between 1 and {MAX_PAGE}, not {n}"
        ))),
    }
}

#[cfg(test)]
mod panic_tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_handler_answers_500_in_the_envelope() {
        let app = Router::new()
            .route(
                "/boom",
                axum::routing::get(|| async {
                    if true {
                        panic!("boom");
                    }
                    StatusCode::OK
                }),
            )
            .layer(catch_panics());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let answer = reqwest::get(format!("http://{addr}/boom")).await.unwrap();
        assert_eq!(answer.status(), 500);
        let body: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(body["error"]["code"], "internal");
    }
}
