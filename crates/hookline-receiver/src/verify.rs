//! Standard Webhooks verification: `webhook-signature` holds space-separated `v1,<base64>`
//! entries, each an HMAC-SHA256 over `{webhook-id}.{webhook-timestamp}.{body}` with the key in
//! a `whsec_` secret. A delivery verifies when any entry matches under any secret the verifier
//! holds: during a rotation the sender may sign with both secrets, and the receiver may hold
//! both, so neither side has to switch at one instant.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use http::HeaderMap;
use sha2::Sha256;

/// The headers a delivery is verified by.
pub const WEBHOOK_ID: &str = "webhook-id";
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

const SECRET_PREFIX: &str = "whsec_";
const SIGNATURE_VERSION: &str = "v1";
/// How far `webhook-timestamp` may be from the receiver's clock, either way, by default (the
/// Standard Webhooks recommendation): a captured delivery replayed later is refused.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// A secret that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    #[error("a secret must start with \"whsec_\"")]
    MissingPrefix,
    #[error("a secret must be base64 after \"whsec_\"")]
    NotBase64,
    #[error("a secret must hold some key material after \"whsec_\"")]
    Empty,
    #[error("a verifier needs at least one secret")]
    NoSecret,
}

/// Why a delivery was not accepted as signed. Every variant is the sender's problem (or an
/// attacker's): the axum extractor answers each with 401.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    #[error("the {0} header is missing")]
    MissingHeader(&'static str),
    #[error("the {0} header is not visible ASCII")]
    InvalidHeader(&'static str),
    #[error("webhook-timestamp is not unix seconds")]
    InvalidTimestamp,
    #[error("webhook-timestamp {timestamp} is more than {tolerance_seconds} s before now ({now})")]
    TooOld {
        timestamp: i64,
        now: i64,
        tolerance_seconds: u64,
    },
    #[error("webhook-timestamp {timestamp} is more than {tolerance_seconds} s after now ({now})")]
    TooNew {
        timestamp: i64,
        now: i64,
        tolerance_seconds: u64,
    },
    #[error("no v1 signature in webhook-signature matches the body under any secret")]
    NoMatchingSignature,
}

/// The receiver's clock, in unix seconds. Tests give a fixed one; [`SystemClock`] otherwise.
pub trait Clock: Send + Sync + 'static {
    fn unix_seconds(&self) -> i64;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn unix_seconds(&self) -> i64 {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
    }
}

impl<F: Fn() -> i64 + Send + Sync + 'static> Clock for F {
    fn unix_seconds(&self) -> i64 {
        self()
    }
}

/// One `whsec_` secret's key.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)") // never the key
    }
}

impl std::str::FromStr for Secret {
    type Err = SecretError;

    fn from_str(secret: &str) -> Result<Self, SecretError> {
        let encoded = secret
            .strip_prefix(SECRET_PREFIX)
            .ok_or(SecretError::MissingPrefix)?;
        let key = STANDARD
            .decode(encoded)
            .map_err(|_| SecretError::NotBase64)?;
        if key.is_empty() {
            return Err(SecretError::Empty);
        }
        Ok(Secret(key))
    }
}

impl Secret {
    fn mac(&self, id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    /// The `webhook-signature` entry (`v1,<base64>`) for a delivery: what a sender sends, and
    /// what tests of a receiver sign with.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let tag = self.mac(id, timestamp, body).finalize().into_bytes();
        format!("{SIGNATURE_VERSION},{}", STANDARD.encode(tag))
    }
}

/// What a verified delivery's headers said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// `webhook-id`: the same on every attempt of a delivery, the key to deduplicate on.
    pub id: String,
    /// `webhook-timestamp`: when this attempt was signed, unix seconds.
    pub timestamp: i64,
}

/// The entries of a `webhook-signature` header looked at: a sender signs once per secret it
/// holds (two during a rotation), and each entry costs a MAC's finalization, so a caller
/// without a secret cannot make a request cost more than this many.
pub const MAX_SIGNATURE_ENTRIES: usize = 16;

/// Verifies deliveries against one or more secrets, within a timestamp tolerance.
#[derive(Clone)]
pub struct Verifier {
    secrets: Vec<Secret>,
    tolerance: Duration,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("secrets", &self.secrets.len())
            .field("tolerance", &self.tolerance)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// A verifier holding `secrets` (`whsec_...`): a delivery signed under any of them
    /// verifies. Hold two while a secret is being rotated.
    pub fn new<S: AsRef<str>>(secrets: impl IntoIterator<Item = S>) -> Result<Self, SecretError> {
        let secrets = secrets
            .into_iter()
            .map(|s| s.as_ref().parse())
            .collect::<Result<Vec<Secret>, _>>()?;
        if secrets.is_empty() {
            return Err(SecretError::NoSecret);
        }
        Ok(Verifier {
            secrets,
            tolerance: DEFAULT_TOLERANCE,
            clock: Arc::new(SystemClock),
        })
    }

    /// How far `webhook-timestamp` may be from now, either way ([`DEFAULT_TOLERANCE`] unless
    /// set).
    pub fn with_tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// The clock timestamps are checked against ([`SystemClock`] unless set).
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Verifies a delivery from its headers and its body exactly as received.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<Signed, VerifyError> {
        let header = |name: &'static str| {
            headers
                .get(name)
                .ok_or(VerifyError::MissingHeader(name))?
                .to_str()
                .map_err(|_| VerifyError::InvalidHeader(name))
        };
        self.verify_parts(
            header(WEBHOOK_ID)?,
            header(WEBHOOK_TIMESTAMP)?,
            header(WEBHOOK_SIGNATURE)?,
            body,
        )
    }

    /// Verifies a delivery from its three header values and its body (for a framework other
    /// than one using the `http` crate's headers).
    pub fn verify_parts(
        &self,
        id: &str,
        timestamp: &str,
        signature: &str,
        body: &[u8],
    ) -> Result<Signed, VerifyError> {
        let timestamp: i64 = timestamp
            .parse()
            .map_err(|_| VerifyError::InvalidTimestamp)?;
        self.check_timestamp(timestamp)?;
        let candidates: Vec<Vec<u8>> = signature
            .split(' ')
            .take(MAX_SIGNATURE_ENTRIES)
            .filter_map(|entry| entry.split_once(','))
            .filter(|(version, _)| *version == SIGNATURE_VERSION)
            .filter_map(|(_, encoded)| STANDARD.decode(encoded).ok())
            .collect();
        // Every candidate is compared under every secret in constant time (verify_slice).
        let matched = self.secrets.iter().any(|secret| {
            let mac = secret.mac(id, timestamp, body);
            candidates
                .iter()
                .any(|tag| mac.clone().verify_slice(tag).is_ok())
        });
        if !matched {
            return Err(VerifyError::NoMatchingSignature);
        }
        Ok(Signed {
            id: id.to_owned(),
            timestamp,
        })
    }

    fn check_timestamp(&self, timestamp: i64) -> Result<(), VerifyError> {
        let now = self.clock.unix_seconds();
        let tolerance_seconds = self.tolerance.as_secs();
        let tolerance = i64::try_from(tolerance_seconds).unwrap_or(i64::MAX);
        if now.saturating_sub(timestamp) > tolerance {
            return Err(VerifyError::TooOld {
                timestamp,
                now,
                tolerance_seconds,
            });
        }
        if timestamp.saturating_sub(now) > tolerance {
            return Err(VerifyError::TooNew {
                timestamp,
                now,
                tolerance_seconds,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const NOW: i64 = 1_700_000_000;

    fn verifier() -> Verifier {
        Verifier::new([SECRET]).unwrap().with_clock(|| NOW)
    }

    fn signed(id: &str, timestamp: i64, body: &[u8]) -> String {
        SECRET.parse::<Secret>().unwrap().sign(id, timestamp, body)
    }

    #[test]
    fn bad_secrets_are_refused() {
        assert_eq!(
            "abc".parse::<Secret>().err(),
            Some(SecretError::MissingPrefix)
        );
        assert_eq!(
            "whsec_!!!".parse::<Secret>().err(),
            Some(SecretError::NotBase64)
        );
        assert_eq!("whsec_".parse::<Secret>().err(), Some(SecretError::Empty));
        assert_eq!(
            Verifier::new(Vec::<String>::new()).err(),
            Some(SecretError::NoSecret)
        );
    }

    #[test]
    fn timestamps_outside_the_tolerance_are_refused_either_way() {
        let v = verifier().with_tolerance(Duration::from_secs(60));
        let at =
            |ts: i64| v.verify_parts("msg_1", &ts.to_string(), &signed("msg_1", ts, b"{}"), b"{}");
        assert!(at(NOW - 60).is_ok());
        assert!(at(NOW + 60).is_ok());
        assert!(matches!(at(NOW - 61), Err(VerifyError::TooOld { .. })));
        assert!(matches!(at(NOW + 61), Err(VerifyError::TooNew { .. })));
        assert_eq!(
            v.verify_parts("msg_1", "soon", "v1,xx", b"{}"),
            Err(VerifyError::InvalidTimestamp)
        );
    }

    #[test]
    fn any_entry_under_any_secret_verifies_and_others_do_not() {
        let other = "whsec_dGhlIG90aGVyIHNlY3JldCBvZiB0aGUgcm90YXRpb24=";
        let by_other = other.parse::<Secret>().unwrap().sign("msg_1", NOW, b"{}");
        let by_ours = signed("msg_1", NOW, b"{}");
        let both = format!("v2,abc {by_other} {by_ours}");
        assert!(verifier()
            .verify_parts("msg_1", &NOW.to_string(), &both, b"{}")
            .is_ok());
        // Only the other secret's entry: refused by a verifier without it, taken by one with it.
        assert_eq!(
            verifier().verify_parts("msg_1", &NOW.to_string(), &by_other, b"{}"),
            Err(VerifyError::NoMatchingSignature)
        );
        let rotating = Verifier::new([SECRET, other]).unwrap().with_clock(|| NOW);
        assert!(rotating
            .verify_parts("msg_1", &NOW.to_string(), &by_other, b"{}")
            .is_ok());
        // A v2 entry carrying a v1 tag is not a v1 signature.
        let relabelled = by_ours.replacen("v1,", "v2,", 1);
        assert_eq!(
            verifier().verify_parts("msg_1", &NOW.to_string(), &relabelled, b"{}"),
            Err(VerifyError::NoMatchingSignature)
        );
    }

    #[test]
    fn missing_headers_are_named() {
        let mut headers = HeaderMap::new();
        headers.insert(WEBHOOK_ID, "msg_1".parse().unwrap());
        headers.insert(WEBHOOK_TIMESTAMP, NOW.to_string().parse().unwrap());
        assert_eq!(
            verifier().verify(&headers, b"{}"),
            Err(VerifyError::MissingHeader(WEBHOOK_SIGNATURE))
        );
        headers.insert(
            WEBHOOK_SIGNATURE,
            signed("msg_1", NOW, b"{}").parse().unwrap(),
        );
        assert_eq!(
            verifier().verify(&headers, b"{}"),
            Ok(Signed {
                id: "msg_1".into(),
                timestamp: NOW
            })
        );
    }
}
