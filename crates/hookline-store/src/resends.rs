//! The rules of a resend, whichever database holds the rows: its bounds, the ids of the
//! deliveries it makes, and the walk that selects its events. Backends fetch the pages of
//! events and write the rows; what is selected, and what each new delivery is called, is
//! decided here.
//!
//! A resend makes new deliveries of events already published, to one subscriber, each named
//! `<event id>:<subscriber id>:resend-<n>`, where `n` counts the resends of that event to that
//! subscriber (1, 2, ...): the id is the `webhook-id` it is sent with, so a receiver that
//! deduplicates by it takes a resend that an earlier attempt's id would have had it drop. A
//! resend's deliveries are named by its audit, and prune keeps them, so `n` never names a
//! delivery twice.

use hookline_policy::UnixMs;

use crate::*;

/// The most events one resend's selection reads, matching or not: the types are matched in
/// code ([`type_patterns::selects`]), so a range whose events are mostly of other types or
/// tenants stops here rather than walking the whole table. A resend that stops here selects what it found.
pub const MAX_RESEND_WALK: u64 = 100_000;
/// Events read per statement of the walk.
pub(crate) const RESEND_PAGE: u32 = 1_000;
/// The longest range of acceptance times a resend may name.
pub const MAX_RESEND_SPAN_MS: i64 = 31 * 24 * 3_600 * 1_000;
/// The most entries a resend's `event_types` may list.
pub const MAX_RESEND_TYPES: usize = 100;

/// What joins a delivery's event id and subscriber id to its resend number.
const RESEND_MARK: &str = ":resend-";

/// Refuses a resend's `limit`, pace or range outside their bounds, naming the field: the API
/// asks before it calls the store, and the store asks again.
pub fn check_resend(
    limit: u32,
    per_second: Option<f64>,
    since: UnixMs,
    until: UnixMs,
) -> Result<()> {
    check_replay(limit, per_second)?;
    if until <= since {
        return Err(StoreError::Invalid(
            "until must be after since: a resend selects events accepted at or after since and \
             before until"
                .into(),
        ));
    }
    if until.saturating_sub(since) > MAX_RESEND_SPAN_MS {
        return Err(StoreError::Invalid(format!(
            "since to until spans more than {} days: resend a long outage in several ranges",
            MAX_RESEND_SPAN_MS / (24 * 3_600 * 1_000)
        )));
    }
    Ok(())
}

pub(crate) fn validate_resend(req: &ResendRequest) -> Result<()> {
    check_resend(req.limit, req.per_second, req.since, req.until)?;
    if req.event_types.len() > MAX_RESEND_TYPES {
        return Err(StoreError::Invalid(format!(
            "event_types may list at most {MAX_RESEND_TYPES} types"
        )));
    }
    match &req.expected {
        Some(ids) if ids.is_empty() => Err(StoreError::Invalid(
            "expected_event_ids: lists no event; a resend held to a preview makes what the \
             preview showed"
                .into(),
        )),
        Some(ids) if ids.len() > req.limit as usize => Err(StoreError::Invalid(format!(
            "expected_event_ids: lists {} events, more than limit ({})",
            ids.len(),
            req.limit
        ))),
        _ => Ok(()),
    }
}

/// Refuses a resend to a revoked subscriber: revocation is final.
pub(crate) fn resendable(subscriber: &Subscriber) -> Result<()> {
    if subscriber.status == SubscriberStatus::Revoked {
        return Err(StoreError::Conflict(format!(
            "subscriber {:?} is revoked (revocation is final): nothing can be resent to it",
            subscriber.id
        )));
    }
    Ok(())
}

/// A new resend's id.
pub(crate) fn new_resend_id() -> String {
    format!("rsd_{:016x}", rand::random::<u64>())
}

/// Refuses a resend whose selection is not the one its preview showed (`expected`), before
/// anything is written.
pub(crate) fn resend_as_previewed(req: &ResendRequest, selected: &[ResendEvent]) -> Result<()> {
    let Some(expected) = &req.expected else {
        return Ok(());
    };
    if !selected
        .iter()
        .map(|c| c.id.as_str())
        .eq(expected.iter().map(String::as_str))
    {
        return Err(StoreError::Conflict(
            "the events this resend selects are no longer the ones previewed (the \
             subscriber's event types or pin changed, or events were accepted in the range \
             since): preview again"
                .into(),
        ));
    }
    Ok(())
}

/// The id of the `n`-th resend of event `event_id` to subscriber `subscriber_id`.
pub(crate) fn resend_delivery_id(event_id: &str, subscriber_id: &str, n: i64) -> String {
    format!("{event_id}:{subscriber_id}{RESEND_MARK}{n}")
}

/// Where the ids of the resends of event `event_id` to subscriber `subscriber_id` lie in the
/// order of ids: at or after the first, before the second.
pub(crate) fn resend_id_range(event_id: &str, subscriber_id: &str) -> (String, String) {
    let start = format!("{event_id}:{subscriber_id}{RESEND_MARK}");
    // '.' follows '-' (the mark's last character): past every id that starts with `start`.
    let end = format!("{}.", &start[..start.len() - 1]);
    (start, end)
}

/// Whether `part` is `resend-<n>`, what ends a resend's delivery id (any digits: a
/// subscriber id of that form is refused, so that no id reads both ways).
pub fn is_resend_suffix(part: &str) -> bool {
    part.strip_prefix(&RESEND_MARK[1..])
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The ways `id` reads as a delivery's name: `(event id, subscriber id, resend number)`, the
/// original delivery being number 0. Subscriber ids hold no `:`, so the last one ends the
/// event id of an original; a resend's id also reads as an original whose subscriber is named
/// `resend-<n>` (a subscriber id may be), so both readings are answered, the resend's first.
pub(crate) fn delivery_id_readings(id: &str) -> Vec<(&str, &str, i32)> {
    let mut readings = Vec::with_capacity(2);
    if let Some((base, n)) = id.rsplit_once(RESEND_MARK) {
        // Only as written here: digits without a leading zero.
        let written = !n.starts_with('0') && n.bytes().all(|b| b.is_ascii_digit());
        let number = n.parse::<i32>().ok().filter(|n| written && *n > 0);
        if let (Some(number), Some((event_id, subscriber_id))) = (number, base.rsplit_once(':')) {
            readings.push((event_id, subscriber_id, number));
        }
    }
    if let Some((event_id, subscriber_id)) = id.rsplit_once(':') {
        readings.push((event_id, subscriber_id, 0));
    }
    readings
}

/// An event a resend's walk read: when it was accepted, its id and type, and the payload
/// version the subscriber is sent (the highest at or below its pin, the latest when unpinned;
/// `None`: it is pinned below every version the event has).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResendCandidate {
    pub accepted_at: UnixMs,
    pub id: String,
    pub event_type: String,
    pub version: Option<i64>,
}

/// An event a resend selected, and the payload version its new delivery sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResendEvent {
    pub id: String,
    pub version: i64,
}

/// The walk of a resend's range, oldest event first, in pages: each page a backend reads
/// (events of the subscriber's tenant accepted in the range, after [`ResendWalk::next_page`]'s
/// position) goes through [`ResendWalk::read`], which keeps the events of types both the
/// subscriber and the request take. An event whose versions are all above the subscriber's pin
/// is left out: a delivery of it could only die. The walk ends when it has `limit` events (as
/// many as a preview showed, when held to one), when the range is read, or at
/// [`MAX_RESEND_WALK`] events read.
pub(crate) struct ResendWalk<'r> {
    subscriber_types: &'r [String],
    asked_types: &'r [String],
    want: usize,
    read: u64,
    after: (UnixMs, String),
    ended: bool,
    selected: Vec<ResendEvent>,
}

impl<'r> ResendWalk<'r> {
    pub fn new(req: &'r ResendRequest, subscriber: &'r Subscriber) -> Self {
        let want = req
            .expected
            .as_ref()
            .map_or(req.limit as usize, |ids| ids.len().min(req.limit as usize));
        Self {
            subscriber_types: &subscriber.event_types,
            asked_types: &req.event_types,
            want,
            read: 0,
            // Before every event accepted at `since`: ids are never empty.
            after: (req.since, String::new()),
            ended: false,
            selected: Vec::new(),
        }
    }

    /// The position the next page starts after (`accepted_at`, id) and how many events it
    /// reads; `None` once the walk is over.
    pub fn next_page(&self) -> Option<(UnixMs, String, u32)> {
        if self.ended || self.selected.len() >= self.want || self.read >= MAX_RESEND_WALK {
            return None;
        }
        let left = u32::try_from(MAX_RESEND_WALK - self.read).unwrap_or(u32::MAX);
        Some((self.after.0, self.after.1.clone(), RESEND_PAGE.min(left)))
    }

    /// Takes a page of `asked` events that the backend read after `next_page`'s position.
    pub fn read(&mut self, page: Vec<ResendCandidate>, asked: u32) {
        if page.len() < asked as usize {
            self.ended = true;
        }
        for candidate in page {
            self.read += 1;
            self.after = (candidate.accepted_at, candidate.id.clone());
            let Some(version) = candidate.version else {
                continue;
            };
            // hookline's own events (test and operational ones) went to one subscriber each.
            let own = type_patterns::is_own_type(&candidate.event_type)
                || candidate.id.starts_with(type_patterns::OWN_PREFIX);
            let taken = !own
                && type_patterns::selects(self.subscriber_types, &candidate.event_type)
                && (self.asked_types.is_empty()
                    || type_patterns::selects(self.asked_types, &candidate.event_type));
            if taken {
                self.selected.push(ResendEvent {
                    id: candidate.id,
                    version,
                });
                if self.selected.len() >= self.want {
                    return;
                }
            }
        }
    }

    /// What the walk selected, oldest first.
    pub fn selected(self) -> Vec<ResendEvent> {
        self.selected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(limit: u32, event_types: &[&str]) -> ResendRequest {
        ResendRequest {
            subscriber_id: "s".into(),
            since: 1_000,
            until: 2_000,
            event_types: event_types.iter().map(|t| (*t).to_owned()).collect(),
            limit,
            per_second: None,
            requested_by: None,
            expected: None,
        }
    }

    fn subscriber(event_types: &[&str]) -> Subscriber {
        Subscriber {
            id: "s".into(),
            tenant_id: None,
            url: "https://example.com/".into(),
            origin: Origin::of_url("https://example.com/"),
            event_types: event_types.iter().map(|t| (*t).to_owned()).collect(),
            secret: String::new(),
            previous_secret: None,
            previous_secret_until: None,
            status: SubscriberStatus::Active,
            status_reason: None,
            created_at: 0,
            updated_at: 0,
            breaker: hookline_policy::Breaker::default(),
            failing: hookline_policy::FailingStreak::default(),
            max_in_flight: None,
            rate_limit_per_second: None,
            rate_next_at: None,
            payload_version: None,
            headers: SubscriberHeaders::default(),
        }
    }

    fn event(at: UnixMs, id: &str, event_type: &str) -> ResendCandidate {
        ResendCandidate {
            accepted_at: at,
            id: id.into(),
            event_type: event_type.into(),
            version: Some(1),
        }
    }

    #[test]
    fn resend_ids_read_back_and_lie_in_their_range() {
        let id = resend_delivery_id("e:1", "s", 12);
        assert_eq!(id, "e:1:s:resend-12");
        assert_eq!(
            delivery_id_readings(&id),
            vec![("e:1", "s", 12), ("e:1:s", "resend-12", 0)]
        );
        assert_eq!(delivery_id_readings("e:1:s"), vec![("e:1", "s", 0)]);
        assert_eq!(delivery_id_readings("nothing"), vec![]);
        for not_a_resend in [
            "e:s:resend-0",
            "e:s:resend-01",
            "e:s:resend-x",
            "e:s:resend--1",
        ] {
            assert_eq!(
                delivery_id_readings(not_a_resend).len(),
                1,
                "{not_a_resend}"
            );
        }
        let (start, end) = resend_id_range("e:1", "s");
        for n in [1, 2, 10, 999] {
            let id = resend_delivery_id("e:1", "s", n);
            assert!(start <= id && id < end, "{id}");
        }
        for other in ["e:1:s", "e:1:s2:resend-1", "e:1:t:resend-1", "e:1:s:resenc"] {
            assert!(
                !(start.as_str() <= other && other < end.as_str()),
                "{other}"
            );
        }
    }

    #[test]
    fn bounds_name_the_field() {
        assert!(check_resend(10, None, 1, 2).is_ok());
        for (limit, rate, since, until, says) in [
            (0, None, 1, 2, "limit"),
            (MAX_REPLAY + 1, None, 1, 2, "limit"),
            (10, Some(0.0), 1, 2, "per_second"),
            (10, None, 2, 2, "until"),
            (10, None, 0, MAX_RESEND_SPAN_MS + 1, "spans"),
        ] {
            let e = check_resend(limit, rate, since, until)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{e}");
        }
        let mut req = request(2, &[]);
        req.expected = Some(vec![]);
        assert!(validate_resend(&req).is_err());
        req.expected = Some(vec!["a".into(), "b".into(), "c".into()]);
        assert!(validate_resend(&req).is_err());
    }

    #[test]
    fn the_walk_keeps_types_both_take_and_stops_at_the_limit() {
        let req = request(2, &["a", "b"]);
        let sub = subscriber(&["b", "c"]);
        let mut walk = ResendWalk::new(&req, &sub);
        assert_eq!(walk.next_page(), Some((1_000, String::new(), RESEND_PAGE)));
        let mut unversioned = event(1_002, "e2", "b");
        unversioned.version = None;
        walk.read(
            vec![
                event(1_001, "e1", "a"),
                unversioned,
                event(1_003, "e3", "b"),
                event(1_004, "e4", "c"),
            ],
            4,
        );
        let (at, after, _) = walk.next_page().unwrap();
        assert_eq!(
            (at, after.as_str()),
            (1_004, "e4"),
            "the next page starts after the last read"
        );
        walk.read(vec![event(1_005, "e5", "b"), event(1_006, "e6", "b")], 4);
        assert_eq!(walk.next_page(), None, "the limit is reached");
        let ids: Vec<String> = walk.selected().into_iter().map(|c| c.id).collect();
        assert_eq!(ids, ["e3", "e5"]);
    }

    #[test]
    fn the_walk_ends_with_the_range_or_its_bound() {
        let req = request(10, &[]);
        let sub = subscriber(&[]);
        let mut walk = ResendWalk::new(&req, &sub);
        walk.read(vec![event(1_001, "e1", "x")], RESEND_PAGE);
        assert_eq!(
            walk.next_page(),
            None,
            "a short page is the end of the range"
        );
        assert_eq!(walk.selected().len(), 1);

        let sub = subscriber(&["never"]);
        let mut walk = ResendWalk::new(&req, &sub);
        let mut pages = 0;
        while let Some((at, _, asked)) = walk.next_page() {
            let page = (0..asked)
                .map(|i| event(at + 1 + i64::from(i), &format!("e{at}-{i}"), "x"))
                .collect();
            walk.read(page, asked);
            pages += 1;
        }
        assert_eq!(pages, MAX_RESEND_WALK / u64::from(RESEND_PAGE));
        assert!(walk.selected().is_empty());
    }

    #[test]
    fn a_walk_held_to_a_preview_selects_as_many_as_it_showed() {
        let mut req = request(10, &[]);
        req.expected = Some(vec!["e1".into()]);
        let sub = subscriber(&[]);
        let mut walk = ResendWalk::new(&req, &sub);
        walk.read(vec![event(1_001, "e1", "x"), event(1_002, "e2", "x")], 2);
        let selected = walk.selected();
        assert_eq!(selected.len(), 1);
        assert!(resend_as_previewed(&req, &selected).is_ok());
        req.expected = Some(vec!["e2".into()]);
        assert!(matches!(
            resend_as_previewed(&req, &selected),
            Err(StoreError::Conflict(_))
        ));
    }
}
