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
