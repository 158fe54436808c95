//! What one claim takes. Every due row a backend reads goes through [`ClaimBudget`] in due
//! order; the backend then writes the [`ClaimPlan`] and leases what it took.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use hookline_policy::{BreakerState, UnixMs};

use crate::*;

/// Why a delivery is leased: a claim of a due delivery, or a rescue of one whose lease ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseKind {
    Claim,
    Rescue,
}

/// A delivery row read for a claim or a rescue, before it is leased. Both backends read the
/// same columns into it (`due_row`).
pub(crate) struct DueRow {
    pub key: i64,
    pub id: String,
    pub event_id: String,
    pub subscriber_id: String,
    /// Attempts spent before this lease (a claim's `UPDATE ... RETURNING` reads
    /// `attempts - 1`, which says so).
    pub attempts: u32,
    pub first_seen: UnixMs,
    pub window_start: UnixMs,
    pub run_at: UnixMs,
    /// The payload version it sends; `None` (rows written before versions) sends the latest.
    pub payload_version: Option<i64>,
    /// When it last changed: for a delivery in flight, when its attempt was claimed (a rescue
    /// leaves it alone, so a lost attempt is recorded with its real start).
    pub claimed_at: UnixMs,
}

impl DueRow {
    /// The leased delivery. A claim is for the next attempt; a rescue is for the attempt that
    /// was lost, already counted when it was claimed.
    pub fn leased(
        self,
        lease: i64,
        kind: LeaseKind,
        destination: Arc<Destination>,
        event: Arc<EventBody>,
    ) -> ClaimedDelivery {
        let (attempt, lost_attempt_started_at) = match kind {
            LeaseKind::Claim => (self.attempts + 1, None),
            LeaseKind::Rescue => (self.attempts, Some(self.claimed_at)),
        };
        ClaimedDelivery {
            key: DeliveryKey(self.key),
            id: self.id,
            lease,
            attempt,
            first_seen: self.first_seen,
            window_start: self.window_start,
            due_at: self.run_at,
            lost_attempt_started_at,
            destination,
            event,
        }
    }
}

/// What one claim may still take of each subscriber: its in-flight cap (its own, or the default,
/// or one probe while its breaker is half-open), its rate limit, and what its origin may still
/// take under the cap per host. Both backends run every due row through this, in due order.
pub(crate) struct ClaimBudget {
    now: UnixMs,
    default_cap: u32,
    /// `None`: no cap per host. There is no slow start per host of its own: a host recovers
    /// because its subscribers' breakers close, each starting at an allowance of 1, and what a
    /// host has in flight is the sum of what its subscribers have, so its effective cap is the
    /// sum of their allowances, never past this (a host whose subscribers all just closed
    /// starts at one per subscriber). State per host would be a second ramp to keep in step
    /// with the first across workers, for the same answers.
    host_cap: Option<u32>,
    retries_left: usize,
    excluded: HashSet<String>,
    subscribers: HashMap<String, SubscriberBudget>,
    /// Per origin: how many more attempts it may have in flight. Filled by
    /// [`ClaimBudget::unclaimable`] for origins with attempts in flight; any other starts at
    /// the cap.
    hosts: HashMap<Origin, u32>,
    /// Subscribers whose slow start this claim found over, and the cap it found in force.
    ramped_up: HashMap<String, u32>,
}

/// What one claim may still take of one subscriber.
struct SubscriberBudget {
    slots: u32,
    /// The rate limiter's next admission time.
    next_at: Option<UnixMs>,
    origin: Origin,
}

/// What a claim needs to know of a subscriber, beyond its status.
pub(crate) struct Limits<'a> {
    pub id: &'a str,
    /// Its origin's text ([`Origin::stored_text`]): what the cap per host counts by. Text, so
    /// a due row's is borrowed from the row.
    pub origin: Cow<'a, str>,
    pub breaker: hookline_policy::Breaker,
    pub max_in_flight: Option<u32>,
    pub rate_limit_per_second: Option<f64>,
    pub rate_next_at: Option<UnixMs>,
}

impl<'a> Limits<'a> {
    /// Just what bounds its deliveries in flight (its origin, its cap and its breaker), as
    /// [`ClaimBudget::unclaimable`] needs.
    pub(crate) fn in_flight_bound(
        id: &'a str,
        origin: Cow<'a, str>,
        max_in_flight: Option<u32>,
        breaker: hookline_policy::Breaker,
    ) -> Self {
        Limits {
            id,
            origin,
            breaker,
            max_in_flight,
            rate_limit_per_second: None,
            rate_next_at: None,
        }
    }

    /// How many of its deliveries may be in flight now: its own cap or the default (no more
    /// than its allowance while it starts slowly after its breaker closed), the one probe while
    /// its breaker is half-open, none while it is open. Applied here, from the stored breaker,
    /// so on PostgreSQL it holds across every worker.
    fn cap(&self, now: UnixMs, default_cap: u32) -> u32 {
        match self.breaker.state(now) {
            BreakerState::Closed => {
                cap_in_force(self.max_in_flight, default_cap, self.breaker.allowance)
            }
            BreakerState::HalfOpen => 1,
            BreakerState::Open { .. } => 0,
        }
    }

    /// The cap in force once its slow start is over, if the allowance has reached it. The
    /// completion that grows the allowance does not know the default cap (the dispatcher's
    /// setting, passed to claims only), so the claim, which does, ends the ramp; until then
    /// `cap` takes the smaller of the two, so an allowance past the cap changes nothing.
    fn ramped_up(&self, now: UnixMs, default_cap: u32) -> Option<u32> {
        let cap = self.max_in_flight.unwrap_or(default_cap);
        let closed = self.breaker.state(now) == BreakerState::Closed;
        (closed && self.breaker.allowance.is_some_and(|a| a >= cap)).then_some(cap)
    }
}

/// The in-flight cap of a subscriber whose breaker is closed: its own cap or the default, no
/// more than its slow-start allowance while it has one. What claims hold it to, and so what
/// the gauges and the window sweep call waiting on its cap.
pub(crate) fn cap_in_force(
    max_in_flight: Option<u32>,
    default_cap: u32,
    allowance: Option<u32>,
) -> u32 {
    let cap = max_in_flight.unwrap_or(default_cap);
    allowance.map_or(cap, |a| a.min(cap))
}

/// The cap per host in force: `None` when `max_in_flight_per_host` is 0 (off). What claims
/// hold an origin to (an origin with this many in flight takes no more), and so what the gauges
/// and the window sweep call waiting on its host's cap.
pub(crate) fn host_cap_in_force(max_in_flight_per_host: u32) -> Option<u32> {
    (max_in_flight_per_host > 0).then_some(max_in_flight_per_host)
}

impl Subscriber {
    pub(crate) fn limits(&self) -> Limits<'_> {
        Limits {
            id: &self.id,
            origin: Cow::Borrowed(self.origin.as_str()),
            breaker: self.breaker,
            max_in_flight: self.max_in_flight,
            rate_limit_per_second: self.rate_limit_per_second,
            rate_next_at: self.rate_next_at,
        }
    }
}

/// What to do with one due row.
pub(crate) enum Admission {
    Take,
    /// Leave it due: its subscriber or its host is at its cap, it is rate-limited, or retries
    /// are used up.
    Skip,
    /// Its subscriber's breaker is open: move it to the half-open time.
    Defer(UnixMs),
}

/// What a claim's scans leave out: subscribers, and every subscriber on an origin. SQLite reads
/// which subscribers are on the origins ([`Excluded::ids`]: its waiting counts go by
/// subscriber); PostgreSQL leaves the origins out in its scan's SQL, since a list of a busy
/// host's 2,000 subscriber ids costs a linear search per due row in its generic plan.
#[derive(Debug, Default)]
pub(crate) struct Excluded {
    pub subscribers: Vec<String>,
    pub origins: Vec<Origin>,
}

impl Excluded {
    /// Every subscriber id to leave out, sorted: `subscribers` and `on_origins` (those the
    /// backend found on `origins`).
    pub fn ids(&self, on_origins: Vec<String>) -> Vec<String> {
        let mut ids = on_origins;
        ids.extend(self.subscribers.iter().cloned());
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

impl ClaimBudget {
    pub fn new(request: &ClaimRequest) -> Self {
        Self {
            now: request.now,
            default_cap: request.max_in_flight_per_subscriber,
            host_cap: host_cap_in_force(request.max_in_flight_per_host),
            retries_left: request.max_retries,
            excluded: request.exclude_subscribers.iter().cloned().collect(),
            subscribers: Default::default(),
            hosts: Default::default(),
            ramped_up: Default::default(),
        }
    }

    /// Counts what is in flight (`busy`: each subscriber with deliveries in flight, in every
    /// process, and how many) and answers what this claim can take none of, for the backend to
    /// leave out of its scan: subscribers excluded by the caller, rate-limited until later
    /// (`rate_limited`), or with as many in flight as they may have, and origins with as many
    /// in flight as the cap per host allows. Skipping their rows one by one instead would let a
    /// wall of them, ahead in due order, use up the scan and hide everyone else's (200
    /// subscribers behind one gateway at its cap would hide every other host). Open breakers
    /// are not here: their rows are deferred, which moves them out of the way for good.
    pub fn unclaimable<'a>(
        &mut self,
        busy: impl IntoIterator<Item = (Limits<'a>, u32)>,
        rate_limited: impl IntoIterator<Item = String>,
    ) -> Excluded {
        let mut full = Vec::new();
        let mut host_in_flight: HashMap<Origin, u32> = HashMap::new();
        for (limits, in_flight) in busy {
            self.note_ramp(&limits);
            let open = matches!(limits.breaker.state(self.now), BreakerState::Open { .. });
            if !open && in_flight >= limits.cap(self.now, self.default_cap) {
                full.push(limits.id.to_owned());
            }
            let n = match host_in_flight.get_mut(limits.origin.as_ref()) {
                Some(n) => n,
                None => host_in_flight
                    .entry(Origin::from_text(limits.origin))
                    .or_default(),
            };
            *n = n.saturating_add(in_flight);
        }
        if let Some(cap) = self.host_cap {
            self.hosts = host_in_flight
                .into_iter()
                .map(|(origin, n)| (origin, cap.saturating_sub(n)))
                .collect();
        }
        let mut subscribers: Vec<String> = full
            .into_iter()
            .chain(rate_limited)
            .chain(self.excluded.iter().cloned())
            .collect();
        subscribers.sort_unstable();
        subscribers.dedup();
        Excluded {
            subscribers,
            origins: self.full_hosts().cloned().collect(),
        }
    }

    /// Whether retries may still be taken: when not, the backend leaves them out of its scan.
    pub fn takes_retries(&self) -> bool {
        self.retries_left > 0
    }

    /// Keeps `s` among the subscribers whose slow start is over, if it is.
    fn note_ramp(&mut self, s: &Limits<'_>) {
        if let Some(cap) = s.ramped_up(self.now, self.default_cap) {
            self.ramped_up.insert(s.id.to_owned(), cap);
        }
    }

    /// `in_flight` is how many the subscriber has in flight before this claim.
    pub fn admit(&mut self, s: &Limits<'_>, in_flight: u32, attempts: u32) -> Admission {
        if !self.subscribers.contains_key(s.id) {
            self.note_ramp(s);
        }
        let now = self.now;
        let default_cap = self.default_cap;
        let budget = self
            .subscribers
            .entry(s.id.to_owned())
            .or_insert_with(|| SubscriberBudget {
                slots: s.cap(now, default_cap).saturating_sub(in_flight),
                next_at: s.rate_next_at,
                origin: Origin::from_text(s.origin.clone()),
            });
        if let BreakerState::Open { until } = s.breaker.state(now) {
            return Admission::Defer(until);
        }
        if budget.slots == 0
            || (attempts > 0 && self.retries_left == 0)
            || self.excluded.contains(s.id)
        {
            return Admission::Skip;
        }
        let host_slots = match self.host_cap {
            // Looked up before it is cloned: most rows' origins are in the map already.
            Some(cap) => Some(match self.hosts.get_mut(budget.origin.as_str()) {
                Some(left) => left,
                None => self.hosts.entry(budget.origin.clone()).or_insert(cap),
            }),
            None => None,
        };
        if host_slots.as_ref().is_some_and(|left| **left == 0) {
            return Admission::Skip;
        }
        if let Some(rate) = s.rate_limit_per_second {
            let at = budget.next_at.unwrap_or(now).max(now);
            if at > now {
                return Admission::Skip;
            }
            budget.next_at = Some(at.saturating_add(paced((1000.0 / rate).ceil())));
        }
        budget.slots -= 1;
        if let Some(left) = host_slots {
            *left -= 1;
        }
        if attempts > 0 {
            self.retries_left -= 1;
        }
        Admission::Take
    }

    /// Origins with no room left under the cap per host.
    fn full_hosts(&self) -> impl Iterator<Item = &Origin> {
        self.hosts
            .iter()
            .filter(|(_, left)| self.host_cap.is_some() && **left == 0)
            .map(|(origin, _)| origin)
    }

    /// Subscribers this claim has used up (no slot left, or no admission from the rate limiter
    /// before a later time): a further scan leaves their rows out.
    fn used_up(&self) -> impl Iterator<Item = &String> {
        self.subscribers
            .iter()
            .filter(|(_, budget)| self.exhausts(budget))
            .map(|(id, _)| id)
    }

    pub fn is_used_up(&self, id: &str) -> bool {
        self.subscribers
            .get(id)
            .is_some_and(|budget| self.exhausts(budget))
    }

    /// No slot left, no admission from the rate limiter before a later time, or a host at its
    /// cap.
    fn exhausts(&self, budget: &SubscriberBudget) -> bool {
        budget.slots == 0
            || budget.next_at.is_some_and(|n| n > self.now)
            || (self.host_cap.is_some() && self.hosts.get(&budget.origin) == Some(&0))
    }

    /// Slow starts to end, per subscriber: the backend clears the allowance where it is still
    /// at least the cap given (a completion meanwhile only grows it; an opening clears it).
    pub fn ramps_ended(&self) -> impl Iterator<Item = (&String, u32)> {
        self.ramped_up.iter().map(|(id, cap)| (id, *cap))
    }

    /// New rate-limiter times to persist, per subscriber.
    pub fn rate_updates(&self) -> impl Iterator<Item = (&String, UnixMs)> {
        self.subscribers
            .iter()
            .filter_map(|(id, budget)| budget.next_at.map(|n| (id, n)))
    }
}

/// The most due rows one scan of a claim looks at, so rows it passes over cannot make it slow.
/// Subscribers with no slot at all are not scanned ([`ClaimBudget::unclaimable`]); rows of
/// those a scan uses up are left out of the next one ([`ClaimPlan::widen`]).
pub(crate) fn scan_bound(limit: usize) -> usize {
    limit.saturating_mul(4).max(256)
}

/// The most due rows the scan of one tenant's share looks at (`rows`: what it was given): like
/// [`scan_bound`] in proportion, but with no floor of its own past a few rows, since one claim
/// scans many tenants (on PostgreSQL, fetching and locking each one's rows in one statement).
/// A tenant whose rows in it are all passed over is done for the claim; the fill in due order
/// may still take its rows.
pub(crate) fn share_scan_bound(rows: usize) -> usize {
    rows.saturating_mul(4).max(16)
}

/// Scans one claim makes at most in its fill in due order: the first, and those after
/// subscribers it used up.
const MAX_SCANS: usize = 4;

/// Due rows in a row a scan that reads row by row passes over (their subscribers used up by
/// this claim) before it stops and scans again without those subscribers. One subscriber's
/// deep backlog takes its slots in the first few rows and then fills the rest of the scan:
/// reading all of them to [`scan_bound`] cost a claim of 16 deliveries a thousand rows.
const PASSED_OVER_IN_A_ROW: usize = 64;

/// One due row as a claim sees it.
pub(crate) struct Candidate<'a> {
    pub key: i64,
    pub status: SubscriberStatus,
    pub limits: Limits<'a>,
    /// Its subscriber's deliveries in flight before this claim.
    pub in_flight: u32,
    /// Attempts it has spent.
    pub attempts: u32,
}

/// What a claim does with the due rows it looked at; the backend writes it.
pub(crate) struct ClaimPlan<T> {
    /// To lease, in due order: what the backend needs of each.
    pub take: Vec<T>,
    /// A paused subscriber's: off the due index until it resumes.
    pub hold: Vec<i64>,
    /// A revoked subscriber's: dead, `subscription_revoked`. Revocation kills them in its own
    /// transaction; one that raced it (a publish, a completion) dies here.
    pub revoked: Vec<i64>,
    /// Behind an open breaker: due again when it half-opens, a millisecond apart in due order
    /// (the n-th row of a subscriber this claim defers goes to its half-open time + n ms).
    /// Moved to one instant they would tie, and ties go by insertion order, which for retries
    /// is not due order: the probe and the slow start after it would take the wrong ones first.
    /// The rank is per claim: rows a later claim defers (those come due during the open
    /// period, a few per claim) start again at + 0, and only those ties go by insertion order;
    /// ranking them after the earlier ones would need a read of what is already deferred.
    pub defer: Vec<(i64, UnixMs)>,
    /// Per subscriber, how many rows this claim has deferred.
    deferred: HashMap<String, i64>,
    /// Every row looked at: a further scan leaves them out.
    pub seen: Vec<i64>,
    limit: usize,
    /// How many `take` may hold when the current scan ends: the claim's limit, or for the scan
    /// of a tenant's share what was taken before it plus that share.
    target: usize,
    /// What `take` held when the current scan began.
    taken_before_scan: usize,
    /// The most rows the current scan looks at.
    bound: usize,
    looked_at: usize,
    /// Rows of used-up subscribers passed over since the last row this claim did something
    /// with, and how many of them end a scan.
    passed_over: usize,
    wall: usize,
    /// Whether the current scan reads retries (the budget had retry slots when it began).
    retries_in_scan: bool,
    scans: usize,
}

impl<T> ClaimPlan<T> {
    /// For a backend that reads a scan's rows one at a time and can stop reading: a scan ends
    /// at a wall of [`PASSED_OVER_IN_A_ROW`] rows of subscribers this claim used up.
    pub fn row_by_row(limit: usize, budget: &ClaimBudget) -> Self {
        Self::with_wall(limit, budget, PASSED_OVER_IN_A_ROW)
    }

    /// For a backend whose scan fetched (and locked) all its rows in one statement: each of
    /// them is considered, since stopping early would save nothing.
    pub fn fetched(limit: usize, budget: &ClaimBudget) -> Self {
        Self::with_wall(limit, budget, usize::MAX)
    }

    fn with_wall(limit: usize, budget: &ClaimBudget, wall: usize) -> Self {
        Self {
            take: Vec::with_capacity(limit),
            hold: Vec::new(),
            revoked: Vec::new(),
            defer: Vec::new(),
            deferred: HashMap::new(),
            seen: Vec::new(),
            limit,
            target: limit,
            taken_before_scan: 0,
            bound: scan_bound(limit),
            looked_at: 0,
            passed_over: 0,
            wall,
            retries_in_scan: budget.takes_retries(),
            scans: 1,
        }
    }

    /// Begins the scan of one tenant's due rows for its share (`fair_share.rs`): it takes at
    /// most `rows` more (what the sharing gave it, lent rows included: past the claim's limit
    /// when so), and looks at [`share_scan_bound`] rows at most. It is not widened: a tenant it
    /// comes up short for is done for the claim.
    pub fn begin_share(&mut self, rows: usize) {
        self.begin_scan(self.take.len().saturating_add(rows));
        self.bound = share_scan_bound(rows);
    }

    /// How many rows the current scan took.
    pub fn taken_in_scan(&self) -> usize {
        self.take.len() - self.taken_before_scan
    }

    /// After the tenants' shares: the fill in due order, up to the claim's limit, widened as
    /// [`ClaimPlan::widen`] says.
    pub fn begin_fill(&mut self, budget: &ClaimBudget) {
        self.begin_scan(self.limit);
        self.bound = scan_bound(self.limit);
        self.retries_in_scan = budget.takes_retries();
        self.scans = 1;
    }

    fn begin_scan(&mut self, target: usize) {
        self.target = target;
        self.taken_before_scan = self.take.len();
        self.looked_at = 0;
        self.passed_over = 0;
    }

    /// Whether the fill can take nothing more: the claim's limit is reached (by the shares
    /// alone, maybe, and past it when they borrowed).
    pub fn is_full(&self) -> bool {
        self.take.len() >= self.limit
    }

    /// After a scan: whether to scan again. A scan that stopped at its bound, or at a wall,
    /// with room left may have run into the rows of subscribers it used up (one with a deep
    /// backlog takes its slots, then its other rows fill the scan): they join `excluded`, and
    /// the next scan looks past them, leaving out the rows already seen. Likewise when the
    /// retry budget ran out during the scan: the next one leaves retries out.
    pub fn widen(&mut self, budget: &ClaimBudget, excluded: &mut Excluded) -> bool {
        let stopped_short = self.take.len() < self.target && self.reached_a_bound();
        if !stopped_short || self.scans >= MAX_SCANS {
            return false;
        }
        let retries_ran_out = self.retries_in_scan && !budget.takes_retries();
        let grew = extend_sorted(&mut excluded.subscribers, budget.used_up())
            | extend_sorted(&mut excluded.origins, budget.full_hosts());
        if !grew && !retries_ran_out {
            return false;
        }
        self.scans += 1;
        self.begin_scan(self.target);
        self.retries_in_scan = budget.takes_retries();
        true
    }

    fn reached_a_bound(&self) -> bool {
        self.looked_at >= self.bound || self.passed_over >= self.wall
    }

    /// Decides one due row (`row`: what the backend keeps of it to lease it). False once the
    /// scan has taken what it may (the claim is full, or a tenant's scan has its share), has
    /// looked at its bound of rows or met its wall: the backend stops reading. Only rows of
    /// subscribers this claim used up make a wall (a further scan leaves them out); a retry
    /// passed over for want of retry slots does not.
    pub fn consider(&mut self, budget: &mut ClaimBudget, c: Candidate<'_>, row: T) -> bool {
        self.looked_at += 1;
        let passed_over = std::mem::take(&mut self.passed_over);
        self.seen.push(c.key);
        match c.status {
            SubscriberStatus::Paused => self.hold.push(c.key),
            SubscriberStatus::Revoked => self.revoked.push(c.key),
            SubscriberStatus::Active => match budget.admit(&c.limits, c.in_flight, c.attempts) {
                Admission::Take => self.take.push(row),
                Admission::Skip if budget.is_used_up(c.limits.id) => {
                    self.passed_over = passed_over + 1
                }
                Admission::Skip => self.passed_over = passed_over,
                Admission::Defer(until) => {
                    let rank = self.deferred.entry(c.limits.id.to_owned()).or_default();
                    self.defer.push((c.key, until.saturating_add(*rank)));
                    *rank += 1;
                }
            },
        }
        self.take.len() < self.target && !self.reached_a_bound()
    }
}

/// Adds `more` to the sorted `list`; answers whether it grew.
fn extend_sorted<'a, T: Ord + Clone + 'a>(
    list: &mut Vec<T>,
    more: impl Iterator<Item = &'a T>,
) -> bool {
    let before = list.len();
    list.extend(more.cloned());
    list.sort_unstable();
    list.dedup();
    list.len() > before
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Cow<'static, str> {
        Cow::Borrowed("https://gateway.example")
    }

    fn request(limit: usize) -> ClaimRequest {
        ClaimRequest {
            now: 1_000,
            limit,
            slots: limit,
            lend: 0,
            lease_ms: 10_000,
            max_in_flight_per_subscriber: 2,
            max_in_flight_per_host: 0,
            max_retries: usize::MAX,
            exclude_subscribers: Vec::new(),
            window_ended_for_start: i64::MIN,
        }
    }

    fn candidate(key: i64, id: &str, status: SubscriberStatus) -> Candidate<'_> {
        Candidate {
            key,
            status,
            limits: Limits::in_flight_bound(id, origin(), None, Default::default()),
            in_flight: 0,
            attempts: 0,
        }
    }

    /// Feeds `plan` due rows of one subscriber until it stops reading; answers how many it
    /// read, the last included.
    fn read_until_stopped(
        plan: &mut ClaimPlan<i64>,
        budget: &mut ClaimBudget,
        id: &str,
        status: SubscriberStatus,
    ) -> usize {
        let passed = (0..10_000)
            .take_while(|&k| plan.consider(budget, candidate(k, id, status), k))
            .count();
        passed + 1
    }

    #[test]
    fn a_plan_takes_within_caps_holds_the_paused_and_kills_the_revoked() {
        let req = request(10);
        let mut budget = ClaimBudget::new(&req);
        let mut plan = ClaimPlan::row_by_row(req.limit, &budget);
        use SubscriberStatus::*;
        for (key, id, status) in [
            (1, "a", Active),
            (2, "a", Active),
            (3, "a", Active), // past a's cap of 2
            (4, "p", Paused),
            (5, "r", Revoked),
            (6, "b", Active),
        ] {
            assert!(plan.consider(&mut budget, candidate(key, id, status), key));
        }
        assert_eq!(plan.take, [1, 2, 6]);
        assert_eq!((plan.hold, plan.revoked), (vec![4], vec![5]));
        let open = hookline_policy::Breaker {
            open_until: Some(5_000),
            ..Default::default()
        };
        let mut plan = ClaimPlan::row_by_row(10, &budget);
        for key in [7, 8] {
            let behind_breaker = Candidate {
                limits: Limits::in_flight_bound("o", origin(), None, open),
                ..candidate(key, "o", Active)
            };
            plan.consider(&mut budget, behind_breaker, key);
        }
        // A millisecond apart, in the order they came (due order).
        assert_eq!(plan.defer, [(7, 5_000), (8, 5_001)]);
    }

    #[test]
    fn a_plan_stops_when_full_or_after_its_scan_bound() {
        let req = request(2);
        let mut budget = ClaimBudget::new(&req);
        let mut plan = ClaimPlan::row_by_row(2, &budget);
        assert!(plan.consider(&mut budget, candidate(1, "a", SubscriberStatus::Active), 1));
        assert!(!plan.consider(&mut budget, candidate(2, "b", SubscriberStatus::Active), 2));
        // Rows it passes over count too: a subscriber at its cap cannot make a claim slow.
        let mut budget = ClaimBudget::new(&req);
        let mut plan = ClaimPlan::<i64>::row_by_row(2, &budget);
        let read = read_until_stopped(&mut plan, &mut budget, "p", SubscriberStatus::Paused);
        assert_eq!(read, scan_bound(2));
    }

    #[test]
    fn a_wall_of_one_used_up_subscriber_ends_the_scan_early_and_is_left_out_of_the_next() {
        // One subscriber with a deep backlog (cap 2) ahead of another's rows.
        let req = request(100);
        let mut budget = ClaimBudget::new(&req);
        let mut plan = ClaimPlan::row_by_row(req.limit, &budget);
        let read = read_until_stopped(&mut plan, &mut budget, "deep", SubscriberStatus::Active);
        // Two taken, then the wall: far fewer rows read than the scan bound allows.
        assert_eq!(plan.take, [0, 1]);
        assert_eq!(read, 2 + PASSED_OVER_IN_A_ROW);
        assert!(read < scan_bound(req.limit));
        let mut excluded = Excluded::default();
        assert!(plan.widen(&budget, &mut excluded));
        assert_eq!(excluded.subscribers, ["deep"]);
        // The next scan reads past it: another subscriber's rows are taken again.
        assert!(plan.consider(
            &mut budget,
            candidate(20_000, "other", SubscriberStatus::Active),
            20_000
        ));
        assert_eq!(plan.take, [0, 1, 20_000]);
        // A scan that ran out of rows before any bound does not scan again.
        assert!(!plan.widen(&budget, &mut excluded));
    }

    #[test]
    fn retries_passed_over_for_want_of_retry_slots_make_no_wall_and_no_hidden_first_attempt() {
        // One retry slot; due retries of many subscribers ahead of a first attempt.
        let req = ClaimRequest {
            max_retries: 1,
            ..request(10)
        };
        fn retry(key: i64, id: &str) -> Candidate<'_> {
            Candidate {
                attempts: 1,
                ..candidate(key, id, SubscriberStatus::Active)
            }
        }
        let ids: Vec<String> = (0..300).map(|i| format!("r{i}")).collect();
        let mut budget = ClaimBudget::new(&req);
        let mut plan = ClaimPlan::row_by_row(req.limit, &budget);
        for (key, id) in (0..).zip(ids.iter().take(100)) {
            assert!(plan.consider(&mut budget, retry(key, id), key));
        }
        assert!(plan.consider(
            &mut budget,
            candidate(100, "first", SubscriberStatus::Active),
            100
        ));
        assert_eq!(plan.take, [0, 100]);
        // A longer run of them reaches the scan bound: the next scan leaves retries out.
        let mut budget = ClaimBudget::new(&req);
        let mut plan = ClaimPlan::row_by_row(req.limit, &budget);
        let read = (0..)
            .zip(&ids)
            .take_while(|(key, id)| plan.consider(&mut budget, retry(*key, id), *key))
            .count();
        assert_eq!(read + 1, scan_bound(req.limit));
        let mut excluded = Excluded::default();
        assert!(plan.widen(&budget, &mut excluded));
        assert!(!budget.takes_retries());
    }

    #[test]
    fn a_share_s_scan_stops_at_its_share_and_the_fill_goes_on_to_the_limit() {
        let req = request(10);
        let mut budget = ClaimBudget::new(&req);
        let mut plan = ClaimPlan::row_by_row(req.limit, &budget);
        plan.begin_share(3);
        let ids = ["a", "b", "c", "d", "e"];
        let read = (0..)
            .zip(ids)
            .take_while(|(k, id)| {
                plan.consider(&mut budget, candidate(*k, id, SubscriberStatus::Active), *k)
            })
            .count();
        assert_eq!((read + 1, plan.taken_in_scan()), (3, 3));
        // A scan that passes over every row it may look at ends there, short of its share.
        plan.begin_share(2);
        let passed = read_until_stopped(&mut plan, &mut budget, "a", SubscriberStatus::Paused);
        assert_eq!((passed, plan.taken_in_scan()), (share_scan_bound(2), 0));
        plan.begin_fill(&budget);
        for (k, id) in (10..).zip(ids) {
            plan.consider(&mut budget, candidate(k, id, SubscriberStatus::Active), k);
        }
        assert_eq!(plan.take, [0, 1, 2, 10, 11, 12, 13, 14]);
        assert!(!plan.is_full());
    }

    #[test]
    fn a_backend_that_fetched_its_scan_considers_every_row_of_it() {
        let req = request(100);
        let mut budget = ClaimBudget::new(&req);
        let mut plan = ClaimPlan::fetched(req.limit, &budget);
        let read = read_until_stopped(&mut plan, &mut budget, "deep", SubscriberStatus::Active);
        assert_eq!(read, scan_bound(req.limit));
    }
}
