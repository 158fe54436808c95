//! The log on stderr: text for a person, or JSON lines for a log shipper (`--log-format`,
//! `HOOKLINE_LOG_FORMAT`, `[log] format`). A JSON line is one object:
//! `{"timestamp", "level", "target", "message", "fields": {...}}`, every field of the record
//! under `fields` (so none can shadow the five), numbers and booleans as JSON numbers and
//! booleans, everything else as its text.
//!
//! Actions an operator takes through the API (replays, resends, pauses, rotations, revocations,
//! tenant deletions, policies and rollouts) are logged at info with `action` and `by`: the
//! token's name, or [`OPEN_CALLER`] when the API runs without tokens.

use std::fmt;
use std::io::IsTerminal;
use std::sync::OnceLock;

use hookline_engine::clock::{rfc3339, Clock, SystemClock};
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

pub use crate::config::LogFormat;

/// `by` of an action taken without a token (open mode, loopback only): parentheses, which no
/// sensible token name holds, keep it apart from a token's name.
pub const OPEN_CALLER: &str = "(open)";

/// Who took an action, for its log line: the caller's token name, or [`OPEN_CALLER`].
pub fn by(caller: Option<&crate::api::auth::Caller>) -> &str {
    caller.map_or(OPEN_CALLER, |c| c.name.as_str())
}

/// Colour codes only where a person reads them: stderr on a terminal, unless `NO_COLOR` is set
/// to anything but nothing (<https://no-color.org>). A file, a pipe or journald gets plain
/// text, which grep and log shippers read as written.
fn colour_logs() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The format [`init`] installed.
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Installs the process's log on stderr, in `format`, at the level `RUST_LOG` says (info
/// without it).
pub fn init(format: LogFormat) {
    let _ = FORMAT.set(format);
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.with_ansi(colour_logs()).init(),
        LogFormat::Json => logs.with_ansi(false).event_format(JsonLines).init(),
    }
}

/// A line a command writes to stderr itself rather than through the log (a drill's progress,
/// the error a command ends with, whatever `RUST_LOG` says): `as_text` in the text format, or
/// `message` in one JSON line like the log's, so stderr stays in one format.
pub fn say(level: Level, target: &str, message: &str, as_text: &str) {
    match FORMAT.get() {
        Some(LogFormat::Json) => {
            let line = serde_json::json!({
                "timestamp": rfc3339(SystemClock.now_ms()),
                "level": level.as_str(),
                "target": target,
                "message": message,
                "fields": {},
            });
            eprintln!("{line}");
        }
        Some(LogFormat::Text) | None => eprintln!("{as_text}"),
    }
}

/// Writes each record as one JSON object on one line.
struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        writeln!(writer, "{}", line(SystemClock.now_ms(), event))
    }
}

/// The JSON object of `event`, logged at `now`.
fn line(now: hookline_policy::UnixMs, event: &Event<'_>) -> Value {
    let mut fields = Fields::default();
    event.record(&mut fields);
    let meta = event.metadata();
    serde_json::json!({
        "timestamp": rfc3339(now),
        "level": meta.level().as_str(),
        "target": meta.target(),
        "message": fields.message,
        "fields": fields.others,
    })
}

/// A record's message and its other fields.
#[derive(Default)]
struct Fields {
    message: String,
    others: Map<String, Value>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        match (field.name(), value) {
            ("message", Value::String(text)) => self.message = text,
            (name, value) => {
                self.others.insert(name.to_owned(), value);
            }
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%x` fields arrive here too, their Debug being x's Display.
        self.put(field, Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_owned()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        // NaN and the infinities have no JSON number: their text, rather than a null.
        let number = serde_json::Number::from_f64(value)
            .map_or_else(|| Value::String(value.to_string()), Value::Number);
        self.put(field, number);
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::String(value.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    /// Each record is one line of one object: the five keys, its fields under `fields` as
    /// their JSON types.
    #[test]
    fn a_record_is_one_json_object_on_one_line() {
        #[derive(Clone, Default)]
        struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let written = buffer.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_writer(move || written.clone())
                .event_format(JsonLines),
        );
        tracing::subscriber::with_default(subscriber, || {
            let error = std::io::Error::other("disk\non fire");
            tracing::info!(replay = "rp_1", selected = 3u64, ok = true, "replay\nmade");
            tracing::warn!(error = %error, rate = 0.5, "cannot");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["level"], "INFO");
        assert_eq!(lines[0]["target"], module_path!());
        assert_eq!(lines[0]["message"], "replay\nmade");
        assert_eq!(
            lines[0]["fields"],
            serde_json::json!({"replay": "rp_1", "selected": 3, "ok": true})
        );
        assert!(
            hookline_engine::clock::parse_rfc3339(lines[0]["timestamp"].as_str().unwrap())
                .is_some()
        );
        assert_eq!(lines[1]["fields"]["error"], "disk\non fire");
        assert_eq!(lines[1]["fields"]["rate"], 0.5);
    }
}
