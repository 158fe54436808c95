//! `/console`: the operator console, and `/portal`: the same console in tenant mode, for a
//! platform's customer. Two pages, one script and one style embedded in the binary (no build
//! step, nothing fetched). They hold no data: they call the API with a token (the one the
//! operator pastes, or the portal session's from the link), kept in `sessionStorage` and sent
//! as a bearer header; no cookies, so no CSRF.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::error::ErrorEnvelope;
use super::{ApiError, ApiState};

const TAG: &str = "console";

/// What the pages may load and run: nothing but their own files (a drill chart is rebuilt
/// inline, from drawing elements only). Who may frame them is added per page.
macro_rules! policy_but_framing {
    () => {
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
         connect-src 'self'; base-uri 'none'; form-action 'none'"
    };
}

/// The console and its files: no page may frame them.
const POLICY: &str = concat!(policy_but_framing!(), "; frame-ancestors 'none'");

/// The portal's policy: the console's, framed by `frame_ancestors` only (origins, as the
/// configuration checked them: `[portal] frame_ancestors`), or by no page when there are none.
pub fn portal_policy(frame_ancestors: &[String]) -> String {
    let ancestors = match frame_ancestors {
        [] => "'none'".to_owned(),
        origins => origins.join(" "),
    };
    format!("{}; frame-ancestors {ancestors}", policy_but_framing!())
}

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
    served(content_type, POLICY.to_owned(), body)
}

fn served(content_type: &'static str, policy: String, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type.to_owned()),
            (header::CONTENT_SECURITY_POLICY, policy),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
            (header::REFERRER_POLICY, "no-referrer".to_owned()),
            // A new binary serves a new console at once.
            (header::CACHE_CONTROL, "no-cache".to_owned()),
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

/// The portal: the console in tenant mode, for a platform's customer, opened with a portal
/// session's link (`/portal#token=hlp_...`). Open like the console (it holds no data); the
/// pages allowed by `[portal] frame_ancestors` may embed it in a frame.
#[utoipa::path(get, path = "/portal", operation_id = "portal_page", tag = TAG, security(()),
    responses((status = 200, description = "The portal", content_type = "text/html", body = String)))]
pub async fn portal(State(ctx): ApiState) -> Response {
    served(
        "text/html; charset=utf-8",
        portal_policy(&ctx.portal_frame_ancestors),
        include_str!("console/portal.html"),
    )
}

/// The console's script and style (the portal's too).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_portal_is_framed_by_the_origins_configured_only() {
        assert_eq!(portal_policy(&[]), POLICY);
        let framed = portal_policy(&["https://a.example".into(), "https://b.example:8443".into()]);
        assert_eq!(
            framed,
            POLICY.replace(
                "frame-ancestors 'none'",
                "frame-ancestors https://a.example https://b.example:8443"
            )
        );
    }
}
