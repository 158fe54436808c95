//! `hookline dlq`: the dead-letter queue through the HTTP API, as tables an operator can read.

use serde_json::{json, Value};

use super::client::call;
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
    let mut query = vec![("limit", limit.to_string())];
    query.extend(reason.map(|r| ("reason", r)));
    query.extend(subscriber.map(|s| ("subscriber_id", s)));
    query.extend(cursor.map(|c| ("cursor", c)));
    let url = format!("{}/v1/dead-letters", api.api.trim_end_matches('/'));
    let page = call(reqwest::Client::new().get(url).query(&query), api).await?;
    output.print(&page, render_list);
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
    let body = json!({
        "reason": reason,
        "subscriber_id": subscriber,
        "limit": limit,
        "per_second": per_second,
        "dry_run": mode == ReplayMode::DryRun,
    });
    let base = api.api.trim_end_matches('/');
    let client = reqwest::Client::new();
    let answer = call(
        client
            .post(format!("{base}/v1/dead-letters/replay"))
            .json(&body),
        api,
    )
    .await?;
    let rows = |ids: &Value| -> Vec<Vec<String>> {
        ids.as_array()
            .into_iter()
            .flatten()
            .map(|d| vec![text(d)])
            .collect()
    };
    if mode == ReplayMode::DryRun {
        // The preview as the API answers it: `selected` and `delivery_ids`.
        output.print(&answer, |answer| {
            table::render(&["WOULD REPLAY"], &rows(&answer["delivery_ids"]))
                + &format!(
                    "dry run: {} dead letter(s) with reason {reason} would be released; \
                     nothing changed\n",
                    text(&answer["selected"])
                )
        });
        return Ok(());
    }
    let id = text(&answer["replay_id"]);
    // The replay's audit record, as `GET /v1/replays/{id}` answers it.
    let audit = call(client.get(format!("{base}/v1/replays/{id}")), api).await?;
    output.print(&audit, |audit| {
        table::render(&["REPLAYED DELIVERY"], &rows(&audit["delivery_ids"]))
            + &format!(
                "replay {id}: {} dead letter(s) with reason {reason}{} released{}\n\
                 follow it: GET {base}/v1/replays/{id}\n",
                text(&answer["selected"]),
                body["subscriber_id"]
                    .as_str()
                    .map_or(String::new(), |s| format!(" for subscriber {s}")),
                per_second.map_or(String::new(), |r| format!(" at most {r}/s")),
            )
    });
    Ok(())
}
