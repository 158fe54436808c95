//! Subscriber health on PostgreSQL (`crate::health`).

use hookline_policy::{DeadReason, UnixMs};
use tokio_postgres::Row;

use super::reads::{self, corrupt};
use super::{execute, queries, query, PostgresStore};
use crate::health::{AutoDisable, Condition, Watched};
use crate::*;

fn watched_row(r: &Row) -> Result<Watched> {
    let told: Option<String> = r.get(24);
    Ok(Watched {
        subscriber: reads::subscriber_row(r)?.1,
        told: told
            .map(|s| Condition::parse(&s).ok_or_else(|| corrupt("told", &s)))
            .transpose()?,
        told_at: r.get(25),
    })
}

#[async_trait::async_trait]
impl Health for PostgresStore {
    async fn auto_disable(&self, r: AutoDisable) -> Result<Vec<Subscriber>> {
        let c = self.client().await?;
        let failing_after = i32::try_from(r.failing_after).unwrap_or(i32::MAX);
        let ids: Vec<String> = query(
            &c,
            queries::AUTO_DISABLE,
            &[&r.cutoff, &r.now, &r.except, &failing_after],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
        let mut paused = Vec::with_capacity(ids.len());
        for id in &ids {
            paused.push(reads::subscriber(&c, id).await?);
        }
        Ok(paused)
    }

    async fn watched_subscribers(&self, after: Option<String>, limit: u32) -> Result<Vec<Watched>> {
        query(
            &self.client().await?,
            queries::WATCHED_SUBSCRIBERS,
            &[&after, &i64::from(limit)],
        )
        .await?
        .iter()
        .map(watched_row)
        .collect()
    }

    async fn set_told(
        &self,
        id: &str,
        from: Option<Condition>,
        to: Option<(Condition, UnixMs)>,
    ) -> Result<bool> {
        let changed = execute(
            &self.client().await?,
            queries::SET_TOLD,
            &[
                &id,
                &to.map(|(c, _)| c.as_str()),
                &to.map(|(_, at)| at),
                &from.map(Condition::as_str),
            ],
        )
        .await?;
        Ok(changed == 1)
    }

    async fn finished_replays(&self, since: UnixMs, limit: u32) -> Result<Vec<Replay>> {
        let c = self.client().await?;
        let rows = query(&c, queries::FINISHED_REPLAYS, &[&since, &i64::from(limit)]).await?;
        let mut replays = Vec::with_capacity(rows.len());
        for r in &rows {
            replays.push(reads::replay_row(&c, r).await?.1);
        }
        Ok(replays)
    }

    async fn set_replay_finished(&self, id: &str, at: UnixMs) -> Result<bool> {
        let changed = execute(
            &self.client().await?,
            queries::SET_REPLAY_FINISHED,
            &[&id, &at],
        )
        .await?;
        Ok(changed == 1)
    }

    async fn dead_letter_inflow(
        &self,
        since: UnixMs,
        except: &str,
    ) -> Result<Vec<(DeadReason, u64)>> {
        Ok(query(
            &self.client().await?,
            queries::DEAD_LETTER_INFLOW,
            &[&since, &except],
        )
        .await?
        .iter()
        .filter_map(|r| {
            let n: i64 = r.get(1);
            Some((DeadReason::parse(r.get(0))?, u64::try_from(n).unwrap_or(0)))
        })
        .collect())
    }
}
