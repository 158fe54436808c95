//! Bearer-token authentication. Tokens live in the config only as SHA-256 hashes with a name
//! and a scope; a presented token is hashed and compared with every configured hash in
//! constant time. With no tokens configured the API is open (and `serve` refuses to listen
//! anywhere but loopback).

use axum::extract::{Request, State};
use axum::http::{header::AUTHORIZATION, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

use super::{ApiContext, ApiError};
use crate::tokens::sha256;
pub use crate::tokens::{ApiToken, Scope};

/// Who is calling, once authenticated. Handlers read it from the request extensions.
#[derive(Debug, Clone)]
pub struct Caller {
    pub name: String,
    pub scope: Scope,
    /// The tenant it acts for; `None`: the platform.
    pub tenant: Option<String>,
}

/// Equal or not, in time that depends only on the length, which is fixed for hashes.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of an `Authorization: Bearer` header. The scheme is case-insensitive (RFC 9110):
/// `bearer` and `BEARER` are `Bearer`.
fn bearer(header: Option<&str>) -> Option<&str> {
    header
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
}

/// The caller a bearer token names, comparing against every token so timing tells nothing.
pub fn authenticate(tokens: &[ApiToken], header: Option<&str>) -> Result<Caller, ApiError> {
    let presented =
        bearer(header).ok_or_else(|| unauthorized("send Authorization: Bearer <token>"))?;
    configured(tokens, presented).ok_or_else(|| unauthorized("the token is not valid"))
}

/// The configured token `presented` is, if any.
fn configured(tokens: &[ApiToken], presented: &str) -> Option<Caller> {
    let hash = sha256(presented);
    let mut found = None;
    for token in tokens {
        if constant_time_eq(&hash, &token.sha256) {
            found = Some(Caller {
                name: token.name.clone(),
                scope: token.scope,
                tenant: token.tenant.clone(),
            });
        }
    }
    found
}

fn unauthorized(message: &str) -> ApiError {
    ApiError::unauthorized(message)
}

/// Routes that need no token: a probe, and what holds no data (the OpenAPI document, the
/// console's and the portal's pages; their files are `console::is_asset_path`).
const OPEN_ROUTES: [&str; 4] = ["/healthz", "/openapi.json", "/console", "/portal"];

/// Which callers may call a route: by scope, and a tenant's never the platform's own routes.
/// `HEAD` is a `GET` without the body.
fn allowed(method: &Method, path: &str, caller: &Caller) -> bool {
    let reads = method == Method::GET || method == Method::HEAD;
    // Any token may ask what it may do.
    if reads && path == "/v1/whoami" {
        return true;
    }
    if caller.tenant.is_some() && platform_only(method, path) {
        return false;
    }
    match caller.scope {
        Scope::Admin => true,
        // Signing secrets and subscriber headers are credentials, not reads: admin only.
        Scope::Read => reads && !credentials(path),
        // Reading an event is further limited to its own in the handler.
        Scope::Publish => {
            (method == Method::POST && path == "/v1/events")
                || (reads && path.starts_with("/v1/events/"))
        }
    }
}

/// What a tenant's token may not reach whatever its scope: metrics, policies, rollouts,
/// capacity and drills, and every change to tenants (it may read its own) and to the event
/// type catalog (which it reads: the catalog is the platform's, the same for every tenant).
fn platform_only(method: &Method, path: &str) -> bool {
    let reads = method == Method::GET || method == Method::HEAD;
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    match segments.as_slice() {
        ["", "metrics"] => true,
        ["", "v1", "policies" | "rollouts" | "capacity" | "drill" | "operational-endpoint", ..] => {
            true
        }
        ["", "v1", "tenants"] | ["", "v1", "tenants", _] => !reads,
        ["", "v1", "tenants", ..] => true,
        ["", "v1", "event-types", ..] => !reads,
        _ => false,
    }
}

/// `/v1/subscribers/{id}/secret` and `/v1/subscribers/{id}/headers`.
fn credentials(path: &str) -> bool {
    matches!(
        path.trim_end_matches('/')
            .split('/')
            .collect::<Vec<_>>()
            .as_slice(),
        ["", "v1", "subscribers", _, "secret" | "headers"]
    )
}

/// What a presented bearer token is, before the configured tokens are consulted.
enum Presented {
    /// A portal session's token that may be used now.
    Portal(Caller),
    /// A portal session's token that may not (expired, revoked, its tenant deleted, or never
    /// made): refused whatever the configured tokens say.
    EndedPortal,
    /// Not a portal session's token (or none): the configured tokens decide.
    Other,
}

/// What `token` is. A portal session is read by the token's hash (a random token's: its
/// timing tells nothing).
async fn presented(ctx: &ApiContext, token: Option<&str>) -> Result<Presented, ApiError> {
    let Some(token) = token.filter(|t| t.starts_with(PORTAL_TOKEN_PREFIX)) else {
        return Ok(Presented::Other);
    };
    let hash = crate::tokens::sha256_hex(token);
    let session = ctx
        .store
        .active_portal_session(&hash, ctx.clock.now_ms())
        .await?;
    let Some(s) = session else {
        return Ok(Presented::EndedPortal);
    };
    let scope = match s.scope.as_str() {
        "admin" => Scope::Admin,
        "read" => Scope::Read,
        _ => return Ok(Presented::EndedPortal),
    };
    Ok(Presented::Portal(Caller {
        name: format!("portal session {}", s.id),
        scope,
        tenant: Some(s.tenant_id),
    }))
}

/// Whether `token` is a tenant's: a portal session's (any, live or not), or a configured
/// token that names a tenant.
fn tenant_token(ctx: &ApiContext, token: Option<&str>) -> bool {
    token.is_some_and(|t| {
        t.starts_with(PORTAL_TOKEN_PREFIX)
            || configured(&ctx.api_tokens, t).is_some_and(|c| c.tenant.is_some())
    })
}

/// What a portal session's token starts with, so a config token is never looked up in the
/// store, nor a portal one compared with the config's.
pub const PORTAL_TOKEN_PREFIX: &str = "hlp_";

/// The middleware: open routes pass, the rest need a token whose scope allows them: a
/// configured token, or a portal session's (which also scopes a caller in open mode, so a
/// tenant's portal works there too).
pub async fn require_token(
    State(ctx): State<Arc<ApiContext>>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    let open_route = OPEN_ROUTES.contains(&path)
        || super::console::is_asset_path(path)
        || (path == "/metrics" && ctx.metrics_open);
    let header = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    // An open `/metrics` needs no token, but a tenant's is never let in with one.
    if path == "/metrics" && ctx.metrics_open && tenant_token(&ctx, bearer(header)) {
        return ApiError::forbidden("a tenant's token may not read /metrics").into_response();
    }
    let token = bearer(header).filter(|_| !open_route);
    let caller = match presented(&ctx, token).await {
        Err(e) => return e.into_response(),
        Ok(Presented::Portal(caller)) => caller,
        Ok(Presented::EndedPortal) => {
            return unauthorized("the portal session has expired, was revoked, or never was")
                .into_response()
        }
        Ok(Presented::Other) if ctx.api_tokens.is_empty() || open_route => {
            return next.run(request).await;
        }
        Ok(Presented::Other) => match authenticate(&ctx.api_tokens, header) {
            Ok(caller) => caller,
            Err(e) => return e.into_response(),
        },
    };
    if !allowed(request.method(), request.uri().path(), &caller) {
        return ApiError::forbidden(format!(
            "token {:?} (scope {:?}) may not {} {}",
            caller.name,
            caller.scope,
            request.method(),
            request.uri().path()
        ))
        .into_response();
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::new_token;

    fn token(name: &str, secret: &str, scope: Scope) -> ApiToken {
        ApiToken {
            name: name.into(),
            sha256: sha256(secret),
            scope,
            tenant: None,
        }
    }

    #[test]
    fn tokens_are_recognised_by_hash() {
        let tokens = [
            token("ops", "hl_a", Scope::Admin),
            token("ci", "hl_b", Scope::Publish),
        ];
        let caller = authenticate(&tokens, Some("Bearer hl_b")).unwrap();
        assert_eq!((caller.name.as_str(), caller.scope), ("ci", Scope::Publish));
        for scheme in ["bearer", "BEARER", "BeArEr"] {
            let header = format!("{scheme} hl_b");
            assert_eq!(
                authenticate(&tokens, Some(&header)).unwrap().name,
                caller.name
            );
        }
        for bad in [None, Some("hl_b"), Some("Bearer hl_c"), Some("Basic aGk=")] {
            assert_eq!(
                authenticate(&tokens, bad).unwrap_err().status,
                axum::http::StatusCode::UNAUTHORIZED
            );
        }
    }

    #[test]
    fn constant_time_comparison_is_still_a_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        let t = new_token();
        assert!(t.starts_with("hl_") && t.len() > 40);
        assert_ne!(t, new_token());
    }

    fn platform(scope: Scope) -> Caller {
        Caller {
            name: "t".into(),
            scope,
            tenant: None,
        }
    }

    #[test]
    fn scopes() {
        use Method as M;
        assert!(allowed(&M::POST, "/v1/events", &platform(Scope::Publish)));
        assert!(allowed(&M::GET, "/v1/events/e1", &platform(Scope::Publish)));
        assert!(!allowed(
            &M::GET,
            "/v1/deliveries",
            &platform(Scope::Publish)
        ));
        assert!(!allowed(
            &M::POST,
            "/v1/subscribers",
            &platform(Scope::Publish)
        ));
        assert!(allowed(&M::GET, "/v1/dead-letters", &platform(Scope::Read)));
        assert!(!allowed(
            &M::GET,
            "/v1/subscribers/s/secret",
            &platform(Scope::Read)
        ));
        assert!(!allowed(
            &M::GET,
            "/v1/subscribers/s/secret",
            &platform(Scope::Publish)
        ));
        assert!(allowed(
            &M::GET,
            "/v1/subscribers/s/secret",
            &platform(Scope::Admin)
        ));
        assert!(!allowed(
            &M::GET,
            "/v1/subscribers/s/headers",
            &platform(Scope::Read)
        ));
        assert!(!allowed(
            &M::GET,
            "/v1/subscribers/s/headers/",
            &platform(Scope::Read)
        ));
        assert!(allowed(
            &M::GET,
            "/v1/subscribers/s/headers",
            &platform(Scope::Admin)
        ));
        // A subscriber may be called "secret" or "headers".
        assert!(allowed(
            &M::GET,
            "/v1/subscribers/headers",
            &platform(Scope::Read)
        ));
        assert!(allowed(
            &M::GET,
            "/v1/subscribers/secret",
            &platform(Scope::Read)
        ));
        assert!(!allowed(
            &M::POST,
            "/v1/dead-letters/replay",
            &platform(Scope::Read)
        ));
        assert!(!allowed(&M::POST, "/v1/events", &platform(Scope::Read)));
        assert!(allowed(
            &M::DELETE,
            "/v1/subscribers/s",
            &platform(Scope::Admin)
        ));
        // Policies and rollouts: read to look, admin to change.
        assert!(allowed(
            &M::GET,
            "/v1/rollouts/r/comparison",
            &platform(Scope::Read)
        ));
        assert!(!allowed(&M::POST, "/v1/rollouts", &platform(Scope::Read)));
        assert!(!allowed(
            &M::POST,
            "/v1/rollouts/r/abort",
            &platform(Scope::Publish)
        ));
        assert!(!allowed(
            &M::PATCH,
            "/v1/rollouts/r",
            &platform(Scope::Read)
        ));
        assert!(!allowed(&M::POST, "/v1/policies", &platform(Scope::Read)));
        assert!(allowed(
            &M::POST,
            "/v1/rollouts/r/promote",
            &platform(Scope::Admin)
        ));
        for scope in [Scope::Admin, Scope::Publish, Scope::Read] {
            assert!(allowed(&M::GET, "/v1/whoami", &platform(scope)));
            assert!(allowed(&M::HEAD, "/v1/whoami", &platform(scope)));
        }
        assert!(allowed(
            &M::HEAD,
            "/v1/dead-letters",
            &platform(Scope::Read)
        ));
        assert!(!allowed(
            &M::HEAD,
            "/v1/subscribers/s/secret",
            &platform(Scope::Read)
        ));
    }

    #[test]
    fn a_tenant_s_token_never_reaches_the_platform_s_routes() {
        use Method as M;
        let tenant = |scope| Caller {
            tenant: Some("acme".into()),
            ..platform(scope)
        };
        let admin = tenant(Scope::Admin);
        for (method, path) in [
            (M::GET, "/metrics"),
            (M::GET, "/v1/policies"),
            (M::POST, "/v1/policies"),
            (M::GET, "/v1/rollouts/r"),
            (M::GET, "/v1/capacity"),
            (M::GET, "/v1/drill/latest"),
            (M::POST, "/v1/tenants"),
            (M::PATCH, "/v1/tenants/acme"),
            (M::DELETE, "/v1/tenants/acme/"),
            (M::POST, "/v1/tenants/acme/portal-sessions"),
            (M::GET, "/v1/tenants/acme/portal-sessions"),
        ] {
            assert!(!allowed(&method, path, &admin), "{method} {path}");
            assert!(
                allowed(&method, path, &platform(Scope::Admin)),
                "{method} {path}"
            );
        }
        for (method, path) in [
            (M::GET, "/v1/tenants"),
            (M::GET, "/v1/tenants/acme"),
            (M::POST, "/v1/subscribers"),
            (M::POST, "/v1/dead-letters/replay"),
            (M::GET, "/v1/overview"),
        ] {
            assert!(allowed(&method, path, &admin), "{method} {path}");
        }
        // Its scope still holds.
        assert!(!allowed(&M::POST, "/v1/subscribers", &tenant(Scope::Read)));
        assert!(allowed(&M::POST, "/v1/events", &tenant(Scope::Publish)));
    }
}
