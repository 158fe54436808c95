//! The server's limits, against its real socket: a silent client, half a request head, half a
//! body and idle keep-alive connections are all closed (and counted); at the connection cap,
//! idle clients cannot lock out `/healthz`.

use std::time::Duration;

use crate::common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const QUICK: &str = "[http]\nheader_read_timeout = \"300ms\"\nbody_read_timeout = \"300ms\"\nidle_timeout = \"300ms\"\n";

/// A whole request head announcing 100 bytes of body, and 8 of them.
const HALF_A_BODY: &[u8] = b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\
    content-type: application/json\r\ncontent-length: 100\r\n\r\n{\"type\":";

async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(app.app.as_ref().unwrap().addr)
        .await
        .unwrap()
}

/// Reads until the server closes the connection (bounded, so a server that never closes fails
/// the test instead of hanging it), returning what it sent.
async fn until_closed(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "the server kept the connection open");
    String::from_utf8_lossy(&got).into_owned()
}

/// A client that keeps no connection open between requests, so the server's timeouts never
/// race it and it adds nothing to what these tests count.
fn unpooled() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn get(app: &TestApp, path: &str) -> reqwest::Response {
    unpooled()
        .get(format!("{}{path}", app.base()))
        .send()
        .await
        .unwrap()
}

async fn closed_count(app: &TestApp, reason: &str) -> u64 {
    let text = unpooled()
        .get(format!("{}/metrics", app.base()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = format!("hookline_http_connections_closed_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test]
async fn slow_and_silent_clients_are_disconnected_and_counted() {
    let app = TestApp::start(QUICK).await;
    let before = (
        closed_count(&app, "idle_timeout").await,
        closed_count(&app, "header_timeout").await,
    );

    // Nothing at all.
    let mut silent = connect(&app).await;
    assert_eq!(until_closed(&mut silent).await, "");

    // Half a request head.
    let mut half_head = connect(&app).await;
    half_head
        .write_all(b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    assert_eq!(until_closed(&mut half_head).await, "");

    // A head, then half its body: 408 in the error envelope, and the connection closes.
    let mut half_body = connect(&app).await;
    half_body.write_all(HALF_A_BODY).await.unwrap();
    let answer = until_closed(&mut half_body).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"request_timeout\""), "{answer}");
    // The client is told the connection ends, so it does not send another request on it.
    assert!(answer.contains("connection: close\r\n"), "{answer}");

    // Kept alive after an answer, then idle.
    let mut kept = connect(&app).await;
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let answer = until_closed(&mut kept).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    eventually("the closes to be counted", async || {
        let after = (
            closed_count(&app, "idle_timeout").await,
            closed_count(&app, "header_timeout").await,
            closed_count(&app, "body_timeout").await,
        );
        (after.0 >= before.0 + 2 && after.1 > before.1 && after.2 >= 1).then_some(())
    })
    .await;
    // A prompt client is not hurried: a request sent at once is answered.
    assert_eq!(get(&app, "/healthz").await.status(), 200);
    app.stop().await;
}

#[tokio::test]
async fn idle_clients_at_the_cap_cannot_lock_out_health_checks() {
    let app = TestApp::start("[http]\nmax_connections = 4\nidle_timeout = \"1h\"\n").await;
    let mut idle = Vec::new();
    for _ in 0..8 {
        idle.push(connect(&app).await);
    }
    // Each connection past the cap displaced the one idle longest; a probe gets in too.
    for _ in 0..3 {
        assert_eq!(get(&app, "/healthz").await.status(), 200);
    }
    let mut closed = 0;
    for stream in &mut idle {
        let mut byte = [0u8; 1];
        if let Ok(Ok(0)) =
            tokio::time::timeout(Duration::from_millis(500), stream.read(&mut byte)).await
        {
            closed += 1;
        }
    }
    assert!(
        closed >= 5,
        "only {closed} of 8 idle connections were displaced"
    );
    assert!(closed_count(&app, "evicted").await >= 5);
    app.stop().await;
}

#[tokio::test]
async fn a_stop_does_not_wait_for_idle_clients() {
    let app = TestApp::start("[http]\nidle_timeout = \"1h\"\nheader_read_timeout = \"1h\"\n").await;
    let mut silent = connect(&app).await;
    let mut half_head = connect(&app).await;
    half_head
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .unwrap();
    // Bounded, so a stop that waited for the hour-long timeouts fails rather than hangs.
    let stopped = tokio::time::timeout(Duration::from_secs(30), app.stop()).await;
    assert!(stopped.is_ok(), "the stop waited for idle clients");
    assert_eq!(until_closed(&mut silent).await, "");
    assert_eq!(until_closed(&mut half_head).await, "");
}

/// A body still arriving at a stop is answered 408 after the stop's grace, and the stop goes
/// on: it neither waits for the hour-long body timeout nor drops the request unanswered.
#[tokio::test]
async fn a_stop_answers_a_body_still_arriving_408() {
    let app = TestApp::start("[http]\nbody_read_timeout = \"1h\"\n").await;
    let mut slow = connect(&app).await;
    slow.write_all(HALF_A_BODY).await.unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(30), app.stop()).await;
    assert!(stopped.is_ok(), "the stop waited for the body");
    let answer = until_closed(&mut slow).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("when the server stopped"), "{answer}");
    assert!(answer.contains("connection: close\r\n"), "{answer}");
}

/// Part of a next request head that arrives while the previous request is being answered
/// (a pipelining client) is timed as a head once the answer is written: the connection is
/// closed after `header_read_timeout` and counted `header_timeout`, not left for the idle
/// timeout. The answer is slow here because another process holds the database's write lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_begun_during_an_answer_is_timed_as_a_head() {
    let app =
        TestApp::start("[http]\nheader_read_timeout = \"300ms\"\nidle_timeout = \"1h\"\n").await;
    let lock = rusqlite::Connection::open(TestApp::db_path(&app.dir)).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut stream = connect(&app).await;
    let body = r#"{"id":"e1","type":"t","payload":1}"#;
    stream
        .write_all(
            format!(
                "POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                 content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // Sent apart from the first request, so the server reads it while answering that one.
    tokio::time::sleep(Duration::from_millis(200)).await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    lock.execute_batch("ROLLBACK").unwrap();
    let answer = until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    eventually("the close to be counted", async || {
        (closed_count(&app, "header_timeout").await == 1).then_some(())
    })
    .await;
    app.stop().await;
}

/// Clients sending their bodies slowly are displaced at the cap too (their requests answered
/// 408), so they cannot lock out a probe either.
#[tokio::test]
async fn slow_bodies_at_the_cap_cannot_lock_out_health_checks() {
    let app = TestApp::start("[http]\nmax_connections = 2\nbody_read_timeout = \"1h\"\n").await;
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut stream = connect(&app).await;
        stream.write_all(HALF_A_BODY).await.unwrap();
        slow.push(stream);
    }
    assert_eq!(get(&app, "/healthz").await.status(), 200);
    let first = until_closed(&mut slow[0]).await;
    assert!(first.starts_with("HTTP/1.1 408"), "{first}");
    assert!(first.contains("needed the connection"), "{first}");
    app.stop().await;
}

/// A stop while the cap is held by requests being answered waits for their answers, then
/// returns: it neither hangs nor drops them, nor the requests clients sent before it to a
/// connection waiting for room or not accepted yet. Here the answer is slow because another
/// process holds the database's write lock for a while.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_at_the_cap_waits_for_answers_under_way() {
    let app = TestApp::start("[http]\nmax_connections = 1\n").await;
    let lock = rusqlite::Connection::open(TestApp::db_path(&app.dir)).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut busy = connect(&app).await;
    let body = r#"{"id":"e1","type":"t","payload":1}"#;
    busy.write_all(
        format!(
            "POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    // Two more clients send requests behind the one being answered: the server holds one of
    // them until there is room, the other is not accepted yet when the stop comes.
    let mut waiting = Vec::new();
    for _ in 0..2 {
        let mut stream = connect(&app).await;
        stream
            .write_all(b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        waiting.push(stream);
    }
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        lock.execute_batch("ROLLBACK").unwrap();
    });
    let stopped = tokio::time::timeout(Duration::from_secs(30), app.stop()).await;
    assert!(stopped.is_ok(), "the stop hung");
    release.join().unwrap();
    let answer = until_closed(&mut busy).await;
    assert!(answer.starts_with("HTTP/1.1 "), "no answer: {answer:?}");
    for stream in &mut waiting {
        let answer = until_closed(stream).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "no answer: {answer:?}");
    }
}

/// Clients that ask for large answers and never read them cannot hold the cap either: at the
/// cap, the one that left its answer unread longest is displaced (after idle and slow ones).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_answers_at_the_cap_cannot_lock_out_health_checks() {
    let app = TestApp::start("[http]\nmax_connections = 3\n").await;
    // 200 subscribers with long event types: a list answer of about 5 MB.
    let types: Vec<String> = (0..100)
        .map(|i| format!("{i:03}{}", "t".repeat(247)))
        .collect();
    let bodies = (0..200)
        .map(|i| serde_json::json!({"id": format!("s{i}"), "url": "http://127.0.0.1:9/x", "event_types": types}))
        .collect();
    hookline_testkit::create_subscribers(&unpooled(), &app.base(), None, bodies, 8)
        .await
        .unwrap();
    let mut readers = Vec::new();
    for _ in 0..3 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket
            .connect(app.app.as_ref().unwrap().addr)
            .await
            .unwrap();
        stream
            .write_all(b"GET /v1/subscribers?limit=1000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        readers.push(stream);
    }
    assert_eq!(get(&app, "/healthz").await.status(), 200);
    // The displaced one got the start of its answer, then the close.
    let mut cut = 0;
    for stream in &mut readers {
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut got)).await;
        if matches!(read, Ok(Ok(_))) && got.len() < 4_000_000 {
            cut += 1;
        }
    }
    assert!(cut >= 1, "no unread answer was displaced");
    app.stop().await;
}
