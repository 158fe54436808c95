//! A count per subscriber, as the writer keeps them in memory (deliveries in flight, deliveries
//! waiting): no entry for a count of zero, so that the subscribers with some are the keys.

use std::collections::HashMap;

#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub(super) struct PerSubscriber(HashMap<String, u32>);

impl PerSubscriber {
    pub fn of(&self, subscriber_id: &str) -> u32 {
        self.0.get(subscriber_id).copied().unwrap_or(0)
    }

    /// The subscribers with a count above zero, and their counts.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, u32)> {
        self.0.iter().map(|(id, n)| (id.as_str(), *n))
    }

    /// In subscriber order, for messages and tests.
    #[cfg(any(test, feature = "testing"))]
    pub fn sorted(&self) -> Vec<(String, u32)> {
        let mut counts: Vec<_> = self.0.iter().map(|(id, n)| (id.clone(), *n)).collect();
        counts.sort();
        counts
    }

    /// Moves `subscriber_id`'s count by `delta`, kept within `0..=u32::MAX` (a count wrapped
    /// to zero would be too low), and answers the change made: what undoes it exactly.
    pub fn change(&mut self, subscriber_id: &str, delta: i64) -> i64 {
        let before = self.of(subscriber_id);
        let after = (i64::from(before) + delta).clamp(0, i64::from(u32::MAX)) as u32;
        if after == 0 {
            self.0.remove(subscriber_id);
        } else if let Some(count) = self.0.get_mut(subscriber_id) {
            *count = after;
        } else {
            self.0.insert(subscriber_id.to_owned(), after);
        }
        i64::from(after) - i64::from(before)
    }
}

impl FromIterator<(String, u32)> for PerSubscriber {
    fn from_iter<I: IntoIterator<Item = (String, u32)>>(counts: I) -> Self {
        Self(counts.into_iter().filter(|(_, n)| *n > 0).collect())
    }
}
