//! The delivery loop: claim -> send -> decide -> commit.
//!
//! The dispatcher holds no schedule of its own. A delivery waiting for a retry is a row in the
//! store with a `run_at`, never a timer or a task here, so a slow or dead destination holds at
//! most the in-flight slots the store's per-subscriber cap lets it claim, and a restart loses
//! nothing. An attempt far slower than usual gives its slot back and finishes in the slow lane
//! (`slots.rs`), so hanging destinations cannot starve the healthy ones of slots. Completions
//! are written in batches (group commit), each followed at once by the claim that takes the
//! slots it frees (on SQLite in the same commit): what finished while the previous batch was
//! being written goes into the next.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use hookline_policy::{duration_ms, AttemptResult, Attempted, DeadReason, Outcome, UnixMs};
use hookline_store::{
    AttemptRecord, ClaimRequest, ClaimedDelivery, Completion, CompletionResult, Store, Transition,
    WindowSweep,
};
use opentelemetry::trace::SpanKind;
use opentelemetry::KeyValue;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinSet;

use crate::clock::Clock;
use crate::config::DeliveryConfig;
use crate::destination::Guards;
use crate::health::FailedCommits;
use crate::hosts::HostLoad;
use crate::meter::{Meter, Showing};
use crate::policy::PoliciesInForce;
use crate::sender::{render_body, AttemptReport, Sender};
use crate::slots::{AttemptKind, Slot, Slots, SlotsConfig, Standing};
use crate::slowness::{Ended, Slowness};
use crate::telemetry::{self, AttemptSeen};
use crate::traces::{Span, Traces};

/// An idle dispatcher sleeps until the next due `run_at` (or lease expiry); this bounds the
/// sleep in case a wake-up was missed (say, while a LISTEN connection was being re-established).
const IDLE_FALLBACK_MS: i64 = 30_000;
/// When due deliveries could not be claimed (their subscribers at their cap or rate limit, or
/// no slot left for retries), look again this soon: this process's own completions wake it at
/// once, but a slot freed by another process, or a rate limiter's next admission, sends no
/// wake-up.
const CAPPED_POLL_MS: i64 = 250;
/// How often to look for deliveries whose worker was lost, and for waiting deliveries whose
/// window has ended.
const RESCUE_EVERY_MS: i64 = 1_000;
/// Deliveries one window sweep pass ends at most, and how long a sweep goes on with full
/// passes before claims get their turn.
const SWEEP_LIMIT: usize = 1_000;
const SWEEP_BUDGET: Duration = Duration::from_secs(1);
/// A lease outlives the attempt timeout by this much, to cover the commit of its completion.
const LEASE_MARGIN: Duration = Duration::from_secs(5);
/// Under load, slots free one at a time. Rather than pay a claim per freed slot, wait this long
/// for more to free when fewer than a quarter of them are.
const CLAIM_COALESCE: Duration = Duration::from_millis(2);
/// How soon an attempt that found the slow lane full (of attempts all within their usual time)
/// tries to move there again.
const LANE_RETRY: Duration = Duration::from_millis(50);
/// Completions written per transaction at most.
const MAX_COMPLETIONS_PER_COMMIT: usize = 1024;

/// Everything an attempt needs, shared by all attempt tasks.
struct Shared {
    store: Arc<dyn Store>,
    policies: Arc<PoliciesInForce>,
    clock: Arc<dyn Clock>,
    sender: Sender,
    wake: Arc<Notify>,
    slots: Arc<Slots>,
    labels: telemetry::Labels,
    slowness: Arc<std::sync::Mutex<Slowness>>,
    hosts: Arc<HostLoad>,
    meter: Arc<Meter>,
    /// Where the claims and completions the store failed to commit are told to `/healthz`.
    failed_commits: Arc<FailedCommits>,
    traces: Traces,
    /// Completions are being committed beside the loop (PostgreSQL): what finishes meanwhile
    /// waits for the next batch, one completion transaction at a time per process, so a burst
    /// of them does not crowd the claims on the database.
    committing: AtomicBool,
}

pub struct Dispatcher {
    shared: Arc<Shared>,
    delivery: DeliveryConfig,
    lease_ms: i64,
}

/// The subscribers a dispatcher gives no new slot now (one of their attempts is far slower
/// than usual): the queue gauges count their due deliveries as waiting on `slow`, not ready.
#[derive(Clone)]
pub struct HeldBack(Arc<std::sync::Mutex<Slowness>>);

impl HeldBack {
    pub fn subscribers(&self) -> Vec<String> {
        self.0.lock().unwrap().suspects(Instant::now())
    }
}

/// Controls a running dispatcher.
pub struct DispatcherHandle {
    wake: Arc<Notify>,
    slots: Arc<Slots>,
    held_back: HeldBack,
    alive: std::sync::Weak<()>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl DispatcherHandle {
    /// Something new may be due (a publish, a resume, a replay): look now.
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Its delivery slots, for the capacity model to sample.
    pub fn slots(&self) -> Arc<Slots> {
        self.slots.clone()
    }

    /// The subscribers it holds back, for the queue gauges.
    pub fn held_back(&self) -> HeldBack {
        self.held_back.clone()
    }

    /// Whether its loop still runs (it stops only at shutdown, or by a panic).
    pub fn liveness(&self) -> crate::health::Liveness {
        crate::health::Liveness(self.alive.clone())
    }

    /// Stops claiming, lets in-flight attempts finish and commits their outcomes.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// What a dispatcher runs on and by.
pub struct DispatcherParts {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    /// Which policy classifies each answer and decides what follows (each attempt records the
    /// one that did).
    pub policies: Arc<PoliciesInForce>,
    pub delivery: DeliveryConfig,
    /// Which destinations attempts may connect to (the platform's subscribers', tenants').
    pub guards: Guards,
    pub labels: telemetry::Labels,
    /// Where completed attempts and busy slots are counted, for the capacity model.
    pub meter: Arc<Meter>,
    /// Where a claim or completions the store failed to commit are recorded for `/healthz`.
    pub failed_commits: Arc<FailedCommits>,
    /// Where the spans of claims and attempts go (`Traces::OFF`: nowhere).
    pub traces: Traces,
}

impl Dispatcher {
    pub fn spawn(parts: DispatcherParts) -> DispatcherHandle {
        let DispatcherParts {
            store,
            clock,
            policies,
            delivery,
            guards,
            labels,
            meter,
            failed_commits,
            traces,
        } = parts;
        let wake = Arc::new(Notify::new());
        let lease_ms = duration_ms(delivery.attempt_timeout + LEASE_MARGIN);
        let slots = Slots::new(SlotsConfig {
            concurrency: delivery.concurrency,
            retry_slots: delivery.retry_slots(),
            probation: delivery.probation_slots(),
            slow_lane: delivery.slow_lane,
        });
        let slowness = Arc::new(std::sync::Mutex::new(Slowness::new(
            delivery.slow_after,
            delivery.attempt_timeout,
        )));
        let dispatcher = Dispatcher {
            shared: Arc::new(Shared {
                store,
                policies,
                clock,
                sender: Sender::new(delivery.attempt_timeout, guards),
                wake: wake.clone(),
                slots: slots.clone(),
                labels,
                slowness: slowness.clone(),
                hosts: HostLoad::new(delivery.max_in_flight_per_host),
                meter,
                failed_commits,
                traces,
                committing: AtomicBool::new(false),
            }),
            delivery,
            lease_ms,
        };
        let (stop, stopped) = watch::channel(false);
        let alive = Arc::new(());
        let liveness = Arc::downgrade(&alive);
        let task = tokio::spawn(async move {
            let _alive = alive;
            dispatcher.run(stopped).await
        });
        DispatcherHandle {
            wake,
            slots,
            held_back: HeldBack(slowness),
            alive: liveness,
            stop,
            task,
        }
    }

    async fn run(self, mut stop: watch::Receiver<bool>) {
        let s = &self.shared;
        let (done_tx, mut done_rx) = mpsc::unbounded_channel();
        let mut finished = Vec::new();
        let mut attempts = JoinSet::new();
        let mut next_rescue: UnixMs = 0;
        let mut next_sweep: UnixMs = 0;
        // Wake-ups from other processes sharing the store (PostgreSQL NOTIFY).
        let remote = s.store.wakeups();
        let remote_wake = || async {
            match &remote {
                Some(n) => n.notified().await,
                None => std::future::pending().await,
            }
        };
        while !*stop.borrow() {
            if s.slots.busy() > 0 && s.slots.free() < self.delivery.concurrency / 4 {
                tokio::time::sleep(CLAIM_COALESCE).await;
            }
            let now = s.clock.now_ms();
            let free = s.slots.free();
            let mut batch = Vec::new();
            if now >= next_sweep {
                next_sweep = now + RESCUE_EVERY_MS;
                self.sweep_windows(now).await;
            }
            if free > 0 && now >= next_rescue {
                next_rescue = now + RESCUE_EVERY_MS;
                match s.store.rescue_expired(now, free, self.lease_ms).await {
                    Ok(rescued) => batch = rescued,
                    Err(e) => {
                        telemetry::store_error("rescue");
                        tracing::error!(error = %e, "rescue of expired leases failed")
                    }
                }
            }
            let mut filled = false;
            let committing = s.committing.load(Ordering::Acquire);
            while !committing && finished.len() < MAX_COMPLETIONS_PER_COMMIT {
                match done_rx.try_recv() {
                    Ok(done) => finished.push(done),
                    Err(_) => break,
                }
            }
            // Read after the drain: the slots of what finished meanwhile are free to claim.
            let want = s.slots.free().saturating_sub(batch.len());
            // Places in the slow lane for deliveries the claim lends to tenants under their
            // share while others hold more (`ClaimRequest::lend`): a claim is worth making
            // with no slot free, for them.
            let mut lent = s.slots.reserve_lane(self.delivery.concurrency);
            let mut claim_span = Span::default();
            if want > 0 || !finished.is_empty() || lent.places() > 0 {
                // Completions are stamped with this time: read after the sweep and the rescue.
                let now = s.clock.now_ms();
                let request = ClaimRequest {
                    now,
                    limit: want,
                    slots: self.delivery.concurrency,
                    lend: lent.places(),
                    lease_ms: self.lease_ms,
                    max_in_flight_per_subscriber: self.delivery.max_in_flight_per_subscriber,
                    max_in_flight_per_host: self.delivery.max_in_flight_per_host,
                    max_retries: s.slots.free_for_retries(),
                    exclude_subscribers: s.slowness.lock().unwrap().suspects(Instant::now()),
                    window_ended_for_start: now.saturating_sub(self.window_ms()),
                };
                let claiming = s.traces.is_on().then(SystemTime::now);
                let completing = finished.len();
                let claimed = if finished.is_empty() {
                    s.store.claim_due(request).await
                } else {
                    let finished = std::mem::take(&mut finished);
                    complete_and_claim(s, finished, request, &mut attempts).await
                };
                if let Some(began) = claiming {
                    claim_span = claim_span_of(&s.traces, began, completing, &claimed);
                }
                match claimed {
                    Ok(claimed) => {
                        filled = want > 0 && claimed.len() >= want;
                        batch.extend(claimed);
                    }
                    Err(e) => {
                        telemetry::store_error("claim");
                        s.failed_commits.record(&e);
                        tracing::error!(error = %e, "claim failed")
                    }
                }
            }
            // The claim lent what it took past the free slots; the other places are free again.
            lent.keep(batch.len().saturating_sub(s.slots.free()));
            // Keyed by the shared event's address: a claim batch shares one Arc per event.
            let mut bodies: HashMap<usize, Bytes> = HashMap::new();
            for delivery in batch {
                let body = bodies
                    .entry(Arc::as_ptr(&delivery.event) as usize)
                    .or_insert_with(|| render_body(&delivery.event))
                    .clone();
                let subscriber = &delivery.destination.subscriber_id;
                let (standing, usual) = {
                    let slowness = s.slowness.lock().unwrap();
                    (slowness.standing(subscriber), slowness.usual(subscriber))
                };
                // A rescue sends nothing: it records the lost attempt at once.
                let standing = match delivery.lost_attempt_started_at {
                    Some(_) => Standing::Answering,
                    None => standing,
                };
                // Past the free slots, the claim lent: those start in the places set aside.
                let (kind, starting) = (AttemptKind::of(&delivery), Instant::now());
                let slot = match s.slots.free() {
                    0 => lent.take(kind, usual, starting),
                    _ => None,
                };
                let slot = slot.unwrap_or_else(|| s.slots.take(kind, standing, usual, starting));
                let span = attempt_span(&s.traces, &delivery, &claim_span);
                let traced = Traced { delivery, span };
                attempts.spawn(attempt(s.clone(), traced, slot, body, done_tx.clone()));
            }
            drop(claim_span);
            drop(lent);
            while attempts.try_join_next().is_some() {}
            telemetry::in_flight(&s.slots);
            // More finished than one batch takes: the wake-ups they sent are used up.
            if filled || (!committing && !done_rx.is_empty()) {
                continue;
            }
            let deadline = match s.store.next_wakeup(self.window_ms()).await {
                Ok(Some(t)) if t > now => t.min(now + IDLE_FALLBACK_MS),
                Ok(Some(_)) => now + CAPPED_POLL_MS,
                Ok(None) => now + IDLE_FALLBACK_MS,
                Err(e) => {
                    telemetry::store_error("next_wakeup");
                    tracing::error!(error = %e, "cannot read the next due time");
                    now + CAPPED_POLL_MS
                }
            };
            tokio::select! {
                _ = s.wake.notified() => {}
                _ = remote_wake() => {}
                _ = s.clock.sleep_until(deadline) => {}
                _ = stop.changed() => {}
            }
        }
        tracing::info!(
            in_flight = s.slots.busy() + s.slots.in_slow_lane(),
            "dispatcher stopping: finishing in-flight attempts"
        );
        // Outcomes are committed as attempts end, not after the last one: a lease must not
        // run out (and its delivery be rescued and sent again) while others finish.
        loop {
            tokio::select! {
                joined = attempts.join_next() => if joined.is_none() { break },
                _ = done_rx.recv_many(&mut finished, MAX_COMPLETIONS_PER_COMMIT) => {
                    commit(s.clone(), std::mem::take(&mut finished)).await;
                }
            }
        }
        drop(done_tx);
        while done_rx
            .recv_many(&mut finished, MAX_COMPLETIONS_PER_COMMIT)
            .await
            > 0
        {
            commit(s.clone(), std::mem::take(&mut finished)).await;
        }
    }
}

impl Dispatcher {
    /// The one window the store's window sweep and claims apply to every delivery.
    fn window_ms(&self) -> i64 {
        duration_ms(self.shared.policies.current().delivery_window())
    }

    /// Ends the window of deliveries that waited past it (behind a breaker, a pause, a rate
    /// limit, a full cap, or simply for a retry): each dies `window_expired` within about a
    /// second of its window's end, never sent late.
    async fn sweep_windows(&self, now: UnixMs) {
        let sweep = WindowSweep {
            now,
            window_ms: self.window_ms(),
            caps: self.delivery.in_flight_caps(),
            limit: SWEEP_LIMIT,
        };
        // A full pass means more may be waiting: go on, for at most a second of passes.
        let started = Instant::now();
        loop {
            match self.shared.store.expire_windows(sweep).await {
                Ok(expired) => {
                    if !expired.is_empty() {
                        let n = expired.len();
                        tracing::info!(expired = n, "deliveries whose window ended while waiting");
                    }
                    for subscriber in &expired {
                        telemetry::dead_letter(
                            subscriber,
                            DeadReason::WindowExpired,
                            self.shared.labels,
                        );
                    }
                    let short = expired.len() < SWEEP_LIMIT;
                    if short || started.elapsed() > SWEEP_BUDGET {
                        return;
                    }
                }
                Err(e) => {
                    telemetry::store_error("expire_windows");
                    tracing::error!(error = %e, "window sweep failed");
                    return;
                }
            }
        }
    }
}

/// What an attempt shed from a full slow lane ends as: a timeout (retryable, as the attempt
/// timeout would have made it), saying why it ended early.
fn shed(after: Duration) -> AttemptReport {
    AttemptReport {
        result: AttemptResult::Timeout,
        error: Some(format!(
            "shed after {} ms without an answer: the slow lane was full and this attempt was \
             the furthest past its subscriber's usual answer time",
            after.as_millis()
        )),
        retry_after: None,
        response_body: None,
    }
}

/// The span of a claim that began at `began`, completed `completing` attempts' outcomes and
/// answered `claimed`: none for a claim that neither took nor completed anything, so an idle
/// loop's looks make no spans.
fn claim_span_of(
    traces: &Traces,
    began: SystemTime,
    completing: usize,
    claimed: &hookline_store::Result<Vec<ClaimedDelivery>>,
) -> Span {
    let took = claimed.as_ref().map_or(0, Vec::len);
    if took == 0 && completing == 0 && claimed.is_ok() {
        return Span::default();
    }
    let span = traces.began("claim", SpanKind::Internal, began);
    span.set(KeyValue::new("hookline.claimed", count(took)));
    span.set(KeyValue::new("hookline.completed", count(completing)));
    if let Err(e) = claimed {
        span.fail(e.to_string());
    }
    span
}

/// A count as a span attribute's integer.
fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The span of an attempt of `d`: a child of its event's publish span (in the publish's
/// trace, `traces.rs`), linked to the claim that took it.
fn attempt_span(traces: &Traces, d: &ClaimedDelivery, claim: &Span) -> Span {
    if !traces.is_on() {
        return Span::default();
    }
    let span = traces.continuing("attempt", SpanKind::Client, d.event.traceparent.as_deref());
    span.link(claim);
    span.set(KeyValue::new("hookline.delivery.id", d.id.clone()));
    span.set(KeyValue::new("hookline.event.id", d.event.id.clone()));
    span.set(KeyValue::new(
        "hookline.event.type",
        d.event.event_type.clone(),
    ));
    span.set(KeyValue::new(
        "hookline.subscriber.id",
        d.destination.subscriber_id.clone(),
    ));
    if let Some(tenant) = &d.destination.tenant_id {
        span.set(KeyValue::new("hookline.tenant.id", tenant.clone()));
    }
    span.set(KeyValue::new("hookline.attempt", i64::from(d.attempt)));
    span.set(KeyValue::new("http.request.method", "POST"));
    span
}

/// A claimed delivery and the span of its attempt.
struct Traced {
    delivery: ClaimedDelivery,
    span: Span,
}

/// Message for a rescued delivery's lost attempt.
const LOST_ATTEMPT: &str =
    "attempt lost: the worker stopped before recording an outcome (lease expired)";

async fn attempt(
    s: Arc<Shared>,
    Traced { delivery: d, span }: Traced,
    mut slot: Slot,
    body: Bytes,
    done: mpsc::UnboundedSender<(Finished, Completion)>,
) {
    let mut started_at = s.clock.now_ms();
    let timer = Instant::now();
    let report = if let Some(lost_started_at) = d.lost_attempt_started_at {
        tracing::warn!(delivery = %d.id, attempt = d.attempt, "rescued a delivery whose lease ran out");
        // Recorded as the attempt it was: started when it was claimed, no answer.
        started_at = lost_started_at;
        AttemptReport {
            result: AttemptResult::Lost,
            error: Some(LOST_ATTEMPT.into()),
            retry_after: None,
            response_body: None,
        }
    } else {
        let subscriber = &d.destination.subscriber_id;
        let _at_host = s.hosts.started(&d.destination.origin);
        let (usual, slot_patience) = {
            let mut slowness = s.slowness.lock().unwrap();
            slowness.started(subscriber, timer);
            (
                slowness.usual(subscriber),
                slowness.slot_patience(subscriber),
            )
        };
        let traceparent = span.traceparent();
        let send = s.sender.send(&d, body, started_at, traceparent.as_deref());
        tokio::pin!(send);
        let mut to_lane = tokio::time::Instant::from_std(timer + slot_patience);
        let report = loop {
            tokio::select! {
                report = &mut send => break report,
                _ = tokio::time::sleep_until(to_lane), if !slot.is_slow() => {
                    if slot.move_to_slow_lane(timer, usual, Instant::now()) {
                        telemetry::slow_lane(s.slots.in_slow_lane());
                        tracing::debug!(delivery = %d.id, %subscriber, "attempt moved to the slow lane");
                        s.wake.notify_one();
                    } else {
                        // A full lane with nothing in it past its usual time: look again soon,
                        // for a place freed or an attempt there gone past its time.
                        to_lane = tokio::time::Instant::now() + LANE_RETRY;
                    }
                }
                _ = slot.shed() => {
                    telemetry::attempt_shed();
                    tracing::debug!(delivery = %d.id, %subscriber, "attempt shed from a full slow lane");
                    break shed(timer.elapsed());
                }
            }
        };
        let ended = match report.result {
            AttemptResult::Status(_) => Ended::Answered(timer.elapsed()),
            _ => Ended::NoAnswer,
        };
        s.slowness
            .lock()
            .unwrap()
            .finished(subscriber, timer, ended);
        report
    };
    let now = s.clock.now_ms();
    // A lost attempt lasted until it was found lost: from its claim to its rescue.
    let duration_ms = match d.lost_attempt_started_at {
        Some(lost_started_at) => u64::try_from(now.saturating_sub(lost_started_at)).unwrap_or(0),
        None => u64::try_from(timer.elapsed().as_millis()).unwrap_or(u64::MAX),
    };
    // Decided by the policy in force for this subscriber now, not when the attempt started.
    let in_force = s.policies.current();
    let policy = in_force.policy_for(&d.destination.subscriber_id);
    let outcome = policy.classification.classify(report.result);
    let transition = policy.retry.decide(&Attempted {
        delivery_id: &d.id,
        outcome,
        number: d.attempt,
        window_start: d.window_start,
        now,
        retry_after: report.retry_after,
    });
    if let Transition::Dead(reason) = transition {
        tracing::info!(delivery = %d.id, %reason, attempt = d.attempt, "delivery dead");
    }
    traced_outcome(&span, &report, outcome, transition);
    // An answer shows what the process did; an attempt without one (a timeout, a shed, a
    // refused connection, a lost attempt) shows its destination, not the process.
    let showing = match report.result {
        AttemptResult::Status(_) => Showing::Answered,
        _ => Showing::Hung,
    };
    s.meter.attempt(now, AttemptKind::of(&d), outcome, showing);
    let status = match report.result {
        AttemptResult::Status(code) => Some(code),
        _ => None,
    };
    tracing::debug!(delivery = %d.id, attempt = d.attempt, ?status, outcome = outcome.as_str(), "attempt");
    telemetry::attempt(
        &AttemptSeen {
            ordinal: d.attempt,
            outcome,
            subscriber_id: &d.destination.subscriber_id,
            accepted_at: d.event.accepted_at,
            window_start: d.window_start,
            started_at,
            finished_at: now,
            duration: Duration::from_millis(duration_ms),
            first_ever: d.attempt == 1
                && d.lost_attempt_started_at.is_none()
                && d.window_start == d.first_seen,
            policy: &policy.name,
            tenant: d.destination.tenant_id.as_deref(),
        },
        s.labels,
    );
    let completion = Completion {
        key: d.key,
        lease: d.lease,
        record: AttemptRecord {
            ordinal: d.attempt,
            started_at,
            duration_ms,
            outcome,
            status,
            error: report.error,
            response_body: report.response_body,
            policy: Some(policy.name.clone()),
        },
        transition,
        revoke_subscriber: policy.classification.revokes_subscription(report.result)
            && d.destination.subscriber_id != hookline_store::health::OPERATIONAL_ENDPOINT,
        breaker: policy.breaker,
    };
    let was_slow = slot.is_slow();
    // The slot is free before the completion is seen: the claim that follows its commit can
    // take the slot again.
    drop(slot);
    let finished = Finished {
        id: d.id,
        subscriber_id: d.destination.subscriber_id.clone(),
    };
    let _ = done.send((finished, completion));
    if was_slow {
        telemetry::slow_lane(s.slots.in_slow_lane());
    }
    s.wake.notify_one();
}

/// What an attempt's span records of how it ended: the answer's status, the outcome as the
/// policy classified it, and what follows; a failed status unless delivered.
fn traced_outcome(span: &Span, report: &AttemptReport, outcome: Outcome, transition: Transition) {
    if span.is_none() {
        return;
    }
    if let AttemptResult::Status(code) = report.result {
        span.set(KeyValue::new("http.response.status_code", i64::from(code)));
    }
    span.set(KeyValue::new("hookline.outcome", outcome.as_str()));
    match transition {
        Transition::Delivered => {}
        Transition::Reschedule { .. } => span.fail(failure(report, "retried")),
        Transition::Dead(reason) => {
            span.set(KeyValue::new("hookline.dead_reason", reason.to_string()));
            span.fail(failure(report, "dead"));
        }
    }
}

/// Why an attempt failed, in its span's status.
fn failure(report: &AttemptReport, then: &str) -> String {
    match (&report.error, report.result) {
        (Some(error), _) => format!("{error}; {then}"),
        (None, AttemptResult::Status(code)) => format!("answered {code}; {then}"),
        (None, _) => then.to_owned(),
    }
}

/// Commits what finished and claims. The claim's deliveries go out without waiting for the
/// completions to commit (`Store::complete_and_claim`): those still under way are seen to in a
/// task beside the attempts (`tasks`), which wakes the loop once they have freed their slots
/// in the store. Completions that could not be applied are committed on their own, retried in
/// such a task, so their retries do not hold up the loop; a claim that fails does not undo them.
async fn complete_and_claim(
    s: &Arc<Shared>,
    finished: Vec<(Finished, Completion)>,
    request: ClaimRequest,
    tasks: &mut JoinSet<()>,
) -> hookline_store::Result<Vec<ClaimedDelivery>> {
    let (ids, completions): (Vec<Finished>, Vec<Completion>) = finished.into_iter().unzip();
    let (mut completing, claimed) = s
        .store
        .complete_and_claim(completions.clone(), request)
        .await;
    // Committed already (SQLite commits both in one job): no task for them.
    let noop = &mut Context::from_waker(Waker::noop());
    match completing.as_mut().poll(noop) {
        Poll::Ready(completed) => {
            if let Some(retry) = settled(&ids, completions, completed, s.labels) {
                tasks.spawn(commit(s.clone(), retry));
            }
        }
        Poll::Pending => {
            s.committing.store(true, Ordering::Release);
            let s = s.clone();
            tasks.spawn(async move {
                if let Some(retry) = settled(&ids, completions, completing.await, s.labels) {
                    commit(s.clone(), retry).await;
                }
                s.committing.store(false, Ordering::Release);
                // Their subscribers' slots are free in the store now, and what finished
                // meanwhile waits: claim and complete again.
                s.wake.notify_one();
            });
        }
    }
    claimed
}

/// Reports what the completions did (`reported`); answers the completions to commit again when
/// they could not be applied.
fn settled(
    ids: &[Finished],
    completions: Vec<Completion>,
    completed: hookline_store::Result<Vec<CompletionResult>>,
    labels: telemetry::Labels,
) -> Option<Vec<(Finished, Completion)>> {
    match completed {
        Ok(results) => {
            reported(ids, &completions, &results, labels);
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "completing failed; retrying the completions alone");
            Some(ids.iter().cloned().zip(completions).collect())
        }
    }
}

/// Commits completions on their own, retrying a failed commit a few times.
async fn commit(s: Arc<Shared>, finished: Vec<(Finished, Completion)>) {
    let (ids, completions): (Vec<Finished>, Vec<Completion>) = finished.into_iter().unzip();
    let mut tries = 0;
    let results = loop {
        match s
            .store
            .complete(completions.clone(), s.clock.now_ms())
            .await
        {
            Ok(results) => break results,
            Err(e) if tries < 5 => {
                telemetry::store_error("complete");
                s.failed_commits.record(&e);
                tries += 1;
                tracing::warn!(error = %e, tries, "committing completions failed; retrying");
                tokio::time::sleep(Duration::from_millis(200 * tries)).await;
            }
            Err(e) => {
                // The deliveries stay leased; once the leases run out they are rescued and
                // these attempts are recorded as lost. Nothing is dropped.
                tracing::error!(error = %e, count = ids.len(), "completions not committed");
                break Vec::new();
            }
        }
    };
    reported(&ids, &completions, &results, s.labels);
    // Their subscribers' slots are free in the store now: claim again.
    s.wake.notify_one();
}

/// Reports completions whose lease was lost, and counts the dead letters of those applied
/// by their subscriber (the store counts every death by reason, whichever path made it; the
/// window sweep counts its own by subscriber).
fn reported(
    ids: &[Finished],
    completions: &[Completion],
    results: &[CompletionResult],
    labels: telemetry::Labels,
) {
    for ((finished, completion), result) in ids.iter().zip(completions).zip(results) {
        match (result, completion.transition) {
            (CompletionResult::LeaseLost, _) => {
                tracing::warn!(delivery = %finished.id, "completion ignored: its lease was lost to a rescue");
            }
            (CompletionResult::Applied, Transition::Dead(reason)) => {
                telemetry::dead_letter(&finished.subscriber_id, reason, labels);
            }
            (CompletionResult::Applied, _) => {}
        }
    }
}

/// Which delivery an attempt that finished was for, and its subscriber's.
#[derive(Debug, Clone)]
struct Finished {
    id: String,
    subscriber_id: String,
}
