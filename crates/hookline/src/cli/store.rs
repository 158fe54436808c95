//! `hookline migrate` and `hookline prune`: store maintenance without serving.

use super::StoreArgs;
use crate::clock::{Clock, SystemClock};
use crate::config::{parse_duration, Config, Overrides};

async fn open(args: StoreArgs) -> Result<std::sync::Arc<dyn hookline_store::Store>, String> {
    let config = Config::load(
        args.config.config.as_deref(),
        Overrides {
            listen: None,
            database: args.database,
        },
    )
    .map_err(|e| e.to_string())?;
    // Opening a store applies its pending migrations.
    hookline_store::open_with(&config.database, &config.store_options())
        .await
        .map_err(|e| e.to_string())
}

pub async fn migrate(args: StoreArgs) -> Result<(), String> {
    open(args).await?;
    println!("migrations applied; the schema is current");
    Ok(())
}

pub async fn prune(args: StoreArgs, delivered_before: &str, batch: u32) -> Result<(), String> {
    let age = parse_duration(delivered_before).map_err(|e| format!("--delivered-before: {e}"))?;
    if batch == 0 {
        return Err("--batch must be at least 1".into());
    }
    let store = open(args).await?;
    let before = SystemClock.now_ms() - age.as_millis() as i64;
    let mut total = 0;
    loop {
        let pruned = store
            .prune_delivered(before, batch)
            .await
            .map_err(|e| e.to_string())?;
        total += pruned;
        if pruned < u64::from(batch) {
            break;
        }
    }
    println!("pruned {total} delivered deliveries older than {delivered_before}");
    Ok(())
}
