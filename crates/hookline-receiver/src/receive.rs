//! One delivery received: verified, parsed, and claimed, in that order, so that an unsigned or
//! malformed request never touches the store. [`Receiver::receive`] is the whole of it for any
//! HTTP framework; with the `axum` feature, [`Delivery`](crate::Delivery) is the same as an
//! extractor.

use std::sync::Arc;

use http::HeaderMap;
use serde::Deserialize;

use crate::dedup::{Claimed, DedupStore, Outcome, StoreError};
use crate::verify::{Verifier, VerifyError};

/// The body a hookline delivery carries (any Standard Webhooks sender using the same shape
/// works). Fields it does not name are ignored.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Event {
    /// The event's type, e.g. `shipment.out_for_delivery`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// When the event was accepted (RFC 3339), not when this attempt was sent.
    pub timestamp: String,
    /// The payload.
    pub data: serde_json::Value,
}

/// A new delivery, verified and claimed: do the side effect through `claim`, then commit it.
#[derive(Debug)]
pub struct NewDelivery<C> {
    /// `webhook-id`, the same on every attempt, replay and crash duplicate of this delivery.
    pub id: String,
    /// `webhook-timestamp` of this attempt, unix seconds.
    pub timestamp: i64,
    pub event: Event,
    /// The store's claim on `id`: the side effect goes through it, then
    /// [`Claim::commit`](crate::Claim::commit) records the outcome with it.
    pub claim: C,
}

/// Why a request is not handed to the handler, and how it is answered.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// Not signed by a secret the receiver holds, or out of the timestamp tolerance: 401.
    #[error("not verified: {0}")]
    Unverified(#[from] VerifyError),
    /// Signed, but not an event's JSON body: 400 (retrying cannot fix it).
    #[error("the body is not an event: {0}")]
    Malformed(serde_json::Error),
    /// Handled before: the outcome recorded then, answered again.
    #[error("a duplicate of a delivery answered {}", .0.status())]
    Duplicate(Outcome),
    /// The store failed; nothing was recorded: 503, so the sender retries.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A verifier and a dedup store: what a receiving endpoint needs.
pub struct Receiver<S> {
    verifier: Arc<Verifier>,
    store: Arc<S>,
}

impl<S> Clone for Receiver<S> {
    fn clone(&self) -> Self {
        Receiver {
            verifier: self.verifier.clone(),
            store: self.store.clone(),
        }
    }
}

impl<S: DedupStore> Receiver<S> {
    pub fn new(verifier: Verifier, store: S) -> Self {
        Receiver {
            verifier: Arc::new(verifier),
            store: Arc::new(store),
        }
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    /// Verifies, parses and claims one request: a new delivery for the handler, or why not.
    pub async fn receive(
        &self,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<NewDelivery<S::Claim>, Refusal> {
        let signed = self.verifier.verify(headers, body)?;
        let event: Event = serde_json::from_slice(body).map_err(Refusal::Malformed)?;
        match self.store.claim(&signed.id).await? {
            Claimed::New(claim) => Ok(NewDelivery {
                id: signed.id,
                timestamp: signed.timestamp,
                event,
                claim,
            }),
            Claimed::Duplicate(outcome) => Err(Refusal::Duplicate(outcome)),
        }
    }
}
