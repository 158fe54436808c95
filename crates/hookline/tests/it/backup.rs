//! Backup and restore of the embedded store, with the real binary: a backup taken while a
//! fan-out is being delivered, restored into a new file and served, delivers every delivery
//! that was outstanding when the backup was taken, under the same `webhook-id`. A restore onto
//! a store that a hookline is serving is refused and changes nothing.

use std::time::Duration;

use crate::common::*;
use hookline_store::DeliveryFilter;
use serde_json::json;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SUBSCRIBERS: usize = 50;
const EVENTS: usize = 6;

fn hookline(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
        .args(args)
        .output()
        .unwrap()
}

/// The deliveries of a store not yet delivered or dead, read from a copy so the file itself
/// stays as it was.
async fn outstanding(db: &std::path::Path) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.db");
    std::fs::copy(db, &copy).unwrap();
    let store = hookline_store::open(&format!("sqlite://{}", copy.display()))
        .await
        .unwrap();
    let mut ids = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list_deliveries(DeliveryFilter::default(), 1000, cursor)
            .await
            .unwrap();
        ids.extend(
            page.items
                .into_iter()
                .filter(|d| {
                    matches!(
                        d.state,
                        hookline_store::DeliveryState::Scheduled
                            | hookline_store::DeliveryState::InFlight
                    )
                })
                .map(|d| d.id),
        );
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return ids,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_during_a_fan_out_restored_and_served_delivers_everything_outstanding() {
    // Slow answers keep the fan-out under way while the backup is taken.
    let rx = Receiver::start_slow(Duration::from_millis(200), |_, _| 200).await;
    let dir = tempfile::tempdir().unwrap();
    let original = dir.path().join("hookline.db");
    let config = |db: &std::path::Path| {
        format!(
            "database = \"sqlite://{}\"\nallow_private_destinations = true\n\
             [delivery]\nattempt_timeout = \"1s\"\nmax_in_flight_per_subscriber = 1\n",
            db.display()
        )
    };
    let mut serving = Process::spawn(dir.path(), "original", &config(&original), "all").await;
    let http = reqwest::Client::new();
    for i in 0..SUBSCRIBERS {
        let r = http
            .post(format!("{}/v1/subscribers", serving.base))
            .json(
                &json!({"id": format!("s{i}"), "url": rx.url(&format!("/s{i}")), "secret": SECRET}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    for e in 0..EVENTS {
        let r = http
            .post(format!("{}/v1/events", serving.base))
            .json(
                &json!({"id": format!("SHP-{e}"), "type": "shipment.out_for_delivery",
                          "payload": {"n": e}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
    }
    eventually("the fan-out to be under way", async || {
        (rx.received().len() >= 120).then_some(())
    })
    .await;

    let backup = dir.path().join("backup.db");
    let db_url = format!("sqlite://{}", original.display());
    let out = hookline(&[
        "backup",
        "--database",
        &db_url,
        "--to",
        backup.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains(&format!("{} events", EVENTS)), "{printed}");

    // A second backup to the same file, or a restore onto the store being served: refused.
    let again = hookline(&[
        "backup",
        "--database",
        &db_url,
        "--to",
        backup.to_str().unwrap(),
    ]);
    assert!(!again.status.success());
    let refused = hookline(&[
        "restore",
        "--from",
        backup.to_str().unwrap(),
        "--database",
        &db_url,
    ]);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("is in use"), "{why}");
    let r = http
        .get(format!("{}/v1/events/SHP-0", serving.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the served store still answers");
    serving.kill_9();

    let expected = outstanding(&backup).await;
    assert!(
        !expected.is_empty() && expected.len() < SUBSCRIBERS * EVENTS,
        "the backup was taken mid fan-out ({} outstanding)",
        expected.len()
    );
    let restored = dir.path().join("restored.db");
    let out = hookline(&[
        "restore",
        "--from",
        backup.to_str().unwrap(),
        "--database",
        &format!("sqlite://{}", restored.display()),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let served = Process::spawn(dir.path(), "restored", &config(&restored), "all").await;
    for id in &expected {
        eventually(&format!("{id} to be delivered"), async || {
            let d: serde_json::Value = http
                .get(format!("{}/v1/deliveries/{id}", served.base))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            (d["state"] == "delivered").then_some(())
        })
        .await;
        let got = rx.received_for(id);
        assert!(!got.is_empty(), "{id} never arrived");
        for r in got {
            standardwebhooks::Webhook::new(SECRET)
                .unwrap()
                .verify(&r.body, &r.headers())
                .unwrap();
        }
    }
    assert_eq!(served.terminate().await.unwrap().code(), Some(0));
}

/// Only `serve` and `migrate` create a store: `prune`, `backup` and `migrate --status` refuse a
/// database that is not there (a typo), with an error and a non-zero exit, and create nothing;
/// an empty file is no store either.
#[test]
fn commands_refuse_a_database_that_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("typo.db");
    let url = format!("sqlite://{}", typo.display());
    let backup = dir.path().join("backup.db");
    for args in [
        vec!["prune", "--database", &url, "--delivered-before", "7d"],
        vec![
            "backup",
            "--database",
            &url,
            "--to",
            backup.to_str().unwrap(),
        ],
        vec!["migrate", "--status", "--database", &url],
    ] {
        let out = hookline(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains("error:"), "{args:?}: {stderr}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("pruned"));
        assert!(!typo.exists(), "{args:?} created {}", typo.display());
        assert!(!backup.exists(), "{args:?} wrote a backup");
    }
    std::fs::write(&typo, b"").unwrap();
    let out = hookline(&["prune", "--database", &url, "--delivered-before", "7d"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("no hookline store"), "{stderr}");
    assert_eq!(std::fs::metadata(&typo).unwrap().len(), 0, "left as it was");
}
