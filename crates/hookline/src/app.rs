//! One running hookline: the store, the dispatcher and the HTTP API, started and stopped
//! together. `serve` runs one of these; tests run them in-process with a manual clock.

use std::net::SocketAddr;
use std::sync::Arc;

use hookline_store::{Store, StoreError};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::api::{self, ApiContext};
use crate::clock::Clock;
use crate::config::Config;
use crate::dispatcher::{Dispatcher, DispatcherHandle};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

pub struct RunningApp {
    /// Where the API listens (the real port when the config asked for port 0).
    pub addr: SocketAddr,
    pub store: Arc<dyn Store>,
    dispatcher: DispatcherHandle,
    server: JoinHandle<std::io::Result<()>>,
    stop_server: oneshot::Sender<()>,
}

pub async fn start(config: &Config, clock: Arc<dyn Clock>) -> Result<RunningApp, StartError> {
    let store = hookline_store::open(&config.database).await?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: config.listen,
        source,
    })?;
    let dispatcher = Dispatcher::spawn(
        store.clone(),
        config.retry,
        config.delivery.clone(),
        clock.clone(),
    );
    let router = api::router(Arc::new(ApiContext {
        store: store.clone(),
        clock,
        allow_private_destinations: config.allow_private_destinations,
        max_payload_bytes: config.max_payload_bytes,
        wake: dispatcher.waker(),
    }));
    let (stop_server, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });
    Ok(RunningApp {
        addr,
        store,
        dispatcher,
        server,
        stop_server,
    })
}

impl RunningApp {
    /// Stops accepting requests and claiming deliveries, lets in-flight requests and attempts
    /// finish, and commits their outcomes.
    pub async fn shutdown(self) {
        let _ = self.stop_server.send(());
        let (server, ()) = tokio::join!(self.server, self.dispatcher.shutdown());
        if let Ok(Err(e)) = server {
            tracing::error!(error = %e, "HTTP server stopped with an error");
        }
    }
}
