//! The export of hookline's traces (`[telemetry] otlp_endpoint`): an OpenTelemetry tracer
//! provider whose batch processor posts spans as OTLP HTTP/protobuf to the collector's
//! `/v1/traces`, with the resource `service.name = "hookline"`. Which spans there are and how
//! an attempt joins its publish's trace is `hookline_engine::traces`.
//!
//! Each running hookline has its own provider (never the process-wide global one), so tests
//! run several side by side; it is shut down with the app, which exports what is left.

use std::time::Duration;

use bytes::Bytes;
use hookline_engine::traces::Traces;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;

use crate::config::TelemetryConfig;

/// How long one export may take (OpenTelemetry's default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The spans' way out, while it runs.
#[derive(Debug)]
pub struct Exporting(SdkTracerProvider);

/// A collector's exporter could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot export traces to {url}: {message}")]
pub struct ExportError {
    url: String,
    message: String,
}

/// The traces `config` asks for: off (`Traces::OFF`, nothing exported) without an endpoint,
/// else spans batched to it. Must run inside the tokio runtime the app runs on: exports run
/// there.
pub fn start(config: &TelemetryConfig) -> Result<(Traces, Option<Exporting>), ExportError> {
    let Some(url) = config.traces_url() else {
        return Ok((Traces::OFF, None));
    };
    let failed = |message: String| ExportError {
        url: url.clone(),
        message,
    };
    let client = reqwest::Client::builder()
        .timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url.as_str())
        .with_timeout(EXPORT_TIMEOUT)
        .with_http_client(OnRuntime {
            client,
            runtime: tokio::runtime::Handle::current(),
        })
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let resource = Resource::builder()
        .with_service_name("hookline")
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let traces = Traces::to(provider.tracer("hookline"));
    Ok((traces, Some(Exporting(provider))))
}

impl Exporting {
    /// Exports the spans still waiting and stops. Blocking work (the batch processor's thread
    /// is waited for), so it runs off the runtime's threads, whose tasks send the last batch.
    pub async fn shutdown(self) {
        let provider = self.0;
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "the last spans were not exported"),
            Err(e) => tracing::warn!(error = %e, "the last spans were not exported"),
        }
    }
}

/// The exporter's HTTP client: reqwest (rustls, like the CLI's client), each request run on
/// the app's tokio runtime. The SDK's batch processor exports from a thread of its own, where
/// reqwest's futures, which need the runtime's reactor, could not run by themselves.
#[derive(Debug)]
struct OnRuntime {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let exported = async move {
            let response = client.execute(reqwest::Request::try_from(request)?).await?;
            let status = response.status();
            let headers = response.headers().clone();
            let mut answer = Response::new(response.bytes().await?);
            *answer.status_mut() = status;
            *answer.headers_mut() = headers;
            Ok::<_, HttpError>(answer)
        };
        self.runtime.spawn(exported).await?
    }
}
