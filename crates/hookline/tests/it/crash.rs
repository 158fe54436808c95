//! Nothing accepted is lost: the real binary is killed with SIGKILL in the middle of a
//! 2,000-subscriber fan-out, started again on the same database, and every delivery of every
//! event it had answered 2xx for reaches the subscriber. Then SIGTERM stops it cleanly (exit 0).
//! And one process serves a SQLite file: a second `serve` on it is refused while the first runs.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::*;
use serde_json::json;

const SUBSCRIBERS: usize = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_2000_subscriber_fan_out_loses_nothing() {
    let rx = Receiver::start(|_, _| 200).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        // One receiver stands for 2,000 hosts: the cap per host is off (tests/it/host_cap.rs).
        // Attempts the kill cut off are retried after base_delay: seconds, inside the wait.
        "database = \"sqlite://{}\"\nallow_private_destinations = true\n[delivery]\nattempt_timeout = \"2s\"\nmax_in_flight_per_host = 0\n[retry]\nbase_delay = \"2s\"\n",
        dir.path().join("hookline.db").display()
    );
    let http = reqwest::Client::new();
    let mut hookline = Process::spawn(dir.path(), "hookline", &config, "all").await;
    let base = hookline.base.clone();

    // 2,000 subscribers, created 16 at a time.
    let mut creators = tokio::task::JoinSet::new();
    for worker in 0..16 {
        let (http, base, url) = (http.clone(), base.clone(), rx.url("/fanout"));
        creators.spawn(async move {
            for i in (worker..SUBSCRIBERS).step_by(16) {
                let r = http
                    .post(format!("{base}/v1/subscribers"))
                    .json(&json!({"id": format!("subscriber-{i}"), "url": url}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 201);
            }
        });
    }
    while creators.join_next().await.is_some() {}

    // Publish until the kill; remember what was acknowledged and what was in doubt.
    let accepted = Arc::new(Mutex::new(Vec::<String>::new()));
    let in_doubt = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = tokio::spawn({
        let (http, base, accepted, in_doubt, stop) = (
            http.clone(),
            base.clone(),
            accepted.clone(),
            in_doubt.clone(),
            stop.clone(),
        );
        async move {
            let mut i = 0;
            while !stop.load(Ordering::Acquire) && i < 20 {
                let id = format!("SHP-{i}");
                let sent = http
                    .post(format!("{base}/v1/events"))
                    .json(&json!({"id": id, "type": "shipment.out_for_delivery", "payload": {"n": i}}))
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status() == 202 => accepted.lock().unwrap().push(id),
                    Ok(r) => panic!("publish answered {}", r.status()),
                    Err(_) => {
                        in_doubt.lock().unwrap().push(id);
                        break;
                    }
                }
                i += 1;
            }
        }
    });
    eventually("the fan-out to be under way", async || {
        (rx.received().len() >= 1_500).then_some(())
    })
    .await;
    hookline.kill_9();
    stop.store(true, Ordering::Release);
    publisher.await.unwrap();
    let accepted = accepted.lock().unwrap().clone();
    let in_doubt = in_doubt.lock().unwrap().clone();
    let before_restart = rx.received().len();
    eprintln!(
        "killed after {before_restart} receipts; {} events acknowledged, {} in doubt",
        accepted.len(),
        in_doubt.len()
    );
    assert!(!accepted.is_empty());
    assert!(
        before_restart < accepted.len() * SUBSCRIBERS,
        "the kill came after everything was delivered; nothing was tested"
    );

    let hookline = Process::spawn(dir.path(), "hookline", &config, "all").await;
    let base = hookline.base.clone();
    // Events whose publish was cut off by the kill are all-or-nothing.
    let mut expected_events: Vec<String> = accepted.clone();
    for id in &in_doubt {
        let r = http
            .get(format!("{base}/v1/events/{id}"))
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            let event: serde_json::Value = r.json().await.unwrap();
            assert_eq!(
                event["deliveries"], SUBSCRIBERS,
                "a partial fan-out was committed"
            );
            expected_events.push(id.clone());
        } else {
            assert_eq!(r.status(), 404);
        }
    }
    let expected: HashSet<String> = expected_events
        .iter()
        .flat_map(|e| (0..SUBSCRIBERS).map(move |s| format!("{e}:subscriber-{s}")))
        .collect();
    eventually("every accepted delivery to arrive", async || {
        let seen: HashSet<String> = rx.received().into_iter().map(|r| r.webhook_id).collect();
        expected.is_subset(&seen).then_some(())
    })
    .await;
    for id in &expected_events {
        let event: serde_json::Value = eventually("completions to be committed", async || {
            let e: serde_json::Value = http
                .get(format!("{base}/v1/events/{id}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            (e["counts"]["delivered"] == SUBSCRIBERS).then_some(e)
        })
        .await;
        assert_eq!(event["counts"]["dead"], 0);
    }
    let seen: HashSet<String> = rx.received().into_iter().map(|r| r.webhook_id).collect();
    assert_eq!(seen, expected, "no delivery lost, none invented");

    // SIGTERM: a clean stop.
    let status = hookline.terminate().await.unwrap();
    assert!(status.success(), "SIGTERM exit: {status}");
}

/// A second `serve` on a SQLite file another process serves exits at once, naming that process,
/// under any name of the file (its own, a hard link, a symlink); once it has stopped, the file
/// can be served again (and after a SIGKILL too: the test above starts again on the same file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_serving_the_same_sqlite_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let database = |name: &str| {
        format!(
            "database = \"sqlite://{}\"\n",
            dir.path().join(name).display()
        )
    };
    let config = database("hookline.db");
    let first = Process::spawn(dir.path(), "first", &config, "all").await;
    std::fs::hard_link(dir.path().join("hookline.db"), dir.path().join("hard.db")).unwrap();
    std::os::unix::fs::symlink(
        dir.path().join("hookline.db"),
        dir.path().join("symlink.db"),
    )
    .unwrap();
    for name in ["hard.db", "symlink.db", "hookline.db"] {
        let second_config = dir.path().join("second.toml");
        let port = hookline_testkit::free_port().unwrap();
        std::fs::write(
            &second_config,
            format!("listen = \"127.0.0.1:{port}\"\n{}", database(name)),
        )
        .unwrap();
        let mut second = std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
            .args(["serve", "--config", &second_config.display().to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Refused at start, or (if the lock is missing) serving: killed after 20 s and failed.
        let mut exited = None;
        for _ in 0..400 {
            exited = second.try_wait().unwrap();
            if exited.is_some() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        if exited.is_none() {
            let _ = second.kill();
        }
        let refused = second.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            exited.is_some_and(|status| !status.success()),
            "a second process served the same file as {name}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("another hookline process (pid {})", first.pid())),
            "{name}: {stderr}"
        );
    }
    assert!(first.terminate().await.unwrap().success());
    let again = Process::spawn(dir.path(), "second", &database("hard.db"), "all").await;
    assert!(again.terminate().await.unwrap().success());
}
