//! `hookline serve`: the API and the workers in one process, until SIGTERM or SIGINT.

use std::sync::Arc;

use hookline_engine::clock::SystemClock;
use tokio::signal::unix::{signal, SignalKind};

use super::ServeArgs;
use crate::app;
use crate::config::{Config, Overrides};

/// The configuration `serve` runs with (the file, flags and environment), with every check it
/// gets before anything starts; `hookline config check` runs the same.
pub fn load(args: &ServeArgs) -> anyhow::Result<Config> {
    Ok(Config::load_for_serve(
        args.store.config.config.as_deref(),
        Overrides {
            listen: args.listen.clone(),
            database: args.store.database.clone(),
            otlp_endpoint: args.otlp_endpoint.clone(),
        },
    )?)
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = load(&args)?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    if let Some(limit) = crate::open_files::check(crate::open_files::needed(&config, args.role)) {
        let lane = crate::open_files::slow_lane_within(&config, args.role, limit.soft);
        if lane < config.delivery.slow_lane {
            tracing::warn!(
                slow_lane = lane,
                configured = config.delivery.slow_lane,
                limit = limit.soft,
                "delivery.slow_lane lowered to fit the open-file limit"
            );
            config.delivery.slow_lane = lane;
        }
    }
    let running = app::start(&config, Arc::new(SystemClock), args.role).await?;
    tracing::info!(
        listen = %running.addr,
        database = %redact(&config.database),
        role = ?args.role,
        "hookline {} serving",
        env!("CARGO_PKG_VERSION")
    );
    if let Some(url) = config.telemetry.traces_url() {
        tracing::info!(to = %url, "exporting traces (OpenTelemetry, OTLP over HTTP)");
    }
    if config.api_tokens.is_empty() {
        tracing::warn!(
            "no api_tokens configured: the API is open to anyone who can reach {}",
            running.addr
        );
    }
    if !config.guards.platform.enabled {
        tracing::warn!("allow_private_destinations = true: the SSRF guard is off");
    }
    if !config.guards.tenants.enabled {
        tracing::warn!("[tenants] destinations = \"as_platform\": the SSRF guard is off for tenants' subscribers too");
    }
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
    running.shutdown().await;
    tracing::info!("stopped cleanly");
    Ok(())
}

/// The database URL without its password, for logs.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &url[..scheme + 3],
                    &userinfo[..colon],
                    &url[at..]
                ),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_stay_out_of_logs() {
        assert_eq!(
            super::redact("postgres://app:s3cret@db:5432/hookline"),
            "postgres://app:***@db:5432/hookline"
        );
        assert_eq!(super::redact("postgres://app@db/h"), "postgres://app@db/h");
        assert_eq!(
            super::redact("sqlite://hookline.db"),
            "sqlite://hookline.db"
        );
    }
}
