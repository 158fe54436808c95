//! hookline-receiver's tests, one binary: the verifier against the reference Standard
//! Webhooks crate, every store's deduplication contract, and the axum extractor over HTTP.

mod extractor;
mod stores;
mod verify;
