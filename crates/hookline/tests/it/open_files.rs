//! `serve` raises a soft open-file limit that is below what its settings may hold open at once
//! (systemd starts services at 1,024, below what the defaults may use).
#![cfg(target_os = "linux")]

use std::os::unix::fs::PermissionsExt;

use hookline::app::Role;
use hookline::config::Config;
use hookline_testkit::process::Process;

#[tokio::test]
async fn serve_raises_a_soft_open_file_limit_below_what_its_settings_need() {
    let hard = hookline::open_files::current().unwrap().hard;
    if hard <= 200 {
        hookline_store::testing::say_skipped(&format!(
            "this machine's hard open-file limit ({hard}) leaves nothing to raise"
        ));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Starts hookline as a service manager would, with a low soft limit.
    let low = dir.path().join("low-limit");
    std::fs::write(
        &low,
        format!(
            "#!/bin/sh\nunset HOOKLINE_DATABASE\nulimit -Sn 200 || exit 1\nexec {} \"$@\"\n",
            env!("CARGO_BIN_EXE_hookline")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&low, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = format!(
        "database = \"sqlite://{}\"\n",
        dir.path().join("hookline.db").display()
    );
    let needed = hookline::open_files::needed(&Config::from_toml(&config).unwrap(), Role::All);

    let serving = Process::start(&low, dir.path(), "limited", &config, "all")
        .await
        .unwrap();
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", serving.pid())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    // "Max open files  SOFT  HARD  files"
    let soft: u64 = line.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert_eq!(soft, needed.min(hard), "{line}");
}
