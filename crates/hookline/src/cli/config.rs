//! `hookline config check`: every check `serve` gives its configuration before it starts
//! (parsing, each value, the retry schedule against its window, the role and listen address),
//! run without opening the database or binding anything, so a deploy can stop on a refusal
//! before it replaces a running process.

use clap::ValueEnum;

use super::ServeArgs;
use crate::app;

pub fn check(args: ServeArgs) -> anyhow::Result<()> {
    let config = super::serve::load(&args)?;
    app::check(&config, args.role)?;
    let file = match &args.store.config.config {
        Some(path) => path.display().to_string(),
        None => "no file: the defaults".into(),
    };
    let retry = &config.retry;
    let schedule = retry.schedule(config.delivery.attempt_timeout);
    println!("config ok ({file})");
    println!(
        "serve would listen on {} for role {}, database {}",
        config.listen,
        args.role
            .to_possible_value()
            .expect("every role has a name")
            .get_name(),
        super::serve::redact(&config.database)
    );
    println!(
        "retry: {} attempts, the last starting at most {} after first seen, inside the {} \
         delivery window (`hookline schedule` for each attempt)",
        retry.max_attempts(),
        humantime::format_duration(schedule.last_attempt_latest),
        humantime::format_duration(retry.delivery_window())
    );
    Ok(())
}
