//! How many deliveries the last event of each type fanned out to: a publish learns before it
//! runs whether it will be large, and so whether to ask the writer for a commit of its own
//! ([`Turn::Ahead`]). A type's subscribers change rarely, so its last fan-out predicts the next.

use std::collections::HashMap;
use std::sync::Mutex;

use super::writer::Turn;

/// A publish of at least this many deliveries goes ahead of the other writes waiting with it:
/// inserting them takes several milliseconds, as long as the dispatcher's work it would
/// otherwise share a commit with.
pub(super) const LARGE_FAN_OUT: u64 = 500;

/// Event types remembered at most (types are the publishers' strings); past it, forgotten all
/// at once, and the next publish of each type goes in order until it is seen again.
const TYPES_KEPT: usize = 4096;

#[derive(Default)]
pub(super) struct FanOuts(Mutex<HashMap<String, u64>>);

impl FanOuts {
    pub fn turn(&self, event_type: &str) -> Turn {
        let last = self.lock().get(event_type).copied().unwrap_or(0);
        if last >= LARGE_FAN_OUT {
            Turn::Ahead
        } else {
            Turn::InOrder
        }
    }

    /// An event of `event_type` was accepted with `deliveries`.
    pub fn accepted(&self, event_type: &str, deliveries: u64) {
        let mut kept = self.lock();
        if let Some(last) = kept.get_mut(event_type) {
            *last = deliveries;
            return;
        }
        if kept.len() >= TYPES_KEPT {
            kept.clear();
        }
        kept.insert(event_type.to_owned(), deliveries);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        // A panic while holding it cannot leave the map half-changed.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_goes_ahead_after_a_large_fan_out_and_back_in_order_after_a_small_one() {
        let f = FanOuts::default();
        assert_eq!(
            f.turn("shipment.out_for_delivery"),
            Turn::InOrder,
            "never seen"
        );
        f.accepted("shipment.out_for_delivery", LARGE_FAN_OUT);
        f.accepted("invoice.paid", LARGE_FAN_OUT - 1);
        assert_eq!(f.turn("shipment.out_for_delivery"), Turn::Ahead);
        assert_eq!(f.turn("invoice.paid"), Turn::InOrder);
        f.accepted("shipment.out_for_delivery", 3);
        assert_eq!(f.turn("shipment.out_for_delivery"), Turn::InOrder);
    }

    #[test]
    fn at_most_so_many_types_are_kept() {
        let f = FanOuts::default();
        for i in 0..TYPES_KEPT + 10 {
            f.accepted(&format!("type.{i}"), LARGE_FAN_OUT);
        }
        assert!(f.lock().len() <= TYPES_KEPT);
        assert_eq!(f.turn(&format!("type.{}", TYPES_KEPT + 9)), Turn::Ahead);
    }
}
