//! The configuration's checks with the real binary: `serve` refuses a `[retry]` whose last
//! attempt can never start inside its window (the rule named policies are held to), and
//! `hookline config check` finds what `serve` would refuse without opening the database.

use std::path::Path;
use std::process::Output;

/// The example: the sixth attempt starts 10m 30s after first seen at the earliest.
const UNFIT: &str = "[retry]\nbase_delay = \"2m\"\nmax_delay = \"5m\"\nmax_attempts = 6\n\
                     delivery_window = \"10m\"\njitter = \"equal\"\n";
const FIT: &str = "[retry]\nbase_delay = \"2s\"\nmax_delay = \"5m\"\nmax_attempts = 6\n\
                   delivery_window = \"30m\"\njitter = \"equal\"\n";
const REFUSAL: &str = "config key `retry.max_attempts`: attempt 6 can never start inside the \
                       10m delivery window (it starts 10m 30s after first seen at the earliest): \
                       lower retry.max_attempts or widen retry.delivery_window";

/// `hookline <args> --database <dir>/h.db`, with none of the environment's settings.
fn hookline(dir: &Path, args: &[&str]) -> (Output, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
        .args(args)
        .arg("--database")
        .arg(format!("sqlite://{}", dir.join("h.db").display()))
        .env_remove("HOOKLINE_CONFIG")
        .env_remove("HOOKLINE_DATABASE")
        .env_remove("HOOKLINE_LISTEN")
        .env_remove("HOOKLINE_ROLE")
        .env_remove("HOOKLINE_OTLP_ENDPOINT")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out, text)
}

fn config_file(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn serve_refuses_a_retry_policy_that_cannot_fit_its_window() {
    let dir = tempfile::tempdir().unwrap();
    let unfit = config_file(dir.path(), "unfit.toml", UNFIT);
    let (out, text) = hookline(
        dir.path(),
        &["serve", "--config", &unfit, "--listen", "127.0.0.1:0"],
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(REFUSAL), "{text}");
    assert!(
        !dir.path().join("h.db").exists(),
        "refused before the store"
    );
}

#[test]
fn config_check_runs_the_start_up_checks_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let check = |args: &[&str]| hookline(dir.path(), &[&["config", "check"], args].concat());

    let fit = config_file(dir.path(), "fit.toml", FIT);
    let (out, text) = check(&["--config", &fit]);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("config ok"), "{text}");
    assert!(
        text.contains("6 attempts, the last starting at most 1m 52s after first seen"),
        "{text}"
    );
    let (out, text) = check(&[]);
    assert_eq!(out.status.code(), Some(0), "the defaults fit: {text}");

    let unfit = config_file(dir.path(), "unfit.toml", UNFIT);
    let (out, text) = check(&["--config", &unfit]);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(REFUSAL), "{text}");

    let malformed = config_file(dir.path(), "bad.toml", "[retry\nbase_delay = \"2s\"\n");
    let (out, text) = check(&["--config", &malformed]);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("config file {malformed}: line 1 (`[retry`)")),
        "{text}"
    );

    // What start-up refuses beyond the file: a split role on SQLite.
    let (out, text) = check(&["--config", &fit, "--role", "worker"]);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("PostgreSQL"), "{text}");

    assert!(!dir.path().join("h.db").exists(), "nothing was opened");
}

/// A bad `[telemetry] otlp_endpoint`, in the file or by flag, is refused naming the key by
/// `config check` and by `serve`, before anything starts; a good one is where traces go.
#[test]
fn a_bad_otlp_endpoint_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = "config key `telemetry.otlp_endpoint`";
    let bad = config_file(
        dir.path(),
        "bad.toml",
        "[telemetry]\notlp_endpoint = \"grpc://127.0.0.1:4317\"\n",
    );
    for command in [
        &["config", "check"][..],
        &["serve", "--listen", "127.0.0.1:0"],
    ] {
        let (out, text) = hookline(dir.path(), &[command, &["--config", &bad]].concat());
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.contains(key) && text.contains("http or https"),
            "{text}"
        );
    }
    let flag = [
        "config",
        "check",
        "--otlp-endpoint",
        "http://user:pw@127.0.0.1:4318",
    ];
    let (out, text) = hookline(dir.path(), &flag);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(key) && !text.contains("pw@"), "{text}");
    assert!(
        !dir.path().join("h.db").exists(),
        "refused before the store"
    );
    let (out, text) = hookline(
        dir.path(),
        &[
            "config",
            "check",
            "--otlp-endpoint",
            "http://127.0.0.1:4318",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("traces: exported to http://127.0.0.1:4318/v1/traces"),
        "{text}"
    );
}
