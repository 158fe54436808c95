//! `hookline-client` against a live hookline: each operation with the API's own types, an
//! error carrying its code, lists paged across several pages, and a publish retried through a
//! proxy that loses its first answers, which still makes one event under one id.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::TryStreamExt;
use hookline_client::api::{
    DeadLetterQuery, DeliveryQuery, EventQuery, EventTypeChange, GroupQuery, NewEvent,
    NewEventType, NewPolicy, NewPortalSession, NewRollout, NewSubscriber, NewTenant,
    OperationalEndpointRequest, PageQuery, ReplayQuery, ReplayRequest, ResendQuery, ResendRequest,
    RolloutAbort, RolloutShare, SecretRotation, SubscriberChange, SubscriberQuery, TenantChange,
};
use hookline_client::{Client, Error, Replayed, Resent, Retry};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::{state, Receiver, TestApp};

/// Retries without waiting to speak of: the tests never wait on a backoff.
fn quick() -> Retry {
    Retry {
        max_attempts: 4,
        max_elapsed: Duration::from_secs(60),
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(1),
    }
}

fn event(id: Option<&str>, event_type: &str) -> NewEvent {
    NewEvent {
        id: id.map(str::to_owned),
        event_type: event_type.to_owned(),
        payload: Some(json!({"shipment": "SHP-1", "n": 12345678901234567890u64})),
        ..NewEvent::default()
    }
}

#[tokio::test]
async fn every_operation_through_the_client() {
    let app = TestApp::start("").await;
    let rx = Receiver::start(|path, _| if path == "/fails" { 400 } else { 200 }).await;
    let client = Client::new(&app.base()).unwrap().with_retry(quick());

    // Event types.
    let created = client
        .create_event_type(&NewEventType {
            name: "shipment.out_for_delivery".into(),
            description: Some("with a driver".into()),
            ..NewEventType::default()
        })
        .await
        .unwrap();
    assert_eq!(created.revision, 1);
    let changed = client
        .update_event_type(
            "shipment.out_for_delivery",
            &EventTypeChange {
                description: Some(None),
                ..EventTypeChange::default()
            },
        )
        .await
        .unwrap();
    assert_eq!((changed.revision, changed.description), (2, None));
    assert_eq!(
        client
            .get_event_type("shipment.out_for_delivery")
            .await
            .unwrap()
            .name,
        "shipment.out_for_delivery"
    );
    let types = client
        .list_event_types(&PageQuery::default())
        .await
        .unwrap();
    assert_eq!(types.items.len(), 1);

    // Tenants.
    let tenant = client
        .create_tenant(&NewTenant {
            id: "merchant-acme".into(),
            name: Some("Acme".into()),
            ..NewTenant::default()
        })
        .await
        .unwrap();
    assert_eq!(tenant.name.as_deref(), Some("Acme"));
    let tenant = client
        .update_tenant(
            "merchant-acme",
            &TenantChange {
                max_subscribers: Some(Some(10)),
                ..TenantChange::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(tenant.max_subscribers, Some(10));
    assert_eq!(
        client.get_tenant("merchant-acme").await.unwrap().id,
        "merchant-acme"
    );
    let session = client
        .create_portal_session("merchant-acme", &NewPortalSession::default())
        .await
        .unwrap();
    assert!(session.token.starts_with("hlp_"), "{}", session.token);
    let revoked = client
        .revoke_portal_session("merchant-acme", &session.session.id)
        .await
        .unwrap();
    assert!(revoked.revoked_at.is_some());
    assert_eq!(
        client
            .list_tenants(&PageQuery::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    // Subscribers.
    let ok = client
        .create_subscriber(&NewSubscriber {
            id: Some("s-ok".into()),
            url: rx.url("/ok"),
            headers: Some([("x-team".to_owned(), "parcels".to_owned())].into()),
            ..NewSubscriber::default()
        })
        .await
        .unwrap();
    assert!(ok.secret.starts_with("whsec_"));
    assert_eq!(ok.subscriber.header_names, ["x-team"]);
    let fails = client
        .create_subscriber(&NewSubscriber {
            id: Some("s-fails".into()),
            url: rx.url("/fails"),
            ..NewSubscriber::default()
        })
        .await
        .unwrap();
    assert_eq!(fails.subscriber.status, "active");
    let paused = client
        .update_subscriber(
            "s-ok",
            &SubscriberChange {
                status: Some("paused".into()),
                max_in_flight: Some(Some(4)),
                ..SubscriberChange::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (paused.status.as_str(), paused.max_in_flight),
        ("paused", Some(4))
    );
    client
        .update_subscriber(
            "s-ok",
            &SubscriberChange {
                status: Some("active".into()),
                ..SubscriberChange::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        client.get_subscriber_secret("s-ok").await.unwrap().secret,
        ok.secret
    );
    assert_eq!(
        client.get_subscriber_headers("s-ok").await.unwrap().headers["x-team"],
        "parcels"
    );
    let rotated = client
        .rotate_subscriber_secret(
            "s-ok",
            &SecretRotation {
                grace_period: Some("0s".into()),
                ..SecretRotation::default()
            },
        )
        .await
        .unwrap();
    assert_ne!(rotated.secret, ok.secret);
    let listed = client
        .list_subscribers(&SubscriberQuery {
            contains: Some("s-".into()),
            ..SubscriberQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 2);

    // Events and their deliveries: one delivered, one dead.
    let receipt = client
        .publish(&event(Some("evt-1"), "shipment.out_for_delivery"))
        .await
        .unwrap();
    assert_eq!((receipt.id.as_str(), receipt.deliveries), ("evt-1", 2));
    app.delivery_when("evt-1:s-ok", "delivered", |d| state(d) == "delivered")
        .await;
    app.delivery_when("evt-1:s-fails", "dead", |d| state(d) == "dead")
        .await;
    let published = client.get_event("evt-1").await.unwrap();
    assert_eq!(published.counts.delivered + published.counts.dead, 2);
    // The payload as published, big integer and all.
    assert_eq!(
        published.payload.get(),
        r#"{"n":12345678901234567890,"shipment":"SHP-1"}"#
    );
    let events = client.list_events(&EventQuery::default()).await.unwrap();
    assert_eq!(events.items[0].id, "evt-1");
    let delivery = client.get_delivery("evt-1:s-fails").await.unwrap();
    assert_eq!(delivery.dead_reason.as_deref(), Some("permanent_failure"));
    assert_eq!(delivery.attempt_history[0].status, Some(400));
    let dead = client
        .list_deliveries(&DeliveryQuery {
            state: Some("dead".into()),
            ..DeliveryQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(dead.items.len(), 1);
    let test_event = client.send_test_event("s-ok").await.unwrap();
    assert_eq!(test_event.event_type, "hookline.test");

    // Dead letters and replays.
    let letters = client
        .list_dead_letters(&DeadLetterQuery::default())
        .await
        .unwrap();
    assert_eq!(letters.items[0].delivery_id, "evt-1:s-fails");
    let groups = client
        .dead_letter_groups(&GroupQuery::default())
        .await
        .unwrap();
    assert_eq!((groups.items[0].count, groups.truncated), (1, false));
    let ask = ReplayRequest {
        reason: "permanent_failure".into(),
        limit: 10,
        dry_run: true,
        ..ReplayRequest::default()
    };
    let Replayed::Previewed(preview) = client.replay_dead_letters(&ask).await.unwrap() else {
        panic!("a dry run previews");
    };
    assert_eq!(preview.delivery_ids, ["evt-1:s-fails"]);
    let replay = ReplayRequest {
        dry_run: false,
        expected_delivery_ids: Some(preview.delivery_ids),
        ..ask
    };
    let Replayed::Started(started) = client.replay_dead_letters(&replay).await.unwrap() else {
        panic!("a replay starts");
    };
    let audit = client.get_replay(&started.replay_id).await.unwrap();
    assert_eq!(audit.selected, 1);
    let replays = client.list_replays(&ReplayQuery::default()).await.unwrap();
    assert_eq!(replays.items[0].id, started.replay_id);

    // Resends: of the events accepted since the first, a second later.
    let since = published.accepted_at.clone();
    app.clock.advance(Duration::from_secs(1));
    let ask = ResendRequest {
        subscriber_id: "s-ok".into(),
        since,
        limit: 10,
        dry_run: true,
        ..ResendRequest::default()
    };
    let Resent::Previewed(preview) = client.resend(&ask).await.unwrap() else {
        panic!("a dry run previews");
    };
    assert!(
        preview.event_ids.contains(&"evt-1".to_owned()),
        "{preview:?}"
    );
    let resend = ResendRequest {
        dry_run: false,
        expected_event_ids: Some(preview.event_ids),
        ..ask
    };
    let Resent::Started(resent) = client.resend(&resend).await.unwrap() else {
        panic!("a resend starts");
    };
    assert_eq!(client.get_resend(&resent.id).await.unwrap().id, resent.id);
    let resends = client.list_resends(&ResendQuery::default()).await.unwrap();
    assert_eq!(resends.items.len(), 1);

    // Policies and rollouts.
    let policy = client
        .create_policy(&NewPolicy {
            name: "retry-520".into(),
            ..NewPolicy::default()
        })
        .await
        .unwrap();
    assert!(policy.created_at.is_some());
    let read = client.get_policy("retry-520").await.unwrap();
    // A policy read back defines the same policy.
    assert_eq!(
        serde_json::to_value(NewPolicy::from(read.policy.clone())).unwrap()["retry"],
        serde_json::to_value(&read.policy.retry).unwrap()
    );
    let policies = client.list_policies(&PageQuery::default()).await.unwrap();
    assert!(policies.items.iter().any(|p| p.policy.name == "retry-520"));
    let rollout = client
        .start_rollout(&NewRollout {
            policy: "retry-520".into(),
            percent: 5.into(),
            subscriber_ids: None,
            abort_if: None,
        })
        .await
        .unwrap();
    assert_eq!(rollout.state, "running");
    let share = RolloutShare { percent: 25.into() };
    let changed = client
        .change_rollout_share(&rollout.id, &share)
        .await
        .unwrap();
    assert_eq!(changed.percent, serde_json::Number::from(25));
    let comparison = client.compare_rollout(&rollout.id).await.unwrap();
    assert_eq!(comparison.rollout, rollout.id);
    assert_eq!(
        client.get_rollout(&rollout.id).await.unwrap().id,
        rollout.id
    );
    let aborted = client
        .abort_rollout(
            &rollout.id,
            &RolloutAbort {
                reason: Some("enough".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(aborted.state, "aborted");
    let again = client
        .start_rollout(&NewRollout {
            policy: "retry-520".into(),
            percent: 100.into(),
            subscriber_ids: None,
            abort_if: None,
        })
        .await
        .unwrap();
    assert_eq!(
        client.promote_rollout(&again.id).await.unwrap().state,
        "promoted"
    );
    assert_eq!(
        client
            .list_rollouts(&PageQuery::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );

    // Operations.
    assert!(client.capacity().await.unwrap().max_attempts >= 1);
    let overview = client.overview().await.unwrap();
    let died = &overview.dead_letters_last_hour;
    assert_eq!(
        (died[0].reason.as_str(), died[0].count),
        ("permanent_failure", 1),
        "{overview:?}"
    );
    // No drill has run: its absence is the API's 404.
    let no_drill = client.latest_drill().await.unwrap_err();
    assert_eq!(no_drill.code(), Some("not_found"));
    let endpoint = client
        .set_operational_endpoint(&OperationalEndpointRequest {
            url: rx.url("/ops"),
            secret: None,
        })
        .await
        .unwrap();
    assert_eq!(endpoint.set_by, "api");
    assert!(endpoint.secret.is_some());
    let read = client.get_operational_endpoint().await.unwrap();
    assert_eq!(
        (read.subscriber.id, read.secret),
        (endpoint.subscriber.id, None)
    );
    client.stop_operational_endpoint().await.unwrap();

    // Last: revoke and delete.
    let revoked = client.revoke_subscriber("s-fails").await.unwrap();
    assert_eq!(revoked.status, "revoked");
    client.delete_tenant("merchant-acme").await.unwrap();
    app.stop().await;
}

/// An error answers its status and the envelope's code and message; a client error is not
/// retried.
#[tokio::test]
async fn an_error_carries_the_apis_code_and_status() {
    let app = TestApp::start("").await;
    let client = Client::new(&app.base()).unwrap().with_retry(quick());
    let missing = client.get_subscriber("nobody").await.unwrap_err();
    assert_eq!(missing.code(), Some("not_found"));
    assert_eq!(missing.status().map(|s| s.as_u16()), Some(404));
    let Error::Api { error, .. } = &missing else {
        panic!("{missing:?}");
    };
    assert!(!error.message.is_empty());
    // The CLI prints this: the status and the API's message.
    assert_eq!(
        missing.to_string(),
        format!("404 Not Found: {}", error.message)
    );

    let invalid = client
        .create_subscriber(&NewSubscriber {
            url: "ftp://x.example/".into(),
            ..NewSubscriber::default()
        })
        .await
        .unwrap_err();
    assert_eq!(invalid.code(), Some("invalid_request"));

    // A token the API does not know.
    let guarded = TestApp::start(&crate::common::api_token(
        "ops",
        "hlk_0123456789abcdef0123456789",
        "admin",
        None,
    ))
    .await;
    let stranger = Client::new(&guarded.base())
        .unwrap()
        .with_token("hlk_wrong");
    let refused = stranger.capacity().await.unwrap_err();
    assert_eq!(refused.code(), Some("unauthorized"));
    guarded.stop().await;

    // Nobody there: no answer, so no code.
    let nowhere = Client::new("http://127.0.0.1:9")
        .unwrap()
        .with_retry(Retry::never());
    let unreachable = nowhere.capacity().await.unwrap_err();
    assert!(
        matches!(unreachable, Error::Unreachable { .. }),
        "{unreachable:?}"
    );
    assert_eq!(unreachable.code(), None);
    app.stop().await;
}

/// A list of more items than a page holds comes whole through the stream, in order, each
/// once; `list_*` is one page with its cursor.
#[tokio::test]
async fn lists_page_across_several_pages() {
    let app = TestApp::start("").await;
    let client = Client::new(&app.base()).unwrap();
    for i in 0..7 {
        client
            .create_subscriber(&NewSubscriber {
                id: Some(format!("s-{i}")),
                url: format!("http://127.0.0.1:9/{i}"),
                ..NewSubscriber::default()
            })
            .await
            .unwrap();
    }
    let first = client
        .list_subscribers(&SubscriberQuery {
            limit: Some(3),
            ..SubscriberQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(first.items.len(), 3);
    assert!(first.next_cursor.is_some());

    let all: Vec<String> = client
        .subscribers_all(SubscriberQuery {
            limit: Some(3),
            ..SubscriberQuery::default()
        })
        .map_ok(|s| s.id)
        .try_collect()
        .await
        .unwrap();
    let expected: Vec<String> = (0..7).map(|i| format!("s-{i}")).collect();
    assert_eq!(all, expected);

    // A filter holds on every page.
    for i in 0..5 {
        client
            .publish(&event(Some(&format!("evt-{i}")), "shipment.paged"))
            .await
            .unwrap();
    }
    client
        .publish(&event(Some("evt-other"), "invoice.paid"))
        .await
        .unwrap();
    let paged: Vec<String> = client
        .events_all(EventQuery {
            event_type: Some("shipment.paged".into()),
            limit: Some(2),
            ..EventQuery::default()
        })
        .map_ok(|e| e.id)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(paged.len(), 5, "{paged:?}");
    assert!(!paged.contains(&"evt-other".to_owned()));
    app.stop().await;
}

/// What the proxy does with a connection.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Passes the request on, lets hookline answer, and closes the connection without the
    /// answer: the event is made, and the publisher cannot know it.
    LoseAnswer,
    /// Answers 503 `unavailable` with `Retry-After: 0` without passing the request on.
    Unavailable,
}

/// A proxy in front of hookline: each connection takes the next fault, and passes through
/// once none is left.
struct Proxy {
    addr: SocketAddr,
    faults: Arc<Mutex<VecDeque<Fault>>>,
}

impl Proxy {
    async fn start(upstream: SocketAddr, faults: impl IntoIterator<Item = Fault>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let faults = Arc::new(Mutex::new(faults.into_iter().collect::<VecDeque<_>>()));
        let queue = faults.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let fault = queue.lock().unwrap().pop_front();
                tokio::spawn(async move {
                    let mut server = TcpStream::connect(upstream).await.unwrap();
                    match fault {
                        None => {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                        Some(Fault::LoseAnswer) => {
                            let request = read_request(&mut client).await;
                            server.write_all(&request).await.unwrap();
                            // The status line comes once the publish is committed.
                            let mut answer = [0u8; 64];
                            let _ = server.read(&mut answer).await;
                        }
                        Some(Fault::Unavailable) => {
                            read_request(&mut client).await;
                            let body = r#"{"error":{"code":"unavailable","message":"try again"}}"#;
                            let answer = format!(
                                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
                                 retry-after: 0\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            client.write_all(answer.as_bytes()).await.unwrap();
                        }
                    }
                });
            }
        });
        Proxy { addr, faults }
    }

    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn faults_left(&self) -> usize {
        self.faults.lock().unwrap().len()
    }
}

/// One whole HTTP/1.1 request with a `content-length` body, as the client sent it.
async fn read_request(stream: &mut TcpStream) -> Vec<u8> {
    let mut request = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the client closed before its request was whole");
        request.extend_from_slice(&chunk[..n]);
        let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&request[..end]).to_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        if request.len() >= end + 4 + length {
            return request;
        }
    }
}

/// A publish whose answer is lost, then refused with a 503, is sent a third time with the
/// same id: the server answers the original receipt, and there is one event.
#[tokio::test]
async fn a_publish_is_retried_under_one_id_after_a_lost_answer_and_a_503() {
    let app = TestApp::start("").await;
    let addr = app.app.as_ref().unwrap().addr;
    let client = Client::new(&app.base()).unwrap();
    client
        .create_subscriber(&NewSubscriber {
            id: Some("s".into()),
            url: "http://127.0.0.1:9/x".into(),
            ..NewSubscriber::default()
        })
        .await
        .unwrap();

    // With its own id, and without one: the client names it once, before the first send.
    for id in [Some("evt-retried"), None] {
        let proxy = Proxy::start(addr, [Fault::LoseAnswer, Fault::Unavailable]).await;
        let through = Client::new(&proxy.base()).unwrap().with_retry(quick());
        let receipt = through
            .publish(&event(id, "shipment.retried"))
            .await
            .unwrap();
        assert_eq!(proxy.faults_left(), 0, "both faults were met");
        if let Some(id) = id {
            assert_eq!(receipt.id, id);
        }
        assert_eq!(receipt.deliveries, 1);
        let deliveries = client
            .list_deliveries(&DeliveryQuery {
                event_id: Some(receipt.id.clone()),
                ..DeliveryQuery::default()
            })
            .await
            .unwrap();
        assert_eq!(deliveries.items.len(), 1);
    }
    let events = client
        .list_events(&EventQuery {
            event_type: Some("shipment.retried".into()),
            ..EventQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(
        events.items.len(),
        2,
        "one event per publish, whatever the retries"
    );

    // Bounded: more failures than attempts end in the last error.
    let proxy = Proxy::start(addr, [Fault::Unavailable; 4]).await;
    let through = Client::new(&proxy.base()).unwrap().with_retry(quick());
    let failed = through
        .publish(&event(Some("evt-never"), "shipment.retried"))
        .await
        .unwrap_err();
    assert_eq!(failed.code(), Some("unavailable"));
    assert_eq!(proxy.faults_left(), 0, "four attempts, no more");
    let missing = client.get_event("evt-never").await.unwrap_err();
    assert_eq!(missing.code(), Some("not_found"));
    app.stop().await;
}
