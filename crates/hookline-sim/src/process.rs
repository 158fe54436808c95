//! What the simulated process holds in memory beside the store: the engine's own delivery slots
//! and slow lane (`hookline_engine::slots`) and what it knows of each subscriber's answer times
//! (`hookline_engine::slowness`), run on the simulated clock. A crash loses them: the next
//! process starts with empty slots and knows no subscriber.
//!
//! The engine's attempt tasks move themselves to the slow lane at their slot patience and end
//! at their answer or when shed; here [`Process::run_until`] plays those moments out in time
//! order between two dispatcher passes, with the same calls.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use hookline_engine::config::DeliveryConfig;
use hookline_engine::slots::{AttemptKind, LaneReservation, Slot, Slots, SlotsConfig, Standing};
use hookline_engine::slowness::{Ended, Slowness};
use hookline_policy::{AttemptResult, UnixMs};
use hookline_store::ClaimedDelivery;

use crate::network::Answer;

/// How soon an attempt that found the slow lane full tries again, as the engine's dispatcher
/// (`LANE_RETRY`).
pub(crate) const LANE_RETRY_MS: i64 = 50;

/// An attempt under way: what the network carries, and its place in the process.
#[derive(Debug)]
pub(crate) struct Live {
    pub claimed: ClaimedDelivery,
    pub started_at: UnixMs,
    pub answer: Answer,
    pub slot: Slot,
    /// Its subscriber's usual answer time when it started (zero: none yet).
    pub usual: Duration,
    /// When it stops holding a slot: its start plus its subscriber's slot patience.
    pub patience_ends: UnixMs,
    /// When it next tries to move to the slow lane (after `patience_ends`, each
    /// [`LANE_RETRY_MS`] while the lane is full of attempts within their usual time).
    pub to_lane_at: UnixMs,
    /// Its subscriber had not answered yet when it started and it kept a slot though the lane
    /// had free places: it must hold one of the probation share.
    pub on_probation: bool,
}

impl Live {
    pub fn answered_at(&self) -> UnixMs {
        self.started_at.saturating_add(self.answer.after_ms)
    }

    /// Whether it is further past its subscriber's usual time than a full lane lets it stay
    /// (the lane's rule, `slots.rs`), with one `LANE_RETRY_MS` of slack for when it was looked
    /// at last.
    pub fn past_usual(&self, now: UnixMs) -> bool {
        let usual = i64::try_from(self.usual.as_millis())
            .unwrap_or(i64::MAX)
            .max(1);
        now.saturating_sub(self.started_at) > usual.saturating_add(LANE_RETRY_MS)
    }
}

/// An attempt that ended: at its answer (or timeout), or shed from the lane.
#[derive(Debug)]
pub(crate) struct Finished {
    pub claimed: ClaimedDelivery,
    pub started_at: UnixMs,
    pub result: AttemptResult,
    pub retry_after: Option<Duration>,
    pub shed: bool,
}

pub(crate) struct Process {
    pub config: DeliveryConfig,
    pub slots: Arc<Slots>,
    pub slowness: Slowness,
    /// The monotonic instant standing for the simulation's `EPOCH` in this process.
    base: Instant,
    epoch: UnixMs,
}

impl Process {
    /// A process starting now: no slot taken, no subscriber known.
    pub fn start(config: DeliveryConfig, epoch: UnixMs) -> Process {
        let slots = Slots::new(SlotsConfig {
            concurrency: config.concurrency,
            retry_slots: config.retry_slots(),
            probation: config.probation_slots(),
            slow_lane: config.slow_lane,
        });
        let slowness = Slowness::new(config.slow_after, config.attempt_timeout);
        Process {
            config,
            slots,
            slowness,
            base: Instant::now(),
            epoch,
        }
    }

    /// The simulated time `t` on the monotonic timer the slots and slowness read.
    pub fn instant(&self, t: UnixMs) -> Instant {
        self.base + Duration::from_millis(u64::try_from(t - self.epoch).unwrap_or(0))
    }

    /// What the engine's dispatcher reads before a claim: the subscribers it gives no new slot.
    pub fn suspects(&self, now: UnixMs) -> Vec<String> {
        let mut suspects = self.slowness.suspects(self.instant(now));
        suspects.sort();
        suspects
    }

    /// Starts `d`'s attempt at `now` as the dispatcher does: a slot (or, for a subscriber on
    /// probation past its share, a place in the lane; past the free slots, a place the claim
    /// set aside), its subscriber's usual time and slot patience.
    pub fn begin(
        &mut self,
        d: ClaimedDelivery,
        answer: Answer,
        lent: &mut LaneReservation,
        now: UnixMs,
    ) -> Live {
        let at = self.instant(now);
        let subscriber = d.destination.subscriber_id.clone();
        let standing = self.slowness.standing(&subscriber);
        let usual = self.slowness.usual(&subscriber);
        let kind = AttemptKind::of(&d);
        let lane_had_room = self.slots.in_slow_lane() < self.config.slow_lane;
        let lent_place = match self.slots.free() {
            0 => lent.take(kind, usual, at),
            _ => None,
        };
        let slot = lent_place.unwrap_or_else(|| self.slots.take(kind, standing, usual, at));
        self.slowness.started(&subscriber, at);
        let patience = self.slowness.slot_patience(&subscriber);
        let patience_ends = now.saturating_add(hookline_policy::duration_ms(patience));
        let on_probation = standing == Standing::Unproven && !slot.is_slow() && lane_had_room;
        Live {
            claimed: d,
            started_at: now,
            answer,
            slot,
            usual,
            patience_ends,
            to_lane_at: patience_ends,
            on_probation,
        }
    }

    /// Plays out, in time order up to `now`, what the attempts under way do on their own: each
    /// past its slot patience moves to the slow lane (shedding the one furthest past its usual
    /// time when the lane is full), and each ends at its answer. Answers the attempts that
    /// ended, in the order they did; `live` keeps the rest.
    pub fn run_until(&mut self, live: &mut Vec<Live>, now: UnixMs) -> Vec<Finished> {
        let mut ended = Vec::new();
        loop {
            // The earliest moment due: an answer, or a move to the lane before its answer.
            let next = live
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let moves = !l.slot.is_slow() && l.to_lane_at < l.answered_at();
                    let at = if moves { l.to_lane_at } else { l.answered_at() };
                    (at, i, moves)
                })
                .filter(|(at, _, _)| *at <= now)
                .min();
            let Some((at, i, moves)) = next else {
                return ended;
            };
            if !moves {
                let l = live.remove(i);
                let answered = match l.answer.result {
                    AttemptResult::Status(_) => Ended::Answered(Duration::from_millis(
                        u64::try_from(l.answer.after_ms).unwrap_or(0),
                    )),
                    _ => Ended::NoAnswer,
                };
                ended.push(self.end(l, answered));
                continue;
            }
            let started = self.instant(live[i].started_at);
            let usual = live[i].usual;
            if live[i]
                .slot
                .move_to_slow_lane(started, usual, self.instant(at))
            {
                // Room may have been made by shedding another.
                ended.extend(self.shed_from(live));
            } else {
                live[i].to_lane_at = at.saturating_add(LANE_RETRY_MS);
            }
        }
    }

    /// The attempts the lane shed to make room (for a move, or for an attempt that started
    /// there): they end now, as timeouts, as the engine's attempt task ends them when told.
    pub fn shed_from(&mut self, live: &mut Vec<Live>) -> Vec<Finished> {
        let mut shed = Vec::new();
        let mut i = 0;
        while i < live.len() {
            if was_shed(&mut live[i].slot) {
                let l = live.remove(i);
                let mut ended = self.end(l, Ended::NoAnswer);
                ended.result = AttemptResult::Timeout;
                ended.retry_after = None;
                ended.shed = true;
                shed.push(ended);
            } else {
                i += 1;
            }
        }
        shed
    }

    fn end(&mut self, l: Live, answered: Ended) -> Finished {
        let subscriber = &l.claimed.destination.subscriber_id;
        self.slowness
            .finished(subscriber, self.instant(l.started_at), answered);
        Finished {
            started_at: l.started_at,
            result: l.answer.result,
            retry_after: l.answer.retry_after,
            shed: false,
            claimed: l.claimed,
        }
    }
}

/// Whether the lane shed this attempt to make room (the engine's attempt task wakes on it).
fn was_shed(slot: &mut Slot) -> bool {
    let shed = pin!(slot.shed());
    shed.poll(&mut Context::from_waker(Waker::noop()))
        .is_ready()
}
