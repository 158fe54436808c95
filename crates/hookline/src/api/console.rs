//! `/console`: the operator console, a page and its script and style embedded in the binary
//! (no build step, nothing fetched). It holds no data: it calls the API with the token the
//! operator pastes (kept in `sessionStorage`, sent as a bearer header; no cookies, so no CSRF).

use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::error::ErrorEnvelope;
use super::ApiError;

const TAG: &str = "console";

/// Nothing but the console's own files runs or loads (a drill chart is rebuilt inline, from
/// drawing elements only).
const POLICY: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; \
                      script-src 'self'; connect-src 'self'; frame-ancestors 'none'; \
                      base-uri 'none'; form-action 'none'";

/// The console's files: name, content type, content.
const ASSETS: [(&str, &str, &str); 2] = [
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("console/app.js"),
    ),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("console/console.css"),
    ),
];

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            // A new binary serves a new console at once.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `/console/{asset}`: open, like the page (it answers a console file or 404). Only that one
/// segment: a route added deeper under `/console/` needs a token like any other
/// (`tests/it/openapi.rs` holds the document's open routes to the server's).
pub fn is_asset_path(path: &str) -> bool {
    path.strip_prefix("/console/")
        .is_some_and(|name| !name.is_empty() && !name.contains('/'))
}

/// The console's page. Open (it holds no data); in open mode, like the API, to loopback only.
#[utoipa::path(get, path = "/console", operation_id = "console_page", tag = TAG, security(()),
    responses((status = 200, description = "The console", content_type = "text/html", body = String)))]
pub async fn page() -> Response {
    asset(
        "text/html; charset=utf-8",
        include_str!("console/index.html"),
    )
}

/// The console's script and style.
#[utoipa::path(get, path = "/console/{asset}", operation_id = "console_file", tag = TAG, security(()),
    params(("asset" = String, Path, description = "`app.js` or `console.css`")),
    responses(
        (status = 200, description = "The file", content(
            (String = "text/javascript"),
            (String = "text/css"),
        )),
        (status = 404, description = "No such file", body = ErrorEnvelope),
    ))]
pub async fn file(Path(name): Path<String>) -> Result<Response, ApiError> {
    ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, content_type, body)| asset(content_type, body))
        .ok_or_else(|| ApiError::not_found(format!("the console has no file {name:?}")))
}
