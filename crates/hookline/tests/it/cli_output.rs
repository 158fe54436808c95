//! `-o json` (`--output json`) on every command that lists or reports, with the real binary:
//! stdout is one JSON document a script parses, holding what the table shows; the exit codes
//! are those `hookline --help` documents (0 ok, 1 failure or a verdict against, 2 usage).

use crate::common::*;
use hookline_engine::clock::{rfc3339, Clock};
use serde_json::Value;

/// Runs `hookline ARGS` with no config from the environment: its exit code, stdout parsed as
/// JSON when it is (else null), and stdout and stderr as text for messages.
fn hookline(args: &[&str]) -> (Option<i32>, Value, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
        .args(args)
        .env_remove("HOOKLINE_CONFIG")
        .env_remove("HOOKLINE_DATABASE")
        .env_remove("HOOKLINE_LOG_FORMAT")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let json = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    let text = stdout + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), json, text)
}

/// `hookline ARGS`, run off the async runtime (it calls the test's server).
async fn hookline_async(args: Vec<String>) -> (Option<i32>, Value, String) {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        hookline(&args)
    })
    .await
    .unwrap()
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// Against a live server: `dlq list`, `dlq replay` (its dry run and a replay), `resend` (its
/// dry run and a confirmed one) and `policy schedule`, each with `-o json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_commands_print_one_json_document() {
    let rx = Receiver::start(|_, _| 400).await;
    let app = TestApp::start("").await;
    app.subscriber("s", &rx.url("/s")).await;
    let since = rfc3339(app.clock.now_ms());
    for i in 0..2 {
        app.publish(&format!("e{i}"), "shipment.delivered").await;
    }
    eventually("2 dead letters", async || {
        let (_, dead) = app.call("GET", "/v1/dead-letters", None).await;
        (dead["items"].as_array().unwrap().len() == 2).then_some(())
    })
    .await;
    app.clock.advance(std::time::Duration::from_secs(1));
    let until = rfc3339(app.clock.now_ms());
    let base = app.base();
    let api = |args: &[&str]| {
        let mut all = strings(args);
        all.extend(strings(&["--api", &base]));
        hookline_async(all)
    };

    let (code, page, text) = api(&["dlq", "list", "-o", "json"]).await;
    assert_eq!(code, Some(0), "{text}");
    let (_, expected) = app.call("GET", "/v1/dead-letters?limit=100", None).await;
    assert_eq!(page, expected, "the API's page, as it answered");
    assert_eq!(page["items"][0]["reason"], "permanent_failure");

    let replay = [
        "dlq",
        "replay",
        "--reason",
        "permanent_failure",
        "--limit",
        "10",
    ];
    let (code, preview, text) =
        api(&[&replay[..], &["--dry-run", "--output", "json"]].concat()).await;
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(preview["selected"], 2, "{preview}");
    assert_eq!(preview["delivery_ids"].as_array().unwrap().len(), 2);

    rx.set_behaviour(|_, _| 200);
    let (code, audit, text) = api(&[&replay[..], &["-o", "json"]].concat()).await;
    assert_eq!(code, Some(0), "{text}");
    let id = audit["id"].as_str().unwrap_or_default();
    assert!(id.starts_with("rpl_"), "the replay's audit record: {audit}");
    assert_eq!(audit["selected"], 2);

    let resend = [
        "resend",
        "--subscriber",
        "s",
        "--since",
        &since,
        "--until",
        &until,
        "--limit",
        "10",
    ];
    let (code, preview, text) = api(&[&resend[..], &["--dry-run", "-o", "json"]].concat()).await;
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(preview["event_ids"], serde_json::json!(["e0", "e1"]));
    // One document and no question: -o json needs --yes or --dry-run.
    let (code, _, text) = api(&[&resend[..], &["-o", "json"]].concat()).await;
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("--yes"), "{text}");
    let (code, made, text) = api(&[&resend[..], &["--yes", "-o", "json"]].concat()).await;
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(made["selected"], 2, "{made}");
    assert_eq!(made["delivery_ids"].as_array().unwrap().len(), 2);

    let (code, schedule, text) = api(&["policy", "schedule", "default", "-o", "json"]).await;
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(schedule["name"], "default");
    assert_eq!(schedule["attempts"].as_array().unwrap().len(), 23);
    assert!(
        schedule["breaker"]["failures"].as_u64().is_some(),
        "{schedule}"
    );

    // The API's refusal is a failure: 1.
    let (code, _, text) = api(&["policy", "schedule", "nonesuch", "-o", "json"]).await;
    assert_eq!(code, Some(1), "{text}");
    app.stop().await;
}

/// Without a server: `schedule`, `capacity` (its verdict both ways), `migrate` and
/// `migrate --status`, `backup`, `prune`, `config check` and `token new`, each with `-o json`;
/// and what has nothing to report refuses `-o json` as a usage error.
#[test]
fn local_commands_print_one_json_document() {
    let (code, schedule, text) = hookline(&["schedule", "-o", "json"]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(schedule["attempts"].as_array().unwrap().len(), 23);
    assert_eq!(schedule["policy"]["max_attempts"], 23);

    let capacity = |fanout: &str| {
        hookline(&[
            "capacity",
            "--service-rate",
            "100",
            "--events-per-second",
            "1",
            "--fanout",
            fanout,
            "--backlog",
            "1000",
            "-o",
            "json",
        ])
    };
    let (code, fits, text) = capacity("50");
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(fits["verdict"], "fits", "{fits}");
    assert_eq!(fits["at_failure_rate"]["required_attempts_per_s"], 50.0);
    assert_eq!(fits["backlog"]["deliveries"], 1000);
    assert_eq!(
        fits["backlog"]["drain"]["at_failure_rate"]["inside_window"],
        true
    );
    // A verdict against: the document, and 1.
    let (code, over, text) = capacity("150");
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(over["verdict"], "over", "{over}");
    assert_eq!(over["at_failure_rate"]["fits"], false);

    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("h.db").display());
    let (code, migrated, text) = hookline(&["migrate", "--database", &db, "-o", "json"]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(migrated["pending"], serde_json::json!([]), "{migrated}");
    assert_eq!(migrated["compatible"], true);
    let (code, status, text) = hookline(&["migrate", "--status", "--database", &db, "-o", "json"]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(status, migrated, "the status is what migrate reported");
    assert!(status["version"].as_u64().unwrap() > 0, "{status}");

    let copy = dir.path().join("copy.db");
    let (code, backup, text) = hookline(&[
        "backup",
        "--database",
        &db,
        "--to",
        copy.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(backup["events"], 0, "{backup}");
    assert_eq!(backup["deliveries"]["dead"], 0);
    let (code, pruned, text) = hookline(&[
        "prune",
        "--database",
        &db,
        "--delivered-before",
        "7d",
        "-o",
        "json",
    ]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(pruned["pruned"], 0, "{pruned}");

    let (code, check, text) = hookline(&["config", "check", "--database", &db, "-o", "json"]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(
        (&check["ok"], &check["role"]),
        (&Value::from(true), &Value::from("all"))
    );

    let (code, token, text) = hookline(&[
        "token", "new", "--name", "ci", "--scope", "read", "-o", "json",
    ]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(token["name"], "ci");
    assert_eq!(token["sha256"].as_str().unwrap().len(), 64, "{token}");

    // Usage: 2, whether clap or the command finds it.
    for args in [
        vec!["serve", "-o", "json"],
        vec!["config", "defaults", "-o", "json"],
        vec!["schedule", "-o", "yaml"],
        vec!["dlq", "list", "--json"],
        vec![
            "prune",
            "--database",
            &db,
            "--delivered-before",
            "7d",
            "--batch",
            "0",
        ],
        vec![
            "capacity",
            "--service-rate",
            "1",
            "--events-per-second",
            "2e9",
            "--fanout",
            "1",
        ],
    ] {
        let (code, _, text) = hookline(&args);
        assert_eq!(code, Some(2), "{args:?}: {text}");
    }
}

/// `hookline --help` says what the exit codes mean.
#[test]
fn help_documents_the_exit_codes() {
    let (code, _, help) = hookline(&["--help"]);
    assert_eq!(code, Some(0), "{help}");
    for line in [
        "Exit codes:",
        "0  ok",
        "1  failure, or a verdict against",
        "2  usage",
    ] {
        assert!(help.contains(line), "{line}: {help}");
    }
    assert!(
        help.contains("--output") && help.contains("--log-format"),
        "{help}"
    );
}
