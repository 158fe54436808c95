//! The process's in-flight slots, and the slow lane that keeps hanging destinations out of them.
//!
//! `delivery.concurrency` bounds the attempts the dispatcher claims for. Without more, a
//! destination that hangs keeps its slot until the attempt timeout; when hundreds hang at once
//! (with a 10 s timeout and events 1 s apart) they hold every slot before the first timeout
//! fires, and healthy subscribers' first attempts wait behind them. An attempt in flight is an
//! async task and a socket, cheap to keep waiting; what must not run out is the slots. So an
//! attempt far slower than its subscriber usually answers moves to the slow lane, a second,
//! bounded pool (`delivery.slow_lane`): the attempt goes on (its answer may still come), its
//! slot is free for new claims. When the slow lane is full the attempt keeps its slot, so the
//! process never has more than `concurrency + slow_lane` attempts in flight.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[derive(Debug)]
pub struct Slots {
    concurrency: usize,
    retry_slots: usize,
    slow_lane: usize,
    busy: AtomicUsize,
    /// Of the busy slots, those held by attempts 2 and later (and rescues).
    busy_retries: AtomicUsize,
    /// Attempts in the slow lane: they hold no slot.
    slow: AtomicUsize,
}

impl Slots {
    pub fn new(concurrency: usize, retry_slots: usize, slow_lane: usize) -> Arc<Self> {
        Arc::new(Self {
            concurrency,
            retry_slots,
            slow_lane,
            busy: AtomicUsize::new(0),
            busy_retries: AtomicUsize::new(0),
            slow: AtomicUsize::new(0),
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
        self.slow.load(Ordering::Acquire)
    }

    /// Attempts under way, in a slot or in the slow lane, against the slots: how busy this
    /// process's delivery is. An attempt that hangs in the slow lane counts (its timeout will
    /// count as a completion), so hanging destinations read as busy, not as idle slots; the
    /// lane itself is parking, not capacity.
    pub fn occupancy(&self) -> (usize, usize) {
        (self.busy() + self.in_slow_lane(), self.concurrency)
    }

    /// Takes a slot for one attempt; it is given back when the returned [`Slot`] drops.
    pub fn take(self: &Arc<Self>, kind: AttemptKind) -> Slot {
        self.busy.fetch_add(1, Ordering::AcqRel);
        if kind == AttemptKind::Retry {
            self.busy_retries.fetch_add(1, Ordering::AcqRel);
        }
        Slot {
            slots: self.clone(),
            kind,
            slow: false,
        }
    }

    fn release_slot(&self, kind: AttemptKind) {
        self.busy.fetch_sub(1, Ordering::AcqRel);
        if kind == AttemptKind::Retry {
            self.busy_retries.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Which share of the slots an attempt may use: retries are held to `retry_slots`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptKind {
    First,
    Retry,
}

/// One attempt's claim on the process's capacity: a slot, or a place in the slow lane.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    kind: AttemptKind,
    slow: bool,
}

impl Slot {
    pub fn is_slow(&self) -> bool {
        self.slow
    }

    /// Moves the attempt to the slow lane, freeing its slot; false (and nothing changes) when
    /// the slow lane is full.
    pub fn move_to_slow_lane(&mut self) -> bool {
        if self.slow {
            return true;
        }
        let lane = self.slots.slow_lane;
        let moved = self
            .slots
            .slow
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < lane).then_some(n + 1)
            })
            .is_ok();
        if moved {
            self.slots.release_slot(self.kind);
            self.slow = true;
        }
        moved
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.slow {
            self.slots.slow.fetch_sub(1, Ordering::AcqRel);
        } else {
            self.slots.release_slot(self.kind);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_attempt_frees_its_slot_while_the_lane_has_room() {
        let slots = Slots::new(2, 1, 1);
        let mut hanging = slots.take(AttemptKind::Retry);
        let mut also_hanging = slots.take(AttemptKind::First);
        assert_eq!((slots.free(), slots.free_for_retries()), (0, 0));

        assert!(hanging.move_to_slow_lane());
        assert_eq!((slots.free(), slots.free_for_retries()), (1, 1));
        assert_eq!(slots.in_slow_lane(), 1);
        // The lane is full: the second keeps its slot.
        assert!(!also_hanging.move_to_slow_lane());
        assert_eq!(slots.free(), 1);

        drop(hanging);
        assert_eq!((slots.in_slow_lane(), slots.free()), (0, 1));
        assert!(also_hanging.move_to_slow_lane());
        drop(also_hanging);
        assert_eq!((slots.in_slow_lane(), slots.free()), (0, 2));
    }

    #[test]
    fn a_slot_is_given_back_once() {
        let slots = Slots::new(1, 1, 1);
        let mut slot = slots.take(AttemptKind::Retry);
        assert!(slot.move_to_slow_lane());
        assert!(slot.move_to_slow_lane());
        assert_eq!(slots.in_slow_lane(), 1);
        drop(slot);
        assert_eq!(
            (slots.free(), slots.free_for_retries(), slots.in_slow_lane()),
            (1, 1, 0)
        );
    }
}
