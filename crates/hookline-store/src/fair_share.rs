//! Who gets how many of a claim's slots while tenants have deliveries due: the fair share.
//!
//! In due order alone, one tenant's burst takes every slot until it drains, and another
//! tenant's first attempts wait behind all of it (issue 36: 20,000 of one tenant's deliveries
//! ahead of a handful of another's). So a claim first finds the tenants with deliveries due
//! (a walk over the index `deliveries_tenant_due`, at most [`TENANTS_PER_CLAIM`] of them), gives
//! each a share of the dispatcher's slots ([`FairShare`]) and scans each one's due rows through
//! that index up to what it was given; then it fills what is left of the claim in plain due
//! order, as it always did, so a share nobody can use goes to whoever can (work-conserving).
//! Every row still goes through the `ClaimBudget` (caps per subscriber and per host, breakers,
//! rate limits, the retry budget): the share is on top of them.
//!
//! The subscribers without a tenant count as one more group, so the tenants' shares leave them
//! theirs; their rows are not in the tenant index (so they pay nothing for it), and the fill in
//! due order is what serves them. Whether they have deliveries due is not known without a walk
//! of the due index, so they always count.
//!
//! Attempts are never stopped, so a tenant that comes while another's burst holds every slot
//! would wait for one of the other's attempts to end (the test: up to the 50 ms its
//! endpoints take, the whole of the slack it allows). So a claim may also lend: take beyond its
//! free slots, for tenants under their share, as many as the groups past their shares hold
//! (and at most what the caller offers, `ClaimRequest::lend`); the caller starts those without
//! a slot, in its slow lane. What is lent is bounded by the borrowers' room under their shares,
//! so the lane holds at most a share's worth per tenant, and the slots' owed share is paid at
//! once instead of when the other tenant's attempts end.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use hookline_policy::UnixMs;

/// The most tenants one claim shares among. Past it, the tenants the walk did not reach get no
/// share in this claim (the fill in due order still serves them), and the next claim's walk
/// starts after the last one this claim reached ([`TenantCursor`]): every tenant with
/// deliveries due is reached within a few claims. It bounds what a claim spends on the walk (an
/// index seek per tenant with deliveries waiting, due or not), and more tenants than this would
/// get less than one slot each of any default number of slots.
pub(crate) const TENANTS_PER_CLAIM: usize = 256;

/// The most rounds of scans one claim makes over the tenants. A tenant whose scan takes fewer
/// rows than it was given has no more this claim can take; the next round offers what it left
/// to the others. Each round that does not end the sharing ends at least one tenant's, so with
/// at most this many tenants coming up short in turn the sharing always ends by itself; past
/// it, what is left goes to the fill in due order.
const MAX_ROUNDS: usize = 8;

/// A tenant with deliveries due, as the walk found it.
#[derive(Debug, Clone)]
pub(crate) struct WaitingTenant<K> {
    pub tenant: K,
    /// Its deliveries in flight in this process (its share is of this process's slots).
    pub in_flight: u32,
    /// When its earliest delivery waiting came due: between tenants equally served, the one
    /// waiting longest goes first.
    pub due_since: UnixMs,
}

/// What a claim has to share: its free slots, and how many it may lend beyond them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimRoom {
    pub free: usize,
    /// What the caller can start without a slot (`ClaimRequest::lend`).
    pub lend: usize,
}

impl crate::ClaimRequest {
    pub(crate) fn room(&self) -> ClaimRoom {
        ClaimRoom {
            free: self.limit,
            lend: self.lend,
        }
    }
}

/// What the groups not among the tenants with deliveries due hold in flight in this process.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HeldElsewhere {
    /// The subscribers without a tenant: a group with a share of its own.
    pub untenanted: u32,
    /// Tenants with nothing due now: all of it is past what they are owed.
    pub idle_tenants: u32,
}

/// What one tenant's scan may take in a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Allotment<K> {
    /// Its place among the tenants, for [`FairShare::took`].
    pub index: usize,
    pub tenant: K,
    pub rows: usize,
}

/// One tenant's standing in the sharing of one claim.
#[derive(Debug)]
struct Standing<K> {
    tenant: K,
    due_since: UnixMs,
    /// In flight before the claim plus what the claim took of its rows so far.
    load: u32,
    /// What its scan in the current round may take.
    allotted: usize,
    /// Its scan took fewer than it was given: it has nothing more this claim can take.
    done: bool,
}

/// The sharing of one claim's slots among the tenants with deliveries due.
#[derive(Debug)]
pub(crate) struct FairShare<K> {
    slots: usize,
    /// The share before any tenant is done: the least any tenant's share is in this claim.
    first_share: u32,
    room: ClaimRoom,
    held: HeldElsewhere,
    /// What the tenants' scans took so far.
    taken: usize,
    tenants: Vec<Standing<K>>,
    rounds: usize,
}

impl<K: Clone> FairShare<K> {
    /// `slots`: the dispatcher's slots. The tenants may take the claim's free slots, and lent
    /// ones up to what the groups past their shares hold (`held` and the tenants' own).
    pub fn new(
        slots: usize,
        room: ClaimRoom,
        waiting: Vec<WaitingTenant<K>>,
        held: HeldElsewhere,
    ) -> Self {
        Self {
            slots,
            first_share: share(slots, 0, waiting.len()),
            room,
            held,
            taken: 0,
            tenants: waiting
                .into_iter()
                .map(|w| Standing {
                    tenant: w.tenant,
                    due_since: w.due_since,
                    load: w.in_flight,
                    allotted: 0,
                    done: false,
                })
                .collect(),
            rounds: 0,
        }
    }

    /// Each tenant's share of the slots at first: of the dispatcher's slots, an equal part per
    /// group (each tenant with deliveries due, and the subscribers without a tenant), at least
    /// one. A share only grows within the claim ([`FairShare::share_now`]).
    #[cfg(test)]
    pub fn first_share(&self) -> u32 {
        self.first_share
    }

    /// The share the last round gave.
    #[cfg(test)]
    pub fn share(&self) -> u32 {
        self.share_now()
    }

    /// What the claim may still take while the share is `share`: its free slots, and lent ones
    /// up to what the groups past `share` hold past it (and what the caller offers), less
    /// what the tenants took. As shares grow, what is held past them, and so what may be lent,
    /// shrinks: a tenant never borrows from one that the grown share no longer puts past it.
    fn left(&self, share: u32) -> usize {
        let past = |n: u32| usize::try_from(n.saturating_sub(share)).unwrap_or(usize::MAX);
        let held_past = self
            .tenants
            .iter()
            .map(|t| past(t.load))
            .chain([past(self.held.untenanted)])
            .chain([usize::try_from(self.held.idle_tenants).unwrap_or(usize::MAX)])
            .fold(0, usize::saturating_add);
        let lent = self.room.lend.min(held_past);
        self.room
            .free
            .saturating_add(lent)
            .saturating_sub(self.taken)
    }

    /// The share in the current round: what the tenants that are done do not hold of their
    /// first share goes to the others in equal parts (the subscribers without a tenant again
    /// one of them), so one tenant's unused share is the others' before it is the fill's.
    /// Never below the first share: the done hold at most that much each.
    fn share_now(&self) -> u32 {
        let done = self.tenants.iter().filter(|t| t.done);
        let held: usize = done
            .clone()
            .map(|t| usize::try_from(t.load.min(self.first_share)).unwrap_or(usize::MAX))
            .sum();
        let open = self.tenants.len() - done.count();
        share(self.slots, held, open).max(self.first_share)
    }

    /// The next round: what each tenant's scan may take, none for a tenant at its share or done.
    /// What the claim may take goes to the tenants furthest below their share first, one at a
    /// time (water-filling: the least loaded, then the one whose deliveries came due first), so
    /// with fewer free slots than room, the tenant with nothing in flight is served before the
    /// one using its share. Empty when there is nothing more to share: the claim's limit is
    /// reached, every tenant is at its share or done, or the rounds are used up.
    pub fn next_round(&mut self) -> Vec<Allotment<K>> {
        for t in &mut self.tenants {
            t.allotted = 0;
        }
        if self.rounds >= MAX_ROUNDS {
            return Vec::new();
        }
        self.rounds += 1;
        let share = self.share_now();
        let room = |t: &Standing<K>| {
            if t.done {
                0
            } else {
                share.saturating_sub(t.load)
            }
        };
        let mut lowest: BinaryHeap<Reverse<(u32, UnixMs, usize)>> = self
            .tenants
            .iter()
            .enumerate()
            .filter(|(_, t)| room(t) > 0)
            .map(|(i, t)| Reverse((t.load, t.due_since, i)))
            .collect();
        let mut left = self.left(share);
        while left > 0 {
            let Some(Reverse((load, due_since, i))) = lowest.pop() else {
                break;
            };
            let t = &mut self.tenants[i];
            t.allotted += 1;
            left -= 1;
            if usize::try_from(room(t)).unwrap_or(usize::MAX) > t.allotted {
                lowest.push(Reverse((load.saturating_add(1), due_since, i)));
            }
        }
        self.tenants
            .iter()
            .enumerate()
            .filter(|(_, t)| t.allotted > 0)
            .map(|(index, t)| Allotment {
                index,
                tenant: t.tenant.clone(),
                rows: t.allotted,
            })
            .collect()
    }

    /// What the scan of tenant `index` took in this round. One that took fewer than it was
    /// given is done: what it left goes to the others in the next round, or to the fill.
    pub fn took(&mut self, index: usize, taken: usize) {
        let t = &mut self.tenants[index];
        t.load = t
            .load
            .saturating_add(u32::try_from(taken).unwrap_or(u32::MAX));
        self.taken = self.taken.saturating_add(taken);
        if taken < t.allotted {
            t.done = true;
        }
    }
}

/// Who shares a claim: the tenants of `waiting` (each with when its earliest delivery waiting
/// comes due) with deliveries due at `now`, each with what it has in flight of `in_flight`
/// (per subscriber: its tenant, and how many), and what everybody else has in flight.
pub(crate) fn sharing<'a>(
    waiting: impl IntoIterator<Item = (&'a str, UnixMs)>,
    now: UnixMs,
    in_flight: impl IntoIterator<Item = (Option<&'a str>, u32)>,
) -> (Vec<WaitingTenant<String>>, HeldElsewhere) {
    let due: Vec<(&str, UnixMs)> = waiting
        .into_iter()
        .filter(|(_, due_since)| *due_since <= now)
        .collect();
    let mut held = HeldElsewhere::default();
    if due.is_empty() {
        return (Vec::new(), held);
    }
    let mut by_tenant: HashMap<&str, u32> = HashMap::new();
    for (tenant, n) in in_flight {
        let count = match tenant {
            Some(tenant) => by_tenant.entry(tenant).or_default(),
            None => &mut held.untenanted,
        };
        *count = count.saturating_add(n);
    }
    let tenants = due
        .into_iter()
        .map(|(tenant, due_since)| WaitingTenant {
            tenant: tenant.to_owned(),
            in_flight: by_tenant.remove(tenant).unwrap_or(0),
            due_since,
        })
        .collect();
    held.idle_tenants = by_tenant.into_values().fold(0, u32::saturating_add);
    (tenants, held)
}

/// An equal part of `slots`, less those `held`, per group: each of `tenants`, and the
/// subscribers without a tenant; at least one.
fn share(slots: usize, held: usize, tenants: usize) -> u32 {
    let part = slots.saturating_sub(held) / tenants.saturating_add(1);
    u32::try_from(part).unwrap_or(u32::MAX).max(1)
}

/// Where the next claim's walk over the tenants with deliveries waiting starts: after the last
/// tenant a claim reached when it stopped at [`TENANTS_PER_CLAIM`], else at the first. Kept by
/// the store between claims; only a hint (a claim run again, or by another process, moves it
/// for nothing worse than a turn).
#[derive(Debug, Default)]
pub(crate) struct TenantCursor(String);

impl TenantCursor {
    /// The walk starts after this tenant id ("" before every id: ids are never empty).
    pub fn after(&self) -> &str {
        &self.0
    }

    /// After a walk that reached `visited` (in id order): the next starts after the last of
    /// them when the walk stopped at its bound, else at the first tenant again.
    pub fn advance<'a>(&mut self, visited: impl ExactSizeIterator<Item = &'a str>) {
        let stopped_at_bound = visited.len() >= TENANTS_PER_CLAIM;
        self.0 = match visited.last() {
            Some(last) if stopped_at_bound => last.to_owned(),
            _ => String::new(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn waiting(in_flight: &[u32]) -> Vec<WaitingTenant<usize>> {
        in_flight
            .iter()
            .enumerate()
            .map(|(tenant, &in_flight)| WaitingTenant {
                tenant,
                in_flight,
                due_since: 0,
            })
            .collect()
    }

    /// A claim of `free` slots that lends none.
    fn free(free: usize) -> ClaimRoom {
        ClaimRoom { free, lend: 0 }
    }

    /// What a claim's fair sharing takes of each tenant, each with `due[i]` rows it can take
    /// (its scan takes what it is given up to what it has left), and what the claim has left
    /// for the fill.
    fn shared(slots: usize, limit: usize, in_flight: &[u32], due: &[usize]) -> (Vec<usize>, usize) {
        let taken = taken(slots, free(limit), in_flight, due);
        let left = limit - taken.iter().sum::<usize>();
        (taken, left)
    }

    /// What each tenant takes in a claim of `room`, each with `due[i]` rows it can take.
    fn taken(slots: usize, room: ClaimRoom, in_flight: &[u32], due: &[usize]) -> Vec<usize> {
        taken_and_share(slots, room, in_flight, due).0
    }

    /// `taken`, and the share of the claim's last round.
    fn taken_and_share(
        slots: usize,
        room: ClaimRoom,
        in_flight: &[u32],
        due: &[usize],
    ) -> (Vec<usize>, u32) {
        let held = HeldElsewhere::default();
        let mut fair = FairShare::new(slots, room, waiting(in_flight), held);
        let mut taken = vec![0; due.len()];
        loop {
            let round = fair.next_round();
            if round.is_empty() {
                break;
            }
            for a in round {
                let took = a.rows.min(due[a.index] - taken[a.index]);
                taken[a.index] += took;
                fair.took(a.index, took);
            }
        }
        (taken, fair.share())
    }

    #[test]
    fn a_tenant_with_nothing_in_flight_is_served_before_one_using_its_share() {
        // 512 slots, two tenants and the untenanted group: 170 each. A has 300 in flight (over
        // its share), B none; a claim of 4 free slots goes to B whole.
        let mut fair = FairShare::new(512, free(4), waiting(&[300, 0]), HeldElsewhere::default());
        assert_eq!(fair.first_share(), 170);
        let round = fair.next_round();
        assert_eq!(
            round,
            [Allotment {
                index: 1,
                tenant: 1,
                rows: 4
            }]
        );
        // B has only 3: the fourth is left for the fill (A is over its share).
        fair.took(1, 3);
        assert!(fair.next_round().is_empty());
    }

    #[test]
    fn what_one_tenant_cannot_use_goes_to_the_others_in_the_next_round() {
        let (taken, left) = shared(30, 20, &[0, 0, 0], &[1, 100, 100]);
        // Shares of 7 (30 slots, three tenants and the untenanted group): the first takes its
        // one row, the others 7 each; then the first holds 1 of its 7 and the others' share
        // grows to 9 ((30 - 1) / 3); the rest is the fill's.
        assert_eq!(taken, [1, 9, 9]);
        assert_eq!(left, 1);
    }

    #[test]
    fn a_tenant_under_its_share_borrows_what_another_holds_past_its_own() {
        // 64 slots, all held by A (share 21: A, B and the untenanted group); B comes with 10
        // rows due and no slot free. What A holds past its share, 43, may be lent.
        let room = ClaimRoom { free: 0, lend: 100 };
        assert_eq!(taken(64, room, &[64, 0], &[1_000, 10]), [0, 10]);
        // No more than B's share, nor than what A holds past its own, nor than offered.
        assert_eq!(taken(64, room, &[64, 0], &[1_000, 100]), [0, 21]);
        assert_eq!(taken(64, room, &[30, 0], &[1_000, 100]), [0, 9]);
        assert_eq!(
            taken(64, ClaimRoom { free: 0, lend: 4 }, &[64, 0], &[0, 10]),
            [0, 4]
        );
        // Nobody past a share: nothing to lend.
        assert_eq!(taken(64, room, &[21, 0], &[1_000, 100]), [0, 0]);
        // What idle tenants and the subscribers without a tenant hold counts too.
        let held = HeldElsewhere {
            untenanted: 31,
            idle_tenants: 5,
        };
        let mut fair = FairShare::new(64, room, waiting(&[0]), held);
        // Shares of 32 (one tenant and the untenanted group): 0 + 5 past them.
        assert_eq!(fair.next_round()[0].rows, 5);
    }

    #[test]
    fn equally_served_tenants_go_in_the_order_their_deliveries_came_due() {
        let mut w = waiting(&[0, 0, 0]);
        w[0].due_since = 30;
        w[1].due_since = 10;
        w[2].due_since = 20;
        let mut fair = FairShare::new(100, free(2), w, HeldElsewhere::default());
        let served: Vec<usize> = fair.next_round().iter().map(|a| a.tenant).collect();
        assert_eq!(served, [1, 2]);
    }

    #[test]
    fn the_walk_resumes_after_the_last_tenant_it_reached_only_when_it_stopped_at_its_bound() {
        let mut cursor = TenantCursor::default();
        assert_eq!(cursor.after(), "");
        let many: Vec<String> = (0..TENANTS_PER_CLAIM).map(|i| format!("t{i:04}")).collect();
        cursor.advance(many.iter().map(String::as_str));
        assert_eq!(cursor.after(), "t0255");
        cursor.advance(["t0300", "t0301"].into_iter());
        assert_eq!(cursor.after(), "");
    }

    fn tenants() -> impl Strategy<Value = (usize, usize, Vec<u32>, Vec<usize>)> {
        (1usize..MAX_ROUNDS).prop_flat_map(|n| {
            (
                1usize..600,
                0usize..200,
                proptest::collection::vec(0u32..150, n),
                proptest::collection::vec(0usize..150, n),
            )
        })
    }

    proptest! {
        /// Lent rows go only to tenants under their share, never past it, and no more are
        /// lent than offered or than the tenants past their shares hold past them.
        #[test]
        fn only_tenants_under_their_share_borrow_and_no_more_than_is_held_past_shares(
            (slots, lend, in_flight, due) in tenants(),
        ) {
            let held = HeldElsewhere::default();
            let room = ClaimRoom { free: 0, lend };
            let share = FairShare::new(slots, room, waiting(&in_flight), held).first_share();
            let (taken, last_share) = taken_and_share(slots, room, &in_flight, &due);
            let past: usize = in_flight.iter().map(|&f| f.saturating_sub(share) as usize).sum();
            prop_assert!(taken.iter().sum::<usize>() <= lend.min(past));
            for i in 0..taken.len() {
                if taken[i] > 0 {
                    prop_assert!(in_flight[i] as usize + taken[i] <= last_share as usize);
                }
            }
        }

        /// In one round: nothing past the claim's limit or a tenant's room; all of the limit
        /// given while any tenant has room; and water-filled: a tenant given less than its room
        /// is at most one below any tenant given something.
        #[test]
        fn a_round_gives_all_it_can_within_the_shares_least_loaded_first(
            (slots, limit, in_flight, _) in tenants(),
        ) {
            let held = HeldElsewhere::default();
            let mut fair = FairShare::new(slots, free(limit), waiting(&in_flight), held);
            let share = fair.first_share();
            let round = fair.next_round();
            let mut given = vec![0usize; in_flight.len()];
            for a in &round {
                given[a.index] = a.rows;
            }
            let room: Vec<usize> = in_flight
                .iter()
                .map(|&f| share.saturating_sub(f) as usize)
                .collect();
            prop_assert!(given.iter().sum::<usize>() <= limit);
            prop_assert_eq!(given.iter().sum::<usize>(), limit.min(room.iter().sum()));
            for i in 0..given.len() {
                prop_assert!(given[i] <= room[i]);
                if given[i] < room[i] {
                    for j in 0..given.len() {
                        if given[j] > 0 {
                            let (lj, li) = (in_flight[j] as usize + given[j], in_flight[i] as usize + given[i]);
                            prop_assert!(lj <= li + 1, "{j} at {lj}, {i} at {li}");
                        }
                    }
                }
            }
        }

        /// Over a claim's rounds: never past the limit, nor what a tenant has due; every
        /// tenant with room gets at least min(its due, its room under its first share)
        /// whenever the claim can hold all of those; none past its share while another gets
        /// less than its own; and nothing is left for the fill while a tenant with room still
        /// has rows to take.
        #[test]
        fn a_claim_gives_each_tenant_its_share_and_leaves_nothing_a_tenant_could_use(
            (slots, limit, in_flight, due) in tenants(),
        ) {
            let held = HeldElsewhere::default();
            let share = FairShare::new(slots, free(limit), waiting(&in_flight), held).first_share();
            let (taken, left) = shared(slots, limit, &in_flight, &due);
            let room: Vec<usize> = in_flight
                .iter()
                .map(|&f| share.saturating_sub(f) as usize)
                .collect();
            let wanted: Vec<usize> = room.iter().zip(&due).map(|(r, d)| *r.min(d)).collect();
            prop_assert_eq!(taken.iter().sum::<usize>() + left, limit);
            for i in 0..taken.len() {
                prop_assert!(taken[i] <= due[i]);
                if limit >= wanted.iter().sum::<usize>() {
                    prop_assert!(taken[i] >= wanted[i], "tenant {} took {} of {}", i, taken[i], wanted[i]);
                }
                if taken[i] < wanted[i] {
                    prop_assert_eq!(left, 0, "tenant {} could use what the fill got", i);
                    for j in 0..taken.len() {
                        let lj = in_flight[j] as usize + taken[j];
                        let li = in_flight[i] as usize + taken[i];
                        prop_assert!(taken[j] == 0 || lj <= li + 1, "{j} at {lj}, {i} at {li}");
                    }
                }
            }
        }
    }
}
