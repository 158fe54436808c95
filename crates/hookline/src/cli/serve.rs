//! `hookline serve`: the API and the workers in one process, until SIGTERM or SIGINT.

use std::sync::Arc;

use tokio::signal::unix::{signal, SignalKind};

use super::ServeArgs;
use crate::app;
use crate::clock::SystemClock;
use crate::config::{Config, Overrides};

pub async fn run(args: ServeArgs) -> Result<(), String> {
    let config = Config::load(
        args.config.config.as_deref(),
        Overrides {
            listen: args.listen,
            database: args.database,
        },
    )
    .map_err(|e| e.to_string())?;
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let running = app::start(&config, Arc::new(SystemClock))
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!(
        listen = %running.addr,
        database = %config.database,
        "hookline {} serving",
        env!("CARGO_PKG_VERSION")
    );
    if config.allow_private_destinations {
        tracing::warn!("allow_private_destinations = true: the SSRF guard is off");
    }
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
    running.shutdown().await;
    tracing::info!("stopped cleanly");
    Ok(())
}
