//! The log on stderr, with the real binary: colour codes only on a terminal, so a file, a pipe
//! or journald gets plain text.

use std::io::BufRead;

/// `hookline serve` with stderr to a pipe: its log lines carry no ESC byte (no ANSI colour).
#[test]
fn logs_to_a_pipe_carry_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let mut serve = std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
        .args(["serve", "--listen", "127.0.0.1:0", "--database"])
        .arg(format!("sqlite://{}", dir.path().join("h.db").display()))
        .env_remove("HOOKLINE_CONFIG")
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = std::io::BufReader::new(serve.stderr.take().unwrap());
    let mut seen = Vec::new();
    // Open mode on loopback warns once it serves: by then the start-up lines are all written.
    while !String::from_utf8_lossy(&seen).contains("no api_tokens configured") {
        let read = log.read_until(b'\n', &mut seen).unwrap();
        assert!(read > 0, "serve ended: {}", String::from_utf8_lossy(&seen));
    }
    serve.kill().unwrap();
    serve.wait().unwrap();
    assert!(
        String::from_utf8_lossy(&seen).contains("serving"),
        "{}",
        String::from_utf8_lossy(&seen)
    );
    assert!(
        !seen.contains(&0x1b),
        "colour codes in a piped log: {:?}",
        String::from_utf8_lossy(&seen)
    );
}

/// A `hookline serve` whose stderr is read line by line as it comes.
struct Serving {
    child: std::process::Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// Every line read so far, for messages.
    seen: Vec<String>,
}

impl Serving {
    /// `hookline serve` with `config` (its text) and `args`, `env` set; on a port of its own.
    fn start(config: &str, args: &[&str], env: &[(&str, &str)]) -> (Serving, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hookline.toml");
        let db = dir.path().join("h.db");
        std::fs::write(
            &path,
            format!(
                "listen = \"127.0.0.1:0\"\ndatabase = \"sqlite://{}\"\n\
                 allow_private_destinations = true\n{config}",
                db.display()
            ),
        )
        .unwrap();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_hookline"));
        command
            .arg("serve")
            .args(args)
            .arg("--config")
            .arg(&path)
            .env_remove("HOOKLINE_CONFIG")
            .env_remove("HOOKLINE_LOG_FORMAT")
            .env_remove("HOOKLINE_LISTEN")
            .env_remove("HOOKLINE_DATABASE")
            .env("RUST_LOG", "info")
            .stderr(std::process::Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().unwrap();
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in stderr.lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let serving = Serving {
            child,
            lines,
            seen: Vec::new(),
        };
        (serving, dir)
    }

    /// The next line `found` accepts, waiting at most 20 s.
    async fn line(&mut self, what: &str, found: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let next = tokio::time::timeout_at(deadline, self.lines.recv()).await;
            match next {
                Ok(Some(line)) => {
                    self.seen.push(line.clone());
                    if found(&line) {
                        return line;
                    }
                }
                _ => panic!("no {what} in the log:\n{}", self.seen.join("\n")),
            }
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every line `serving` logged so far, and from now until the one whose `fields.action` is
/// `action`, each parsed as one JSON object with the five keys; that one is answered.
async fn json_until_action(serving: &mut Serving, action: &str) -> serde_json::Value {
    let line = serving
        .line(action, |l| {
            serde_json::from_str::<serde_json::Value>(l)
                .is_ok_and(|v| v["fields"]["action"] == action)
        })
        .await;
    for seen in &serving.seen {
        let v: serde_json::Value =
            serde_json::from_str(seen).unwrap_or_else(|e| panic!("not a JSON line ({e}): {seen}"));
        assert!(
            hookline_engine::clock::parse_rfc3339(v["timestamp"].as_str().unwrap()).is_some(),
            "{seen}"
        );
        assert!(
            ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&v["level"].as_str().unwrap()),
            "{seen}"
        );
        assert!(
            v["target"].as_str().unwrap().starts_with("hookline"),
            "{seen}"
        );
        assert!(
            v["message"].is_string() && v["fields"].is_object(),
            "{seen}"
        );
    }
    serde_json::from_str(&line).unwrap()
}

/// The `listen` address of the JSON log's "serving" line.
async fn serving_at(serving: &mut Serving) -> String {
    let line = serving
        .line("serving", |l| l.contains("serving") && l.contains("listen"))
        .await;
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    format!("http://{}", v["fields"]["listen"].as_str().unwrap())
}

/// `[log] format = "json"` in the config: every line is one JSON object, and each action an
/// operator takes through the API is logged with its token's name as `by`.
#[tokio::test]
async fn json_logs_from_the_config_say_who_did_what() {
    let token = hookline::tokens::new_token();
    let config = format!(
        "[log]\nformat = \"json\"\n[[api_tokens]]\nname = \"ops-alice\"\nsha256 = \"{}\"\n\
         scope = \"admin\"\n",
        hookline::tokens::sha256_hex(&token)
    );
    let (mut serving, _dir) = Serving::start(&config, &[], &[]);
    let base = serving_at(&mut serving).await;
    let http = reqwest::Client::new();
    let call = async |method: reqwest::Method, path: &str, body: serde_json::Value| {
        let answer = http
            .request(method, format!("{base}{path}"))
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = answer.status();
        let body: serde_json::Value = answer.json().await.unwrap_or_default();
        assert!(status.is_success(), "{path}: {status} {body}");
        body
    };
    let subscriber = serde_json::json!({"id": "s1", "url": "http://127.0.0.1:9/hook"});
    call(reqwest::Method::POST, "/v1/subscribers", subscriber).await;
    let status = |s: &str| serde_json::json!({"status": s});
    call(
        reqwest::Method::PATCH,
        "/v1/subscribers/s1",
        status("paused"),
    )
    .await;
    let paused = json_until_action(&mut serving, "pause").await;
    assert_eq!(paused["level"], "INFO");
    assert_eq!(paused["message"], "subscriber paused");
    assert_eq!(paused["fields"]["subscriber"], "s1");
    assert_eq!(paused["fields"]["by"], "ops-alice");
    call(
        reqwest::Method::PATCH,
        "/v1/subscribers/s1",
        status("active"),
    )
    .await;
    let resumed = json_until_action(&mut serving, "resume").await;
    assert_eq!(resumed["fields"]["by"], "ops-alice");
    call(
        reqwest::Method::POST,
        "/v1/subscribers/s1/secret/rotate",
        serde_json::json!({"grace_period": "1h"}),
    )
    .await;
    let rotated = json_until_action(&mut serving, "rotate_secret").await;
    assert_eq!(rotated["fields"]["by"], "ops-alice");
    assert!(
        !rotated.to_string().contains("whsec_"),
        "a secret in the log: {rotated}"
    );
    let replay = serde_json::json!({"reason": "permanent_failure", "limit": 10});
    call(reqwest::Method::POST, "/v1/dead-letters/replay", replay).await;
    let replayed = json_until_action(&mut serving, "replay").await;
    assert_eq!(replayed["fields"]["selected"], 0);
    assert_eq!(replayed["fields"]["by"], "ops-alice");
    call(
        reqwest::Method::DELETE,
        "/v1/subscribers/s1",
        serde_json::Value::Null,
    )
    .await;
    let revoked = json_until_action(&mut serving, "revoke").await;
    assert_eq!(revoked["fields"]["by"], "ops-alice");
    // What changes every subscriber's retries: a policy, and a rollout of it.
    let policy = serde_json::json!({"name": "retry-more", "retry": {"max_attempts": 8}});
    call(reqwest::Method::POST, "/v1/policies", policy).await;
    let created = json_until_action(&mut serving, "create_policy").await;
    assert_eq!(created["fields"]["policy"], "retry-more");
    assert_eq!(created["fields"]["by"], "ops-alice");
    let rollout = serde_json::json!({"policy": "retry-more", "percent": 5});
    let started = call(reqwest::Method::POST, "/v1/rollouts", rollout).await;
    let id = started["id"].as_str().unwrap().to_owned();
    let logged = json_until_action(&mut serving, "start_rollout").await;
    assert_eq!(
        (&logged["fields"]["rollout"], &logged["fields"]["by"]),
        (&serde_json::json!(id), &serde_json::json!("ops-alice"))
    );
    let abort = format!("/v1/rollouts/{id}/abort");
    call(reqwest::Method::POST, &abort, serde_json::json!({})).await;
    let aborted = json_until_action(&mut serving, "abort_rollout").await;
    assert_eq!(aborted["fields"]["by"], "ops-alice");
}

/// `HOOKLINE_LOG_FORMAT=json` without tokens: JSON lines, and actions are logged as by
/// `(open)`.
#[tokio::test]
async fn json_logs_from_the_environment_in_open_mode() {
    let (mut serving, _dir) = Serving::start("", &[], &[("HOOKLINE_LOG_FORMAT", "json")]);
    let base = serving_at(&mut serving).await;
    let http = reqwest::Client::new();
    let tenant = serde_json::json!({"id": "acme"});
    let made = http
        .post(format!("{base}/v1/tenants"))
        .json(&tenant)
        .send()
        .await
        .unwrap();
    assert!(made.status().is_success(), "{}", made.status());
    // A portal session hands out access and its revocation takes it back: both say who.
    let session: serde_json::Value = http
        .post(format!("{base}/v1/tenants/acme/portal-sessions"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let session_id = session["id"].as_str().unwrap().to_owned();
    let line = json_until_action(&mut serving, "create_portal_session").await;
    assert_eq!(
        (&line["fields"]["session"], &line["fields"]["by"]),
        (
            &serde_json::json!(session_id),
            &serde_json::json!(hookline::logs::OPEN_CALLER)
        )
    );
    let revoked = http
        .delete(format!(
            "{base}/v1/tenants/acme/portal-sessions/{session_id}"
        ))
        .send()
        .await
        .unwrap();
    assert!(revoked.status().is_success(), "{}", revoked.status());
    let line = json_until_action(&mut serving, "revoke_portal_session").await;
    assert_eq!(line["fields"]["session"], session_id.as_str());
    let deleted = http
        .delete(format!("{base}/v1/tenants/acme"))
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success(), "{}", deleted.status());
    let line = json_until_action(&mut serving, "delete_tenant").await;
    assert_eq!(line["fields"]["tenant"], "acme");
    assert_eq!(line["fields"]["by"], hookline::logs::OPEN_CALLER);
}

/// The flag wins over the config file: `--log-format text` with `[log] format = "json"` logs
/// text.
#[tokio::test]
async fn the_flag_wins_over_the_config() {
    let (mut serving, _dir) =
        Serving::start("[log]\nformat = \"json\"\n", &["--log-format", "text"], &[]);
    let line = serving.line("serving", |l| l.contains("serving")).await;
    assert!(
        serde_json::from_str::<serde_json::Value>(&line).is_err() && line.contains(" INFO "),
        "{line}"
    );
}

/// With JSON logs, what a command itself writes to stderr is JSON lines too: here the error
/// it ends with (a config file that is not there), with its exit code unchanged.
#[test]
fn a_command_s_error_is_a_json_line_too() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
        .args([
            "--log-format",
            "json",
            "schedule",
            "--config",
            "/nonexistent/hookline.toml",
        ])
        .env_remove("HOOKLINE_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let last = lines.last().expect("the error");
    assert_eq!(last["level"], "ERROR", "{stderr}");
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/hookline.toml"),
        "{stderr}"
    );
}
