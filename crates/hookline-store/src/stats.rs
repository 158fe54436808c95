//! What the queue gauges read: which due deliveries a claim could take now, and what the rest
//! wait on.

use std::collections::HashMap;

use hookline_policy::UnixMs;

use crate::*;

/// The due deliveries of one subscriber, as the queue gauges read them.
pub(crate) struct DueGroup {
    pub oldest_due: UnixMs,
    /// The oldest due first attempt, if any.
    pub oldest_first_attempt: Option<UnixMs>,
    pub state: WaitState,
}

/// Splits the due deliveries into those a claim could take now and those waiting on
/// something ([`WaitState::waiting_on`], the rule the window sweep records), with the held
/// deliveries of paused subscribers: the oldest ready first attempt, and the oldest waiting
/// delivery per cause.
pub(crate) fn ready_and_waiting(
    groups: impl IntoIterator<Item = DueGroup>,
    oldest_paused: Option<UnixMs>,
    oldest_ordered: Option<UnixMs>,
    now: UnixMs,
) -> (Option<UnixMs>, Vec<(WaitingOn, UnixMs)>) {
    let mut ready = None;
    let mut waiting: HashMap<WaitingOn, UnixMs> = Default::default();
    for g in groups {
        match g.state.waiting_on(now) {
            None => ready = earliest([ready, g.oldest_first_attempt]),
            Some(cause) => {
                let at = waiting.entry(cause).or_insert(g.oldest_due);
                *at = (*at).min(g.oldest_due);
            }
        }
    }
    if let Some(at) = oldest_paused {
        waiting.insert(WaitingOn::Paused, at);
    }
    if let Some(at) = oldest_ordered {
        waiting.insert(WaitingOn::Ordering, at);
    }
    let mut waiting: Vec<(WaitingOn, UnixMs)> = waiting.into_iter().collect();
    waiting.sort_by_key(|(cause, _)| cause.as_str());
    (ready, waiting)
}

/// Deliveries in flight per subscriber and per origin (the sum over the subscribers pointing
/// there), as a claim counts them: what tells a due delivery waiting on its subscriber's cap,
/// or on its host's, from one a claim could take.
#[derive(Default)]
pub(crate) struct InFlight {
    subscribers: HashMap<String, u32>,
    origins: HashMap<Origin, u32>,
}

impl InFlight {
    /// Counts `n` in flight for `subscriber`, whose URL is on `origin`.
    pub fn add(&mut self, subscriber: &str, origin: &Origin, n: u32) {
        let mine = self.subscribers.entry(subscriber.to_owned()).or_default();
        *mine = mine.saturating_add(n);
        let host = match self.origins.get_mut(origin) {
            Some(host) => host,
            None => self.origins.entry(origin.clone()).or_default(),
        };
        *host = host.saturating_add(n);
    }

    pub fn of_subscriber(&self, id: &str) -> u32 {
        self.subscribers.get(id).copied().unwrap_or(0)
    }

    pub fn of_origin(&self, origin: &Origin) -> u32 {
        self.origins.get(origin).copied().unwrap_or(0)
    }
}

/// The earliest of several optional times.
pub(crate) fn earliest(times: impl IntoIterator<Item = Option<UnixMs>>) -> Option<UnixMs> {
    times.into_iter().flatten().min()
}
