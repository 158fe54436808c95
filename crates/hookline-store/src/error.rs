//! What a store call can fail with: the caller's mistake (`NotFound`, `Conflict`, `Invalid`,
//! `OverCapacity`) or the store's own failure (`StorageFull`, `Backend`), which carries the
//! database's error itself so a caller can ask for its SQLSTATE instead of parsing text.

use std::sync::Arc;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    #[error("the store is shut down")]
    Closed,
    /// A tenant's quota refuses what was asked (the message names the quota): nothing stored.
    #[error("{0}")]
    OverQuota(String),
    /// A tenant's `max_events_per_second` refuses a publish now; it may come back after
    /// `retry_after_ms`. Nothing stored.
    #[error("tenant {tenant:?} publishes more than its max_events_per_second of {per_second}")]
    RateLimited {
        tenant: String,
        per_second: f64,
        retry_after_ms: i64,
    },
    /// A publish would fan out to more deliveries than admission allows now: nothing stored.
    #[error(
        "the event fans out to {deliveries} deliveries, more than the {room} admission allows now"
    )]
    OverCapacity { deliveries: u64, room: u64 },
    /// The database's storage is full (SQLite's `SQLITE_FULL`, PostgreSQL's `disk_full`):
    /// nothing of the write was stored, and the same write may go through once room is made.
    #[error("the database's storage is full: {0}")]
    StorageFull(BackendError),
    /// The database cannot be reached now: no connection could be had, one was lost, or the
    /// server is shutting down, starting or read-only (a standby not yet promoted). A write cut
    /// by it may or may not have committed; the same write sent again once it is back is
    /// answered as a retry.
    #[error("the database cannot be reached: {0}")]
    Unreachable(BackendError),
    #[error("storage failure: {0}")]
    Backend(BackendError),
}

impl StoreError {
    /// Whether the store itself failed to commit (a full disk, a failing database), rather
    /// than refusing what the caller asked: what makes a process unhealthy.
    pub fn is_storage_failure(&self) -> bool {
        matches!(
            self,
            StoreError::StorageFull(_) | StoreError::Unreachable(_) | StoreError::Backend(_)
        )
    }

    /// The SQLSTATE PostgreSQL answered with, when the store failed on one.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            StoreError::StorageFull(e) | StoreError::Unreachable(e) | StoreError::Backend(e) => {
                e.sqlstate()
            }
            _ => None,
        }
    }

    /// The store found something it cannot go on with (an impossible row, a task that died):
    /// no database error underneath.
    pub fn backend(message: impl Into<String>) -> Self {
        StoreError::Backend(BackendError::new(message))
    }

    /// The store failed on `source`.
    pub(crate) fn failed(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        StoreError::Backend(BackendError::new("").with_source(source))
    }

    /// The store failed on `source` while doing `context`.
    pub fn caused_by(
        context: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StoreError::Backend(BackendError::new(context).with_source(source))
    }
}

/// A failure of the database or of the store's own machinery. Its text carries the cause's
/// text, so one log line is complete; [`source`](std::error::Error::source) keeps the cause
/// itself (a `rusqlite::Error`, a `tokio_postgres::Error`) for whoever needs its type.
#[derive(Debug, Clone)]
pub struct BackendError {
    message: String,
    sqlstate: Option<String>,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Written out: the cause is the error inside the `Arc`, so that it downcasts to its type.
impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as _)
    }
}

impl BackendError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        BackendError {
            message: message.into(),
            sqlstate: None,
            source: None,
        }
    }

    /// Keeps `source` as the cause, its text after this error's own.
    pub(crate) fn with_source(
        mut self,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        self.message = if self.message.is_empty() {
            source.to_string()
        } else {
            format!("{}: {source}", self.message)
        };
        self.source = Some(Arc::new(source));
        self
    }

    /// The database answered `code` (its SQLSTATE) and `message`: the text says it all, the
    /// cause is kept for its type.
    pub(crate) fn answered(
        code: &str,
        message: &str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        BackendError {
            message: format!("{code}: {message}"),
            sqlstate: Some(code.to_owned()),
            source: Some(Arc::new(source)),
        }
    }

    /// The SQLSTATE PostgreSQL answered with (`55P03` lock not available, `40P01` deadlock...).
    pub fn sqlstate(&self) -> Option<&str> {
        self.sqlstate.as_deref()
    }

    /// The same failure, said while doing `what`.
    pub(crate) fn during(mut self, what: &str) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_error_keeps_its_cause_and_says_it() {
        let cause = std::io::Error::other("disk on fire");
        let e = StoreError::caused_by("reading the queue", cause);
        assert_eq!(
            e.to_string(),
            "storage failure: reading the queue: disk on fire"
        );
        let StoreError::Backend(backend) = &e else {
            unreachable!()
        };
        let source = std::error::Error::source(backend).expect("the cause is kept");
        assert!(source.downcast_ref::<std::io::Error>().is_some());
        assert_eq!(e.sqlstate(), None);
    }
}
