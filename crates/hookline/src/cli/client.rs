//! The commands that talk to a running hookline through its HTTP API: one way to send a
//! request and read its answer or its error.

use anyhow::{anyhow, Context};
use serde_json::Value;

use super::ApiArg;

fn authorized(request: reqwest::RequestBuilder, api: &ApiArg) -> reqwest::RequestBuilder {
    match &api.token {
        Some(token) => request.bearer_auth(token),
        None => request,
    }
}

/// Sends `request` and reads its answer as JSON, whatever its status: for the loads the
/// commands run themselves (the drill's, the capacity measurement's) and the sinks they read.
pub async fn read_json(request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
    Ok(request.send().await?.json().await?)
}

pub async fn call(request: reqwest::RequestBuilder, api: &ApiArg) -> anyhow::Result<Value> {
    let response = authorized(request, api)
        .send()
        .await
        .with_context(|| format!("cannot reach the hookline API at {}", api.api))?;
    let status = response.status();
    let body: Value = response
        .json()
        .await
        .with_context(|| format!("the API at {} answered {status} without JSON", api.api))?;
    if !status.is_success() {
        let message = body["error"]["message"].as_str().unwrap_or("(no message)");
        return Err(anyhow!("{status}: {message}"));
    }
    Ok(body)
}

/// `GET {url}/healthz` answers 200, within `timeout` (a duration such as "5s"): what
/// `hookline healthcheck` checks.
pub async fn healthcheck(url: &str, timeout: &str) -> anyhow::Result<()> {
    let timeout = humantime::parse_duration(timeout)
        .with_context(|| format!("--timeout {timeout:?} is not a duration (e.g. 5s)"))?;
    let health = format!("{}/healthz", url.trim_end_matches('/'));
    let response = reqwest::Client::builder()
        .timeout(timeout)
        .build()?
        .get(&health)
        .send()
        .await
        .with_context(|| format!("cannot reach {health}"))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if status != reqwest::StatusCode::OK {
        return Err(anyhow!("{health} answered {status}: {body}"));
    }
    println!("{body}");
    Ok(())
}
