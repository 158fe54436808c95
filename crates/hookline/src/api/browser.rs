//! Keeping web pages out. Any page a user visits can make the browser send requests to
//! hookline on loopback: a form or a `text/plain` "simple request" needs no CORS preflight, and
//! a DNS-rebinding page reaches it under its own host name. So bodies must say they are JSON
//! (a page cannot send that without a preflight hookline never answers), and an open API (no
//! tokens) answers only requests addressed to a loopback name (or its listen address) that
//! come from no page or a loopback one.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST, ORIGIN, TRANSFER_ENCODING};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiContext, ApiError};

pub async fn guard(State(ctx): State<Arc<ApiContext>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if has_body(headers) && !is_json(headers) {
        return ApiError::unsupported_media_type(
            "request bodies must be sent with content-type: application/json",
        )
        .into_response();
    }
    if ctx.api_tokens.is_empty() && request.uri().path() != "/healthz" {
        if let Err(why) = local_request(headers, ctx.listen) {
            return ApiError::forbidden(why).into_response();
        }
    }
    next.run(request).await
}

fn has_body(headers: &HeaderMap) -> bool {
    let length = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    length.is_some_and(|n| n > 0) || headers.contains_key(TRANSFER_ENCODING)
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// A host (with or without a port) that names this machine: `localhost`, a loopback address,
/// or the address hookline listens on.
fn is_local_host(authority: &str, listen: SocketAddr) -> bool {
    // A Host never carries user information; `evil.example@127.0.0.1` is not local.
    if authority.contains('@') {
        return false;
    }
    let Ok(authority) = authority.parse::<axum::http::uri::Authority>() else {
        return false;
    };
    let host = authority.host();
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .is_ok_and(|ip| ip.is_loopback() || ip == listen.ip())
}

fn local_request(headers: &HeaderMap, listen: SocketAddr) -> Result<(), String> {
    let host = headers
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !is_local_host(host, listen) {
        return Err(format!(
            "this hookline has no API tokens, so it answers only requests addressed to a \
             loopback name, not {host:?} (configure api_tokens to expose it)"
        ));
    }
    if let Some(origin) = headers.get(ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let local = url::Url::parse(origin).is_ok_and(|u| {
            u.host_str().is_some_and(|h| {
                is_local_host(
                    &format!("{h}:{}", u.port_or_known_default().unwrap_or(80)),
                    listen,
                )
            })
        });
        if !local {
            return Err(format!(
                "this hookline has no API tokens, so it answers no web page from {origin:?}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_loopback_hosts_and_pages_reach_an_open_api() {
        let listen: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        for host in [
            "localhost:8080",
            "127.0.0.1:8080",
            "[::1]:8080",
            "127.0.0.2",
            "LOCALHOST",
        ] {
            assert!(
                local_request(&headers(&[("host", host)]), listen).is_ok(),
                "{host}"
            );
        }
        for host in ["rebind.evil.example:8080", "10.0.0.1:8080", ""] {
            assert!(
                local_request(&headers(&[("host", host)]), listen).is_err(),
                "{host:?}"
            );
        }
        let exposed: SocketAddr = "10.1.2.3:8080".parse().unwrap();
        assert!(local_request(&headers(&[("host", "10.1.2.3:8080")]), exposed).is_ok());
        for origin in ["http://localhost:3000", "http://127.0.0.1:8080"] {
            let h = headers(&[("host", "localhost:8080"), ("origin", origin)]);
            assert!(local_request(&h, listen).is_ok(), "{origin}");
        }
        for origin in [
            "http://evil.example",
            "null",
            "https://127.0.0.1.evil.example",
        ] {
            let h = headers(&[("host", "localhost:8080"), ("origin", origin)]);
            assert!(local_request(&h, listen).is_err(), "{origin}");
        }
    }

    #[test]
    fn bodies_must_say_they_are_json() {
        let json = headers(&[("content-type", "application/json; charset=utf-8")]);
        assert!(is_json(&json));
        for other in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "application/jsonp",
        ] {
            assert!(!is_json(&headers(&[("content-type", other)])), "{other}");
        }
        assert!(!has_body(&headers(&[("content-length", "0")])));
        assert!(has_body(&headers(&[("content-length", "2")])));
        assert!(has_body(&headers(&[("transfer-encoding", "chunked")])));
    }
}
