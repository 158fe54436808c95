//! A PostgreSQL server of this test process's own, from the installed binaries, like Debian's
//! `pg_virtualenv`: `initdb` into a temporary directory, listening on a Unix socket there only.
//! A guardian shell outlives nothing: it waits for this process to exit, then stops the server
//! and removes the directory. As root, the server runs as the `postgres` user (or `nobody`),
//! since PostgreSQL refuses to run as root.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Starts the server; the URL of its `postgres` database, or why there is none.
pub(super) fn start() -> Result<String, String> {
    let installed = Installed::find()?;
    let dir = installed.scratch_dir("hookline-pg")?;
    let data = dir.join("data");
    installed.init(&data)?;
    let options = format!(
        "-k '{}' -c listen_addresses='' -c fsync=off -c max_connections=300",
        dir.display()
    );
    installed.start(&data, &dir.join("log"), &options)?;
    // The socket directory as the URL's host, percent-encoded.
    let host: String = dir
        .to_string_lossy()
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect();
    Ok(format!("postgres://postgres@{host}:5432/postgres"))
}

/// The installed PostgreSQL's programs, run as a user the server accepts.
pub(crate) struct Installed {
    bin: PathBuf,
    /// Who runs them when this process is root (PostgreSQL refuses to run as root).
    owner: Option<String>,
}

impl Installed {
    /// The newest installed PostgreSQL, or why there is none.
    pub(crate) fn find() -> Result<Self, String> {
        let bin = binaries().ok_or("no PostgreSQL binaries (initdb, pg_ctl) are installed")?;
        Ok(Self {
            bin,
            owner: unprivileged_user()?,
        })
    }

    /// `PROGRAM`, run as the server's owner (through `runuser -u OWNER --` when root).
    pub(crate) fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        match &self.owner {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(path);
                c
            }
            None => Command::new(path),
        }
    }

    /// A new directory under /tmp, owned by the server's user, named `PREFIX-PID-RANDOM`. Once
    /// this process exits, however it exits, a guardian stops every server whose data
    /// directory is directly in it and removes it.
    pub(crate) fn scratch_dir(&self, prefix: &str) -> Result<PathBuf, String> {
        // /tmp rather than $TMPDIR: the socket path must stay short, and as root the server's
        // user must be able to reach it.
        let tmp = Path::new("/tmp");
        let tmp = if tmp.is_dir() {
            tmp.to_owned()
        } else {
            std::env::temp_dir()
        };
        let dir = tmp.join(format!(
            "{prefix}-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        if let Some(user) = &self.owner {
            run(Command::new("chown").arg(user).arg(&dir))?;
        }
        let mut pg_ctl: Vec<OsString> = match &self.owner {
            Some(user) => ["runuser", "-u", user, "--"].map(OsString::from).into(),
            None => Vec::new(),
        };
        pg_ctl.push(self.bin.join("pg_ctl").into());
        guard(&dir, pg_ctl)?;
        Ok(dir)
    }

    /// `initdb` of a cluster at `data` whose superuser `postgres` is trusted on every local
    /// connection (Unix socket and 127.0.0.1, replication included).
    pub(crate) fn init(&self, data: &Path) -> Result<(), String> {
        run(self.command("initdb").arg("-D").arg(data).args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]))
    }

    /// Starts the server of `data` with `options` (the postgres command line), logging to
    /// `log`, and waits until it accepts connections.
    pub(crate) fn start(&self, data: &Path, log: &Path, options: &str) -> Result<(), String> {
        run(self
            .command("pg_ctl")
            .arg("-D")
            .arg(data)
            .arg("-l")
            .arg(log)
            .args(["-o", options, "-w", "start"]))
    }
}

/// The newest `/usr/lib/postgresql/N/bin` (Debian), else `initdb` on the `PATH`.
fn binaries() -> Option<PathBuf> {
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    debian.sort();
    debian.pop().map(|(_, bin)| bin).or_else(|| {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .find(|dir| dir.join("initdb").exists() && dir.join("pg_ctl").exists())
    })
}

/// Who the server runs as when this process is root.
fn unprivileged_user() -> Result<Option<String>, String> {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| format!("cannot run id: {e}"))?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Ok(None);
    }
    let exists = |user: &str| {
        Command::new("id")
            .arg(user)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    ["postgres", "nobody"]
        .into_iter()
        .find(|u| exists(u))
        .map(|u| Some(u.to_owned()))
        .ok_or_else(|| "running as root with no postgres or nobody user to run PostgreSQL".into())
}

/// Stops every server whose data directory is directly in `dir` and removes `dir` once this
/// process has exited, however it exits. In its own process group and deaf to INT, HUP and
/// TERM, so a Ctrl-C of the tests does not leave a server behind.
fn guard(dir: &Path, pg_ctl: Vec<OsString>) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let script = r#"trap '' INT HUP TERM
p=$1; d=$2; shift 2
while kill -0 "$p" 2>/dev/null; do sleep 1; done
for pid in "$d"/*/postmaster.pid; do
  [ -f "$pid" ] || continue
  data=${pid%/postmaster.pid}
  "$@" -D "$data" -m fast -w stop >/dev/null 2>&1 ||
    "$@" -D "$data" -m immediate -w stop >/dev/null 2>&1
done
rm -rf "$d""#;
    Command::new("sh")
        .args(["-c", script, "hookline-pg-guardian"])
        .arg(std::process::id().to_string())
        .arg(dir)
        .args(pg_ctl)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map(drop)
        .map_err(|e| format!("cannot start the guardian of a test server: {e}"))
}

pub(crate) fn run(command: &mut Command) -> Result<(), String> {
    let out = command
        .output()
        .map_err(|e| format!("cannot run {:?}: {e}", command.get_args().last()))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{:?} failed: {}",
        command.get_args().collect::<Vec<_>>(),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}
