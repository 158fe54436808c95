//! What hookline's tests, benchmarks and failure drill share: the subscriber simulator behind
//! `hookline sink` ([`sink`]), real `hookline serve` processes ([`process`]), and small
//! helpers for wall-clock time and percentiles. Nothing here is part of the delivery path; the
//! service binary links it only for its `sink` and `drill` commands.

pub mod process;
pub mod sink;

/// Creates subscribers through hookline's API at `api` (one `POST /v1/subscribers` body each),
/// `parallel` requests at a time; any answer but 201 is an error naming it.
pub async fn create_subscribers(
    http: &reqwest::Client,
    api: &str,
    token: Option<&str>,
    mut bodies: Vec<serde_json::Value>,
    parallel: usize,
) -> anyhow::Result<()> {
    bodies.reverse(); // taken from the end: in the order given
    let queue = std::sync::Arc::new(std::sync::Mutex::new(bodies));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..parallel.max(1) {
        let (http, queue) = (http.clone(), queue.clone());
        let (url, token) = (format!("{api}/v1/subscribers"), token.map(str::to_owned));
        workers.spawn(async move {
            loop {
                let Some(body) = queue.lock().expect("queue lock").pop() else {
                    return Ok(());
                };
                let mut request = http.post(&url).json(&body);
                if let Some(t) = &token {
                    request = request.bearer_auth(t);
                }
                let response = request.send().await?;
                if response.status() != 201 {
                    let status = response.status();
                    let text = response.text().await.unwrap_or_default();
                    anyhow::bail!("creating a subscriber answered {status}: {text}");
                }
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done??;
    }
    Ok(())
}

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock unix milliseconds (for measuring, never for scheduling).
pub fn now_ms() -> i64 {
    unix_ms(SystemTime::now()).unwrap_or(0)
}

/// A time the API wrote (RFC 3339), in unix milliseconds.
pub fn rfc3339_ms(value: &serde_json::Value) -> Option<i64> {
    unix_ms(humantime::parse_rfc3339(value.as_str()?).ok()?)
}

/// `t` in unix milliseconds (saturating); `None` before 1970.
fn unix_ms(t: SystemTime) -> Option<i64> {
    let since = t.duration_since(UNIX_EPOCH).ok()?;
    Some(i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
}

/// The value at quantile `p` (0 to 1) of `sorted` (nearest rank); `None` when it is empty.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // p in 0..=1: 0..=last.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    let last = sorted.len().checked_sub(1)?;
    Some(sorted[(last as f64 * p.clamp(0.0, 1.0)).round() as usize])
}

/// A free TCP port on 127.0.0.1 (free when asked; a process binds it soon after).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A directory of one's own under the system's temporary directory, removed on drop.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    pub fn new(prefix: &str) -> std::io::Result<Self> {
        let path = std::env::temp_dir().join(format!(
            "{prefix}-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir(&path)?;
        Ok(ScratchDir(path))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), Some(51));
        assert_eq!(percentile(&v, 0.99), Some(99));
        assert_eq!(percentile(&v, 1.0), Some(100));
        assert_eq!(percentile::<u32>(&[], 0.5), None);
    }

    #[test]
    fn a_scratch_dir_goes_with_its_owner() {
        let dir = ScratchDir::new("testkit").unwrap();
        let path = dir.path().to_owned();
        std::fs::write(path.join("f"), "x").unwrap();
        drop(dir);
        assert!(!path.exists());
    }
}
