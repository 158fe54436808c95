//! The invariants, held against the store's own reads and the simulated network's log.

use std::collections::{BTreeMap, BTreeSet};

use hookline_policy::{DeadReason, Outcome, UnixMs};
use hookline_store::{Delivery, DeliveryFilter, DeliveryState};

use crate::process::Live;
use crate::{in_flight_keys, Sim, Violation};

/// Rows per page when the checks list deliveries.
const PAGE: u32 = 500;

/// After a claim: no subscriber that got a delivery in it has more in flight than its cap, and
/// no origin more than the cap per host. In flight counts what the store holds in flight:
/// the attempts under way and the lost ones not yet rescued.
pub(crate) fn caps(sim: &Sim, claimed_for: &BTreeSet<String>) -> Result<(), Violation> {
    let mut per_subscriber: BTreeMap<&str, u32> = BTreeMap::new();
    let mut per_origin: BTreeMap<&str, u32> = BTreeMap::new();
    let in_flight = in_flight_keys(sim);
    for subscriber in in_flight.values() {
        *per_subscriber.entry(subscriber).or_default() += 1;
        if let Some(s) = sim.subscriber(subscriber) {
            *per_origin.entry(&s.origin).or_default() += 1;
        }
    }
    // For each subscriber and ordering key at most one delivery is on its way, bar replays.
    let mut per_line: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    for (key, subscriber) in &in_flight {
        let Some(seen) = sim.network.by_key.get(key) else {
            continue;
        };
        let event = seen.webhook_id.split(':').next().unwrap_or_default();
        if sim.replayed.contains(&seen.webhook_id) {
            continue;
        }
        if let Some(ordering_key) = sim.ordering_keys.get(event) {
            let line = per_line.entry((subscriber, ordering_key)).or_default();
            line.push(&seen.webhook_id);
            if line.len() > 1 {
                return Err(sim.violation(
                    "at most one delivery per subscriber and ordering key on its way",
                    format!("{subscriber}, key {ordering_key}: {line:?} in flight"),
                ));
            }
        }
    }
    let host_cap = sim.settings.caps.max_in_flight_per_host;
    for id in claimed_for {
        let Some(s) = sim.subscriber(id) else {
            continue;
        };
        let cap = s
            .max_in_flight
            .unwrap_or(sim.settings.caps.max_in_flight_per_subscriber);
        let n = per_subscriber.get(id.as_str()).copied().unwrap_or(0);
        if n > cap {
            return Err(sim.violation(
                "never more in flight per subscriber than its cap",
                format!("{id}: {n} in flight, cap {cap}"),
            ));
        }
        let at_host = per_origin.get(s.origin.as_str()).copied().unwrap_or(0);
        if host_cap > 0 && at_host > host_cap {
            return Err(sim.violation(
                "never more in flight per host than max_in_flight_per_host",
                format!("{}: {at_host} in flight, cap {host_cap}", s.origin),
            ));
        }
    }
    Ok(())
}

/// After a pass: hanging destinations hold no slot. No attempt past its subscriber's slot
/// patience kept its slot when the lane would have taken it (a free place, or one to shed: the
/// one case `slots.rs` lets an attempt keep its slot is a lane full of attempts all within their
/// usual time); attempts of subscribers that have not answered yet hold at most the probation
/// share of the slots; never more attempts in the slots than slots, in the lane than places.
pub(crate) fn slots(sim: &Sim) -> Result<(), Violation> {
    let delivery = &sim.settings.delivery;
    let (in_lane, in_slots): (Vec<&Live>, Vec<&Live>) =
        sim.live.iter().partition(|l| l.slot.is_slow());
    if in_slots.len() > delivery.concurrency || in_lane.len() > delivery.slow_lane {
        return Err(sim.violation(
            "never more attempts under way than the slots and the slow lane",
            format!(
                "{} in slots of {}, {} in the lane of {}",
                in_slots.len(),
                delivery.concurrency,
                in_lane.len(),
                delivery.slow_lane
            ),
        ));
    }
    if let Some(first) = sim.process.refused_wrongly.first() {
        return Err(sim.violation(
            "an attempt past its subscriber's slot patience holds no slot while the lane has room",
            format!(
                "{} kept a slot ({} such refusals since the last pass, {} of {} places in the \
                 lane taken now)",
                first,
                sim.process.refused_wrongly.len(),
                in_lane.len(),
                delivery.slow_lane
            ),
        ));
    }
    let on_probation = in_slots.iter().filter(|l| l.on_probation).count();
    if on_probation > delivery.probation_slots() {
        return Err(sim.violation(
            "subscribers that have not answered hold at most the probation share of the slots",
            format!(
                "{on_probation} slots held by them, their share is {} of {}",
                delivery.probation_slots(),
                delivery.concurrency
            ),
        ));
    }
    Ok(())
}

/// Every delivery in `state`, oldest first.
async fn listed(sim: &Sim, state: Option<DeliveryState>) -> Result<Vec<Delivery>, Violation> {
    let mut all = Vec::new();
    let mut cursor = None;
    loop {
        let filter = DeliveryFilter {
            state,
            ..DeliveryFilter::default()
        };
        let page = sim
            .store
            .list_deliveries(filter, PAGE, cursor)
            .await
            .map_err(|e| sim.violation("store answers", format!("list_deliveries: {e}")))?;
        all.extend(page.items);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(all),
        }
    }
}

/// How long past its window's end a delivery may still be on its way: an attempt sent just
/// before the end runs to its timeout, a lost one until its lease runs out and a slot is free
/// for the rescue, and the dispatcher looks once per pass.
fn grace_ms(sim: &Sim) -> i64 {
    let s = &sim.settings;
    s.lease_ms + s.attempt_timeout_ms + 2 * s.max_advance_ms
}

/// After every step.
pub(crate) async fn step(sim: &Sim) -> Result<(), Violation> {
    // What is in flight in the store is exactly what the network carries or lost.
    let store_in_flight: BTreeSet<String> = listed(sim, Some(DeliveryState::InFlight))
        .await?
        .into_iter()
        .map(|d| d.id)
        .collect();
    let ours: BTreeSet<String> = in_flight_keys(sim)
        .keys()
        .filter_map(|key| sim.network.by_key.get(key))
        .map(|seen| seen.webhook_id.clone())
        .collect();
    if store_in_flight != ours {
        let extra: Vec<_> = store_in_flight.difference(&ours).collect();
        let missing: Vec<_> = ours.difference(&store_in_flight).collect();
        return Err(sim.violation(
            "in flight in the store is what the network carries or lost",
            format!("in flight only in the store: {extra:?}; only on the network: {missing:?}"),
        ));
    }
    // Nothing waits past its window (this pass's sweep ended it) and nothing is on its way
    // long past it. A retry this pass's completions scheduled was decided when its attempt
    // ended, inside the window, and committed after the sweep: the next sweep ends it. A full
    // disk may refuse the sweep: then it waits for room.
    let window = sim.settings.window_ms;
    let past_window = |id: &str, state: &str, window_start: UnixMs| {
        sim.violation(
            "every delivery ends within its window",
            format!(
                "{id} still {state} {} ms after its window ended",
                sim.now - window_start - window
            ),
        )
    };
    for d in listed(sim, Some(DeliveryState::Scheduled)).await? {
        let swept_by = (d.window_start + window).max(sim.disk_freed_at);
        if !sim.disk_full && swept_by <= sim.now && !sim.rescheduled.contains(&d.id) {
            return Err(past_window(&d.id, "scheduled", d.window_start));
        }
    }
    for id in &store_in_flight {
        let d = sim
            .store
            .get_delivery(id)
            .await
            .map_err(|e| sim.violation("store answers", format!("get_delivery {id}: {e}")))?;
        let end_by = (d.window_start + window).max(sim.disk_freed_at) + grace_ms(sim);
        if !sim.disk_full && end_by <= sim.now {
            return Err(past_window(&d.id, "in flight", d.window_start));
        }
    }
    Ok(())
}

/// After the drain: every accepted event's deliveries ended, and the store's attempts are the
/// network's.
pub(crate) async fn end(sim: &mut Sim) -> Result<(), Violation> {
    if !sim.live.is_empty() || !sim.shed.is_empty() || !sim.orphans.is_empty() {
        return Err(sim.violation(
            "the drain ends every attempt",
            format!(
                "{} under way, {} lost and not rescued",
                sim.live.len(),
                sim.orphans.len()
            ),
        ));
    }
    let all: BTreeMap<String, Delivery> = listed(sim, None)
        .await?
        .into_iter()
        .map(|d| (d.id.clone(), d))
        .collect();
    // Nothing acknowledged is lost: each accepted event has a delivery to each subscriber it
    // was for, and each ended (delivered, or dead with a reason).
    for event in &sim.published {
        let stored: BTreeSet<String> = all
            .values()
            .filter(|d| d.event_id == event.id)
            .map(|d| d.subscriber_id.clone())
            .collect();
        if stored != event.subscribers {
            return Err(sim.violation(
                "nothing acknowledged is lost",
                format!(
                    "event {} has deliveries to {stored:?}, was accepted for {:?}",
                    event.id, event.subscribers
                ),
            ));
        }
    }
    let grace = grace_ms(sim);
    let window = sim.settings.window_ms;
    for d in all.values() {
        let ended_at = match d.state {
            DeliveryState::Delivered => None,
            DeliveryState::Dead => match (d.dead_reason, d.dead_at) {
                (Some(_), Some(at)) => Some(at),
                _ => {
                    return Err(sim.violation(
                        "a dead delivery has a reason",
                        format!("{}: reason {:?}, at {:?}", d.id, d.dead_reason, d.dead_at),
                    ))
                }
            },
            state => {
                return Err(sim.violation(
                    "every delivery ends within its window",
                    format!("{} is {state:?} after the drain", d.id),
                ))
            }
        };
        if let Some(at) = ended_at {
            // A full disk refuses the completions and sweeps that would end it: then it ends
            // once the disk has room.
            let end_by = (d.window_start + window).max(sim.disk_freed_at) + grace;
            if at > end_by {
                return Err(sim.violation(
                    "every delivery ends within its window",
                    format!(
                        "{} died ({:?}, waiting on {:?}) {} ms after its window; attempts: {:?}",
                        d.id,
                        d.dead_reason,
                        d.waiting_on,
                        at - d.window_start - window,
                        d.attempt_history
                            .iter()
                            .map(|a| (a.started_at - crate::EPOCH, a.duration_ms, a.outcome))
                            .collect::<Vec<_>>()
                    ),
                ));
            }
        }
        if d.state == DeliveryState::Delivered {
            sim.summary.delivered += 1;
        } else {
            sim.summary.dead += 1;
            let reason = DeadReason::ALL
                .iter()
                .position(|r| Some(*r) == d.dead_reason);
            if let Some(slot) = reason.and_then(|i| sim.summary.dead_by_reason.get_mut(i)) {
                *slot += 1;
            }
        }
    }
    // The store recorded each request the network carried, the lost ones as `lost`.
    for seen in sim.network.by_key.values() {
        let Some(d) = all.get(&seen.webhook_id) else {
            return Err(sim.violation(
                "attempts in the store match the network",
                format!("{} was sent but is not in the store", seen.webhook_id),
            ));
        };
        let recorded = u32::try_from(d.attempt_history.len()).unwrap_or(u32::MAX);
        let lost = u32::try_from(
            d.attempt_history
                .iter()
                .filter(|a| a.outcome == Outcome::Lost)
                .count(),
        )
        .unwrap_or(u32::MAX);
        if recorded != seen.sent + seen.unsent || lost != seen.orphaned + seen.unsent {
            return Err(sim.violation(
                "attempts in the store match the network",
                format!(
                    "{}: the store recorded {recorded} attempts ({lost} lost), the network \
                     carried {} ({} lost with their worker) and {} claims died unsent",
                    d.id, seen.sent, seen.orphaned, seen.unsent
                ),
            ));
        }
    }
    for d in all.values() {
        if !d.attempt_history.is_empty()
            && !sim.network.by_key.values().any(|s| s.webhook_id == d.id)
        {
            return Err(sim.violation(
                "attempts in the store match the network",
                format!("{} has attempts the network never carried", d.id),
            ));
        }
    }
    sim.summary.steps = sim.step;
    Ok(())
}
