//! hookline's own webhooks (`subscriber.failing`, `.recovered`, `.disabled`, `.revoked`,
//! `dead_letters.spike`, `replay.finished`) and the endpoint lifecycle (`[lifecycle]
//! disable_after`).
//!
//! The operational endpoint is a subscriber of its own, [`ENDPOINT_ID`], so its events go
//! through the queue like any delivery (signed by the same signer, retried by the same policy,
//! behind the same SSRF guard), and are published to it alone (`NewEvent::only_subscriber`):
//! never to a subscriber's URL, and no publisher's event reaches it (it lists one type under
//! `hookline.`, which no publisher may use). It is never told about itself: its own health,
//! auto-disable and dead letters are left out.
//!
//! A watcher in each process that delivers looks once a second: it pauses subscribers that have
//! failed for too long, compares each watched subscriber's condition with what was told
//! (`hookline_store::health`), and tells what changed. Each event's id is made from what it
//! tells and the time that began, so two processes, or one that crashed between the publish
//! and recording it told, publish the same id, which the store answers as a retry: told at
//! least once, published once.

use std::sync::Arc;

use hookline_engine::clock::Clock;
use hookline_policy::{DeadReason, UnixMs};
use hookline_store::health::{AutoDisable, Condition, Notice, Watched};
use hookline_store::{
    NewEvent, NewSubscriber, PublishOutcome, Replay, Store, StoreError, SubscriberPatch,
    SubscriberStatus,
};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::config::OperationalConfig;

/// The operational endpoint's subscriber id: under `hookline.`, which no subscriber id an
/// outsider chooses may start with.
pub const ENDPOINT_ID: &str = hookline_store::health::OPERATIONAL_ENDPOINT;

/// The one type it lists: under `hookline.`, so no publisher's event selects it.
const ENDPOINT_TYPE: &str = "hookline.operational";

/// How often the watcher looks.
const WATCH_EVERY_MS: i64 = 1_000;

/// Subscribers read per page of the watched ones.
const PAGE: u32 = 500;

/// How far back unfinished replays are looked for: replays older than this were released and
/// ended long before (their deliveries' windows are a day by default).
const REPLAYS_SINCE_MS: i64 = 7 * 24 * 3600 * 1000;

/// Replays looked at per pass.
const REPLAYS_PER_PASS: u32 = 100;

pub struct Watcher {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub config: OperationalConfig,
    /// Wakes this process's dispatcher for what was published (a SQLite store has no
    /// `NOTIFY`).
    pub wake: Arc<tokio::sync::Notify>,
    /// When each reason's last spike was told: a flood that goes on is told again only once
    /// another `dead_letter_spike` dead letters of it came after. (Per process: another
    /// process, or this one after a restart, may tell a flood it saw begin once more.)
    pub spikes_told: std::sync::Mutex<std::collections::HashMap<DeadReason, UnixMs>>,
}

/// Where operational events go now: `None` when no endpoint is set or it is paused (what
/// happens meanwhile is recorded as told, so setting one later does not replay the past).
async fn endpoint_active(store: &dyn Store) -> Result<bool, StoreError> {
    match store.get_subscriber(ENDPOINT_ID).await {
        Ok(s) => Ok(s.status == SubscriberStatus::Active),
        Err(StoreError::NotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sets the operational endpoint to `url` (checked by the caller's guard) and `secret` (when
/// given; a new endpoint needs one), active. Answers whether it was made now.
pub async fn set_endpoint(
    store: &dyn Store,
    url: String,
    secret: Option<String>,
    now: UnixMs,
) -> Result<bool, StoreError> {
    if let Err(StoreError::NotFound(_)) = store.get_subscriber(ENDPOINT_ID).await {
        let new = NewSubscriber {
            id: ENDPOINT_ID.into(),
            tenant_id: None,
            url: url.clone(),
            event_types: vec![ENDPOINT_TYPE.into()],
            secret: secret.clone().ok_or_else(|| {
                StoreError::Invalid("a new operational endpoint needs a secret".into())
            })?,
            max_in_flight: None,
            rate_limit_per_second: None,
            payload_version: None,
            headers: Default::default(),
        };
        match store.create_subscriber(new, now).await {
            Ok(_) => return Ok(true),
            // Another process starting beside this one made it first: set it as theirs.
            Err(StoreError::Conflict(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let current = store.get_subscriber(ENDPOINT_ID).await?;
    let patch = SubscriberPatch {
        url: Some(url),
        status: Some(SubscriberStatus::Active),
        ..Default::default()
    };
    store.update_subscriber(ENDPOINT_ID, patch, now).await?;
    if let Some(secret) = secret.filter(|s| *s != current.secret) {
        // No grace: the endpoint's owner set the new secret and verifies with it.
        store.rotate_secret(ENDPOINT_ID, secret, now, now).await?;
    }
    Ok(false)
}

/// Stops operational events: the endpoint is paused (its waiting deliveries held, ended by
/// their windows as any paused subscriber's).
pub async fn stop_endpoint(store: &dyn Store, now: UnixMs) -> Result<(), StoreError> {
    let patch = SubscriberPatch {
        status: Some(SubscriberStatus::Paused),
        ..Default::default()
    };
    store.update_subscriber(ENDPOINT_ID, patch, now).await?;
    Ok(())
}

/// An operational event's id: `hookline.` and a digest of what it tells and when that began.
fn event_id(parts: &[&str]) -> String {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    let digest = hash.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("hookline.{hex}")
}

impl Watcher {
    /// Watches until `stop`.
    pub async fn keep_watching(self, mut stop: watch::Receiver<bool>) {
        while !*stop.borrow() {
            let now = self.clock.now_ms();
            if let Err(e) = self.watch_once(now).await {
                hookline_engine::telemetry::store_error("operational");
                tracing::warn!(error = %e, "cannot look at subscribers' health; trying again");
            }
            tokio::select! {
                _ = self.clock.sleep_until(now.saturating_add(WATCH_EVERY_MS)) => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// One look: pauses, notices, dead-letter spikes, finished replays.
    pub async fn watch_once(&self, now: UnixMs) -> Result<(), StoreError> {
        let telling = endpoint_active(self.store.as_ref()).await?;
        self.disable_failing(now).await?;
        self.tell_changes(telling, now).await?;
        self.tell_finished_replays(telling, now).await?;
        if telling {
            self.tell_spikes(now).await?;
        }
        Ok(())
    }

    async fn disable_failing(&self, now: UnixMs) -> Result<(), StoreError> {
        let Some(after) = self.config.disable_after else {
            return Ok(());
        };
        let after_ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
        let cutoff = now.saturating_sub(after_ms);
        let request = AutoDisable {
            cutoff,
            failing_after: self.config.failing_after,
            except: ENDPOINT_ID.to_owned(),
            now,
        };
        for s in self.store.auto_disable(request).await? {
            tracing::warn!(
                action = "auto_disable",
                subscriber = %s.id,
                failing_since = ?s.failing.since,
                by = "hookline",
                "subscriber paused: failing, with no attempt succeeding, for [lifecycle] disable_after"
            );
        }
        Ok(())
    }

    async fn tell_changes(&self, telling: bool, now: UnixMs) -> Result<(), StoreError> {
        let mut after = None;
        loop {
            let page = self.store.watched_subscribers(after, PAGE).await?;
            for w in &page {
                if w.subscriber.id == ENDPOINT_ID {
                    continue;
                }
                let condition = Condition::of(&w.subscriber, self.config.failing_after);
                if condition.map(|(c, _)| c) == w.told {
                    continue;
                }
                let notice = Notice::between(w.told, condition.map(|(c, _)| c));
                if let (Some(notice), true) = (notice, telling) {
                    self.tell(notice, w, condition, now).await?;
                }
                self.store
                    .set_told(&w.subscriber.id, w.told, condition)
                    .await?;
            }
            match page.last() {
                Some(last) if page.len() == PAGE as usize => {
                    after = Some(last.subscriber.id.clone())
                }
                _ => return Ok(()),
            }
        }
    }

    async fn tell(
        &self,
        notice: Notice,
        w: &Watched,
        condition: Option<(Condition, UnixMs)>,
        now: UnixMs,
    ) -> Result<(), StoreError> {
        let s = &w.subscriber;
        // The time the change began names it: a failing streak's start, a revocation's or a
        // pause's time; a recovery, by the streak it ended (as told).
        let began = match notice {
            Notice::Recovered => w.told_at.unwrap_or(now),
            _ => condition.map_or(now, |(_, at)| at),
        };
        let data = json!({
            "subscriber_id": s.id,
            "tenant_id": s.tenant_id,
            "url": crate::api::views::QueryValues::Masked.url(&s.url),
            "status": s.status.as_str(),
            "status_reason": s.status_reason.map(|r| r.as_str()),
            "failing_since": s.failing.since.map(hookline_engine::clock::rfc3339),
            "failed_attempts": s.failing.attempts,
            "breaker_open": s.breaker.open_until.is_some(),
            "since": hookline_engine::clock::rfc3339(began),
        });
        let id = event_id(&[notice.event_type(), &s.id, &began.to_string()]);
        self.publish(&id, notice.event_type(), data, now).await
    }

    async fn tell_finished_replays(&self, telling: bool, now: UnixMs) -> Result<(), StoreError> {
        let since = now.saturating_sub(REPLAYS_SINCE_MS);
        for r in self.store.finished_replays(since, REPLAYS_PER_PASS).await? {
            // A replay of the endpoint's own dead letters is not told to it.
            if telling && r.subscriber_id.as_deref() != Some(ENDPOINT_ID) {
                self.publish(
                    &event_id(&["replay.finished", &r.id]),
                    "replay.finished",
                    replay_data(&r),
                    now,
                )
                .await?;
            }
            self.store.set_replay_finished(&r.id, now).await?;
        }
        Ok(())
    }

    async fn tell_spikes(&self, now: UnixMs) -> Result<(), StoreError> {
        let Some(threshold) = self.config.dead_letter_spike else {
            return Ok(());
        };
        let window = i64::try_from(self.config.spike_window.as_millis()).unwrap_or(i64::MAX);
        let window_start = now.saturating_sub(window);
        for (reason, in_window) in self
            .store
            .dead_letter_inflow(window_start, ENDPOINT_ID)
            .await?
        {
            if in_window < threshold {
                continue;
            }
            // Dead letters a spike told already are not counted again.
            let told = self.spike_told_at(reason).filter(|at| *at > window_start);
            let (since, count) = match told {
                None => (window_start, in_window),
                Some(at) => (at, self.inflow_of(reason, at).await?),
            };
            if count < threshold {
                continue;
            }
            // Processes that see one spike in one window publish one id.
            let bucket = now / window.max(1);
            let id = event_id(&["dead_letters.spike", reason.as_str(), &bucket.to_string()]);
            let data = spike_data(reason, count, threshold, since, now);
            self.publish(&id, "dead_letters.spike", data, now).await?;
            self.spikes_told
                .lock()
                .expect("not poisoned")
                .insert(reason, now.saturating_add(1));
        }
        Ok(())
    }

    fn spike_told_at(&self, reason: DeadReason) -> Option<UnixMs> {
        self.spikes_told
            .lock()
            .expect("not poisoned")
            .get(&reason)
            .copied()
    }

    /// Dead letters of `reason` since `since` (the endpoint's left out).
    async fn inflow_of(&self, reason: DeadReason, since: UnixMs) -> Result<u64, StoreError> {
        let inflow = self.store.dead_letter_inflow(since, ENDPOINT_ID).await?;
        Ok(inflow
            .into_iter()
            .find(|(r, _)| *r == reason)
            .map_or(0, |(_, n)| n))
    }

    async fn publish(
        &self,
        id: &str,
        event_type: &str,
        data: serde_json::Value,
        now: UnixMs,
    ) -> Result<(), StoreError> {
        let mut event = NewEvent::single(id, event_type, &data.to_string(), 1);
        event.only_subscriber = Some(ENDPOINT_ID.into());
        event.published_by = Some("hookline".into());
        match self.store.publish(event, now).await? {
            PublishOutcome::Accepted(_) => {
                self.wake.notify_one();
                tracing::info!(event = %id, r#type = event_type, "operational event published");
            }
            // Told before, by this process before a crash or by another one.
            PublishOutcome::AlreadyAccepted(_) | PublishOutcome::Conflict => {}
        }
        Ok(())
    }
}

fn replay_data(r: &Replay) -> serde_json::Value {
    json!({
        "replay_id": r.id,
        "tenant_id": r.tenant_id,
        "reason": r.reason.as_str(),
        "subscriber_id": r.subscriber_id,
        "requested_by": r.requested_by,
        "selected": r.selected,
        "delivered": r.delivered,
        "dead": r.dead,
        "created_at": hookline_engine::clock::rfc3339(r.created_at),
    })
}

fn spike_data(
    reason: DeadReason,
    count: u64,
    threshold: u64,
    since: UnixMs,
    now: UnixMs,
) -> serde_json::Value {
    json!({
        "reason": reason.as_str(),
        "count": count,
        "threshold": threshold,
        "since": hookline_engine::clock::rfc3339(since),
        "until": hookline_engine::clock::rfc3339(now),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_are_plain_and_name_what_they_tell() {
        let a = event_id(&["subscriber.failing", "s-1", "100"]);
        assert!(a.starts_with("hookline.") && a.len() == "hookline.".len() + 32);
        assert_eq!(a, event_id(&["subscriber.failing", "s-1", "100"]));
        assert_ne!(a, event_id(&["subscriber.failing", "s-1", "101"]));
        // Parts are separated: ("ab", "c") is not ("a", "bc").
        assert_ne!(event_id(&["ab", "c"]), event_id(&["a", "bc"]));
    }
}
