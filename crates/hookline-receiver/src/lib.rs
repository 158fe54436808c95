#![doc = include_str!("../README.md")]

#[cfg(feature = "axum")]
mod axum;
mod dedup;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
mod receive;
#[cfg(feature = "sqlite")]
mod sqlite;
mod verify;

#[cfg(feature = "axum")]
pub use crate::axum::{Delivery, Rejection};
pub use dedup::{
    Claim, Claimed, DedupStore, Outcome, OutcomeError, StoreError, MAX_ID_BYTES, MAX_OUTCOME_BODY,
};
pub use memory::{MemoryClaim, MemoryStore};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresClaim, PostgresStore};
pub use receive::{Event, NewDelivery, Receiver, Refusal};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteClaim, SqliteStore};
pub use verify::{
    Clock, Secret, SecretError, Signed, SystemClock, Verifier, VerifyError, DEFAULT_TOLERANCE,
    MAX_SIGNATURE_ENTRIES, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP,
};

/// The table name each SQL store keeps its seen ids in.
pub const SEEN_TABLE: &str = "hookline_receiver_seen";

/// The versions of the database crates a claim's connection comes from.
#[cfg(feature = "postgres")]
pub use deadpool_postgres;
#[cfg(feature = "sqlite")]
pub use rusqlite;
#[cfg(feature = "postgres")]
pub use tokio_postgres;
