//! `hookline policy schedule NAME`: a named policy's retry schedule, read from the API and
//! printed like `hookline schedule`.

use serde_json::json;
use std::path::Path;

use hookline_engine::policy::Policy;

use super::{ApiArg, Output};
use crate::config::{Config, Overrides};
use crate::policies::{NewPolicy, PolicyExt};

pub async fn schedule(
    name: &str,
    api: &ApiArg,
    config: Option<&Path>,
    output: Output,
) -> anyhow::Result<()> {
    let config = Config::load(config, Overrides::default())?;
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name == "." || name == ".." || !name.chars().all(plain) {
        return Err(super::usage(format!(
            "{name:?} is not a policy name (1 to 128 characters of A-Z a-z 0-9 . _ -)"
        )));
    }
    let answer = api.client()?.get_policy(name).await?;
    // The definition, without when and by whom it was created.
    let policy = Policy::read(NewPolicy::from(answer.policy), &Policy::default_of(&config))?;
    let c = &policy.classification;
    let list = |s: &std::collections::BTreeSet<u16>| {
        let v: Vec<String> = s.iter().map(u16::to_string).collect();
        if v.is_empty() {
            "none".to_owned()
        } else {
            v.join(" ")
        }
    };
    let timeout = config.delivery.attempt_timeout;
    let mut document = super::schedule::document(&policy.retry, timeout);
    document["name"] = json!(policy.name);
    document["retryable"] = json!(c.retryable());
    document["revoke"] = json!(c.revoke());
    document["breaker"] = json!({
        "failures": policy.breaker.failures,
        "cool_down_ms": super::schedule::ms(policy.breaker.cool_down),
    });
    output.print(&document, |_| {
        format!(
            "policy {}: retryable {}; revoke {}; breaker opens after {} failures for {}\n\n",
            policy.name,
            list(c.retryable()),
            list(c.revoke()),
            policy.breaker.failures,
            humantime::format_duration(policy.breaker.cool_down)
        ) + &super::schedule::render(&policy.retry, timeout)
    });
    Ok(())
}
