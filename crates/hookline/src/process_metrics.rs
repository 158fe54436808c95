//! The process's own metrics under Prometheus's standard names (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_open_fds`, `process_max_fds`,
//! `process_start_time_seconds`), as every Prometheus client library exports them, so the usual
//! dashboards and alerts (a descriptor leak against the limit, a memory creep) work unchanged.
//! Read from `/proc/self` when scraped, without a dependency; where there is no `/proc` (not
//! Linux) a family is left out rather than reported as zero.

use std::fmt::Write as _;

/// Linux reports CPU time in clock ticks of `USER_HZ`, which is 100 on every architecture it
/// supports (it is part of the ABI; Prometheus's own `procfs` assumes the same).
const TICKS_PER_SECOND: f64 = 100.0;

/// The families, in Prometheus' text format; those that cannot be read are left out.
pub fn render() -> String {
    let mut out = String::new();
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    let stat = stat.as_deref().and_then(Stat::parse);
    if let Some(stat) = &stat {
        family(
            &mut out,
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time spent, in seconds.",
            (stat.user_ticks.saturating_add(stat.system_ticks)) as f64 / TICKS_PER_SECOND,
        );
    }
    if let Some(bytes) = resident_bytes() {
        family(
            &mut out,
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size, in bytes.",
            bytes as f64,
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        // The directory's own descriptor, open while it is read, is counted too, as Prometheus's
        // clients count it.
        family(
            &mut out,
            "process_open_fds",
            "gauge",
            "Open file descriptors.",
            fds.count() as f64,
        );
    }
    if let Ok(limit) = crate::open_files::current() {
        family(
            &mut out,
            "process_max_fds",
            "gauge",
            "The open-file limit in force (the soft limit).",
            limit.soft as f64,
        );
    }
    if let (Some(stat), Some(boot)) = (&stat, boot_time_seconds()) {
        family(
            &mut out,
            "process_start_time_seconds",
            "gauge",
            "When the process started, in seconds since the Unix epoch.",
            boot as f64 + stat.start_ticks as f64 / TICKS_PER_SECOND,
        );
    }
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str, value: f64) {
    let _ = write!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n\n"
    );
}

/// What `/proc/self/stat` says that these metrics need.
#[derive(Debug, PartialEq, Eq)]
struct Stat {
    user_ticks: u64,
    system_ticks: u64,
    /// Since the machine booted.
    start_ticks: u64,
}

impl Stat {
    /// Parses `/proc/<pid>/stat`: the command name (field 2) is in parentheses and may hold
    /// spaces and parentheses itself, so fields are counted from the last `)`.
    fn parse(text: &str) -> Option<Stat> {
        let after_name = &text[text.rfind(')')? + 1..];
        // Fields 3 onwards: state is field 3, utime 14, stime 15, starttime 22.
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        Some(Stat {
            user_ticks: field(14)?,
            system_ticks: field(15)?,
            start_ticks: field(22)?,
        })
    }
}

/// `VmRSS` from `/proc/self/status`, which states it in kB (kibibytes).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_kib(&status, "VmRSS:").map(|kib| kib.saturating_mul(1024))
}

fn parse_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

/// When the machine booted (`btime` in `/proc/stat`), in seconds since the Unix epoch.
fn boot_time_seconds() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("btime "))?;
    line["btime ".len()..].trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let line = "4242 (hook (line) x) S 1 4242 4242 0 -1 4194560 1 0 0 0 250 75 0 0 20 0 9 0 123456 1000 200 0";
        assert_eq!(
            Stat::parse(line),
            Some(Stat {
                user_ticks: 250,
                system_ticks: 75,
                start_ticks: 123456
            })
        );
        assert_eq!(Stat::parse("4242 (cut"), None);
    }

    #[test]
    fn resident_memory_is_read_in_kibibytes() {
        let status = "Name:\thookline\nVmRSS:\t   10240 kB\nThreads:\t9\n";
        assert_eq!(parse_kib(status, "VmRSS:"), Some(10240));
        assert_eq!(parse_kib(status, "VmSwap:"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reports_every_family() {
        let text = render();
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
        ] {
            let value: f64 = text
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("no {name} in\n{text}"))
                .parse()
                .unwrap();
            assert!(value >= 0.0, "{name} {value}");
        }
    }
}
