//! `hookline drill`, end to end at a small scale: it starts its own hookline and sink, runs all
//! four phases (including SIGKILL and restart), the shared host's phase, and writes its report
//! and chart.

/// Runs `hookline drill -o json` with `args`: its output and report (`--json`), which is what
/// it printed on stdout.
fn drill(args: &[&str]) -> (std::process::Output, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("drill.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
        .arg("drill")
        .args(args)
        .args(["--json", json.to_str().unwrap(), "-o", "json"])
        .output()
        .unwrap();
    let report = std::fs::read_to_string(&json).map_or(serde_json::Value::Null, |text| {
        serde_json::from_str(&text).unwrap()
    });
    if !report.is_null() {
        let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "-o json: stdout is not JSON ({e}):\n{}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        assert_eq!(printed, report, "stdout is the report --json writes");
    }
    (out, report)
}

/// Every check but the wall-clock latency comparisons must pass. Those compare latencies of two
/// phases on a shared machine: the drill measures them (figures in docs/RUNBOOK.md from release
/// runs at full scale); a test does not assert on wall-clock time.
fn assert_passed_but_latency(out: &std::process::Output, report: &serde_json::Value) {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    // The exit code follows the checks.
    assert_eq!(out.status.success(), report["passed"] == true, "{stdout}");
    for check in report["checks"].as_array().unwrap() {
        let name = check["check"].as_str().unwrap();
        if !name.contains("latency") {
            assert!(check["passed"] == true, "{name}\n{stdout}\n{stderr}");
        }
    }
}

#[test]
fn the_drill_runs_its_four_phases_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let (json, svg) = (dir.path().join("drill.json"), dir.path().join("drill.svg"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
        .args([
            "drill",
            "--subscribers",
            "60",
            "--events",
            "2",
            "--interval",
            "200ms",
        ])
        .args([
            "--mode",
            "503",
            "--slo",
            "20s",
            "--shared-host",
            "0",
            "--json",
            json.to_str().unwrap(),
        ])
        .args(["--svg", svg.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for phase in ["phase 1/4", "phase 2/4", "phase 3/4", "phase 4/4 crash"] {
        assert!(stderr.contains(phase), "{phase} missing:\n{stderr}");
    }
    assert!(!stderr.contains("phase 3b/4"), "--shared-host 0 skips it");
    assert!(
        stdout.contains("PHASE") && stdout.contains("P99 MS"),
        "{stdout}"
    );
    assert!(
        stdout.contains("run_at, attempts and first_seen unchanged"),
        "{stdout}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["checks"].as_array().unwrap().len(), 6, "{report}");
    assert_eq!(report["phases"]["baseline"]["first_attempt"]["n"], 120);
    assert_passed_but_latency(&out, &report);
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(
        chart.starts_with("<svg") && chart.contains("<circle"),
        "{chart:.200}"
    );
}

/// `--sustained`: the unavailable cohort hangs across three attempt timeouts and a breaker
/// cool-down; every one of its deliveries still ends inside its window, with a reason.
#[test]
fn the_sustained_drill_ends_every_unavailable_delivery_inside_its_window() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("policy.toml");
    std::fs::write(
        &config,
        "[delivery]\nattempt_timeout = \"1s\"\n[retry]\nbase_delay = \"2s\"\nmax_delay = \"5m\"\n\
         max_attempts = 4\ndelivery_window = \"8s\"\n[breaker]\ncool_down = \"2s\"\n",
    )
    .unwrap();
    let json = dir.path().join("drill.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
        .args([
            "drill",
            "--sustained",
            "--subscribers",
            "40",
            "--events",
            "2",
        ])
        .args(["--interval", "200ms", "--mode", "hang", "--slo", "20s"])
        .args(["--shared-host", "0"])
        .args(["--config", config.to_str().unwrap()])
        .args(["--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("phase 2b/4 sustained"), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let sustained = &report["phases"]["sustained"];
    assert!(sustained["hold_ms"].as_u64() >= Some(3_000), "{report}");
    assert!(
        sustained["unavailable_ended"].as_u64() > Some(0),
        "{report}"
    );
    assert_eq!(sustained["unavailable_late"], 0, "{report}");
    let checks = report["checks"].as_array().unwrap();
    assert!(checks.iter().any(|c| c["check"]
        .as_str()
        .unwrap()
        .starts_with("sustained: every unavailable")));
    assert!(
        stdout.contains("PASS") || stdout.contains("FAIL"),
        "{stdout}"
    );
    assert_passed_but_latency(&out, &report);
}

/// `--hanging N` makes exactly N destinations hang, and the shared host's phase (3b): many
/// subscribers on one origin that hangs and recovers, held to the cap per host throughout, with
/// every delivery to it ending. The cap is lowered to 8 so that 30 subscribers press on it.
#[test]
fn the_drill_hangs_n_destinations_and_holds_a_shared_host_to_its_cap() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("policy.toml");
    std::fs::write(
        &config,
        "[delivery]\nattempt_timeout = \"1s\"\nmax_in_flight_per_host = 8\n\
         [retry]\nbase_delay = \"2s\"\nmax_delay = \"5m\"\nmax_attempts = 6\n\
         delivery_window = \"30m\"\n[breaker]\ncool_down = \"2s\"\n",
    )
    .unwrap();
    let (out, report) = drill(&[
        "--subscribers",
        "40",
        "--hanging",
        "10",
        "--shared-host",
        "30",
        "--events",
        "2",
        "--interval",
        "200ms",
        "--mode",
        "hang",
        "--slo",
        "20s",
        "--config",
        config.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("phase 2/4 failure: 10 destinations hang"),
        "{stderr}"
    );
    assert!(
        stderr.contains("phase 3b/4 shared host: 30 subscribers"),
        "{stderr}"
    );
    // With -o json (the helper's), stdout is the report, the shared host's phase in it.
    assert!(
        report["phases"]["shared_host"]["healthy_first_attempt"].is_object(),
        "{report}"
    );
    let shared = &report["phases"]["shared_host"];
    assert_eq!(shared["cap"], 8, "{report}");
    // 60 deliveries hang at 8 places for a second each: the host was at its cap, never past it.
    assert_eq!(shared["most_in_flight"], 8, "{report}");
    assert_eq!(shared["open"], 0, "{report}");
    let ended = shared["delivered"].as_u64().unwrap() + shared["dead"].as_u64().unwrap();
    assert_eq!(ended, 60, "{report}");
    assert!(
        shared["healthy_first_attempt"]["n"] == 60,
        "30 healthy x 2 events: {report}"
    );
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    for check in [
        "no host of the main phases saw more attempts at once than its cap",
        "shared host: healthy p99 first-attempt latency",
        "shared host: every delivery ended",
        "shared host: never saw more attempts at once than its cap",
    ] {
        assert!(
            names.iter().any(|n| n.starts_with(check)),
            "{check}: {names:?}"
        );
    }
    assert_passed_but_latency(&out, &report);
}

/// A bad size is refused before anything starts, saying what to change.
#[test]
fn the_drill_refuses_more_hanging_than_subscribers() {
    let (out, report) = drill(&["--subscribers", "10", "--hanging", "11"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--hanging 11 is more than --subscribers 10"),
        "{stderr}"
    );
    assert!(report.is_null(), "no report: {report}");
    let (out, _) = drill(&["--subscribers", "10", "--hanging", "10"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("leaves none healthy"), "{stderr}");
    let (out, _) = drill(&["--hanging", "5", "--unhealthy", "0.2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

/// The pid of the hookline the drill said it started (`hookline started (pid N)`).
fn started_pid(stderr: &str) -> Option<u32> {
    let (_, rest) = stderr.split_once("hookline started (pid ")?;
    rest.split(')').next()?.parse().ok()
}

/// Whether `pid` is a live process (not gone, not a zombie). A live one is killed, so a failing
/// test leaves nothing behind either.
fn still_running(pid: u32) -> bool {
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let running = state
        .rsplit_once(") ")
        .is_some_and(|(_, fields)| !fields.starts_with('Z'));
    if running {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    running
}

/// A drill that fails after its hookline started (here a bad `--interval`, read when the phases
/// are planned) stops that hookline before it exits.
#[test]
fn a_drill_that_fails_early_leaves_no_hookline_running() {
    let (out, report) = drill(&["--subscribers", "10", "--interval", "soon"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("soon"),
        "the error names the bad value: {stderr}"
    );
    assert!(report.is_null(), "no report: {report}");
    let pid = started_pid(&stderr).expect("the drill names its hookline's pid");
    assert!(!still_running(pid), "hookline {pid} outlived the drill");
}

/// SIGINT (Ctrl-C) and SIGTERM stop the drill and the hookline it started.
#[test]
fn an_interrupted_drill_leaves_no_hookline_running() {
    use std::io::BufRead;
    for signal in ["-INT", "-TERM"] {
        let mut drill = std::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
            .args(["drill", "--subscribers", "10", "--events", "1000"])
            .args(["--interval", "1s", "--shared-host", "0"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(drill.stderr.take().unwrap()).lines();
        let mut seen = String::new();
        let pid = loop {
            let line = lines
                .next()
                .expect("the drill ended before starting")
                .unwrap();
            seen.push_str(&line);
            seen.push('\n');
            if let Some(pid) = started_pid(&line) {
                break pid;
            }
        };
        std::process::Command::new("kill")
            .args([signal, &drill.id().to_string()])
            .status()
            .unwrap();
        seen.extend(lines.map_while(Result::ok).map(|l| l + "\n"));
        let status = drill.wait().unwrap();
        assert!(!status.success(), "{signal}: {seen}");
        assert!(seen.contains("the drill's hookline is stopped"), "{seen}");
        assert!(
            !still_running(pid),
            "{signal}: hookline {pid} outlived the drill"
        );
    }
}
