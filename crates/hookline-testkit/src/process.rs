//! Real `hookline serve` processes: started on a free port from a config, waited for until they
//! answer `/healthz`, killed with SIGKILL or stopped with SIGTERM. A process that is dropped is
//! killed, so a test that fails leaves nothing running behind it.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context;

pub struct Process {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    /// Writes `config` (which must not set `listen`) with a free port to `DIR/NAME.toml`, starts
    /// `BINARY serve --config ... --role ROLE`, and waits until it answers `/healthz`.
    pub async fn start(
        binary: &Path,
        dir: &Path,
        name: &str,
        config: &str,
        role: &str,
    ) -> anyhow::Result<Self> {
        let port = crate::free_port()?;
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, format!("listen = \"127.0.0.1:{port}\"\n{config}"))
            .with_context(|| path.display().to_string())?;
        Self::serve(binary, &path, role, format!("http://127.0.0.1:{port}")).await
    }

    /// Starts `BINARY serve --config CONFIG --role ROLE` for a config that listens at `base`,
    /// and waits until it answers `/healthz`. The child is owned from the moment it starts, so
    /// one that never becomes healthy is killed too.
    pub async fn serve(
        binary: &Path,
        config: &Path,
        role: &str,
        base: String,
    ) -> anyhow::Result<Self> {
        let process = Process {
            child: serve(binary, config, role)?,
            base,
        };
        wait_healthy(&process.base).await?;
        Ok(process)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL: no chance to finish anything.
    pub fn kill_9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and the exit status once it has stopped.
    pub async fn terminate(mut self) -> std::io::Result<ExitStatus> {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status()?;
        let (status, _stopped) = tokio::task::spawn_blocking(move || (self.child.wait(), self))
            .await
            .map_err(std::io::Error::other)?;
        status
    }
}

/// Starts `BINARY serve --config CONFIG --role ROLE` (errors only in its log), not waiting.
fn serve(binary: &Path, config: &Path, role: &str) -> anyhow::Result<Child> {
    Command::new(binary)
        .args([
            "serve",
            "--config",
            &config.display().to_string(),
            "--role",
            role,
        ])
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {}", binary.display()))
}

/// Waits (up to about 20 s) until `base` answers `/healthz` with 200. A probe that gets no
/// answer soon counts as "not yet".
pub async fn wait_healthy(base: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    for _ in 0..400 {
        let probe = http
            .get(format!("{base}/healthz"))
            .timeout(Duration::from_secs(1))
            .send()
            .await;
        if probe.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("hookline at {base} did not become healthy")
}
