//! The attempts this process has in flight per destination origin, for the operator: how many
//! origins are at `delivery.max_in_flight_per_host` (`hookline_hosts_at_cap`). The cap itself is
//! held by the store's claim (across every worker on PostgreSQL); this is what one process
//! sees of it, kept as attempts start and end so a scrape never walks the origins.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hookline_store::Origin;

#[derive(Debug)]
pub struct HostLoad {
    cap: u32,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    in_flight: HashMap<Origin, u32>,
    at_cap: usize,
}

impl HostLoad {
    /// `cap` 0: no cap, so no origin is ever at it.
    pub fn new(cap: u32) -> Arc<Self> {
        Arc::new(Self {
            cap,
            state: Mutex::default(),
        })
    }

    /// An attempt to `origin` started; it ends when the returned guard drops. Nothing is kept
    /// without a cap.
    pub fn started(self: &Arc<Self>, origin: &Origin) -> Option<InFlightAt> {
        if self.cap == 0 {
            return None;
        }
        let mut guard = self.state.lock().unwrap();
        let State { in_flight, at_cap } = &mut *guard;
        let n = match in_flight.get_mut(origin) {
            Some(n) => n,
            None => in_flight.entry(origin.clone()).or_default(),
        };
        *n += 1;
        if *n == self.cap {
            *at_cap += 1;
            crate::telemetry::hosts_at_cap(*at_cap);
        }
        Some(InFlightAt {
            load: self.clone(),
            origin: origin.clone(),
        })
    }
}

/// One attempt in flight to an origin.
#[derive(Debug)]
pub struct InFlightAt {
    load: Arc<HostLoad>,
    origin: Origin,
}

impl Drop for InFlightAt {
    fn drop(&mut self) {
        let mut guard = self.load.state.lock().unwrap();
        let State { in_flight, at_cap } = &mut *guard;
        let Some(n) = in_flight.get_mut(&self.origin) else {
            return;
        };
        if *n == self.load.cap {
            *at_cap -= 1;
            crate::telemetry::hosts_at_cap(*at_cap);
        }
        *n -= 1;
        if *n == 0 {
            in_flight.remove(&self.origin);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl HostLoad {
        fn at_cap(&self) -> usize {
            self.state.lock().unwrap().at_cap
        }
    }

    fn started(load: &Arc<HostLoad>, url: &str) -> Option<InFlightAt> {
        load.started(&Origin::of_url(url))
    }

    #[test]
    fn origins_at_their_cap_are_counted_as_attempts_start_and_end() {
        let load = HostLoad::new(2);
        let a1 = started(&load, "https://a.example");
        assert_eq!(load.at_cap(), 0);
        let a2 = started(&load, "https://a.example");
        let b = started(&load, "https://b.example");
        assert_eq!(load.at_cap(), 1);
        drop(a1);
        assert_eq!(load.at_cap(), 0);
        drop((a2, b));
        assert!(load.state.lock().unwrap().in_flight.is_empty());
        let off = HostLoad::new(0);
        assert!(
            started(&off, "https://a.example").is_none(),
            "no cap, nothing kept"
        );
        assert_eq!(off.at_cap(), 0);
    }
}
