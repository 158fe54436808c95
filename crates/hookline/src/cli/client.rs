//! The commands that talk to a running hookline through its HTTP API do it with
//! `hookline-client`, this API's typed client (the CLI is its first user), and print its typed
//! answers as the documents the API sent.

use anyhow::{anyhow, Context};
use serde::Serialize;
use serde_json::Value;

use super::ApiArg;

/// Sends `request` and reads its answer as JSON, whatever its status: for the sinks the
/// commands run themselves (the drill's, the capacity measurement's), which are not the API.
pub async fn read_json(request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
    Ok(request.send().await?.json().await?)
}

impl ApiArg {
    /// The typed client of the API these flags name, with their token: every command that
    /// calls the API goes through it.
    pub fn client(&self) -> anyhow::Result<hookline_client::Client> {
        let client = hookline_client::Client::new(&self.api)?;
        Ok(match &self.token {
            Some(token) => client.with_token(token),
            None => client,
        })
    }
}

/// An answer as the JSON document `-o json` prints: the API's answer as the API gave it.
pub fn document(answer: &impl Serialize) -> Value {
    serde_json::to_value(answer).expect("an answer serializes")
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
