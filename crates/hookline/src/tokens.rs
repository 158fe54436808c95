//! API tokens: what one is and may do, and how one is made. The config holds them (as hashes);
//! `api::auth` checks a presented token against them.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

/// What a token may do.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    serde::Deserialize,
    serde::Serialize,
    clap::ValueEnum,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Everything.
    Admin,
    /// `POST /v1/events`, and reading the events it published.
    Publish,
    /// Every read but subscriber secrets and header values.
    Read,
}

/// A configured token: its name (recorded in audits), the SHA-256 of the token, its scope, and
/// the tenant it acts for (`None`: the platform's own, which sees every tenant).
#[derive(Debug, Clone)]
pub struct ApiToken {
    pub name: String,
    pub sha256: [u8; 32],
    pub scope: Scope,
    pub tenant: Option<String>,
}

pub fn sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// [`sha256`] in lower-case hex, as the store keeps a portal session's token.
pub fn sha256_hex(token: &str) -> String {
    sha256(token).iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh portal session token: [`crate::api::auth::PORTAL_TOKEN_PREFIX`] + 32 random bytes.
pub fn new_portal_token() -> String {
    let bytes: [u8; 32] = rand::random();
    format!(
        "{}{}",
        crate::api::auth::PORTAL_TOKEN_PREFIX,
        URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// A fresh token: `hl_` + 32 random bytes, base64url.
pub fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("hl_{}", URL_SAFE_NO_PAD.encode(bytes))
}
