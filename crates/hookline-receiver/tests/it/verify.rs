//! The verifier held to the reference `standardwebhooks` crate both ways, and property tests:
//! whatever is signed verifies, and any one-byte change to it does not.

use hookline_receiver::{Secret, Verifier, VerifyError};
use proptest::prelude::*;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .try_into()
        .unwrap()
}

fn headers(id: &str, timestamp: i64, signature: &str) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    h.insert("webhook-id", id.parse().unwrap());
    h.insert("webhook-timestamp", timestamp.to_string().parse().unwrap());
    h.insert("webhook-signature", signature.parse().unwrap());
    h
}

#[test]
fn the_reference_crate_s_signatures_verify_here_and_ours_verify_there() {
    let reference = standardwebhooks::Webhook::new(SECRET).unwrap();
    let ours = Verifier::new([SECRET]).unwrap();
    let secret: Secret = SECRET.parse().unwrap();
    let body =
        br#"{"type":"shipment.delivered","timestamp":"2026-12-05T10:00:00Z","data":{"n":1}}"#;
    let (id, ts) = ("SHP-1:delivered:sub-1", now());

    let theirs = reference.sign(id, ts, body).unwrap();
    assert_eq!(theirs, secret.sign(id, ts, body), "the same signature");
    assert!(ours.verify(&headers(id, ts, &theirs), body).is_ok());
    reference
        .verify(body, &headers(id, ts, &secret.sign(id, ts, body)))
        .expect("the reference crate accepts ours");

    // Both refuse a body that was changed, whoever signed it.
    let changed =
        br#"{"type":"shipment.delivered","timestamp":"2026-12-05T10:00:00Z","data":{"n":2}}"#;
    assert_eq!(
        ours.verify(&headers(id, ts, &theirs), changed),
        Err(VerifyError::NoMatchingSignature)
    );
    assert!(reference
        .verify(changed, &headers(id, ts, &secret.sign(id, ts, body)))
        .is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Any body, id and timestamp signed by the reference crate verifies here (within the
    /// tolerance of a clock set to the timestamp), and any one byte changed in the body, the
    /// id or the timestamp fails.
    #[test]
    fn whatever_is_signed_verifies_and_any_one_byte_change_fails(
        body in "\\PC{0,200}",
        id in "[a-zA-Z0-9_:.-]{1,60}",
        timestamp in 1_000_000_000i64..4_000_000_000,
        position in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let reference = standardwebhooks::Webhook::new(SECRET).unwrap();
        let signature = reference.sign(&id, timestamp, body.as_bytes()).unwrap();
        let verifier = Verifier::new([SECRET]).unwrap().with_clock(move || timestamp);
        let ts = timestamp.to_string();
        prop_assert!(verifier.verify_parts(&id, &ts, &signature, body.as_bytes()).is_ok());

        // One byte of the body, the id or the timestamp, by turns.
        let mut signed = [body.as_bytes().to_vec(), id.as_bytes().to_vec(), ts.as_bytes().to_vec()];
        let part = position.index(3);
        if signed[part].is_empty() {
            signed[part].push(flip);
        } else {
            let at = position.index(signed[part].len());
            signed[part][at] ^= flip;
        }
        let [body2, id2, ts2] = signed;
        let id2 = String::from_utf8_lossy(&id2).into_owned();
        let ts2 = String::from_utf8_lossy(&ts2).into_owned();
        prop_assert!(verifier.verify_parts(&id2, &ts2, &signature, &body2).is_err());
    }

    /// Any one byte changed in the signature fails.
    #[test]
    fn any_one_byte_change_to_the_signature_fails(
        body in prop::collection::vec(any::<u8>(), 0..200),
        position in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let secret: Secret = SECRET.parse().unwrap();
        let signature = secret.sign("msg_1", 1_700_000_000, &body);
        let verifier = Verifier::new([SECRET]).unwrap().with_clock(|| 1_700_000_000);
        prop_assert!(verifier.verify_parts("msg_1", "1700000000", &signature, &body).is_ok());
        let mut changed = signature.into_bytes();
        let at = position.index(changed.len());
        changed[at] ^= flip;
        let changed = String::from_utf8_lossy(&changed).into_owned();
        prop_assert!(verifier.verify_parts("msg_1", "1700000000", &changed, &body).is_err());
    }
}
