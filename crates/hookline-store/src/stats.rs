//! What the queue gauges read: which due deliveries a claim could take now, and what the rest
//! wait on.

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
    now: UnixMs,
) -> (Option<UnixMs>, Vec<(WaitingOn, UnixMs)>) {
    let mut ready = None;
    let mut waiting: std::collections::HashMap<WaitingOn, UnixMs> = Default::default();
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
    let mut waiting: Vec<(WaitingOn, UnixMs)> = waiting.into_iter().collect();
    waiting.sort_by_key(|(cause, _)| cause.as_str());
    (ready, waiting)
}

/// The earliest of several optional times.
pub(crate) fn earliest(times: impl IntoIterator<Item = Option<UnixMs>>) -> Option<UnixMs> {
    times.into_iter().flatten().min()
}
