//! Every API request counted and timed by the route template it matched
//! (`hookline_api_requests_total`, `hookline_api_request_duration_seconds`). The template, not
//! the path: a path carries ids, and a series per id would grow `/metrics` without bound. The
//! templates are the OpenAPI document's paths, matched here ahead of the router, so a request
//! refused before it reaches a handler (no token, a body too large, a panic) is still counted
//! under its route.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

/// The label of a request that matches no route.
pub const UNMATCHED: &str = "unmatched";

/// The route templates the API serves (`/v1/subscribers/{id}`), split into segments.
pub struct RouteTemplates(Vec<(String, Vec<Segment>)>);

enum Segment {
    Literal(String),
    /// `{name}`: any one non-empty segment.
    Parameter,
}

impl RouteTemplates {
    /// The templates of `doc`'s paths.
    pub fn of(doc: &utoipa::openapi::OpenApi) -> Self {
        RouteTemplates(
            doc.paths
                .paths
                .keys()
                .map(|template| {
                    let segments = template
                        .split('/')
                        .map(|s| {
                            if s.starts_with('{') && s.ends_with('}') {
                                Segment::Parameter
                            } else {
                                Segment::Literal(s.to_owned())
                            }
                        })
                        .collect();
                    (template.clone(), segments)
                })
                .collect(),
        )
    }

    /// The template `path` matches; where several do, the one with the most literal
    /// segments (`/v1/dead-letters/groups` before a `/v1/dead-letters/{id}`).
    pub fn matching(&self, path: &str) -> &str {
        let path: Vec<&str> = path.split('/').collect();
        self.0
            .iter()
            .filter(|(_, segments)| {
                segments.len() == path.len()
                    && segments.iter().zip(&path).all(|(s, p)| match s {
                        Segment::Literal(l) => l == p,
                        Segment::Parameter => !p.is_empty(),
                    })
            })
            .max_by_key(|(_, segments)| {
                segments
                    .iter()
                    .filter(|s| matches!(s, Segment::Literal(_)))
                    .count()
            })
            .map_or(UNMATCHED, |(template, _)| template)
    }
}

/// A request's method as a label: the standard ones by name, anything else (a client may send
/// any token) as `other`.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Counts and times the request, to its response's head.
pub async fn metered(
    State(templates): State<Arc<RouteTemplates>>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let method = method_label(request.method());
    let route = templates.matching(request.uri().path()).to_owned();
    let response = next.run(request).await;
    crate::telemetry::api_request(
        &route,
        method,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_labelled_by_their_template_never_by_their_ids() {
        let (_, doc) = super::super::routes().split_for_parts();
        let templates = RouteTemplates::of(&doc);
        for (path, template) in [
            ("/v1/subscribers/s-1", "/v1/subscribers/{id}"),
            (
                "/v1/subscribers/s-1/secret/rotate",
                "/v1/subscribers/{id}/secret/rotate",
            ),
            ("/v1/dead-letters/groups", "/v1/dead-letters/groups"),
            ("/v1/events", "/v1/events"),
            ("/healthz", "/healthz"),
            ("/v1/subscribers/", UNMATCHED),
            ("/v1/nothing/here", UNMATCHED),
            ("/", UNMATCHED),
        ] {
            assert_eq!(templates.matching(path), template, "{path}");
        }
    }
}
