//! Subscriber health on SQLite (`crate::health`). The changes run on the writer.

use hookline_policy::{DeadReason, UnixMs};
use rusqlite::{params, Connection, Row};

use super::{queries, reads, SqliteStore};
use crate::health::{AutoDisable, Condition, Watched};
use crate::*;

fn told(stored: Option<String>) -> rusqlite::Result<Option<Condition>> {
    stored
        .map(|s| {
            Condition::parse(&s).ok_or_else(|| {
                rusqlite::Error::InvalidColumnType(
                    24,
                    format!("told {s:?}"),
                    rusqlite::types::Type::Text,
                )
            })
        })
        .transpose()
}

fn watched_row(r: &Row<'_>) -> rusqlite::Result<Watched> {
    Ok(Watched {
        subscriber: reads::subscriber_row(r)?.1,
        told: told(r.get(24)?)?,
        told_at: r.get(25)?,
    })
}

fn auto_disable(c: &Connection, r: &AutoDisable) -> Result<Vec<Subscriber>> {
    let ids = c
        .prepare_cached(queries::AUTO_DISABLE)?
        .query_map(params![r.cutoff, r.now, r.except, r.failing_after], |row| {
            row.get::<_, String>(0)
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    ids.iter().map(|id| reads::subscriber(c, id)).collect()
}

#[async_trait::async_trait]
impl Health for SqliteStore {
    async fn auto_disable(&self, request: AutoDisable) -> Result<Vec<Subscriber>> {
        self.writer
            .write(move |w| auto_disable(&w.conn, &request))
            .await
    }

    async fn watched_subscribers(&self, after: Option<String>, limit: u32) -> Result<Vec<Watched>> {
        self.read(move |c| {
            Ok(c.prepare_cached(queries::WATCHED_SUBSCRIBERS)?
                .query_map(params![after, limit], watched_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?)
        })
        .await
    }

    async fn set_told(
        &self,
        id: &str,
        from: Option<Condition>,
        to: Option<(Condition, UnixMs)>,
    ) -> Result<bool> {
        let id = id.to_owned();
        self.writer
            .write(move |w| {
                let changed = w.conn.prepare_cached(queries::SET_TOLD)?.execute(params![
                    id,
                    to.map(|(c, _)| c.as_str()),
                    to.map(|(_, at)| at),
                    from.map(Condition::as_str)
                ])?;
                Ok(changed == 1)
            })
            .await
    }

    async fn finished_replays(&self, since: UnixMs, limit: u32) -> Result<Vec<Replay>> {
        self.read(move |c| {
            let mut stmt = c.prepare_cached(queries::FINISHED_REPLAYS)?;
            let mut rows = stmt.query(params![since, limit])?;
            let mut replays = Vec::new();
            while let Some(r) = rows.next()? {
                replays.push(reads::replay_row(c, r)?.1);
            }
            Ok(replays)
        })
        .await
    }

    async fn set_replay_finished(&self, id: &str, at: UnixMs) -> Result<bool> {
        let id = id.to_owned();
        self.writer
            .write(move |w| {
                let changed = w
                    .conn
                    .prepare_cached(queries::SET_REPLAY_FINISHED)?
                    .execute(params![id, at])?;
                Ok(changed == 1)
            })
            .await
    }

    async fn dead_letter_inflow(
        &self,
        since: UnixMs,
        except: &str,
    ) -> Result<Vec<(DeadReason, u64)>> {
        let except = except.to_owned();
        self.read(move |c| {
            let rows = c
                .prepare_cached(queries::DEAD_LETTER_INFLOW)?
                .query_map(params![since, except], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, u64>(1)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows
                .into_iter()
                .filter_map(|(reason, n)| Some((DeadReason::parse(&reason)?, n)))
                .collect())
        })
        .await
    }
}
