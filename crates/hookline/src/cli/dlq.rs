//! `hookline dlq`: the dead-letter queue through the HTTP API, as tables an operator can read.

use hookline_client::api::{DeadLetterQuery, ReplayRequest};
use hookline_client::Replayed;
use serde_json::Value;

use super::client::document;
use super::{table, ApiArg, Output};

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

pub async fn list(
    api: &ApiArg,
    reason: Option<String>,
    subscriber: Option<String>,
    limit: u32,
    cursor: Option<String>,
    output: Output,
) -> anyhow::Result<()> {
    let query = DeadLetterQuery {
        limit: Some(limit),
        reason,
        subscriber_id: subscriber,
        cursor,
        ..DeadLetterQuery::default()
    };
    let page = api.client()?.list_dead_letters(&query).await?;
    output.print(&document(&page), render_list);
    Ok(())
}

pub fn render_list(page: &Value) -> String {
    let items = page["items"].as_array().cloned().unwrap_or_default();
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|d| {
            let history = d["attempt_history"].as_array().cloned().unwrap_or_default();
            let last = history.last().map_or("-".into(), |a| {
                a.get("status")
                    .map(text)
                    .or_else(|| a.get("error").map(text))
                    .unwrap_or_else(|| text(&a["outcome"]))
            });
            vec![
                text(&d["delivery_id"]),
                text(&d["subscriber_id"]),
                text(&d["event_type"]),
                text(&d["reason"]),
                text(&d["dead_at"]),
                history.len().to_string(),
                last,
            ]
        })
        .collect();
    let mut out = table::render(
        &[
            "DELIVERY",
            "SUBSCRIBER",
            "EVENT TYPE",
            "REASON",
            "DEAD AT",
            "ATTEMPTS",
            "LAST",
        ],
        &rows,
    );
    out += &format!("{} dead letter(s) shown", items.len());
    match page["next_cursor"].as_str() {
        Some(c) => out += &format!("; more with --cursor {c}\n"),
        None => out += "\n",
    }
    out
}

/// One row per id.
fn rows(ids: &[String]) -> Vec<Vec<String>> {
    ids.iter().map(|id| vec![id.clone()]).collect()
}

/// Whether `dlq replay` replays or only shows what it would select.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayMode {
    Replay,
    DryRun,
}

pub async fn replay(
    api: &ApiArg,
    reason: String,
    subscriber: Option<String>,
    limit: u32,
    per_second: Option<f64>,
    mode: ReplayMode,
    output: Output,
) -> anyhow::Result<()> {
    let request = ReplayRequest {
        reason: reason.clone(),
        subscriber_id: subscriber,
        limit,
        per_second,
        dry_run: mode == ReplayMode::DryRun,
        ..ReplayRequest::default()
    };
    let client = api.client()?;
    let started = match client.replay_dead_letters(&request).await? {
        Replayed::Previewed(preview) => {
            // The preview as the API answers it: `selected` and `delivery_ids`.
            output.print(&document(&preview), |_| {
                table::render(&["WOULD REPLAY"], &rows(&preview.delivery_ids))
                    + &format!(
                        "dry run: {} dead letter(s) with reason {reason} would be released; \
                         nothing changed\n",
                        preview.selected
                    )
            });
            return Ok(());
        }
        Replayed::Started(started) => started,
    };
    let id = &started.replay_id;
    // The replay's audit record, as `GET /v1/replays/{id}` answers it.
    let audit = client.get_replay(id).await?;
    let base = api.api.trim_end_matches('/');
    output.print(&document(&audit), |_| {
        table::render(&["REPLAYED DELIVERY"], &rows(&audit.delivery_ids))
            + &format!(
                "replay {id}: {} dead letter(s) with reason {reason}{} released{}\n\
                 follow it: GET {base}/v1/replays/{id}\n",
                started.selected,
                request
                    .subscriber_id
                    .as_ref()
                    .map_or(String::new(), |s| format!(" for subscriber {s}")),
                per_second.map_or(String::new(), |r| format!(" at most {r}/s")),
            )
    });
    Ok(())
}
