//! `/v1/drill/latest`: the newest report `hookline drill --json` wrote into the console's
//! drill directory (`console.drill_reports`), and its `--svg` chart beside it.
//!
//! The directory is the operator's, but what is in it is read as untrusted: only regular
//! files (no symlinks, which could name any file hookline can read), each read no further than
//! its limit whatever size it claims (files in `/proc` claim none), and the chart served so
//! that nothing in it runs.

use hookline_api::{DrillReport, LatestDrill};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hookline_policy::duration_ms;

use super::error::ErrorEnvelope;
use super::{ApiError, ApiState};

const TAG: &str = "operations";

/// The largest report read: a drill's is a few KiB; anything near this is not one.
const MAX_REPORT_BYTES: u64 = 4 << 20;
/// The largest chart served: a drill's is a few hundred KiB.
const MAX_CHART_BYTES: u64 = 8 << 20;
/// What one request reads at most looking for a report among the newest `.json` files, so
/// that a directory of large non-reports costs a bounded amount per request.
const MAX_BYTES_TRIED: u64 = 16 << 20;

struct Found {
    path: PathBuf,
    modified: SystemTime,
    report: DrillReport,
}

/// A regular file (not a symlink) of at most `max` bytes, read no further than that.
fn read_regular(path: &Path, max: u64) -> Option<Vec<u8>> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_file() || meta.len() > max {
        return None;
    }
    let mut bytes = Vec::new();
    File::open(path)
        .ok()?
        .take(max + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    (bytes.len() as u64 <= max).then_some(bytes)
}

/// The newest `.json` file in `dir` that reads as a drill report.
fn newest_report(dir: &Path) -> Option<Found> {
    let mut candidates: Vec<(SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| {
            // `DirEntry::metadata` does not follow a symlink: one is no regular file.
            let meta = e.metadata().ok()?;
            let fits = meta.file_type().is_file() && meta.len() <= MAX_REPORT_BYTES;
            fits.then(|| Some((meta.modified().ok()?, e.path())))?
        })
        .collect();
    candidates.sort_by_key(|c| std::cmp::Reverse(c.0));
    let mut budget = MAX_BYTES_TRIED;
    for (modified, path) in candidates {
        let Some(text) = read_regular(&path, MAX_REPORT_BYTES.min(budget)) else {
            continue;
        };
        budget = budget.saturating_sub(text.len() as u64);
        if let Ok(report) = serde_json::from_slice(&text) {
            return Some(Found {
                path,
                modified,
                report,
            });
        }
        if budget == 0 {
            break;
        }
    }
    None
}

fn chart_of(report: &Path) -> Option<Vec<u8>> {
    read_regular(&report.with_extension("svg"), MAX_CHART_BYTES)
}

/// Whether [`chart_of`] would serve one, without reading it.
fn has_chart(report: &Path) -> bool {
    std::fs::symlink_metadata(report.with_extension("svg"))
        .is_ok_and(|m| m.file_type().is_file() && m.len() <= MAX_CHART_BYTES)
}

/// Runs a read of the drill directory off the async workers.
async fn in_the_directory<T: Send + 'static>(
    dir: PathBuf,
    read: impl FnOnce(&Path) -> Option<T> + Send + 'static,
    none: &str,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(move || read(&dir))
        .await
        .map_err(|_| ApiError::internal("reading the drill directory failed"))?
        .ok_or_else(|| ApiError::not_found(none))
}

const NO_REPORT: &str = "no drill report: run `hookline drill --json drill.json --svg drill.svg` \
                         in the directory console.drill_reports names";

#[utoipa::path(get, path = "/v1/drill/latest", operation_id = "get_latest_drill", tag = TAG,
    responses(
        (status = 200, description = "The newest drill report", body = LatestDrill),
        (status = 404, description = "No drill report in the drill directory", body = ErrorEnvelope),
    ))]
pub async fn latest(State(ctx): ApiState) -> Result<Json<LatestDrill>, ApiError> {
    let (found, chart) = in_the_directory(
        ctx.drill_reports.clone(),
        |dir| {
            let found = newest_report(dir)?;
            let chart = has_chart(&found.path);
            Some((found, chart))
        },
        NO_REPORT,
    )
    .await?;
    let modified_ms = found
        .modified
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, duration_ms);
    Ok(Json(LatestDrill {
        file: found
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        modified_at: hookline_engine::clock::rfc3339(modified_ms),
        chart,
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
    let svg = in_the_directory(
        ctx.drill_reports.clone(),
        |dir| chart_of(&newest_report(dir)?.path),
        "no drill chart: the newest report has none (run the drill with --svg)",
    )
    .await?;
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
