//! The pure core of hookline: what an attempt's result means, how long to wait before the next
//! one, whether there is a next one at all, and what the whole schedule adds up to.
//!
//! Nothing here does I/O, reads a clock or draws random numbers: time is an argument and jitter
//! is a hash of the delivery id and the attempt number. (Its dependencies: `httpdate` parses
//! HTTP dates, `humantime` writes durations into messages, `thiserror` derives errors.) That keeps every decision reproducible
//! (a restart or a replay computes the same schedule) and lets property tests cover it.

mod breaker;
mod capacity;
mod classify;
mod cohort;
mod failing;
mod retry;
mod retry_after;
mod schedule;

pub use breaker::{Breaker, BreakerConfig, BreakerState};
pub use capacity::{
    drain_seconds, expected_attempts, rate_with_unanswered, retry_after_s, room, AdmissionLimits,
    BacklogWaits, DeferCause, Deferred, Demand, Drain, DrainTerm, Evidence, Measured, Refusal,
    Shown, WaitTerms, Window, SATURATED,
};
pub use classify::{AttemptResult, Classification, ClassificationError, Outcome};
pub use cohort::{compare_proportions, in_share, Difference, EVERYONE};
pub use failing::FailingStreak;
pub use retry::{duration_ms, Attempted, DeadReason, Jitter, PolicyError, RetryPolicy, Transition};
pub use retry_after::parse_retry_after;
pub use schedule::{NeverStarts, Schedule, ScheduleRow, WindowFit};

/// Milliseconds since the Unix epoch. Every persisted time in hookline uses this unit, so the
/// policy can do its arithmetic without caring which store or clock produced it.
pub type UnixMs = i64;
