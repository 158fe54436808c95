//! The axum extractor: [`Delivery`] verifies, parses and claims a request before the handler
//! runs. A bad or missing signature is answered 401, a malformed body 400, a duplicate with
//! the outcome recorded for it (the handler does not run), a store failure 503; the handler
//! gets only new deliveries.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRef, FromRequest, Request};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::dedup::{DedupStore, Outcome, StoreError};
use crate::receive::{NewDelivery, Receiver, Refusal};
use crate::verify::VerifyError;

/// A new delivery, for a handler whose state gives a [`Receiver`] (`Receiver<S>: FromRef`).
pub struct Delivery<S: DedupStore>(pub NewDelivery<S::Claim>);

/// Why the extractor answered instead of the handler.
#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The body could not be read (too large, cut off): axum's own answer.
    #[error(transparent)]
    Body(#[from] BytesRejection),
}

impl<St, S> FromRequest<St> for Delivery<S>
where
    S: DedupStore,
    Receiver<S>: FromRef<St>,
    St: Send + Sync,
{
    type Rejection = Rejection;

    async fn from_request(request: Request, state: &St) -> Result<Self, Rejection> {
        let receiver = Receiver::<S>::from_ref(state);
        let headers = request.headers().clone();
        let body = Bytes::from_request(request, state).await?;
        Ok(Delivery(receiver.receive(&headers, &body).await?))
    }
}

impl IntoResponse for Outcome {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status()).unwrap_or(StatusCode::OK);
        let content_type = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
        (status, content_type, self.body().to_owned()).into_response()
    }
}

impl IntoResponse for StoreError {
    fn into_response(self) -> Response {
        let status = match self {
            StoreError::InvalidId => StatusCode::BAD_REQUEST,
            StoreError::Outcome(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        (status, self.to_string()).into_response()
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            // Not the receiver's clock: the caller is not known yet.
            Refusal::Unverified(VerifyError::TooOld { .. } | VerifyError::TooNew { .. }) => (
                StatusCode::UNAUTHORIZED,
                "the webhook-timestamp is outside the tolerance",
            )
                .into_response(),
            Refusal::Unverified(e) => (StatusCode::UNAUTHORIZED, e.to_string()).into_response(),
            Refusal::Malformed(e) => {
                (StatusCode::BAD_REQUEST, format!("not an event: {e}")).into_response()
            }
            Refusal::Duplicate(outcome) => outcome.into_response(),
            Refusal::Store(e) => e.into_response(),
        }
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        match self {
            Rejection::Refused(refusal) => refusal.into_response(),
            Rejection::Body(rejection) => rejection.into_response(),
        }
    }
}
