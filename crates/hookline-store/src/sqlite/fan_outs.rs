//! Which event types fanned out large the last time: a publish learns before it runs whether it
//! will be large, and so whether to ask the writer for a commit of its own ([`Turn::Ahead`]). A
//! type's subscribers change rarely, so its last fan-out predicts the next.

use std::collections::HashSet;
use std::sync::Mutex;

use super::writer::Turn;

/// A publish of at least this many deliveries goes ahead of the other writes waiting with it:
/// inserting them takes several milliseconds, as long as the dispatcher's work it would
/// otherwise share a commit with.
pub(super) const LARGE_FAN_OUT: u64 = 500;

/// Large types remembered at most (types are the publishers' strings); past it, forgotten all
/// at once, and the next publish of each goes in order until it is seen again.
const TYPES_KEPT: usize = 4096;

/// The event types whose last accepted event fanned out to [`LARGE_FAN_OUT`] or more.
#[derive(Default)]
pub(super) struct FanOuts(Mutex<HashSet<String>>);

impl FanOuts {
    pub fn turn(&self, event_type: &str) -> Turn {
        if self.lock().contains(event_type) {
            Turn::Ahead
        } else {
            Turn::InOrder
        }
    }

    /// An event of `event_type` was accepted with `deliveries`.
    pub fn accepted(&self, event_type: &str, deliveries: u64) {
        let mut large = self.lock();
        if deliveries < LARGE_FAN_OUT {
            large.remove(event_type);
            return;
        }
        if large.contains(event_type) {
            return;
        }
        if large.len() >= TYPES_KEPT {
            large.clear();
        }
        large.insert(event_type.to_owned());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // A panic while holding it cannot leave the set half-changed.
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

    /// The store's publish keeps what it learns: a large fan-out sends the type's next
    /// publish ahead, a small one sends it back in order.
    #[tokio::test]
    async fn a_publish_learns_whether_its_type_goes_ahead() {
        use crate::sqlite::SqliteStore;
        use crate::*;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hookline.db");
        let store = std::sync::Arc::new(
            SqliteStore::open(path.to_str().unwrap(), &OpenOptions::default())
                .await
                .unwrap(),
        );
        let subscriber = |id: String, types: Vec<String>| NewSubscriber {
            tenant_id: None,
            url: format!("http://127.0.0.1:9/{id}"),
            id,
            event_types: types,
            secret: "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0".into(),
            max_in_flight: None,
            rate_limit_per_second: None,
            payload_version: None,
            headers: SubscriberHeaders::default(),
        };
        let mut creating = tokio::task::JoinSet::new();
        for i in 0..LARGE_FAN_OUT {
            let (store, wide) = (
                store.clone(),
                subscriber(format!("s{i}"), vec!["wide".into()]),
            );
            creating.spawn(async move { store.create_subscriber(wide, 0).await });
        }
        while let Some(created) = creating.join_next().await {
            created.unwrap().unwrap();
        }
        assert_eq!(store.fan_outs.turn("wide"), Turn::InOrder, "not seen yet");
        store
            .publish(NewEvent::single("e1", "wide", "{}", 1), 0)
            .await
            .unwrap();
        assert_eq!(store.fan_outs.turn("wide"), Turn::Ahead);

        // Most of its subscribers are gone: the next fan-out is small.
        let mut revoking = tokio::task::JoinSet::new();
        for i in 1..LARGE_FAN_OUT {
            let store = store.clone();
            revoking.spawn(async move { store.revoke_subscriber(&format!("s{i}"), 1).await });
        }
        while let Some(revoked) = revoking.join_next().await {
            revoked.unwrap().unwrap();
        }
        store
            .publish(NewEvent::single("e2", "wide", "{}", 1), 2)
            .await
            .unwrap();
        assert_eq!(store.fan_outs.turn("wide"), Turn::InOrder);
    }
}
