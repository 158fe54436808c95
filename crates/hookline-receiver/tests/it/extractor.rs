//! The axum extractor over HTTP: 401 for a bad or missing signature, 400 for a body that is
//! not an event, the handler for a new delivery, the recorded outcome for a duplicate (the
//! handler not run), and a failure not committed runs again on the retry.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use hookline_receiver::{Claim, Delivery, MemoryStore, Outcome, Receiver, Secret, Verifier};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const NOW: i64 = 1_767_225_600;

#[derive(Clone)]
struct App {
    receiver: Receiver<MemoryStore>,
    /// Handler runs, and how many of them are to fail (503, not committed) first.
    runs: Arc<AtomicU32>,
    failing_runs: u32,
}

impl FromRef<App> for Receiver<MemoryStore> {
    fn from_ref(app: &App) -> Self {
        app.receiver.clone()
    }
}

async fn hook(State(app): State<App>, Delivery(delivery): Delivery<MemoryStore>) -> Response {
    let run = app.runs.fetch_add(1, Ordering::SeqCst) + 1;
    if run <= app.failing_runs {
        // Dropping the claim records nothing: the retry runs again.
        return (StatusCode::SERVICE_UNAVAILABLE, "downstream unavailable").into_response();
    }
    let body = format!("{} {}", delivery.event.event_type, delivery.event.data["n"]);
    let outcome = Outcome::new(201, body).unwrap();
    delivery.claim.commit(outcome).await.into_response()
}

async fn serve(failing_runs: u32) -> (String, Arc<AtomicU32>) {
    let verifier = Verifier::new([SECRET]).unwrap().with_clock(|| NOW);
    let runs = Arc::new(AtomicU32::new(0));
    let app = App {
        receiver: Receiver::new(verifier, MemoryStore::new(100)),
        runs: runs.clone(),
        failing_runs,
    };
    let router = Router::new().route("/hooks", post(hook)).with_state(app);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (url, runs)
}

/// Sends `body` as delivery `id`, signed with our secret unless `signature` is given.
async fn send(url: &str, id: &str, body: &str, signature: Option<&str>) -> (u16, String) {
    let secret: Secret = SECRET.parse().unwrap();
    let signed = secret.sign(id, NOW, body.as_bytes());
    let request = reqwest::Client::new()
        .post(url)
        .header("webhook-id", id)
        .header("webhook-timestamp", NOW.to_string())
        .header("webhook-signature", signature.unwrap_or(&signed));
    answer(request.body(body.to_owned())).await
}

async fn answer(request: reqwest::RequestBuilder) -> (u16, String) {
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

const EVENT: &str =
    r#"{"id":"e","type":"shipment.delivered","timestamp":"2026-01-01T00:00:00Z","data":{"n":7}}"#;

#[tokio::test]
async fn a_new_delivery_runs_once_and_its_duplicates_get_the_recorded_outcome() {
    let (url, runs) = serve(0).await;
    assert_eq!(
        send(&url, "e:s", EVENT, None).await,
        (201, "shipment.delivered 7".into())
    );
    assert_eq!(
        send(&url, "e:s", EVENT, None).await,
        (201, "shipment.delivered 7".into())
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn bad_signatures_are_401_and_bad_bodies_400_and_neither_runs_the_handler() {
    let (url, runs) = serve(0).await;
    let other = "whsec_dGhlIG90aGVyIHNlY3JldCBvZiB0aGUgcm90YXRpb24="
        .parse::<Secret>()
        .unwrap();
    let forged = other.sign("e:s", NOW, EVENT.as_bytes());
    let (status, text) = send(&url, "e:s", EVENT, Some(&forged)).await;
    assert_eq!(status, 401, "{text}");
    let (status, text) = answer(reqwest::Client::new().post(&url).body(EVENT)).await;
    assert_eq!((status, text.contains("webhook-id")), (401, true), "{text}");
    let (status, _) = send(&url, "e:s", r#"{"type":"x"}"#, None).await;
    assert_eq!(status, 400);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // The refused requests recorded nothing: the real one is new.
    assert_eq!(send(&url, "e:s", EVENT, None).await.0, 201);
}

#[tokio::test]
async fn a_failure_not_committed_runs_again_on_the_retry() {
    let (url, runs) = serve(1).await;
    assert_eq!(send(&url, "e:s", EVENT, None).await.0, 503);
    assert_eq!(send(&url, "e:s", EVENT, None).await.0, 201);
    assert_eq!(send(&url, "e:s", EVENT, None).await.0, 201);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
