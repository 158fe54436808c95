//! The process's open-file limit against what its settings let it hold open at once. Every API
//! connection, every attempt in flight (in a delivery slot or in the slow lane), every idle
//! subscriber connection kept for reuse and every database connection is a file descriptor.
//! Service managers often start a process with a soft limit of 1,024 (systemd's default), below
//! what the defaults may use (512 API connections, then 512 or 1,024 slots and as many places in
//! the slow lane); past it, accepting a connection and connecting to a subscriber fail with "too
//! many open files". So `serve` (and the drill and `capacity --measure`, which receive
//! deliveries in process) raise the soft limit to an estimate of what they need, never past the
//! hard limit (as Go's runtime and nginx's `worker_rlimit_nofile` do), and warn, naming the
//! settings, when even the hard limit is short.

use crate::app::Role;
use crate::config::Config;

/// A process's open-file limit: the soft one is enforced, and may be raised up to the hard one
/// without privileges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub soft: u64,
    pub hard: u64,
}

/// Descriptors besides the connections: the listener, the store's files (SQLite's database,
/// its WAL and shared memory, a backup being taken), the runtime's epoll and event fds.
pub const BESIDES_CONNECTIONS: u64 = 64;

/// What a `serve` process with `config` in `role` may hold open at once, estimated: idle
/// subscriber connections are kept for reuse for a while, uncapped (the engine's `sender.rs`), and are
/// counted as many as the attempts in flight; a process that talks to many hosts in turn can
/// keep more.
pub fn needed(config: &Config, role: Role) -> u64 {
    // Workers serve `/healthz` and `/metrics`, so every role accepts connections.
    let api = config.http.max_connections as u64;
    let delivery = match role {
        Role::Api => 0,
        Role::All | Role::Worker => receiving(config).saturating_mul(2),
    };
    // PostgreSQL's pool and its LISTEN connection; on SQLite the same count, with the margin,
    // covers the writer's, the checkpointer's and the readers' files.
    let store = (config.database_pool_size as u64).saturating_add(1);
    api.saturating_add(delivery)
        .saturating_add(store)
        .saturating_add(BESIDES_CONNECTIONS)
}

/// The attempts a process with `config` may have in flight, each one connection at the
/// receiving end too: what the drill's and `capacity --measure`'s in-process sink may hold.
pub fn receiving(config: &Config) -> u64 {
    (config.delivery.concurrency as u64).saturating_add(config.delivery.slow_lane as u64)
}

/// The slow lane as large as a soft open-file limit of `soft` leaves room for. Each attempt
/// waiting there holds a socket (and is counted, like every attempt, with one idle connection
/// after it); past the limit a connect fails with "too many open files" for every subscriber,
/// healthy ones too, so the lane shrinks instead, and a full lane sheds (the engine's `slots.rs`).
pub fn slow_lane_within(config: &Config, role: Role, soft: u64) -> usize {
    let lane = config.delivery.slow_lane as u64;
    let besides_lane = needed(config, role).saturating_sub(lane.saturating_mul(2));
    let room = soft.saturating_sub(besides_lane) / 2;
    usize::try_from(lane.min(room)).unwrap_or(usize::MAX)
}

/// What to do about a limit, for a process that needs `needed` descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Leave it (never lowered): the soft limit covers it, or is at the hard one already.
    Keep,
    /// Raise the soft limit to this (at most the hard limit).
    RaiseTo(u64),
}

/// The raise `needed` calls for: to `needed`, or as far as the hard limit lets.
pub fn plan(limit: Limit, needed: u64) -> Plan {
    let reachable = needed.min(limit.hard);
    if limit.soft >= reachable {
        Plan::Keep
    } else {
        Plan::RaiseTo(reachable)
    }
}

/// The limit now, raised to `needed` when it was lower and the hard limit allows.
pub fn ensure(needed: u64) -> std::io::Result<(Limit, Limit)> {
    let before = current()?;
    match plan(before, needed) {
        Plan::Keep => Ok((before, before)),
        Plan::RaiseTo(soft) => {
            rlimit::setrlimit(rlimit::Resource::NOFILE, soft, before.hard)?;
            Ok((before, current()?))
        }
    }
}

/// The limit as it is.
pub fn current() -> std::io::Result<Limit> {
    let (soft, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE)?;
    Ok(Limit { soft, hard })
}

/// Raises the limit to `needed` at start-up and says what it did; a limit still short is a
/// warning, not a refusal: a process that never opens that many works all the same. Answers
/// the limit as it is after, when it could be read.
pub fn check(needed: u64) -> Option<Limit> {
    let result = ensure(needed);
    match result {
        Ok((before, after)) if after.soft >= needed => {
            if after.soft > before.soft {
                tracing::info!(
                    from = before.soft,
                    to = after.soft,
                    needed,
                    "open-file limit raised"
                );
            }
        }
        Ok((_, after)) => tracing::warn!(
            limit = after.soft,
            hard_limit = after.hard,
            needed,
            "the open-file limit is below what http.max_connections, delivery.concurrency, \
             delivery.slow_lane and database_pool_size may open at once: past it, connections \
             fail with \"too many open files\"; raise the hard limit (ulimit -Hn, systemd \
             LimitNOFILE=) or lower those settings"
        ),
        Err(ref e) => {
            tracing::warn!(error = %e, needed, "cannot read or raise the open-file limit")
        }
    }
    result.ok().map(|(_, after)| after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_what_is_needed_never_past_the_hard_one() {
        let limit = |soft, hard| Limit { soft, hard };
        assert_eq!(plan(limit(4096, 8192), 2000), Plan::Keep);
        assert_eq!(plan(limit(2000, 8192), 2000), Plan::Keep);
        assert_eq!(plan(limit(1024, 524_288), 2000), Plan::RaiseTo(2000));
        assert_eq!(plan(limit(1024, 1500), 2000), Plan::RaiseTo(1500));
        assert_eq!(
            plan(limit(1024, 1024), 2000),
            Plan::Keep,
            "nothing to raise"
        );
    }

    #[test]
    fn what_a_process_needs_follows_its_settings_and_role() {
        let config = Config::from_toml(
            "database_pool_size = 16\n[delivery]\nconcurrency = 100\nslow_lane = 50\n\
             [http]\nmax_connections = 300",
        )
        .unwrap();
        // Attempts in flight, and as many idle connections kept for reuse.
        assert_eq!(needed(&config, Role::All), 300 + 2 * 150 + 17 + 64);
        assert_eq!(needed(&config, Role::Worker), 300 + 2 * 150 + 17 + 64);
        assert_eq!(needed(&config, Role::Api), 300 + 17 + 64);
        assert_eq!(receiving(&config), 150);
    }

    /// Settings at their largest add up without wrapping to a small number.
    #[test]
    fn the_largest_settings_saturate() {
        let config = Config::from_toml(&format!(
            "database_pool_size = {max}\n[delivery]\nconcurrency = {max}\nslow_lane = {max}",
            max = i64::MAX
        ))
        .unwrap();
        assert_eq!(needed(&config, Role::All), u64::MAX);
        assert_eq!(receiving(&config), 2 * i64::MAX as u64);
    }

    /// The lane shrinks to what the limit leaves once everything else is counted, and never
    /// grows past its setting.
    #[test]
    fn the_slow_lane_fits_the_open_file_limit() {
        let config = Config::from_toml(
            "database_pool_size = 16\n[delivery]\nconcurrency = 100\nslow_lane = 5000\n\
             [http]\nmax_connections = 300",
        )
        .unwrap();
        let besides_lane = 300 + 2 * 100 + 17 + 64;
        assert_eq!(slow_lane_within(&config, Role::All, 1_000_000), 5000);
        assert_eq!(
            slow_lane_within(&config, Role::All, besides_lane + 2 * 700),
            700
        );
        assert_eq!(slow_lane_within(&config, Role::All, 100), 0);
    }

    /// With the defaults on either backend, a process needs more than systemd's default soft
    /// limit: the raise is what keeps a default install from running out.
    #[test]
    fn the_defaults_need_more_than_a_common_soft_limit() {
        let sqlite = Config::from_toml("").unwrap();
        let postgres = Config::from_toml("database = \"postgres://app@db/h\"").unwrap();
        assert!(needed(&sqlite, Role::All) > 1024);
        assert!(needed(&postgres, Role::Worker) > needed(&sqlite, Role::Worker));
    }
}
