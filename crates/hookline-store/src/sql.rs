//! SQL both backends run, written once: `?N` placeholders where a backend says `$N` are
//! swapped by the function that returns the text.

/// The heartbeat write, in SQL both backends take (SQLite reads `$1` as parameter 1).
pub(crate) const HEARTBEAT: &str = "INSERT INTO hookline_heartbeat (id, beat_at) VALUES (1, $1)
     ON CONFLICT (id) DO UPDATE SET beat_at = excluded.beat_at";

/// The error a delivery dies with when the event has no version its subscriber accepts.
pub(crate) const UNVERSIONED_ERROR: &str = "no payload version at or below ";

/// The columns after `event_id, subscriber_id` of a delivery a publish fans out to subscriber
/// `s`, in either backend's placeholders (`?` or `$`), reading the event's versions from
/// `versions`, a row source with a column `v` (parameters: 3 now, 4 the latest version, 5 every version as an
/// array, 6 the oldest version, 7 the dead reason and 8 the error of an unversioned delivery).
/// Its payload version is the highest at or below the subscriber's pin (the latest when
/// unpinned); a subscriber pinned below every version gets a delivery that is dead at once.
/// A paused subscriber's deliveries are held from the start (so that an older release, whose
/// claims read the status without a lock, finds them held and its resume releases them); the
/// PostgreSQL publish first share-locks the paused subscribers it fans out to, which orders it
/// with a concurrent resume.
pub(crate) fn fan_out(placeholder: char, versions: &str) -> String {
    FAN_OUT
        .replace("VERSIONS", versions)
        .replace('?', &placeholder.to_string())
}

const FAN_OUT: &str = "
    CASE WHEN s.payload_version < ?6 THEN 'dead' ELSE 'scheduled' END,
    CASE WHEN s.payload_version < ?6 THEN FALSE ELSE s.status = 'paused' END, ?3, ?3, CASE WHEN s.payload_version < ?6 THEN NULL ELSE CAST(?3 AS BIGINT) END, ?3,
    CASE WHEN s.payload_version IS NULL OR s.payload_version >= ?4 THEN ?4
         WHEN s.payload_version < ?6 THEN NULL
         ELSE (SELECT max(v) FROM VERSIONS WHERE v <= s.payload_version) END,
    CASE WHEN s.payload_version < ?6 THEN ?7 END,
    CASE WHEN s.payload_version < ?6 THEN CAST(?3 AS BIGINT) END,
    CASE WHEN s.payload_version < ?6 THEN ?8 || s.payload_version END";

/// The dead letters a replay selects, in either backend's placeholders (parameters: 1 the
/// reason, 2 the subscriber or NULL, 3 the limit): `seq, id`, the subscriber's pin and the
/// version the replay would send ([`REPLAY_VERSION`]). Oldest dead first, then by key: the
/// order `list_dead_letters` pages in, so listing N and replaying N selects the same N.
/// `index_hint` is how `deliveries` is read (empty on PostgreSQL, whose planner has statistics).
/// The subscriber is compared only when `req` names one (parameter 2 is NULL otherwise): an
/// `OR` of the two cases would keep SQLite from seeking on the subscriber column.
pub(crate) fn replay_selection(
    placeholder: char,
    index_hint: &str,
    req: &crate::ReplayRequest,
) -> String {
    let subscriber = match req.subscriber_id {
        Some(_) => "d.subscriber_id = ?2",
        None => "CAST(?2 AS TEXT) IS NULL",
    };
    format!(
        "SELECT d.seq, d.id, s.payload_version, {REPLAY_VERSION}
         FROM deliveries d {index_hint} JOIN subscribers s ON s.id = d.subscriber_id
         WHERE d.state = 'dead' AND d.dead_reason = ?1 AND {subscriber}
           AND s.status != 'revoked'
         ORDER BY d.dead_at, d.seq LIMIT ?3"
    )
    .replace('?', &placeholder.to_string())
}

/// A page of subscribers after key `$1` whose lower-cased id or URL is `LIKE` `$2` (NULL: all),
/// the URL whole when `$3`, else up to its query (`url_before_query`, the backend's expression:
/// query values may be credentials), at most `$4` rows (parameters in both backends' `$N`, in
/// order of appearance).
pub(crate) fn subscriber_page(columns: &str, url_before_query: &str) -> String {
    format!(
        "SELECT {columns} FROM subscribers
         WHERE seq > $1
           AND (CAST($2 AS TEXT) IS NULL
                OR lower(id) LIKE $2 ESCAPE '\\'
                OR lower(CASE WHEN $3 THEN url ELSE {url_before_query} END) LIKE $2 ESCAPE '\\')
         ORDER BY seq LIMIT $4"
    )
}

/// Dead letters by reason and subscriber since `$1`, largest groups first, at most `$2` groups,
/// each with its subscriber's status (a revoked one's cannot be replayed) (parameters in both
/// backends' `$N`; through [`recent_dead`]).
pub(crate) const DEAD_LETTER_GROUPS: &str =
    "SELECT d.dead_reason, d.subscriber_id, count(*), min(d.dead_at), max(d.dead_at), s.status
     FROM deliveries d RECENT_DEAD JOIN subscribers s ON s.id = d.subscriber_id
     WHERE d.state = 'dead' AND d.dead_at >= $1
     GROUP BY d.dead_reason, d.subscriber_id, s.status
     ORDER BY count(*) DESC, d.dead_reason, d.subscriber_id LIMIT $2";

/// How many deliveries wait (scheduled, due or deferred) for subscribers whose breaker is open
/// or half-open, and the earliest `first_seen` among them. From those subscribers to their rows:
/// `join` is `CROSS JOIN` on SQLite, which keeps the subscribers the outer loop, so it reads no
/// delivery while no breaker is open; PostgreSQL plans `JOIN` itself.
pub(crate) fn behind_open_breakers(join: &str) -> String {
    format!(
        "SELECT count(*), min(d.first_seen)
         FROM subscribers s {join} deliveries d ON d.subscriber_id = s.id
         WHERE s.breaker_open_until IS NOT NULL AND d.state = 'scheduled'"
    )
}

/// Dead letters by reason that died since `$1` (and are still dead), through the index on
/// `dead_at`: the recent inflow, cheap enough to read per request (through [`recent_dead`]).
pub(crate) const DEAD_LETTERS_BY_REASON: &str = "SELECT dead_reason, count(*)
     FROM deliveries RECENT_DEAD WHERE state = 'dead' AND dead_at >= $1
     GROUP BY dead_reason ORDER BY dead_reason";

/// One of the queries of recent dead letters above, reading `deliveries` with `index_hint`:
/// empty on PostgreSQL, whose planner has statistics; SQLite has none, and left to itself walks
/// `deliveries_dead` (every dead letter kept, already grouped by reason) rather than the range
/// of `deliveries_dead_at`, so it names that index.
pub(crate) fn recent_dead(query: &str, index_hint: &str) -> String {
    query.replace("RECENT_DEAD", index_hint)
}

/// For reads: the payload version delivery `d` sends (or sent). Rows written before payload
/// versions (NULL) send the event's latest; a delivery that died for want of a version has none.
pub(crate) const SENT_VERSION: &str =
    "CASE WHEN d.payload_version IS NOT NULL THEN d.payload_version
         WHEN d.state = 'dead' AND d.dead_error IS NOT NULL THEN NULL
         ELSE (SELECT e.payload_version FROM events e WHERE e.id = d.event_id) END";

/// The payload version a replayed delivery `d` of subscriber `s` sends: chosen again by the
/// subscriber's pin at replay time, the highest version at or below it (NULL: none).
pub(crate) const REPLAY_VERSION: &str = "(SELECT max(v) FROM (
        SELECT e.payload_version AS v FROM events e WHERE e.id = d.event_id
        UNION ALL SELECT p.version FROM event_payloads p WHERE p.event_id = d.event_id) AS versions
     WHERE s.payload_version IS NULL OR v <= s.payload_version)";

/// The columns both backends read into a [`DueRow`], in its order, with `attempts` as the
/// expression that gives the attempts spent before the lease.
macro_rules! due_columns {
    ($attempts:literal) => {
        concat!(
            "seq, id, event_id, subscriber_id, ",
            $attempts,
            ", first_seen, window_start, run_at, payload_version, updated_at"
        )
    };
}

/// A [`DueRow`] read before leasing it, or by a rescue (which does not count an attempt).
pub(crate) const DUE_COLUMNS: &str = due_columns!("attempts");
/// A [`DueRow`] returned by the claim that counted its attempt.
pub(crate) const LEASED_COLUMNS: &str = due_columns!("attempts - 1");

/// A replay's audit counts the outcome of a delivery `ri` it released only while it is that
/// delivery's latest replay: a later replay of the same delivery counts it instead.
pub(crate) const LATEST_REPLAY: &str = "NOT EXISTS (SELECT 1 FROM replay_items later
    WHERE later.delivery_seq = ri.delivery_seq AND later.replay_seq > ri.replay_seq)";

/// A stored policy's columns, in [`StoredPolicy`]'s order after the key.
pub(crate) const POLICY_COLUMNS: &str = "seq, name, definition, created_at, created_by";
pub(crate) const INSERT_POLICY: &str =
    "INSERT INTO policies (name, definition, created_at, created_by) VALUES ($1, $2, $3, $4)";

/// The columns of a dead-letter list, before its filter and [`DEATH_ORDER`], reading
/// `deliveries` with `index_hint` (empty on PostgreSQL, whose planner has statistics).
pub(crate) fn dead_letters_select(index_hint: &str) -> String {
    format!(
        "SELECT d.seq, d.id, d.event_id, e.type, d.subscriber_id, {SENT_VERSION},
                d.dead_reason, d.dead_at, d.dead_error, d.waiting_on
         FROM deliveries d {index_hint} JOIN events e ON e.id = d.event_id"
    )
}

/// The order dead letters are listed and replayed in: oldest dead first, then by key.
pub(crate) const DEATH_ORDER: &[&str] = &["d.dead_at", "d.seq"];

/// A rollout's columns, in [`Rollout`]'s order after the key.
pub(crate) const ROLLOUT_COLUMNS: &str = "seq, id, policy, baseline, basis_points, subscriber_ids,
    abort_terminal_rate_increase, abort_min_deliveries, state, reason, started_at, ended_at,
    created_by";
pub(crate) const INSERT_ROLLOUT: &str = "INSERT INTO rollouts (id, policy, baseline, basis_points,
        subscriber_ids, abort_terminal_rate_increase, abort_min_deliveries, state, reason,
        started_at, ended_at, created_by)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";
/// A rollout's changes, fenced: only a running one changes (parameters: 1 the share, 2 the
/// state, 3 the reason, 4 when it ended, 5 the id; SQLite numbers `$N` parameters in the order
/// they first appear, so they appear in order).
pub(crate) const CHANGE_ROLLOUT: &str = "UPDATE rollouts
    SET basis_points = $1, state = $2, reason = $3, ended_at = $4
    WHERE id = $5 AND state = 'running'";
/// The policy in force for everyone: the candidate of the rollout promoted last (none: the
/// configuration's `default`).
pub(crate) const PROMOTED_POLICY: &str =
    "SELECT policy FROM rollouts WHERE state = 'promoted' ORDER BY ended_at DESC, seq DESC LIMIT 1";

/// The deliveries a [`CohortReport`] covers, as `firsts` (parameters: 1 the policy, 2 since,
/// 3 until): those with a first attempt that policy decided, started in the range, read
/// through the `attempts_first` index. A replayed delivery (a new budget, so a new first
/// attempt) counts once, with its latest such first attempt.
const COHORT_FIRSTS: &str = "WITH firsts AS (
    SELECT d.subscriber_id, d.state, d.dead_reason, d.attempts,
           (SELECT max(a.started_at + a.duration_ms) FROM attempts a
            WHERE a.delivery_seq = d.seq AND a.ordinal = 1 AND a.policy = $1
              AND a.started_at >= $2 AND a.started_at < $3) - d.first_seen AS latency
    FROM deliveries d
    WHERE d.seq IN (SELECT a.delivery_seq FROM attempts a
                    WHERE a.ordinal = 1 AND a.policy = $1 AND a.started_at >= $2
                      AND a.started_at < $3))";

/// A cohort's totals: deliveries, subscribers, delivered, dead, retry attempts, retried.
pub(crate) fn cohort_totals() -> String {
    format!(
        "{COHORT_FIRSTS}
         SELECT count(*), count(DISTINCT subscriber_id),
                CAST(COALESCE(sum(CASE WHEN state = 'delivered' THEN 1 ELSE 0 END), 0) AS BIGINT),
                CAST(COALESCE(sum(CASE WHEN state = 'dead' THEN 1 ELSE 0 END), 0) AS BIGINT),
                CAST(COALESCE(sum(CASE WHEN attempts > 1 THEN attempts - 1 ELSE 0 END), 0)
                     AS BIGINT),
                CAST(COALESCE(sum(CASE WHEN attempts > 1 THEN 1 ELSE 0 END), 0) AS BIGINT)
         FROM firsts"
    )
}

/// A cohort's dead deliveries by reason.
pub(crate) fn cohort_dead() -> String {
    format!(
        "{COHORT_FIRSTS}
         SELECT dead_reason, count(*) FROM firsts WHERE state = 'dead' GROUP BY dead_reason"
    )
}

/// The latency at 0-based rank `$4` in a cohort.
pub(crate) fn cohort_latency_at() -> String {
    format!("{COHORT_FIRSTS} SELECT latency FROM firsts ORDER BY latency LIMIT 1 OFFSET $4")
}

/// Deliveries scheduled, in flight, scheduled and not held, and due now (parameter 1: now),
/// each counted through a partial index; `unheld` is the backend's "not held" predicate.
pub(crate) fn backlog(unheld: &str) -> String {
    format!(
        "SELECT (SELECT count(*) FROM deliveries WHERE state = 'scheduled'),
                (SELECT count(*) FROM deliveries WHERE state = 'in_flight'),
                (SELECT count(*) FROM deliveries WHERE state = 'scheduled' AND {unheld}),
                (SELECT count(*) FROM deliveries
                 WHERE state = 'scheduled' AND {unheld} AND run_at <= $1)"
    )
}

/// Groups of the backlog that wait for a later time (parameter 1: now), as (cause, after ms,
/// deliveries): cause 1 is an open breaker (rows a claim deferred to its half-open time, a
/// millisecond apart, and retries behind it: each waits for the later of the two), 0 a
/// scheduled `run_at` only. Times are rounded up to a second within a minute, ten seconds
/// within ten minutes and a minute beyond, so a day's backlog is at most ~1,500 groups.
/// Rows of subscribers whose breaker is open but that no claim has deferred yet are due:
/// they are found from the subscribers with an open breaker, through each one's rows (SQLite
/// keeps a CROSS JOIN's order, and the unary `+` keeps it from walking every due row per
/// subscriber instead; PostgreSQL plans both as usual). `unheld` qualifies `d`.
pub(crate) fn backlog_deferred(unheld: &str) -> String {
    format!(
        "SELECT CAST(cause AS BIGINT),
                CASE WHEN wait <= 60000 THEN (wait + 999) / 1000 * 1000
                     WHEN wait <= 600000 THEN (wait + 9999) / 10000 * 10000
                     ELSE (wait + 59999) / 60000 * 60000 END AS after_ms,
                count(*)
         FROM (SELECT CASE WHEN s.breaker_open_until > $1 THEN 1 ELSE 0 END AS cause,
                      CASE WHEN s.breaker_open_until > d.run_at THEN s.breaker_open_until
                           ELSE d.run_at END - $1 AS wait
               FROM deliveries d JOIN subscribers s ON s.id = d.subscriber_id
               WHERE d.state = 'scheduled' AND {unheld} AND d.run_at > $1
               UNION ALL
               SELECT 1, s.breaker_open_until - $1
               FROM subscribers s CROSS JOIN deliveries d
               WHERE d.subscriber_id = s.id AND s.breaker_open_until > $1
                 AND d.state = 'scheduled' AND {unheld} AND +d.run_at <= $1) w
         GROUP BY 1, 2"
    )
}

/// The backlog of subscribers with a rate limit (parameter 1: now): how many deliveries, and
/// the longest any such subscriber needs to work through its own at its rate, in ms from now.
/// `unheld` qualifies `d`.
pub(crate) fn backlog_rate_limited(unheld: &str) -> String {
    format!(
        "SELECT CAST(COALESCE(sum(n), 0) AS BIGINT),
                CAST(COALESCE(max(wait + n * 1000.0 / rate), 0) AS BIGINT)
         FROM (SELECT count(*) AS n, s.rate_limit_per_second AS rate,
                      CASE WHEN s.rate_next_at > $1 THEN s.rate_next_at - $1 ELSE 0 END AS wait
               FROM subscribers s CROSS JOIN deliveries d
               WHERE d.subscriber_id = s.id AND s.rate_limit_per_second > 0 AND d.state IN ('scheduled', 'in_flight')
                 AND {unheld}
               GROUP BY s.id, s.rate_limit_per_second, s.rate_next_at) r"
    )
}

/// The attempts started at or after `$1`, the most recent `$2`: duration, outcome, whether
/// answered.
pub(crate) const ATTEMPT_HISTORY: &str =
    "SELECT duration_ms, outcome, status IS NOT NULL FROM attempts
     WHERE started_at >= $1 ORDER BY started_at DESC LIMIT $2";

/// One process's meter, replaced (parameters in [`MeterReading`]'s order after owner and time).
pub(crate) const RECORD_METER: &str = "INSERT INTO capacity_meters
        (owner, measured_at, new_attempts, retry_attempts, failed_attempts, busy_slot_samples,
         slot_samples, answered_attempts, held_slot_samples)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
    ON CONFLICT (owner) DO UPDATE SET measured_at = excluded.measured_at,
        new_attempts = excluded.new_attempts, retry_attempts = excluded.retry_attempts,
        failed_attempts = excluded.failed_attempts,
        busy_slot_samples = excluded.busy_slot_samples, slot_samples = excluded.slot_samples,
        answered_attempts = excluded.answered_attempts,
        held_slot_samples = excluded.held_slot_samples";
/// Meters of processes gone for a day.
pub(crate) const FORGET_METERS: &str = "DELETE FROM capacity_meters WHERE measured_at < $1";
/// The sum of the meters recorded since `$1`.
pub(crate) const METER_TOTALS: &str = "SELECT CAST(COALESCE(sum(new_attempts), 0) AS BIGINT),
        CAST(COALESCE(sum(retry_attempts), 0) AS BIGINT),
        CAST(COALESCE(sum(failed_attempts), 0) AS BIGINT),
        CAST(COALESCE(sum(busy_slot_samples), 0) AS BIGINT),
        CAST(COALESCE(sum(slot_samples), 0) AS BIGINT),
        CAST(COALESCE(sum(answered_attempts), 0) AS BIGINT),
        CAST(COALESCE(sum(held_slot_samples), 0) AS BIGINT)
    FROM capacity_meters WHERE measured_at >= $1";
/// The estimate of what the process has shown it can do, replaced (1 the rate, 2 its evidence,
/// 3 when).
///
/// Several processes record it, each from its own copy read at its start: a lower figure that
/// is only a lower bound (`at_least`) never replaces a higher one another process recorded;
/// a saturated measurement, which is what the processes can do now, always does.
pub(crate) const RECORD_SHOWN: &str =
    "INSERT INTO capacity_shown (id, per_s, evidence, measured_at)
    VALUES (1, $1, $2, $3)
    ON CONFLICT (id) DO UPDATE SET per_s = excluded.per_s, evidence = excluded.evidence,
        measured_at = excluded.measured_at
    WHERE excluded.evidence = 'saturated' OR excluded.per_s > capacity_shown.per_s";
/// The estimate, if one was ever recorded.
pub(crate) const SHOWN: &str = "SELECT per_s, evidence FROM capacity_shown WHERE id = 1";
