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
use hookline_engine::slots::{
    past_usual, AttemptKind, LaneReservation, Slot, Slots, SlotsConfig, Standing,
};
use hookline_engine::slowness::{Ended, Slowness};
use hookline_policy::{AttemptResult, UnixMs};
use hookline_store::ClaimedDelivery;

use crate::network::Answer;

/// How soon an attempt that found the slow lane full tries again, as the engine's dispatcher
/// (`LANE_RETRY`).
const LANE_RETRY_MS: i64 = 50;

/// The places of the lane a claim lent, as the attempts of its batch start: the reservation,
/// and how many of its places the claim lent and no attempt has taken yet (counted here, not
/// read from the reservation, whose accounting is what the checks are about).
pub(crate) struct Lending<'a> {
    pub reservation: &'a mut LaneReservation,
    pub left: usize,
}

/// A claimed delivery and the answer the network will give its request.
#[derive(Debug)]
pub(crate) struct Request {
    pub claimed: ClaimedDelivery,
    pub answer: Answer,
}

/// An attempt under way: what the network carries, and its place in the process.
#[derive(Debug)]
pub(crate) struct Live {
    pub claimed: ClaimedDelivery,
    pub started_at: UnixMs,
    pub answer: Answer,
    pub slot: Slot,
    /// Its subscriber's usual answer time when it started (zero: none yet).
    pub usual: Duration,
    /// When it next tries to move to the slow lane: its start plus its subscriber's slot
    /// patience, then each [`LANE_RETRY_MS`] while the lane is full of attempts within their
    /// usual time.
    pub to_lane_at: UnixMs,
    /// Its subscriber had not answered yet when it started and it kept a slot though the lane
    /// would have taken it: it must hold one of the probation share.
    pub on_probation: bool,
}

impl Live {
    fn answered_at(&self) -> UnixMs {
        self.started_at.saturating_add(self.answer.after_ms)
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// With the network's answer, or its attempt timeout.
    Network,
    /// Shed from a full slow lane to make room.
    Shed,
    /// Its worker was lost: the rescue records it.
    Rescue,
}

/// An attempt that ended, to be decided and completed.
#[derive(Debug)]
pub(crate) struct Finished {
    pub claimed: ClaimedDelivery,
    pub started_at: UnixMs,
    /// When it ended: what the engine's attempt decides at.
    pub ended_at: UnixMs,
    pub result: AttemptResult,
    pub retry_after: Option<Duration>,
    pub ending: Ending,
}

pub(crate) struct Process {
    pub config: DeliveryConfig,
    pub slots: Arc<Slots>,
    pub slowness: Slowness,
    /// Moves to the lane refused while the lane would have taken them (since the last pass):
    /// each an attempt that kept its slot past its subscriber's usual time for nothing.
    pub refused_wrongly: Vec<String>,
    /// The monotonic instant standing for the simulation's `EPOCH` in this process: only
    /// differences from it are read.
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
            refused_wrongly: Vec::new(),
            base: Instant::now(),
            epoch,
        }
    }

    /// The simulated time `t` on the monotonic timer the slots and slowness read.
    fn instant(&self, t: UnixMs) -> Instant {
        self.base + Duration::from_millis(u64::try_from(t - self.epoch).unwrap_or(0))
    }

    /// What the engine's dispatcher reads before a claim: the subscribers it gives no new slot.
    pub fn suspects(&self, now: UnixMs) -> Vec<String> {
        let mut suspects = self.slowness.suspects(self.instant(now));
        suspects.sort();
        suspects
    }

    /// Whether the lane has room for one more at `at`, as `slots.rs` makes it: a free place
    /// (past the `lent` places set aside for a claim's lent attempts that have not started), or
    /// an attempt in it past its usual time to shed. The places a claim did not lend are not
    /// counted: they are given back before its attempts start (`LaneReservation::keep`).
    fn lane_takes_one_more(&self, live: &[Live], lent: usize, at: UnixMs) -> bool {
        let in_lane: Vec<&Live> = live.iter().filter(|l| l.slot.is_slow()).collect();
        in_lane.len() + lent < self.config.slow_lane
            || in_lane.iter().any(|l| {
                let waited = Duration::from_millis(u64::try_from(at - l.started_at).unwrap_or(0));
                past_usual(waited, l.usual) > 1.0
            })
    }

    /// Starts an attempt at `now` as the dispatcher does: a slot (or, for a subscriber on
    /// probation past its share, a place in the lane; past the free slots, a place the claim
    /// set aside), its subscriber's usual time and slot patience. Answers the attempts the lane
    /// shed to make room for it: they end now.
    pub fn begin(
        &mut self,
        live: &mut Vec<Live>,
        request: Request,
        lending: &mut Lending<'_>,
        now: UnixMs,
    ) -> Vec<Finished> {
        let Request { claimed, answer } = request;
        let at = self.instant(now);
        let subscriber = claimed.destination.subscriber_id.clone();
        let standing = self.slowness.standing(&subscriber);
        let usual = self.slowness.usual(&subscriber);
        let kind = AttemptKind::of(&claimed);
        let lane_takes_it = self.lane_takes_one_more(live, lending.left, now);
        let lent_place = match self.slots.free() {
            0 => lending.reservation.take(kind, usual, at),
            _ => None,
        };
        if lent_place.is_some() {
            lending.left = lending.left.saturating_sub(1);
        }
        let slot = lent_place.unwrap_or_else(|| self.slots.take(kind, standing, usual, at));
        self.slowness.started(&subscriber, at);
        let patience = self.slowness.slot_patience(&subscriber);
        let on_probation = standing == Standing::Unproven && !slot.is_slow() && lane_takes_it;
        live.push(Live {
            claimed,
            started_at: now,
            answer,
            slot,
            usual,
            to_lane_at: now.saturating_add(hookline_policy::duration_ms(patience)),
            on_probation,
        });
        self.shed_from(live, now)
    }

    /// Plays out, in time order up to `now`, what the attempts under way do on their own: each
    /// past its slot patience moves to the slow lane (shedding the one furthest past its usual
    /// time when the lane is full), and each ends at its answer. Answers the attempts that
    /// ended, in the order they did; `live` keeps the rest.
    pub fn run_until(&mut self, live: &mut Vec<Live>, now: UnixMs) -> Vec<Finished> {
        self.refused_wrongly.clear();
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
                ended.push(self.end(l, at, answered, Ending::Network));
                continue;
            }
            // No claim's places are set aside between passes.
            let lane_takes_it = self.lane_takes_one_more(live, 0, at);
            let started = self.instant(live[i].started_at);
            let usual = live[i].usual;
            if live[i]
                .slot
                .move_to_slow_lane(started, usual, self.instant(at))
            {
                // Room may have been made by shedding another.
                ended.extend(self.shed_from(live, at));
            } else {
                if lane_takes_it {
                    let l = &live[i];
                    self.refused_wrongly.push(format!(
                        "{} to {}, {} ms in flight, at {} ms",
                        l.claimed.id,
                        l.claimed.destination.subscriber_id,
                        at - l.started_at,
                        at - self.epoch
                    ));
                }
                live[i].to_lane_at = at.saturating_add(LANE_RETRY_MS);
            }
        }
    }

    /// The attempts the lane shed to make room: they end `at`, as timeouts, as the engine's
    /// attempt task ends them when told.
    fn shed_from(&mut self, live: &mut Vec<Live>, at: UnixMs) -> Vec<Finished> {
        let mut shed = Vec::new();
        let mut i = 0;
        while i < live.len() {
            if was_shed(&mut live[i].slot) {
                let l = live.remove(i);
                let mut ended = self.end(l, at, Ended::NoAnswer, Ending::Shed);
                ended.result = AttemptResult::Timeout;
                ended.retry_after = None;
                shed.push(ended);
            } else {
                i += 1;
            }
        }
        shed
    }

    fn end(&mut self, l: Live, at: UnixMs, answered: Ended, ending: Ending) -> Finished {
        let subscriber = &l.claimed.destination.subscriber_id;
        self.slowness
            .finished(subscriber, self.instant(l.started_at), answered);
        Finished {
            started_at: l.started_at,
            ended_at: at,
            result: l.answer.result,
            retry_after: l.answer.retry_after,
            ending,
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
