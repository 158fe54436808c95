//! `hookline resend`: new deliveries of published events to one subscriber, through the HTTP
//! API. It always previews first (a dry run), then resends exactly what the preview showed
//! (`expected_event_ids`), once confirmed.

use std::io::{BufRead, IsTerminal, Write};

use hookline_client::api::{ResendPreview, ResendRequest};
use hookline_client::Resent;

use super::client::document;
use super::{table, ApiArg, Output};

/// What a resend asks for, as the flags give it.
#[derive(Debug, Clone)]
pub struct Asked {
    pub subscriber: String,
    pub since: String,
    pub until: Option<String>,
    pub event_types: Vec<String>,
    pub limit: u32,
    pub per_second: Option<f64>,
}

/// What follows the preview.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirm {
    /// Ask on the terminal (and refuse without one).
    Ask,
    /// Resend what the preview showed without asking (`--yes`).
    Yes,
    /// Only show the preview (`--dry-run`).
    DryRun,
}

/// The ids in `list`, one row each.
fn rows(list: &[String]) -> Vec<Vec<String>> {
    list.iter().map(|id| vec![id.clone()]).collect()
}

pub async fn run(
    api: &ApiArg,
    asked: Asked,
    confirm: Confirm,
    output: Output,
) -> anyhow::Result<()> {
    if output == Output::Json && confirm == Confirm::Ask {
        return Err(super::usage(
            "-o json prints one document and asks nothing: pass --dry-run for the preview, or \
             --yes to resend what it selects",
        ));
    }
    let base = api.api.trim_end_matches('/');
    let client = api.client()?;
    let mut request = ResendRequest {
        subscriber_id: asked.subscriber.clone(),
        since: asked.since.clone(),
        until: asked.until.clone(),
        event_types: Some(asked.event_types.clone()),
        limit: asked.limit,
        per_second: asked.per_second,
        dry_run: true,
        expected_event_ids: None,
    };
    let preview = match client.resend(&request).await? {
        Resent::Previewed(preview) => preview,
        Resent::Started(resend) => {
            return Err(anyhow::anyhow!(
                "the API at {base} made resend {} when asked for a preview",
                resend.id
            ))
        }
    };
    let selected = preview.selected;
    let to = &asked.subscriber;
    let preview_table =
        |preview: &ResendPreview| table::render(&["WOULD RESEND"], &rows(&preview.event_ids));
    if confirm == Confirm::DryRun {
        // The preview as the API answers it: `selected` and `event_ids`.
        output.print(&document(&preview), |_| {
            preview_table(&preview)
                + &format!(
                    "dry run: {selected} event(s) would be resent to subscriber {to}; nothing \
                     changed\n"
                )
        });
        return Ok(());
    }
    if output == Output::Table {
        print!("{}", preview_table(&preview));
    }
    if selected == 0 {
        // Nothing made: the (empty) preview is the answer.
        output.print(&document(&preview), |_| {
            format!("nothing to resend: no event in the range that subscriber {to} takes\n")
        });
        return Ok(());
    }
    if confirm == Confirm::Ask && !confirmed(&format!("resend these {selected} event(s) to {to}?"))?
    {
        println!("nothing resent");
        return Ok(());
    }
    request.dry_run = false;
    request.expected_event_ids = Some(preview.event_ids);
    let resend = match client.resend(&request).await? {
        Resent::Started(resend) => resend,
        Resent::Previewed(_) => {
            return Err(anyhow::anyhow!(
                "the API at {base} answered a preview when asked to resend"
            ))
        }
    };
    // The resend's audit record, as the API answers it.
    output.print(&document(&resend), |_| {
        let id = &resend.id;
        table::render(&["RESENT DELIVERY"], &rows(&resend.delivery_ids))
            + &format!(
                "resend {id}: {} event(s) resent to subscriber {to}{}\n\
                 follow it: GET {base}/v1/resends/{id}\n",
                resend.selected,
                asked
                    .per_second
                    .map_or(String::new(), |r| format!(" at most {r}/s")),
            )
    });
    Ok(())
}

/// Asks `question` on the terminal: yes only for `y` or `yes`. Without a terminal nobody can
/// answer, so the command says how to go on instead of guessing.
fn confirmed(question: &str) -> anyhow::Result<bool> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(super::usage(
            "not resending without a confirmation: pass --yes to resend what the preview \
             shows, or --dry-run to only look",
        ));
    }
    print!("{question} [y/N] ");
    std::io::stdout().flush()?;
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim().to_lowercase().as_str(), "y" | "yes"))
}
