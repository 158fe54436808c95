//! `hookline policy schedule NAME`: a named policy's retry schedule, read from the API and
//! printed like `hookline schedule`.

use anyhow::{anyhow, Context};
use std::path::Path;

use hookline_engine::policy::Policy;

use super::client::call;
use super::ApiArg;
use crate::config::{Config, Overrides};
use crate::policies::{Definition, PolicyExt};

pub async fn schedule(name: &str, api: &ApiArg, config: Option<&Path>) -> anyhow::Result<()> {
    let config = Config::load(config, Overrides::default())?;
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name == "." || name == ".." || !name.chars().all(plain) {
        return Err(anyhow!(
            "{name:?} is not a policy name (1 to 128 characters of A-Z a-z 0-9 . _ -)"
        ));
    }
    let url = format!("{}/v1/policies/{name}", api.api.trim_end_matches('/'));
    let mut answer = call(reqwest::Client::new().get(url), api).await?;
    // The definition, without when and by whom it was created.
    if let Some(fields) = answer.as_object_mut() {
        fields.remove("created_at");
        fields.remove("created_by");
    }
    let definition: Definition = serde_json::from_value(answer)
        .context("the API answered a policy this hookline cannot read")?;
    let policy = Policy::read(definition, &Policy::default_of(&config))?;
    let c = &policy.classification;
    let list = |s: &std::collections::BTreeSet<u16>| {
        let v: Vec<String> = s.iter().map(u16::to_string).collect();
        if v.is_empty() {
            "none".to_owned()
        } else {
            v.join(" ")
        }
    };
    println!(
        "policy {}: retryable {}; revoke {}; breaker opens after {} failures for {}\n",
        policy.name,
        list(c.retryable()),
        list(c.revoke()),
        policy.breaker.failures,
        humantime::format_duration(policy.breaker.cool_down)
    );
    print!(
        "{}",
        super::schedule::render(&policy.retry, config.delivery.attempt_timeout)
    );
    Ok(())
}
