//! `hookline config check`: every check `serve` gives its configuration before it starts
//! (parsing, each value, the retry schedule against its window, the role and listen address),
//! run without opening the database or binding anything, so a deploy can stop on a refusal
//! before it replaces a running process.

use clap::ValueEnum;

use serde_json::json;

use super::{Output, ServeArgs};
use crate::app;

pub fn check(args: ServeArgs, output: Output) -> anyhow::Result<()> {
    let config = super::serve::load(&args)?;
    app::check(&config, args.role)?;
    let file = match &args.store.config.config {
        Some(path) => path.display().to_string(),
        None => "no file: the defaults".into(),
    };
    let retry = &config.retry;
    let schedule = retry.schedule(config.delivery.attempt_timeout);
    let role = args
        .role
        .to_possible_value()
        .expect("every role has a name");
    let database = super::serve::redact(&config.database);
    let traces = config.telemetry.traces_url();
    let document = json!({
        "ok": true,
        "file": args.store.config.config.as_ref().map(|p| p.display().to_string()),
        "listen": config.listen.to_string(),
        "role": role.get_name(),
        "database": database,
        "max_attempts": retry.max_attempts(),
        "last_attempt_latest_ms": super::schedule::ms(schedule.last_attempt_latest),
        "delivery_window_ms": super::schedule::ms(retry.delivery_window()),
        "traces_to": traces,
    });
    output.print(&document, |_| {
        format!(
            "config ok ({file})\nserve would listen on {} for role {}, database {database}\n\
             retry: {} attempts, the last starting at most {} after first seen, inside the {} \
             delivery window (`hookline schedule` for each attempt)\ntraces: {}\n",
            config.listen,
            role.get_name(),
            retry.max_attempts(),
            humantime::format_duration(schedule.last_attempt_latest),
            humantime::format_duration(retry.delivery_window()),
            traces
                .as_deref()
                .map_or("off".into(), |url| format!("exported to {url}"))
        )
    });
    Ok(())
}
