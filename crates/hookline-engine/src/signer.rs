//! Standard Webhooks signatures: `v1,` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")),
//! where the key is the base64 text after `whsec_` in the subscriber's secret.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

const PREFIX: &str = "whsec_";
/// Standard Webhooks asks for 24 to 64 bytes of key material.
const MIN_KEY_BYTES: usize = 24;
const MAX_KEY_BYTES: usize = 64;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    #[error("secret must start with \"whsec_\"")]
    MissingPrefix,
    #[error("secret after \"whsec_\" must be base64")]
    NotBase64,
    #[error("secret must hold {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes of key material, not {0}")]
    WrongLength(usize),
}

/// The signing key a secret holds, checked.
#[derive(Clone)]
pub struct SigningKey(Vec<u8>);

impl SigningKey {
    pub fn from_secret(secret: &str) -> Result<Self, SecretError> {
        let encoded = secret
            .strip_prefix(PREFIX)
            .ok_or(SecretError::MissingPrefix)?;
        let key = STANDARD
            .decode(encoded)
            .map_err(|_| SecretError::NotBase64)?;
        if !(MIN_KEY_BYTES..=MAX_KEY_BYTES).contains(&key.len()) {
            return Err(SecretError::WrongLength(key.len()));
        }
        Ok(Self(key))
    }

    /// The `webhook-signature` value for one attempt.
    pub fn sign(&self, webhook_id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(webhook_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

/// A fresh secret: `whsec_` + base64 of 32 random bytes.
pub fn new_secret() -> String {
    let key: [u8; 32] = rand::random();
    format!("{PREFIX}{}", STANDARD.encode(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_verify_with_the_reference_library() {
        let secret = new_secret();
        let key = SigningKey::from_secret(&secret).unwrap();
        let body = br#"{"id":"SHP-20418","type":"shipment.out_for_delivery","data":{}}"#;
        let id = "SHP-20418:subscriber-731";
        // The reference verifier checks the timestamp against its own clock: sign "now".
        let now: i64 = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            .try_into()
            .unwrap();
        let headers = |signature: String| {
            let mut h = axum::http::HeaderMap::new();
            h.insert("webhook-id", id.parse().unwrap());
            h.insert("webhook-timestamp", now.to_string().parse().unwrap());
            h.insert("webhook-signature", signature.parse().unwrap());
            h
        };
        let verifier = standardwebhooks::Webhook::new(&secret).unwrap();
        verifier
            .verify(body, &headers(key.sign(id, now, body)))
            .expect("reference verifier accepts");
        let other = SigningKey::from_secret(&new_secret()).unwrap();
        assert!(verifier
            .verify(body, &headers(other.sign(id, now, body)))
            .is_err());
        assert!(verifier
            .verify(b"{}", &headers(key.sign(id, now, body)))
            .is_err());
    }

    #[test]
    fn bad_secrets_are_refused() {
        assert_eq!(
            SigningKey::from_secret("abc").err(),
            Some(SecretError::MissingPrefix)
        );
        assert_eq!(
            SigningKey::from_secret("whsec_!!!").err(),
            Some(SecretError::NotBase64)
        );
        assert_eq!(
            SigningKey::from_secret("whsec_c2hvcnQ=").err(),
            Some(SecretError::WrongLength(5))
        );
    }
}
