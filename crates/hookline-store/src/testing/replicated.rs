//! A PostgreSQL primary and a synchronous streaming standby of this test process's own, from
//! the installed binaries, for the failover test: each on a free 127.0.0.1 port, trusting every
//! local connection, in a temporary directory (the throwaway server's guardian stops both and
//! removes it once this process exits; dropping the pair does it at once). As root, every
//! program runs through `runuser -u postgres --` (or `nobody`), which owns the directory:
//! `initdb` and the server refuse to run as root.
//!
//! The standby is a `pg_basebackup -R` of the primary, and the primary names it in
//! `synchronous_standby_names` with `synchronous_commit = on`: a commit returns only once the
//! standby has it, so whatever hookline acknowledged survives the primary's death. The standby
//! is started without `synchronous_standby_names`, so once promoted it commits alone. `fsync`
//! is off, as on the throwaway server: the servers are killed, never the machine, and the
//! operating system keeps what they wrote.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::throwaway::{run, Installed};

/// The `application_name` the standby streams under, which the primary waits for.
const STANDBY_NAME: &str = "standby";

pub struct ReplicatedPostgres {
    installed: Installed,
    dir: PathBuf,
    /// The primary's port on 127.0.0.1.
    pub primary_port: u16,
    /// The standby's port on 127.0.0.1.
    pub standby_port: u16,
}

impl ReplicatedPostgres {
    /// The pair, streaming synchronously; `None` where no PostgreSQL server is installed (the
    /// test skips, saying why in one line), a failure under `HOOKLINE_TEST_POSTGRES_REQUIRED=1`.
    pub fn start() -> Option<Self> {
        match Self::try_start() {
            Ok(pair) => Some(pair),
            Err(why) => {
                super::skip_unless_required(&format!("no primary and standby PostgreSQL: {why}"));
                None
            }
        }
    }

    fn try_start() -> Result<Self, String> {
        let installed = Installed::find()?;
        let dir = installed.scratch_dir("hookline-failover")?;
        let pair = Self {
            installed,
            primary_port: free_port()?,
            standby_port: free_port()?,
            dir,
        };
        let primary = pair.data("primary");
        pair.installed.init(&primary)?;
        pair.installed.start(
            &primary,
            &pair.dir.join("primary.log"),
            &format!(
                "{} -c synchronous_standby_names={STANDBY_NAME} -c synchronous_commit=on",
                pair.options(pair.primary_port)
            ),
        )?;
        run(pair
            .installed
            .command("pg_basebackup")
            .args(["-h", "127.0.0.1", "-U", "postgres", "-X", "stream", "-R"])
            .args([
                "--no-sync",
                "-c",
                "fast",
                "-p",
                &pair.primary_port.to_string(),
            ])
            .args(["-d", &format!("application_name={STANDBY_NAME}")])
            .arg("-D")
            .arg(pair.data("standby")))?;
        pair.installed.start(
            &pair.data("standby"),
            &pair.dir.join("standby.log"),
            &pair.options(pair.standby_port),
        )?;
        pair.until_streaming_synchronously()?;
        Ok(pair)
    }

    /// The multi-host URL of the pair's `postgres` database that connects to whichever of the
    /// two accepts writes, the primary first.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write&connect_timeout=5&keepalives_idle=10&tcp_user_timeout=10",
            self.primary_port, self.standby_port
        )
    }

    /// Kills the primary: `pg_ctl stop -m immediate`, no checkpoint, every connection cut.
    pub fn kill_primary(&self) {
        run(self
            .installed
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data("primary"))
            .args(["-m", "immediate", "-w", "stop"]))
        .expect("kill the primary");
    }

    /// Promotes the standby (`pg_ctl promote`) and waits until it accepts writes.
    pub fn promote_standby(&self) {
        run(self
            .installed
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data("standby"))
            .args(["-w", "promote"]))
        .expect("promote the standby");
    }

    fn data(&self, server: &str) -> PathBuf {
        self.dir.join(server)
    }

    /// The postgres command line of a server on `port`.
    fn options(&self, port: u16) -> String {
        format!(
            "-p {port} -k '{}' -c listen_addresses=127.0.0.1 -c fsync=off",
            self.dir.display()
        )
    }

    /// Waits (up to 20 s) until the primary reports its standby streaming as synchronous.
    fn until_streaming_synchronously(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = self
                .installed
                .command("psql")
                .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-At"])
                .args(["-p", &self.primary_port.to_string()])
                .args(["-c", "SELECT sync_state FROM pg_stat_replication"])
                .output()
                .map_err(|e| format!("cannot run psql: {e}"))?;
            if String::from_utf8_lossy(&out.stdout).trim() == "sync" {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the standby is not streaming synchronously after 20 s (logs in {})",
                    self.dir.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for ReplicatedPostgres {
    fn drop(&mut self) {
        for server in ["primary", "standby"] {
            let data = self.data(server);
            if data.join("postmaster.pid").exists() {
                let _ = run(self.installed.command("pg_ctl").arg("-D").arg(&data).args([
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ]));
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}
