//! The process's in-flight slots, and the slow lane that keeps hanging destinations out of them.
//!
//! `delivery.concurrency` bounds the attempts the dispatcher claims for. An attempt in flight
//! is an async task and a socket, cheap to keep waiting; what must not run out is the slots,
//! since a claim takes only as many deliveries as there are free slots, in due order. So a slot
//! is held only while an attempt is within what its subscriber usually takes: past that (see
//! [`crate::slowness`]) the attempt moves to the slow lane (`delivery.slow_lane` places, bounded
//! by the open-file limit), where it goes on waiting for its answer without a slot.
//!
//! Three rules make the bound on healthy subscribers' waiting independent of how many others
//! hang at once:
//! - a subscriber that has not answered yet (no latency history, or its last attempt got no
//!   answer) holds a slot only from a small share of them (`probation`); past that share its
//!   attempts go straight to the lane, so thousands of new destinations that hang cannot fill
//!   the slots before any of them is known to be slow;
//! - when the lane is full, the attempt in it furthest past its own subscriber's usual answer
//!   time is shed (it ends as a timeout, retryable, recorded in the attempt history and counted
//!   in `hookline_attempts_shed_total`) to make room; an attempt still within its usual time is
//!   never shed;
//! - only when nothing in a full lane is past its usual time does an attempt keep its slot, so
//!   the process never has more than `concurrency + slow_lane` attempts in flight.
//!
//! The lane also holds attempts that start without a slot: those a claim took for a tenant
//! under its share of the slots while other tenants held more than theirs (lent:
//! `ClaimRequest::lend`). Attempts are never stopped, so without them a tenant arriving while
//! another's burst holds every slot would wait for one of the other's attempts to end. Their
//! places are set aside before the claim ([`Slots::reserve_lane`]), so each has one when it
//! starts and the bound above holds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

#[derive(Debug)]
pub struct Slots {
    concurrency: usize,
    retry_slots: usize,
    /// Slots that attempts of subscribers with no answer yet may hold.
    probation: usize,
    slow_lane: usize,
    busy: AtomicUsize,
    /// Of the busy slots, those held by attempts 2 and later (and rescues).
    busy_retries: AtomicUsize,
    /// Of the busy slots, those held by subscribers on probation.
    busy_probation: AtomicUsize,
    lane: Mutex<Lane>,
}

/// The attempts in the slow lane, each with what ranks it for shedding.
#[derive(Debug, Default)]
struct Lane {
    next: u64,
    waiting: HashMap<u64, Waiting>,
    /// Places set aside for attempts a claim may lend (see [`LaneReservation`]).
    reserved: usize,
}

#[derive(Debug)]
struct Waiting {
    started: Instant,
    /// Its subscriber's usual answer time (zero when it has not answered yet): how many times
    /// that the attempt has been in flight ranks it.
    usual: Duration,
    shed: oneshot::Sender<()>,
}

impl Lane {
    /// Makes room for one more when full, by shedding the attempt furthest past its own
    /// subscriber's usual time; false when the lane is full of attempts still within theirs.
    fn room(&mut self, capacity: usize, now: Instant) -> bool {
        if self.waiting.len() + self.reserved < capacity {
            return true;
        }
        let furthest = self
            .waiting
            .iter()
            .map(|(id, w)| {
                (
                    *id,
                    past_usual(now.saturating_duration_since(w.started), w.usual),
                )
            })
            .filter(|(_, past)| *past > 1.0)
            // Of two equally far past, the one that entered first: the same choice every time.
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        let Some((id, _)) = furthest else {
            return false;
        };
        let shed = self.waiting.remove(&id).expect("just found");
        // Its task may have ended meanwhile: then its place is free all the same (the attempt
        // counts as shed only where it ends as shed, in the dispatcher).
        let _ = shed.shed.send(());
        true
    }

    fn enter(&mut self, started: Instant, usual: Duration) -> (u64, oneshot::Receiver<()>) {
        let (shed, shed_rx) = oneshot::channel();
        let id = self.next;
        self.next += 1;
        self.waiting.insert(
            id,
            Waiting {
                started,
                usual,
                shed,
            },
        );
        (id, shed_rx)
    }
}

/// How many times its usual time an attempt has been in flight (a usual time of zero, for a
/// subscriber that has not answered yet, counts as one millisecond: of two attempts waiting
/// equally long, the one whose subscriber never answered goes first). Above 1.0 it may be shed.
pub fn past_usual(elapsed: Duration, usual: Duration) -> f64 {
    elapsed.as_secs_f64() / usual.max(Duration::from_millis(1)).as_secs_f64()
}

/// What the dispatcher knows of a subscriber's answers, as far as slots are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// It has answered, and its last attempt got an answer.
    Answering,
    /// No answer yet, or none to its last attempt: on probation.
    Unproven,
}

impl Slots {
    pub fn new(config: SlotsConfig) -> Arc<Self> {
        Arc::new(Self {
            concurrency: config.concurrency,
            retry_slots: config.retry_slots,
            probation: config.probation,
            slow_lane: config.slow_lane,
            busy: AtomicUsize::new(0),
            busy_retries: AtomicUsize::new(0),
            busy_probation: AtomicUsize::new(0),
            lane: Mutex::new(Lane::default()),
        })
    }

    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::Acquire)
    }

    pub fn free(&self) -> usize {
        self.concurrency.saturating_sub(self.busy())
    }

    /// How many more retries may take a slot now.
    pub fn free_for_retries(&self) -> usize {
        self.retry_slots
            .saturating_sub(self.busy_retries.load(Ordering::Acquire))
    }

    pub fn in_slow_lane(&self) -> usize {
        self.lane.lock().unwrap().waiting.len()
    }

    /// Attempts holding a slot, by kind: (first attempts, retries).
    pub fn busy_by_kind(&self) -> (usize, usize) {
        let retries = self.busy_retries.load(Ordering::Acquire);
        (self.busy().saturating_sub(retries), retries)
    }

    /// Attempts under way, in a slot or in the slow lane, against the slots: how busy this
    /// process's delivery is. An attempt that hangs in the slow lane counts (its timeout will
    /// count as a completion), so hanging destinations read as busy, not as idle slots; the
    /// lane itself is parking, not capacity.
    pub fn occupancy(&self) -> (usize, usize) {
        (self.busy() + self.in_slow_lane(), self.concurrency)
    }

    /// Takes a place for one attempt starting now: a slot, or for a subscriber on probation
    /// whose share of the slots is used up, a place in the slow lane. It is given back when the
    /// returned [`Slot`] drops. `now` is when it starts (the simulation's time in
    /// `hookline-sim`, `Instant::now()` in the dispatcher).
    pub fn take(
        self: &Arc<Self>,
        kind: AttemptKind,
        standing: Standing,
        usual: Duration,
        now: Instant,
    ) -> Slot {
        let probation = standing == Standing::Unproven
            && self
                .busy_probation
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < self.probation).then_some(n + 1)
                })
                .is_ok();
        let mut slot = Slot {
            slots: self.clone(),
            kind,
            probation,
            place: Place::Slot,
        };
        self.busy.fetch_add(1, Ordering::AcqRel);
        if kind == AttemptKind::Retry {
            self.busy_retries.fetch_add(1, Ordering::AcqRel);
        }
        if standing == Standing::Unproven && !probation {
            slot.move_to_slow_lane(now, usual, now);
        }
        slot
    }

    /// Sets aside at most `at_most` free places of the slow lane for attempts a claim lends
    /// (they start without a slot): what the claim may offer to lend. Those not used are given
    /// back when the reservation drops.
    pub fn reserve_lane(self: &Arc<Self>, at_most: usize) -> LaneReservation {
        let mut lane = self.lane.lock().unwrap();
        let free = self
            .slow_lane
            .saturating_sub(lane.waiting.len() + lane.reserved);
        let places = at_most.min(free);
        lane.reserved += places;
        LaneReservation {
            slots: self.clone(),
            places,
        }
    }

    fn release_slot(&self, kind: AttemptKind, probation: bool) {
        self.busy.fetch_sub(1, Ordering::AcqRel);
        if kind == AttemptKind::Retry {
            self.busy_retries.fetch_sub(1, Ordering::AcqRel);
        }
        if probation {
            self.busy_probation.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Places of the slow lane set aside for attempts that start without a slot.
#[derive(Debug)]
pub struct LaneReservation {
    slots: Arc<Slots>,
    places: usize,
}

impl LaneReservation {
    pub fn places(&self) -> usize {
        self.places
    }

    /// Gives back every place past the first `lent`, once the claim has answered how many
    /// deliveries it lent: held any longer, the places it did not use would keep attempts out
    /// of the lane (a subscriber on probation past its share would keep a slot).
    pub fn keep(&mut self, lent: usize) {
        let unused = self.places.saturating_sub(lent);
        self.places -= unused;
        self.slots.lane.lock().unwrap().reserved -= unused;
    }

    /// A place in the lane for an attempt starting `now` without a slot (`usual`: its
    /// subscriber's usual answer time, which ranks it for shedding as any other there); `None`
    /// when every place set aside is taken.
    pub fn take(&mut self, kind: AttemptKind, usual: Duration, now: Instant) -> Option<Slot> {
        self.places = self.places.checked_sub(1)?;
        let mut lane = self.slots.lane.lock().unwrap();
        lane.reserved -= 1;
        let (id, shed) = lane.enter(now, usual);
        Some(Slot {
            slots: self.slots.clone(),
            kind,
            probation: false,
            place: Place::Lane {
                id,
                shed: Some(shed),
            },
        })
    }
}

impl Drop for LaneReservation {
    fn drop(&mut self) {
        self.slots.lane.lock().unwrap().reserved -= self.places;
    }
}

/// How the slots are sized.
#[derive(Debug, Clone, Copy)]
pub struct SlotsConfig {
    pub concurrency: usize,
    /// Of `concurrency`, what retries may hold.
    pub retry_slots: usize,
    /// Of `concurrency`, what subscribers with no answer yet may hold.
    pub probation: usize,
    pub slow_lane: usize,
}

/// Which share of the slots an attempt may use: retries are held to `retry_slots`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptKind {
    First,
    Retry,
}

impl AttemptKind {
    /// A first attempt, or a retry: a later attempt, and a rescue (which records the attempt
    /// its lost worker made).
    pub fn of(d: &hookline_store::ClaimedDelivery) -> AttemptKind {
        if d.attempt > 1 || d.lost_attempt_started_at.is_some() {
            AttemptKind::Retry
        } else {
            AttemptKind::First
        }
    }
}

#[derive(Debug)]
enum Place {
    Slot,
    Lane {
        id: u64,
        shed: Option<oneshot::Receiver<()>>,
    },
}

/// One attempt's claim on the process's capacity: a slot, or a place in the slow lane.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    kind: AttemptKind,
    /// It holds (or held, before the lane) a slot of the probation share.
    probation: bool,
    place: Place,
}

impl Slot {
    pub fn is_slow(&self) -> bool {
        matches!(self.place, Place::Lane { .. })
    }

    /// Moves the attempt (started at `started`, its subscriber's usual answer time `usual`) to
    /// the slow lane, freeing its slot and shedding another attempt if the lane is full; false
    /// (and nothing changes) when the lane is full of attempts still within their usual time.
    pub fn move_to_slow_lane(&mut self, started: Instant, usual: Duration, now: Instant) -> bool {
        if self.is_slow() {
            return true;
        }
        let mut lane = self.slots.lane.lock().unwrap();
        if !lane.room(self.slots.slow_lane, now) {
            return false;
        }
        let (id, shed) = lane.enter(started, usual);
        drop(lane);
        self.slots.release_slot(self.kind, self.probation);
        self.place = Place::Lane {
            id,
            shed: Some(shed),
        };
        true
    }

    /// Resolves when the attempt is shed from the slow lane to make room; never while it
    /// holds a slot.
    pub async fn shed(&mut self) {
        match &mut self.place {
            Place::Lane {
                shed: Some(shed), ..
            } => {
                if shed.await.is_err() {
                    // Dropped without a send: the lane is gone (never while this slot lives).
                    std::future::pending::<()>().await
                }
            }
            _ => std::future::pending().await,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        match self.place {
            Place::Lane { id, .. } => {
                self.slots.lane.lock().unwrap().waiting.remove(&id);
            }
            Place::Slot => self.slots.release_slot(self.kind, self.probation),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const USUAL: Duration = Duration::from_millis(100);

    fn slots(
        concurrency: usize,
        retry_slots: usize,
        probation: usize,
        slow_lane: usize,
    ) -> Arc<Slots> {
        Slots::new(SlotsConfig {
            concurrency,
            retry_slots,
            probation,
            slow_lane,
        })
    }

    #[test]
    fn places_set_aside_in_the_lane_start_attempts_without_a_slot_and_count_against_it() {
        let slots = slots(2, 2, 2, 2);
        let now = Instant::now();
        let _a = slots.take(AttemptKind::First, Standing::Answering, USUAL, now);
        let mut b = slots.take(AttemptKind::First, Standing::Answering, USUAL, now);
        let mut lent = slots.reserve_lane(5);
        assert_eq!((lent.places(), slots.free()), (2, 0));
        // The places set aside are not the lane's to give a slow attempt.
        assert!(!b.move_to_slow_lane(now, USUAL, now));
        let borrowed = lent.take(AttemptKind::First, USUAL, now).unwrap();
        assert!(borrowed.is_slow());
        assert_eq!((slots.free(), slots.in_slow_lane()), (0, 1));
        // The one not used comes back when the reservation ends.
        drop(lent);
        assert!(b.move_to_slow_lane(now, USUAL, now));
        assert_eq!((slots.free(), slots.in_slow_lane()), (1, 2));
        let mut none_left = slots.reserve_lane(5);
        assert!(none_left.take(AttemptKind::Retry, USUAL, now).is_none());
        drop(borrowed);
        assert_eq!(slots.in_slow_lane(), 1);
    }

    #[test]
    fn places_the_claim_did_not_lend_are_free_for_attempts_on_probation() {
        let slots = slots(4, 4, 1, 2);
        let mut lent = slots.reserve_lane(4);
        assert_eq!(lent.places(), 2);
        lent.keep(1);
        assert_eq!(lent.places(), 1);
        let now = Instant::now();
        let on_probation = slots.take(AttemptKind::First, Standing::Unproven, USUAL, now);
        let past_the_share = slots.take(AttemptKind::First, Standing::Unproven, USUAL, now);
        assert!(!on_probation.is_slow());
        assert!(past_the_share.is_slow(), "the place not lent is free");
        assert!(lent.take(AttemptKind::First, USUAL, now).is_some());
        assert!(lent.take(AttemptKind::First, USUAL, now).is_none());
    }

    #[test]
    fn a_slow_attempt_frees_its_slot_while_the_lane_has_room() {
        let slots = slots(2, 1, 2, 1);
        let now = Instant::now();
        let mut hanging = slots.take(AttemptKind::Retry, Standing::Answering, USUAL, now);
        let mut also_hanging = slots.take(AttemptKind::First, Standing::Answering, USUAL, now);
        assert_eq!((slots.free(), slots.free_for_retries()), (0, 0));

        assert!(hanging.move_to_slow_lane(now, USUAL, now));
        assert_eq!((slots.free(), slots.free_for_retries()), (1, 1));
        assert_eq!(slots.in_slow_lane(), 1);
        // The lane is full of an attempt still within its usual time: the second keeps its slot.
        assert!(!also_hanging.move_to_slow_lane(now, Duration::from_secs(3600), now));
        assert_eq!(slots.free(), 1);

        drop(hanging);
        assert_eq!((slots.in_slow_lane(), slots.free()), (0, 1));
        assert!(also_hanging.move_to_slow_lane(now, USUAL, now));
        drop(also_hanging);
        assert_eq!((slots.in_slow_lane(), slots.free()), (0, 2));
    }

    #[test]
    fn a_slot_is_given_back_once() {
        let now = Instant::now();
        let slots = slots(1, 1, 1, 1);
        let mut slot = slots.take(AttemptKind::Retry, Standing::Answering, USUAL, now);
        assert!(slot.move_to_slow_lane(now, USUAL, now));
        assert!(slot.move_to_slow_lane(now, USUAL, now));
        assert_eq!(slots.in_slow_lane(), 1);
        drop(slot);
        assert_eq!(
            (slots.free(), slots.free_for_retries(), slots.in_slow_lane()),
            (1, 1, 0)
        );
    }

    /// Subscribers with no answer yet, past their share of the slots, go straight to the lane:
    /// however many there are, the slots stay free for those that answer.
    #[test]
    fn subscribers_without_an_answer_hold_only_their_share_of_the_slots() {
        let now = Instant::now();
        let slots = slots(4, 2, 1, 1_000);
        let unproven: Vec<Slot> = (0..500)
            .map(|_| slots.take(AttemptKind::First, Standing::Unproven, USUAL, now))
            .collect();
        assert_eq!(slots.busy(), 1, "the probation share");
        assert_eq!(slots.in_slow_lane(), 499);
        let answering = slots.take(AttemptKind::First, Standing::Answering, USUAL, now);
        assert!(!answering.is_slow());
        assert_eq!(slots.free(), 2);
        drop(unproven);
        drop(answering);
        assert_eq!(
            (slots.busy(), slots.in_slow_lane(), slots.free()),
            (0, 0, 4)
        );
        // The share is given back: the next one holds a slot again.
        let again = slots.take(AttemptKind::First, Standing::Unproven, USUAL, now);
        assert!(!again.is_slow());
    }

    /// A full lane sheds the attempt furthest past its own usual time, never one within it.
    #[tokio::test]
    async fn a_full_lane_sheds_the_attempt_furthest_past_its_usual_time() {
        let now = Instant::now();
        let slots = slots(4, 4, 4, 2);
        let long_ago = Instant::now() - Duration::from_secs(10);
        // 10 s in flight: 100x its usual 100 ms, and 2x its usual 5 s.
        let mut far_past = slots.take(AttemptKind::First, Standing::Answering, USUAL, now);
        assert!(far_past.move_to_slow_lane(long_ago, USUAL, now));
        let mut a_little_past = slots.take(AttemptKind::First, Standing::Answering, USUAL, now);
        assert!(a_little_past.move_to_slow_lane(long_ago, Duration::from_secs(5), now));

        let mut next = slots.take(AttemptKind::First, Standing::Answering, USUAL, now);
        assert!(next.move_to_slow_lane(now, USUAL, now));
        far_past.shed().await;
        assert_eq!(slots.in_slow_lane(), 2);
        drop(far_past);
        assert_eq!(slots.in_slow_lane(), 2, "its place went to the next one");

        // Nothing in the lane is past its usual time now but the second: it goes next; then
        // the lane holds only attempts within theirs, and the next keeps its slot.
        let mut another = slots.take(AttemptKind::First, Standing::Answering, USUAL, now);
        assert!(another.move_to_slow_lane(now, USUAL, now));
        a_little_past.shed().await;
        let mut kept = slots.take(AttemptKind::First, Standing::Answering, USUAL, now);
        assert!(!kept.move_to_slow_lane(now, USUAL, now));
        assert!(!kept.is_slow());
        // An attempt holding a slot is never shed.
        let never = tokio::time::timeout(Duration::from_millis(10), kept.shed()).await;
        assert!(never.is_err());
    }
}
