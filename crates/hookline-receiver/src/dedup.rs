//! Deduplication on `webhook-id`: "record it and return the prior outcome for a duplicate".
//!
//! A sender delivers at least once: a retry after a lost answer, a dead letter replayed, a
//! resend after its crash all carry the `webhook-id` the receiver saw before. A store
//! [`claim`](DedupStore::claim)s an id before the handler runs: a duplicate gets the
//! [`Outcome`] recorded for it and the handler does not run; a new delivery gets a claim, the
//! handler does its side effect through it, and [`Claim::commit`] records the outcome with the
//! side effect, together. A claim dropped without a commit records nothing and undoes what was
//! done through it, so a failure the sender should retry is simply not committed.
//!
//! Two copies of one delivery arriving at once run the handler once: the second claim waits
//! until the first is committed (and then answers its outcome) or dropped (and then runs).

use std::future::Future;

/// The most bytes of an outcome's body a store records: an answer for the sender, not a
/// document.
pub const MAX_OUTCOME_BODY: usize = 4096;

/// What a handler answered a delivery, recorded with its id and answered again to duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    status: u16,
    body: String,
}

/// An outcome that cannot be recorded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OutcomeError {
    #[error("an outcome's status must be 200 to 599, not {0}")]
    Status(u16),
    #[error("an outcome's body is {0} bytes, more than the {MAX_OUTCOME_BODY} a store records")]
    BodyTooLong(usize),
}

impl Outcome {
    /// An answer of `status` (200 to 599) with `body` (at most [`MAX_OUTCOME_BODY`] bytes).
    pub fn new(status: u16, body: impl Into<String>) -> Result<Self, OutcomeError> {
        let body = body.into();
        if !(200..=599).contains(&status) {
            return Err(OutcomeError::Status(status));
        }
        if body.len() > MAX_OUTCOME_BODY {
            return Err(OutcomeError::BodyTooLong(body.len()));
        }
        Ok(Outcome { status, body })
    }

    pub fn status(&self) -> u16 {
        self.status
    }

    pub fn body(&self) -> &str {
        &self.body
    }

    /// An outcome as a store read it back: checked again, so a row edited by hand into
    /// something no handler could record is an error, not an answer.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub(crate) fn stored(status: i64, body: String) -> Result<Self, StoreError> {
        let status = u16::try_from(status).map_err(|_| OutcomeError::Status(u16::MAX))?;
        Ok(Self::new(status, body)?)
    }
}

/// What a claim on a `webhook-id` found.
#[derive(Debug)]
pub enum Claimed<C> {
    /// Never seen (or only by a claim that was dropped): run the handler, then commit.
    New(C),
    /// Seen and committed before: answer this again, run nothing.
    Duplicate(Outcome),
}

/// A store failed: nothing was recorded, and the delivery should be retried (the axum
/// extractor answers 503).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("a webhook-id must be 1 to 300 bytes without control characters")]
    InvalidId,
    #[error(transparent)]
    Outcome(#[from] OutcomeError),
    #[cfg(feature = "sqlite")]
    #[error("SQLite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[cfg(feature = "postgres")]
    #[error("PostgreSQL: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    #[cfg(feature = "postgres")]
    #[error("PostgreSQL pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[cfg(feature = "postgres")]
    #[error("PostgreSQL pool: {0}")]
    PoolSetup(#[from] deadpool_postgres::BuildError),
    #[error("the store's worker thread failed: {0}")]
    Worker(String),
}

/// The longest `webhook-id` a store takes (hookline's are at most 128 + 1 + 128 bytes and a
/// resend suffix; ids past this are refused rather than stored).
pub const MAX_ID_BYTES: usize = 300;

/// Refuses ids no sender makes, before they reach a store.
pub(crate) fn checked_id(id: &str) -> Result<&str, StoreError> {
    if id.is_empty() || id.len() > MAX_ID_BYTES || id.chars().any(char::is_control) {
        return Err(StoreError::InvalidId);
    }
    Ok(id)
}

/// Where seen `webhook-id`s and their outcomes are kept.
pub trait DedupStore: Send + Sync + 'static {
    /// What a new delivery's handler holds: its side effect goes through it.
    type Claim: Claim;

    /// Claims `id`: the recorded outcome of a duplicate, or a claim to run the handler under.
    /// Waits while another claim on the same id is open.
    fn claim(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Claimed<Self::Claim>, StoreError>> + Send;
}

/// A new delivery's claim on its id.
pub trait Claim: Send + 'static {
    /// Records `outcome` for the id, together with what was done through the claim, and
    /// returns it (to answer). On an error nothing was recorded or done.
    fn commit(self, outcome: Outcome) -> impl Future<Output = Result<Outcome, StoreError>> + Send;
}
