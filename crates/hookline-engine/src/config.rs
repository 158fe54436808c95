//! What the engine is configured with. The `hookline` crate reads these from its configuration
//! file (`[delivery]`), checks them, and hands them over as they are here.

use std::time::Duration;

/// The dispatcher's `[delivery]` settings.
#[derive(Debug, Clone)]
pub struct DeliveryConfig {
    /// Delivery slots: attempts in flight in this process, beside those in the slow lane.
    pub concurrency: usize,
    pub attempt_timeout: Duration,
    pub max_in_flight_per_subscriber: u32,
    /// Attempts in flight to one origin (scheme, host and port of the subscriber URL), across
    /// every subscriber pointing there and every worker: many subscribers behind one gateway
    /// must not add up to a flood when it recovers. 0: no such cap.
    pub max_in_flight_per_host: u32,
    /// The share of in-flight slots retries may never take: first attempts are not queued
    /// behind a backlog of retries.
    pub first_attempt_share: f64,
    /// An attempt in flight longer than this (or than 4x the subscriber's usual answer time)
    /// makes its subscriber a suspect: no new slot until it ends.
    pub slow_after: Duration,
    /// Attempts past that threshold give their slot back and wait here, up to this many; beyond
    /// it they keep their slot. See `slots.rs`.
    pub slow_lane: usize,
}

impl DeliveryConfig {
    /// The caps the dispatcher's claims apply, for the reads that must tell a delivery held
    /// back by one from a ready one (the queue gauges, the window sweep).
    pub fn in_flight_caps(&self) -> hookline_store::InFlightCaps {
        hookline_store::InFlightCaps {
            max_in_flight_per_subscriber: self.max_in_flight_per_subscriber,
            max_in_flight_per_host: self.max_in_flight_per_host,
        }
    }

    /// How many attempts in flight may be retries (at least one, so retries always progress).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // A share of concurrency.
    pub fn retry_slots(&self) -> usize {
        (((1.0 - self.first_attempt_share) * self.concurrency as f64).floor() as usize).max(1)
    }

    /// How many slots attempts of subscribers that have not answered yet may hold (at least
    /// one): an eighth, so that any number of new destinations that hang leave the rest to
    /// subscribers that answer. See `slots.rs`.
    pub fn probation_slots(&self) -> usize {
        (self.concurrency / 8).max(1)
    }
}
