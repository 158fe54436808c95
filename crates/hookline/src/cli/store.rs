//! `hookline migrate`, `backup`, `restore` and `prune`: store maintenance without serving.

use serde_json::{json, Value};
use std::path::PathBuf;

use hookline_engine::clock::{Clock, SystemClock};
use hookline_policy::duration_ms;

use super::{Output, StoreArgs};
use crate::config::{parse_duration, Config, Overrides};

fn config(args: StoreArgs) -> anyhow::Result<Config> {
    Ok(Config::load(
        args.config.config.as_deref(),
        Overrides {
            database: args.database,
            ..Overrides::default()
        },
    )?)
}

pub async fn migrate(args: StoreArgs, output: Output) -> anyhow::Result<()> {
    let config = config(args)?;
    // Opening a store creates it if need be and applies its pending migrations.
    hookline_store::open_with(&config.database, &config.store_options()).await?;
    // For -o json, what `--status` reports, now that nothing is pending.
    let s = hookline_store::schema_status(&config.database).await?;
    output.print(&status_document(&s), |_| {
        "migrations applied; the schema is current\n".into()
    });
    Ok(())
}

/// The schema's status as `-o json` prints it.
fn status_document(s: &hookline_store::SchemaStatus) -> Value {
    let applied: Vec<Value> = s
        .applied
        .iter()
        .map(|m| {
            json!({
                "number": m.number,
                "description": m.description,
                "min_binary": m.min_binary.to_string(),
                "applied_by": m.applied_by,
            })
        })
        .collect();
    let pending: Vec<Value> = s
        .pending
        .iter()
        .map(|(number, description)| json!({"number": number, "description": description}))
        .collect();
    json!({
        "version": s.version,
        "min_binary": s.min_binary.to_string(),
        "this_binary": hookline_store::Version::current().to_string(),
        "applied": applied,
        "pending": pending,
        "compatible": s.compatible.is_ok(),
        "incompatible_because": s.compatible.as_ref().err(),
    })
}

pub async fn migrate_status(args: StoreArgs, output: Output) -> anyhow::Result<()> {
    let config = config(args)?;
    let s = hookline_store::schema_status(&config.database).await?;
    output.print(&status_document(&s), |_| {
        let mut out = format!(
            "schema version:           {}\noldest compatible binary: hookline {}\n\
             this binary:              hookline {}\n",
            s.version,
            s.min_binary,
            hookline_store::Version::current()
        );
        for m in &s.applied {
            out += &format!(
                "applied:                  {} {} (needs hookline >= {}, applied by {})\n",
                m.number, m.description, m.min_binary, m.applied_by
            );
        }
        if s.pending.is_empty() {
            out += "pending migrations:       none\n";
        }
        for (number, description) in &s.pending {
            out += &format!("pending:                  {number} {description}\n");
        }
        out
    });
    s.compatible.map_err(anyhow::Error::msg)
}

/// What a backup or restore did: `what` for the table, the summary for `-o json`.
fn print_summary(what: &str, s: &hookline_store::BackupSummary, output: Output, note: &str) {
    let c = &s.counts;
    let document = json!({
        "bytes": s.bytes,
        "schema_version": s.schema_version,
        "events": s.events,
        "deliveries": c,
    });
    output.print(&document, |_| {
        format!(
            "{what}: {} bytes, schema version {}, {} events; deliveries: {} scheduled, {} in \
             flight (still to be sent), {} delivered, {} dead\n{note}",
            s.bytes, s.schema_version, s.events, c.scheduled, c.in_flight, c.delivered, c.dead
        )
    });
}

pub async fn backup(args: StoreArgs, to: PathBuf, output: Output) -> anyhow::Result<()> {
    let config = config(args)?;
    let summary = hookline_store::backup(&config.database, to.clone()).await?;
    print_summary(
        &format!(
            "backed up {} to {}",
            super::serve::redact(&config.database),
            to.display()
        ),
        &summary,
        output,
        "",
    );
    Ok(())
}

pub async fn restore(args: StoreArgs, from: PathBuf, output: Output) -> anyhow::Result<()> {
    let config = config(args)?;
    let summary = hookline_store::restore(from.clone(), &config.database).await?;
    print_summary(
        &format!(
            "restored {} into {}",
            from.display(),
            super::serve::redact(&config.database)
        ),
        &summary,
        output,
        "deliveries in flight at backup time are sent again once their lease runs out, with \
         the same webhook-id\n",
    );
    Ok(())
}

pub async fn prune(
    args: StoreArgs,
    delivered_before: &str,
    batch: u32,
    output: Output,
) -> anyhow::Result<()> {
    let age = parse_duration(delivered_before)
        .map_err(|e| super::usage(format!("--delivered-before: {e}")))?;
    if batch == 0 {
        return Err(super::usage("--batch must be at least 1"));
    }
    let config = config(args)?;
    // A store that is not there is refused, not created empty and reported as pruned.
    let store = hookline_store::open_existing(&config.database, &config.store_options()).await?;
    let before = SystemClock.now_ms().saturating_sub(duration_ms(age));
    let mut total = 0;
    loop {
        let pruned = store.prune_delivered(before, batch).await?;
        total += pruned;
        if pruned < u64::from(batch) {
            break;
        }
    }
    output.print(
        &json!({"pruned": total, "delivered_before": delivered_before}),
        |_| format!("pruned {total} delivered deliveries older than {delivered_before}\n"),
    );
    Ok(())
}
