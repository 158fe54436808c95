//! `hookline sink`: each behaviour, run-time control, deduplicating stats, and signature checks
//! against secrets it is given or fetches from hookline.

use std::time::Duration;

use crate::common::*;
use hookline_engine::signer::{new_secret, SigningKey};
use hookline_testkit::sink::{reference_signature, router, Secrets, Signatures};
use serde_json::{json, Value};

async fn start(signatures: Signatures) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router(signatures)).await.unwrap() });
    format!("http://{addr}")
}

/// Signatures checked by the reference implementation, not by hookline's signer.
fn checked(secrets: Secrets) -> Signatures {
    Signatures::Checked {
        secrets,
        sign: reference_signature,
    }
}

async fn post(base: &str, path: &str, id: &str, secret: Option<&str>) -> reqwest::Result<u16> {
    let body = br#"{"hello":"world"}"#;
    let mut req = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .timeout(Duration::from_millis(300))
        .header("webhook-id", id)
        .header("webhook-timestamp", "1786784400")
        .body(&body[..]);
    if let Some(secret) = secret {
        let signature = SigningKey::from_secret(secret)
            .unwrap()
            .sign(id, 1_786_784_400, body);
        req = req.header("webhook-signature", signature);
    }
    Ok(req.send().await?.status().as_u16())
}

async fn stats(base: &str) -> Value {
    reqwest::get(format!("{base}/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn behaviours_by_path_and_control() {
    let sink = start(Signatures::Unchecked).await;
    assert_eq!(post(&sink, "/ok/s1", "e1:s1", None).await.unwrap(), 200);
    assert_eq!(
        post(&sink, "/status/429/s1", "e2:s1", None).await.unwrap(),
        429
    );
    assert_eq!(post(&sink, "/gone/s1", "e3:s1", None).await.unwrap(), 410);
    assert_eq!(
        post(&sink, "/slow/20/s1", "e4:s1", None).await.unwrap(),
        200
    );
    for expected in [503, 503, 200] {
        assert_eq!(
            post(&sink, "/flaky/2/s1", "e5:s1", None).await.unwrap(),
            expected
        );
    }
    assert!(post(&sink, "/hang/s1", "e6:s1", None)
        .await
        .unwrap_err()
        .is_timeout());

    // A destination fails, then is restored, at run time.
    let control = |fail: Value| {
        let sink = sink.clone();
        async move {
            reqwest::Client::new()
                .post(format!("{sink}/control"))
                .json(&json!({"prefix": "/ok/down", "fail": fail}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(control(json!(503)).await, 200);
    assert_eq!(
        post(&sink, "/ok/down-1", "e7:down-1", None).await.unwrap(),
        503
    );
    assert_eq!(post(&sink, "/ok/up-1", "e7:up-1", None).await.unwrap(), 200);
    assert_eq!(control(json!("hang")).await, 200);
    assert!(post(&sink, "/ok/down-1", "e7:down-1", None)
        .await
        .unwrap_err()
        .is_timeout());
    assert_eq!(control(json!(null)).await, 200);
    assert_eq!(
        post(&sink, "/ok/down-1", "e7:down-1", None).await.unwrap(),
        200
    );
    assert_eq!(control(json!("sometimes")).await, 422);

    let s = stats(&sink).await;
    // 12 requests; the flaky id came 3 times and the controlled one 3 times.
    assert_eq!(s["received"], 12);
    assert_eq!(s["unique"], 8);
    assert_eq!(s["duplicates"], 4);
    assert_eq!(s["per_path"]["/flaky/2/s1"], 3);
    assert_eq!(s["receipts"].as_array().unwrap().len(), 12);
    assert_eq!(s["bad_signatures"], 0);
}

#[tokio::test]
async fn signatures_are_checked_with_a_given_secret() {
    let secret = new_secret();
    let sink = start(checked(Secrets::One(secret.clone()))).await;
    assert_eq!(
        post(&sink, "/ok/s1", "e1:s1", Some(&secret)).await.unwrap(),
        200
    );
    assert_eq!(
        post(&sink, "/ok/s1", "e2:s1", Some(&new_secret()))
            .await
            .unwrap(),
        401
    );
    assert_eq!(stats(&sink).await["bad_signatures"], 1);
}

/// hookline delivering to the sink, which fetches each subscriber's secret from hookline.
#[tokio::test]
async fn signatures_are_checked_with_secrets_from_the_api() {
    let app = TestApp::start("").await;
    let sink = start(checked(Secrets::FromApi {
        api: app.base(),
        token: None,
    }))
    .await;
    for id in ["a", "b"] {
        app.subscriber(id, &format!("{sink}/ok/{id}")).await;
    }
    app.publish("e1", "t").await;
    for id in ["e1:a", "e1:b"] {
        app.delivery_when(id, "delivered", |d| state(d) == "delivered")
            .await;
    }
    let s = stats(&sink).await;
    assert_eq!(
        (s["unique"].as_u64(), s["bad_signatures"].as_u64()),
        (Some(2), Some(0))
    );
    // A rotation with no grace period: the sink's cached secret is stale, and it fetches the
    // new one rather than counting a bad signature.
    let (status, _) = app
        .call(
            "POST",
            "/v1/subscribers/a/secret/rotate",
            Some(json!({"grace_period": "0s"})),
        )
        .await;
    assert_eq!(status, 200);
    app.publish("e2", "t").await;
    for id in ["e2:a", "e2:b"] {
        app.delivery_when(id, "delivered", |d| state(d) == "delivered")
            .await;
    }
    let s = stats(&sink).await;
    assert_eq!(
        (s["unique"].as_u64(), s["bad_signatures"].as_u64()),
        (Some(4), Some(0))
    );
    app.stop().await;
}
