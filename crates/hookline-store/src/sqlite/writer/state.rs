//! What the writer keeps in memory beside the rows (deliveries waiting per subscriber, deaths
//! not yet counted in the metric), and the only way it changes: one method per transition a
//! write path makes deliveries go through, called beside the statement that makes it (a
//! fan-out's as it is counted, just before its insert; the others right after theirs). Each
//! moves every figure its transition moves (a claim takes a delivery out of the waiting count,
//! a completion that retries puts it back, one that ends in death counts it for the metric), so
//! a write path names what happened to its rows and cannot move one figure and forget another;
//! the figures themselves are private to this module, and so are their journal's commit and
//! undo, to `writer`. (Deliveries in flight are counted from the rows when a claim needs them:
//! keeping them here measured no gain, `writes::busy`.)
//!
//! Every change to a count is logged until its batch commits: a job or a batch rolled back, or
//! a first run of a batch undone to run again (`writer`), takes its changes with it, exactly.
//! (When claims last read every scan in full is not logged: after a rolled-back claim the
//! restored counts are trusted a little longer, which they bear.) In test builds the writer
//! recounts every figure from the tables after each batch ([`WriterState::differences`]).

use hookline_policy::{DeadReason, UnixMs};
use rusqlite::Connection;

use super::super::dead_tally::{self, DeadTally};
use super::super::scheduled::ScheduledCounts;
use crate::rules::Ending;
use crate::{DeliveryState, Result};

/// Changes kept allocated between batches: a batch of large fan-outs logs one per delivery.
const KEPT_CHANGES: usize = 4_096;

pub(in crate::sqlite) struct WriterState {
    /// Deliveries waiting per subscriber, and when claims may trust them.
    scheduled: ScheduledCounts,
    /// Deliveries that died since the last commit, counted in the metric once it commits.
    dead: DeadTally,
    /// Each change to a count since the last commit, as made: undone in reverse on a rollback.
    changes: Vec<Change>,
}

/// A change made to a subscriber's waiting count.
struct Change {
    subscriber_id: String,
    made: i64,
}

/// Where a job's changes begin, to undo them if it fails.
#[derive(Clone, Copy)]
pub(super) struct Mark {
    changes: usize,
    dead: dead_tally::Mark,
}

impl WriterState {
    /// The figures as the rows are now.
    pub(super) fn load(conn: &Connection) -> Result<Self> {
        Ok(Self {
            scheduled: ScheduledCounts::load(conn)?,
            dead: DeadTally::default(),
            changes: Vec::new(),
        })
    }

    // The transitions: what write paths call.

    /// A fan-out wrote a delivery to `subscriber_id` that waits.
    pub(in crate::sqlite) fn fanned_out(&mut self, subscriber_id: &str) {
        self.change(subscriber_id, 1);
    }

    /// A fan-out wrote `n` deliveries dead at once: their subscribers are pinned below every
    /// version the event has.
    pub(in crate::sqlite) fn dead_on_arrival(&mut self, n: u64) {
        self.dead.add(DeadReason::PermanentFailure, None, n);
    }

    /// A waiting delivery was leased to an attempt.
    pub(in crate::sqlite) fn claimed(&mut self, subscriber_id: &str) {
        self.change(subscriber_id, -1);
    }

    /// A leased delivery's attempt ended, leaving it as `ending` says, as `policy` decided.
    pub(in crate::sqlite) fn completed(
        &mut self,
        subscriber_id: &str,
        ending: &Ending,
        policy: Option<&str>,
    ) {
        if ending.state == DeliveryState::Scheduled {
            self.change(subscriber_id, 1);
        }
        if let Some(reason) = ending.dead_reason {
            self.dead.add(reason, policy, 1);
        }
    }

    /// `n` of `subscriber_id`'s waiting deliveries died for `reason` (their subscriber was
    /// revoked, their window ended).
    pub(in crate::sqlite) fn died_waiting(
        &mut self,
        subscriber_id: &str,
        reason: DeadReason,
        n: u64,
    ) {
        self.change(subscriber_id, -crate::to_bigint(n));
        self.dead.add(reason, None, n);
    }

    /// A dead letter of `subscriber_id` waits again (a replay).
    pub(in crate::sqlite) fn replayed(&mut self, subscriber_id: &str) {
        self.change(subscriber_id, 1);
    }

    /// A resend wrote a delivery to `subscriber_id` that waits.
    pub(in crate::sqlite) fn resent(&mut self, subscriber_id: &str) {
        self.change(subscriber_id, 1);
    }

    /// A dead letter a replay selected died again at once for `reason`.
    pub(in crate::sqlite) fn died_again(&mut self, reason: DeadReason) {
        self.dead.add(reason, None, 1);
    }

    fn change(&mut self, subscriber_id: &str, delta: i64) {
        let made = self.scheduled.change(subscriber_id, delta);
        if made != 0 {
            self.changes.push(Change {
                subscriber_id: subscriber_id.to_owned(),
                made,
            });
        }
    }

    // What claims read.

    pub(in crate::sqlite) fn scheduled(&self) -> &ScheduledCounts {
        &self.scheduled
    }

    /// A claim at `now` read every scan in full (see `ScheduledCounts::trusted`).
    pub(in crate::sqlite) fn claimed_in_full(&mut self, now: UnixMs) {
        self.scheduled.claimed_in_full(now);
    }

    // The journal: what `writer` calls.

    pub(super) fn mark(&self) -> Mark {
        Mark {
            changes: self.changes.len(),
            dead: self.dead.mark(),
        }
    }

    /// Undoes the changes made since `mark` (a failed job's).
    pub(super) fn roll_back_to(&mut self, mark: Mark) {
        self.undo_changes_to(mark.changes);
        self.dead.roll_back_to(mark.dead);
    }

    /// The batch's transaction committed: its changes stand, and its deaths are counted.
    pub(super) fn committed(&mut self) {
        self.changes.clear();
        self.changes.shrink_to(KEPT_CHANGES);
        self.dead.committed();
    }

    /// The batch's transaction was rolled back: so are its changes.
    pub(super) fn rolled_back(&mut self) {
        self.undo_changes_to(0);
        self.dead.rolled_back();
    }

    fn undo_changes_to(&mut self, len: usize) {
        while self.changes.len() > len {
            let change = self.changes.pop().expect("longer than the mark");
            self.scheduled.change(&change.subscriber_id, -change.made);
        }
    }

    /// How the figures differ from the rows, between batches: each difference in words (none
    /// when every write path went through its transition and every undo was exact).
    #[cfg(any(test, feature = "testing"))]
    pub(super) fn differences(&self, conn: &Connection) -> Result<Vec<String>> {
        let mut differences: Vec<String> = self
            .scheduled
            .difference_from_rows(conn)?
            .into_iter()
            .collect();
        if !self.changes.is_empty() || !self.dead.is_empty() {
            differences.push(format!(
                "{} changes and deaths left neither committed nor rolled back",
                self.changes.len()
            ));
        }
        Ok(differences)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> WriterState {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::super::schema::migrate(&mut conn).unwrap();
        WriterState::load(&conn).unwrap()
    }

    fn among<'a>(ids: &'a [&str]) -> impl Fn(&str) -> bool + 'a {
        move |id| ids.contains(&id)
    }

    fn waiting(s: &WriterState) -> Vec<(String, u32)> {
        s.scheduled.sorted()
    }

    #[test]
    fn each_transition_moves_every_figure_it_moves() {
        let mut s = state();
        for id in ["a", "a", "b"] {
            s.fanned_out(id);
        }
        s.claimed("a");
        s.claimed("b");
        assert_eq!(waiting(&s), [("a".to_string(), 1)]);
        let retry = Ending::of(
            crate::Transition::Reschedule { run_at: 5 },
            crate::SubscriberStatus::Active,
        );
        let dead = Ending::of(
            crate::Transition::Dead(DeadReason::PermanentFailure),
            crate::SubscriberStatus::Active,
        );
        s.completed("a", &retry, None);
        s.completed("b", &dead, Some("default"));
        assert_eq!(waiting(&s), [("a".to_string(), 2)]);
        assert!(!s.dead.is_empty(), "a death waits for the commit");
        s.died_waiting("a", DeadReason::SubscriptionRevoked, 2);
        s.replayed("b");
        assert_eq!(waiting(&s), [("b".to_string(), 1)]);
    }

    #[test]
    fn a_rolled_back_job_takes_its_changes_with_it() {
        let mut s = state();
        assert!(s.scheduled.all_left_out(among(&[])), "nothing waits");
        s.fanned_out("a");
        s.fanned_out("a");
        s.committed();
        assert!(s.dead.is_empty());

        // A job takes both of a's and adds one of b's, then fails.
        let mark = s.mark();
        s.claimed("a");
        s.claimed("a");
        s.fanned_out("b");
        s.dead_on_arrival(3);
        assert!(s.scheduled.all_left_out(among(&["b"])));
        s.roll_back_to(mark);
        assert_eq!(waiting(&s), [("a".to_string(), 2)]);
        assert!(s.dead.is_empty(), "its deaths are dropped");

        // A batch whose commit failed: everything since the last commit is undone.
        s.claimed("a");
        s.fanned_out("c");
        s.rolled_back();
        assert_eq!(waiting(&s), [("a".to_string(), 2)]);

        // Taking more than is counted takes what is there, and undoes exactly that.
        let mark = s.mark();
        s.died_waiting("a", DeadReason::WindowExpired, 5);
        assert!(s.scheduled.all_left_out(among(&[])));
        s.roll_back_to(mark);
        assert_eq!(waiting(&s), [("a".to_string(), 2)]);
    }
}
