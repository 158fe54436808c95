//! The packages in `Containerfile` and `deploy/systemd/`: what they must keep (a non-root
//! runtime with the binary alone, a health check, a hardened unit), checked by reading them;
//! `systemd-analyze verify` checks the unit where systemd is installed (`.ci/run` lints or builds
//! the image where a container tool is). And `hookline healthcheck`, which the image's health check
//! runs, against a live server and a dead address.

use std::path::Path;

use crate::common::*;

fn read(file: &str) -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    std::fs::read_to_string(format!("{root}/{file}")).unwrap()
}

/// The instructions of a Containerfile, continuation lines joined and comments left out.
fn instructions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    out
}

#[test]
fn the_image_is_multi_stage_non_root_and_health_checked_with_the_binary_only() {
    let steps = instructions(&read("Containerfile"));
    let from: Vec<&String> = steps.iter().filter(|s| s.starts_with("FROM ")).collect();
    assert_eq!(from.len(), 2, "a build stage and a runtime stage: {from:?}");
    let runtime_at = steps.iter().position(|s| s == from[1]).unwrap();
    let runtime = &steps[runtime_at..];
    assert!(
        steps[..runtime_at]
            .iter()
            .any(|s| s.contains("cargo build --release --locked")),
        "the build uses Cargo.lock as it is"
    );
    // The runtime stage copies the binary (and its empty state directory) and runs nothing.
    assert!(
        !runtime.iter().any(|s| s.starts_with("RUN ")),
        "{runtime:?}"
    );
    let copied: Vec<&String> = runtime.iter().filter(|s| s.starts_with("COPY ")).collect();
    assert!(
        copied.iter().all(|s| s.contains("--from=build")),
        "{copied:?}"
    );
    assert!(copied
        .iter()
        .any(|s| s.ends_with("/usr/local/bin/hookline")));
    let user = runtime.iter().find(|s| s.starts_with("USER ")).unwrap();
    let who = user["USER ".len()..].split(':').next().unwrap();
    assert!(who != "root" && who != "0", "{user}");
    assert!(runtime.iter().any(|s| s == "EXPOSE 8080"));
    let health = runtime
        .iter()
        .find(|s| s.starts_with("HEALTHCHECK "))
        .unwrap();
    assert!(
        health.contains(r#"CMD ["/usr/local/bin/hookline", "healthcheck""#),
        "{health}"
    );
    assert!(
        !steps.iter().any(|s| s.starts_with("ADD ")),
        "COPY, never ADD"
    );
}

#[test]
fn the_unit_is_hardened_and_verified() {
    let unit = read("deploy/systemd/hookline.service");
    for setting in [
        "DynamicUser=yes",
        "StateDirectory=hookline",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
        "ExecStart=/usr/local/bin/hookline serve",
    ] {
        assert!(unit.lines().any(|l| l == setting), "no {setting}");
    }
    // Where systemd is (the tool comes with it), not a tool CI installs: skipped elsewhere.
    let Some(analyze) = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("systemd-analyze"))
        .find(|path| path.is_file())
    else {
        hookline_store::testing::say_skipped("systemd-analyze is not installed");
        return;
    };
    // Verified as installed, with the binary this test was built with in its place.
    let dir = tempfile::tempdir().unwrap();
    let binary = Path::new(env!("CARGO_BIN_EXE_hookline"));
    let installed = unit.replace("/usr/local/bin/hookline", binary.to_str().unwrap());
    let path = dir.path().join("hookline.service");
    std::fs::write(&path, installed).unwrap();
    let out = std::process::Command::new(analyze)
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {said}"
    );
}

#[tokio::test]
async fn healthcheck_exits_zero_only_for_a_healthy_answer() {
    let app = TestApp::start("").await;
    let check = |url: String| async move {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_hookline"))
            .args(["healthcheck", "--url", &url, "--timeout", "5s"])
            .output()
            .await
            .unwrap()
    };
    let healthy = check(app.base()).await;
    assert!(healthy.status.success(), "{healthy:?}");
    assert!(String::from_utf8_lossy(&healthy.stdout).contains("\"status\":\"ok\""));
    let base = app.base();
    app.stop().await;
    let gone = check(base).await;
    assert_eq!(gone.status.code(), Some(1), "{gone:?}");
    assert!(String::from_utf8_lossy(&gone.stderr).contains("cannot reach"));
}

/// The README's first command, `cargo run --release -- serve` at the repository's root, runs
/// the service: cargo must find exactly one binary to run there, hookline's, however many
/// crates of the workspace have binaries of their own (hookline-sim has).
#[test]
fn the_readme_s_first_command_has_one_binary_to_run() {
    let output = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let defaults: Vec<&str> = metadata["workspace_default_members"]
        .as_array()
        .expect("cargo reports the default members")
        .iter()
        .map(|id| id.as_str().unwrap())
        .collect();
    let binaries: Vec<String> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| defaults.contains(&p["id"].as_str().unwrap()))
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "bin"))
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        binaries,
        ["hookline"],
        "cargo run at the root would ask which binary"
    );
    assert!(read("README.md").contains("cargo run --release -- serve"));
}
