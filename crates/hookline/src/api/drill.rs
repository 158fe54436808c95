//! `/v1/drill/latest`: the newest report `hookline drill --json` wrote into the console's
//! drill directory (`console.drill_reports`), and its `--svg` chart beside it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::error::ErrorEnvelope;
use super::{ApiError, ApiState};

const TAG: &str = "operations";

/// Files of the directory looked at, at most (a report is among the newest anyway).
const MAX_ENTRIES: usize = 10_000;
/// Newest `.json` files tried, at most, before saying there is no report.
const MAX_TRIED: usize = 20;
const MAX_REPORT_BYTES: u64 = 4 << 20;
const MAX_CHART_BYTES: u64 = 8 << 20;

#[derive(Serialize, Deserialize, ToSchema)]
pub struct DrillCheck {
    pub check: String,
    pub passed: bool,
}

/// What `hookline drill --json` writes.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct DrillReport {
    pub passed: bool,
    pub checks: Vec<DrillCheck>,
    /// By phase, then by who (`all`, `healthy`, ...): `n`, `p50_ms`, `p95_ms`, `p99_ms` and
    /// other figures of the phase.
    #[schema(value_type = BTreeMap<String, Object>)]
    pub phases: BTreeMap<String, Value>,
}

#[derive(Serialize, ToSchema)]
pub struct LatestDrill {
    /// The report's file name in the drill directory.
    pub file: String,
    #[schema(format = DateTime)]
    pub modified_at: String,
    /// Whether a chart (`--svg`, the same name ending in `.svg`) is beside it.
    pub chart: bool,
    pub report: DrillReport,
}

struct Found {
    path: PathBuf,
    modified: SystemTime,
    report: DrillReport,
}

/// The newest `.json` file in `dir` that reads as a drill report.
fn newest_report(dir: &Path) -> Option<Found> {
    let mut candidates: Vec<(SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .ok()?
        .take(MAX_ENTRIES)
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            (meta.is_file() && meta.len() <= MAX_REPORT_BYTES)
                .then(|| Some((meta.modified().ok()?, e.path())))?
        })
        .collect();
    candidates.sort_by_key(|c| std::cmp::Reverse(c.0));
    candidates
        .into_iter()
        .take(MAX_TRIED)
        .find_map(|(modified, path)| {
            let text = std::fs::read(&path).ok()?;
            let report = serde_json::from_slice(&text).ok()?;
            Some(Found {
                path,
                modified,
                report,
            })
        })
}

async fn latest_in(dir: PathBuf) -> Result<Found, ApiError> {
    tokio::task::spawn_blocking(move || newest_report(&dir))
        .await
        .map_err(|_| ApiError::internal("reading the drill directory failed"))?
        .ok_or_else(|| {
            ApiError::not_found(
                "no drill report: run `hookline drill --json drill.json --svg drill.svg` in the \
                 directory console.drill_reports names",
            )
        })
}

#[utoipa::path(get, path = "/v1/drill/latest", operation_id = "get_latest_drill", tag = TAG,
    responses(
        (status = 200, description = "The newest drill report", body = LatestDrill),
        (status = 404, description = "No drill report in the drill directory", body = ErrorEnvelope),
    ))]
pub async fn latest(State(ctx): ApiState) -> Result<Json<LatestDrill>, ApiError> {
    let found = latest_in(ctx.drill_reports.clone()).await?;
    Ok(Json(LatestDrill {
        file: found
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        modified_at: crate::clock::rfc3339(
            found
                .modified
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        ),
        chart: found.path.with_extension("svg").is_file(),
        report: found.report,
    }))
}

/// The chart is served so that nothing in it runs: a CSP that allows no script, and no
/// sniffing of another type.
#[utoipa::path(get, path = "/v1/drill/latest/chart", operation_id = "get_latest_drill_chart", tag = TAG,
    responses(
        (status = 200, description = "The newest report's latency chart", content_type = "image/svg+xml", body = String),
        (status = 404, description = "No drill report, or none with a chart", body = ErrorEnvelope),
    ))]
pub async fn chart(State(ctx): ApiState) -> Result<Response, ApiError> {
    let found = latest_in(ctx.drill_reports.clone()).await?;
    let path = found.path.with_extension("svg");
    let svg = tokio::task::spawn_blocking(move || {
        let meta = std::fs::metadata(&path).ok()?;
        (meta.is_file() && meta.len() <= MAX_CHART_BYTES)
            .then(|| std::fs::read(&path).ok())
            .flatten()
    })
    .await
    .map_err(|_| ApiError::internal("reading the drill chart failed"))?
    .ok_or_else(|| {
        ApiError::not_found("the newest drill report has no chart: run the drill with --svg")
    })?;
    Ok((
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        svg,
    )
        .into_response())
}
