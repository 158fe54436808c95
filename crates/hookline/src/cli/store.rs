//! `hookline migrate`, `backup`, `restore` and `prune`: store maintenance without serving.

use anyhow::{anyhow, Context};
use std::path::PathBuf;

use hookline_engine::clock::{Clock, SystemClock};
use hookline_policy::duration_ms;

use super::StoreArgs;
use crate::config::{parse_duration, Config, Overrides};

fn config(args: StoreArgs) -> anyhow::Result<Config> {
    Ok(Config::load(
        args.config.config.as_deref(),
        Overrides {
            listen: None,
            database: args.database,
        },
    )?)
}

pub async fn migrate(args: StoreArgs) -> anyhow::Result<()> {
    let config = config(args)?;
    // Opening a store creates it if need be and applies its pending migrations.
    hookline_store::open_with(&config.database, &config.store_options()).await?;
    println!("migrations applied; the schema is current");
    Ok(())
}

pub async fn migrate_status(args: StoreArgs) -> anyhow::Result<()> {
    let config = config(args)?;
    let s = hookline_store::schema_status(&config.database).await?;
    println!("schema version:           {}", s.version);
    println!("oldest compatible binary: hookline {}", s.min_binary);
    println!(
        "this binary:              hookline {}",
        hookline_store::Version::current()
    );
    for m in &s.applied {
        println!(
            "applied:                  {} {} (needs hookline >= {}, applied by {})",
            m.number, m.description, m.min_binary, m.applied_by
        );
    }
    if s.pending.is_empty() {
        println!("pending migrations:       none");
    }
    for (number, description) in &s.pending {
        println!("pending:                  {number} {description}");
    }
    s.compatible.map_err(anyhow::Error::msg)
}

fn print_summary(what: &str, s: &hookline_store::BackupSummary) {
    let c = &s.counts;
    println!(
        "{what}: {} bytes, schema version {}, {} events; deliveries: {} scheduled, {} in flight \
         (still to be sent), {} delivered, {} dead",
        s.bytes, s.schema_version, s.events, c.scheduled, c.in_flight, c.delivered, c.dead
    );
}

pub async fn backup(args: StoreArgs, to: PathBuf) -> anyhow::Result<()> {
    let config = config(args)?;
    let summary = hookline_store::backup(&config.database, to.clone()).await?;
    print_summary(
        &format!("backed up {} to {}", config.database, to.display()),
        &summary,
    );
    Ok(())
}

pub async fn restore(args: StoreArgs, from: PathBuf) -> anyhow::Result<()> {
    let config = config(args)?;
    let summary = hookline_store::restore(from.clone(), &config.database).await?;
    print_summary(
        &format!("restored {} into {}", from.display(), config.database),
        &summary,
    );
    println!(
        "deliveries in flight at backup time are sent again once their lease runs out, with \
         the same webhook-id"
    );
    Ok(())
}

pub async fn prune(args: StoreArgs, delivered_before: &str, batch: u32) -> anyhow::Result<()> {
    let age = parse_duration(delivered_before).context("--delivered-before")?;
    if batch == 0 {
        return Err(anyhow!("--batch must be at least 1"));
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
    println!("pruned {total} delivered deliveries older than {delivered_before}");
    Ok(())
}
