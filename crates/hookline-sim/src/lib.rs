//! A deterministic simulation of hookline's delivery loop (issue 40, item 1).
//!
//! The real store (SQLite on a file, or PostgreSQL in a schema of its own), the real policy
//! and the engine's own slots and slowness are driven as the engine's dispatcher drives them
//! (`claim_due`, `complete_and_claim`, `rescue_expired`, `expire_windows`; `process.rs`), but
//! everything around them is simulated and seeded: the clock (milliseconds, moved only by the
//! scheduler), the subscribers (each answers by a behaviour drawn per seed: 2xx, 5xx, 4xx, 410,
//! `Retry-After`, a hang until the attempt timeout, a slow answer; some seeds add a crowd that
//! hangs, several times the slots), the control changes (pause, resume, revoke, caps, rate
//! limits, replays, new subscribers and URLs, rollouts: `rollouts.rs`), crashes (the attempts in
//! flight and the process's memory are dropped, the store reopened; also between a claim's
//! commit and its first request) and full disks. After every step `check` holds the invariants
//! of docs/ARCHITECTURE.md against the store's own reads and what the simulated network saw; a
//! seed that breaks one stops there and says so, and replays the same steps
//! (`HOOKLINE_SIM_SEED`). On PostgreSQL some changes run beside the claim ([`Changes`]).
//! The HTTP sender is not simulated: the network answers.

mod check;
mod network;
mod prng;
mod process;
mod rollouts;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use hookline_policy::{AttemptResult, Attempted, DeadReason, Outcome, UnixMs};
use hookline_store::testing::PgSchema;
use hookline_store::{
    AttemptRecord, ClaimRequest, ClaimedDelivery, Completion, CompletionResult, InFlightCaps,
    NewEvent, NewSubscriber, NewTenant, PublishOutcome, ReplayRequest, Store, StoreError,
    SubscriberHeaders, SubscriberPatch, SubscriberStatus, Transition, WindowSweep,
};

use hookline::rollouts::Policies;
use hookline_engine::config::DeliveryConfig;
use hookline_engine::policy::{Policy, DEFAULT_POLICY};
use hookline_engine::slots::LaneReservation;
use network::{Answer, Behaviour, NetworkLog, Seen};
use prng::Prng;
use process::{Ending, Finished, Lending, Live, Process, Request};

/// Where a seed's store lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file in a temporary directory of the seed's own.
    Sqlite,
    /// A schema of the seed's own in the PostgreSQL `HOOKLINE_TEST_POSTGRES` names.
    Postgres,
}

/// One seed's run.
#[derive(Debug, Clone, Copy)]
pub struct SimConfig {
    pub seed: u64,
    /// Scheduled steps before the drain (which runs the clock past every window).
    pub steps: u32,
    pub backend: Backend,
    pub changes: Changes,
}

/// When the control changes of a step run on PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changes {
    /// Half of those that may (publishes, pauses and resumes, rate limits, replays,
    /// revocations, rollouts) run beside the claim, in a transaction of their own, as an api
    /// process's do beside a worker's: which goes first is the database's choice, so a seed
    /// replays its schedule exactly but not always the order of those transactions.
    BesideClaims,
    /// Each before the claim: a seed replays exactly, on PostgreSQL too (`--in-turn`). SQLite,
    /// which has one writer, always runs them so.
    InTurn,
}

/// An invariant that did not hold: the seed's run, the step and what was seen.
#[derive(Debug, Clone)]
pub struct Violation {
    pub config: SimConfig,
    /// The step it was seen after; past the scheduled steps, a step of the drain.
    pub step: u32,
    pub invariant: &'static str,
    pub detail: String,
}

impl Violation {
    fn at_setup(config: SimConfig, detail: String) -> Violation {
        Violation {
            config,
            step: 0,
            invariant: "setup",
            detail,
        }
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let SimConfig {
            seed,
            steps,
            backend,
            changes,
        } = self.config;
        let postgres = if backend == Backend::Postgres {
            " --postgres"
        } else {
            ""
        };
        let in_turn = if changes == Changes::InTurn && backend == Backend::Postgres {
            " --in-turn"
        } else {
            ""
        };
        write!(
            f,
            "seed {seed} step {}: invariant {:?} broken: {} (replay: HOOKLINE_SIM_SEED={seed} \
             cargo run -p hookline-sim -- --steps {steps}{postgres}{in_turn})",
            self.step, self.invariant, self.detail
        )
    }
}

/// What a seed did, for the soak's figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    pub steps: u32,
    pub events: u64,
    pub deliveries: u64,
    pub sent: u64,
    pub orphaned: u64,
    /// Claims whose process died before sending them.
    pub unsent: u64,
    /// Attempts started in a place of the slow lane a claim lent to a tenant under its share.
    pub lent: u64,
    pub delivered: u64,
    pub dead: u64,
    /// Of the dead, by reason, in the order of `DeadReason::ALL`.
    pub dead_by_reason: [u64; 5],
    pub crashes: u64,
    pub full_disks: u64,
    pub refused_writes: u64,
    pub replays: u64,
    pub rollouts: u64,
}

impl std::ops::AddAssign for Summary {
    fn add_assign(&mut self, o: Summary) {
        self.steps += o.steps;
        self.events += o.events;
        self.deliveries += o.deliveries;
        self.sent += o.sent;
        self.orphaned += o.orphaned;
        self.unsent += o.unsent;
        self.lent += o.lent;
        self.delivered += o.delivered;
        self.dead += o.dead;
        for (mine, theirs) in self.dead_by_reason.iter_mut().zip(o.dead_by_reason) {
            *mine += theirs;
        }
        self.crashes += o.crashes;
        self.full_disks += o.full_disks;
        self.refused_writes += o.refused_writes;
        self.replays += o.replays;
        self.rollouts += o.rollouts;
    }
}

/// Runs one seed to its end; the first invariant broken stops it.
pub async fn run(config: SimConfig) -> Result<Summary, Violation> {
    let place = match Place::make(config.backend).await {
        Some(place) => place,
        None => {
            return Err(Violation::at_setup(
                config,
                "no PostgreSQL to run on (HOOKLINE_TEST_POSTGRES)".into(),
            ))
        }
    };
    let mut sim = Sim::start(config, place).await?;
    sim.run_steps().await?;
    let Sim {
        place,
        store,
        summary,
        ..
    } = sim;
    drop(store);
    place.clean_up().await;
    Ok(summary)
}

/// The store's location: a SQLite file (kept in its directory until the seed ends) or a
/// PostgreSQL schema.
enum Place {
    Sqlite {
        _dir: tempfile::TempDir,
        path: String,
    },
    Postgres(PgSchema),
}

impl Place {
    async fn make(backend: Backend) -> Option<Place> {
        Some(match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("a temporary directory");
                let path = dir.path().join("sim.db").to_string_lossy().into_owned();
                Place::Sqlite { _dir: dir, path }
            }
            Backend::Postgres => Place::Postgres(PgSchema::create().await?),
        })
    }

    fn url(&self) -> String {
        match self {
            Place::Sqlite { path, .. } => format!("sqlite://{path}"),
            Place::Postgres(schema) => schema.url(),
        }
    }

    /// On PostgreSQL, the full disk `Sim::fill_or_free_disk` turns on and off: a trigger on
    /// every table of the store (made by now) fails one write statement in `sim_fault.every`
    /// with SQLSTATE 53100 while that table has a row. The count is a sequence, which a
    /// rollback does not undo, so a seed run in turn fails the same statements each time.
    async fn install_full_disk(&self) {
        let Place::Postgres(schema) = self else {
            return;
        };
        schema
            .sql(&[
                "CREATE TABLE sim_fault (every bigint NOT NULL)",
                "CREATE SEQUENCE sim_fault_statements",
                "CREATE FUNCTION sim_fault() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                   IF nextval('sim_fault_statements') % (SELECT every FROM sim_fault LIMIT 1) = 0 THEN
                     RAISE EXCEPTION 'hookline-sim: the disk is full' USING ERRCODE = 'disk_full';
                   END IF;
                   RETURN NULL;
                 END $$",
                "DO $$
                 DECLARE t text;
                 BEGIN
                   FOR t IN SELECT tablename FROM pg_tables
                            WHERE schemaname = current_schema() AND tablename <> 'sim_fault'
                   LOOP
                     EXECUTE format('CREATE TRIGGER sim_fault BEFORE INSERT OR UPDATE OR DELETE ON %I
                                     FOR EACH STATEMENT EXECUTE FUNCTION sim_fault()', t);
                   END LOOP;
                 END $$",
            ])
            .await;
    }

    /// After a seed that passed: a failing seed's schema is left for inspection (its
    /// SQLite file goes with its temporary directory: the seed replays).
    async fn clean_up(self) {
        if let Place::Postgres(schema) = self {
            schema.drop_schema().await;
        }
    }
}

/// The settings a seed runs under, drawn from it.
#[derive(Debug, Clone)]
struct Settings {
    /// The configuration's `default` policy: the standard classification table.
    policy: Policy,
    window_ms: i64,
    attempt_timeout_ms: i64,
    /// As the engine's: the attempt timeout and a margin for the commit.
    lease_ms: i64,
    /// The process's slots, slow lane and slowness threshold (the caps are in `caps`).
    delivery: DeliveryConfig,
    caps: InFlightCaps,
    /// The clock moves at most this far between two dispatcher passes.
    max_advance_ms: i64,
}

impl Settings {
    fn draw(rng: &mut Prng) -> Settings {
        let window = Duration::from_secs(rng.between(20, 90));
        let policy = rollouts::draw(rng, DEFAULT_POLICY, window);
        let attempt_timeout_ms = i64::try_from(rng.between(2_000, 10_000)).unwrap_or(2_000);
        let concurrency = usize::try_from(rng.between(2, 24)).unwrap_or(2);
        let caps = InFlightCaps {
            max_in_flight_per_subscriber: u32::try_from(rng.between(1, 6)).unwrap_or(1),
            // Half the seeds without a cap per host (0), so that the slots can fill.
            max_in_flight_per_host: if rng.percent(50) {
                0
            } else {
                u32::try_from(rng.between(1, 8)).unwrap_or(1)
            },
        };
        let delivery = DeliveryConfig {
            concurrency,
            attempt_timeout: Duration::from_millis(attempt_timeout_ms.unsigned_abs()),
            max_in_flight_per_subscriber: caps.max_in_flight_per_subscriber,
            max_in_flight_per_host: caps.max_in_flight_per_host,
            first_attempt_share: *rng.pick(&[0.25, 0.5, 0.75]).expect("shares"),
            slow_after: Duration::from_millis(rng.between(200, 3_000)),
            // From a lane that fills at once to one with room for every slot twice.
            slow_lane: usize::try_from(rng.between(1, 2 * concurrency as u64)).unwrap_or(1),
        };
        Settings {
            policy,
            window_ms: hookline_policy::duration_ms(window),
            attempt_timeout_ms,
            lease_ms: attempt_timeout_ms + 5_000,
            delivery,
            caps,
            max_advance_ms: i64::try_from(rng.between(200, 3_000)).unwrap_or(200),
        }
    }
}

/// A subscriber as the simulation believes it is.
#[derive(Debug, Clone)]
struct SimSubscriber {
    id: String,
    /// The tenant whose events it gets (`None`: the platform's).
    tenant: Option<&'static str>,
    origin: String,
    event_types: Vec<String>,
    behaviour: Behaviour,
    status: SubscriberStatus,
    max_in_flight: Option<u32>,
}

/// An event the store accepted, and the subscribers it was for.
#[derive(Debug, Clone)]
struct Published {
    id: String,
    subscribers: BTreeSet<String>,
}

/// The event types the simulation publishes, and the patterns subscribers take.
const EVENT_TYPES: [&str; 3] = ["order.created", "order.paid", "user.created"];
const PATTERNS: [&str; 5] = ["*", "order.*", "order.created", "user.created", "user.*"];

/// The platform's own subscribers and events (`None`) and two tenants': claims share the slots
/// across them (`ClaimRequest::lend`).
const TENANTS: [Option<&str>; 3] = [None, Some("t1"), Some("t2")];

/// Two origins, so several subscribers share the cap per host.
const ORIGINS: [&str; 2] = ["http://127.0.0.1:9001", "http://127.0.0.1:9002"];

/// When the simulated clock starts: a fixed instant, so a seed replays exactly.
const EPOCH: UnixMs = 1_800_000_000_000;

/// An upper bound on a claim or rescue, for the sweep and rescue batches.
const BATCH: usize = 1_000;

/// `max_page_count` for a SQLite file whose disk has room again: SQLite's own ceiling.
const NO_PAGE_CAP: u64 = 4_294_967_294;

/// What a step does besides the dispatcher's pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Publish,
    PauseOrResume,
    Cap,
    RateLimit,
    Replay,
    NewSubscriber,
    Revoke,
    Crash,
    FillOrFreeDisk,
    NewUrl,
    Rollout,
    Nothing,
}

impl Action {
    /// Each with how often it is drawn.
    const DRAWN: [(Action, u64); 12] = [
        (Action::Publish, 30),
        (Action::PauseOrResume, 4),
        (Action::Cap, 3),
        (Action::RateLimit, 2),
        (Action::Replay, 2),
        (Action::NewSubscriber, 2),
        (Action::Revoke, 2),
        (Action::Crash, 2),
        (Action::FillOrFreeDisk, 2),
        (Action::NewUrl, 2),
        (Action::Rollout, 2),
        (Action::Nothing, 2),
    ];

    /// Whether, on PostgreSQL, it may run beside the claim (an api process and a worker at the
    /// same moment). Not a cap or a URL: the checks after the claim read the caps and origins
    /// as they are after it.
    fn may_run_beside_a_claim(self) -> bool {
        matches!(
            self,
            Action::Publish
                | Action::PauseOrResume
                | Action::RateLimit
                | Action::Replay
                | Action::Revoke
                | Action::Rollout
        )
    }
}

struct Sim {
    config: SimConfig,
    /// `HOOKLINE_SIM_TRACE=1`: every step's action, claims and completions on standard error.
    tracing: bool,
    step: u32,
    rng: Prng,
    now: UnixMs,
    /// The deliveries this pass's completions rescheduled: decided when their attempt ended,
    /// committed after the pass's window sweep.
    rescheduled: BTreeSet<String>,
    place: Place,
    store: Arc<dyn Store>,
    settings: Settings,
    subscribers: Vec<SimSubscriber>,
    /// Attempts under way, each until `started_at + answer.after_ms` or shed.
    live: Vec<Live>,
    /// The process's slots, slow lane and slowness: new after each crash.
    process: Process,
    /// Attempts the lane shed when another started there: completed in the next pass.
    shed: Vec<Finished>,
    /// The process's view of the policies in force (new after each crash).
    policies: Arc<Policies>,
    /// The rollout running, by id.
    rollout: Option<String>,
    /// Deliveries in flight in the store with no attempt running (their worker was lost),
    /// by key, with their subscriber: rescued once their lease runs out.
    orphans: BTreeMap<i64, String>,
    network: NetworkLog,
    published: Vec<Published>,
    /// The ordering key of each keyed event published (also of one whose publish a full disk
    /// refused: it stored nothing, so it is never claimed).
    ordering_keys: BTreeMap<String, String>,
    /// Deliveries a replay released: out of their key's line.
    replayed: BTreeSet<String>,
    /// When the last delivery a paced replay released is released, at the latest.
    last_release: UnixMs,
    /// Whether the SQLite file is capped at its size now (writes may fail `StorageFull`).
    disk_full: bool,
    /// When the disk last had room again: what a full disk held back ends after it.
    disk_freed_at: UnixMs,
    summary: Summary,
}

impl Sim {
    async fn start(config: SimConfig, place: Place) -> Result<Sim, Violation> {
        let mut rng = Prng::new(config.seed);
        let settings = Settings::draw(&mut rng);
        let store = hookline_store::open(&place.url())
            .await
            .map_err(|e| Violation::at_setup(config, format!("cannot open the store: {e}")))?;
        place.install_full_disk().await;
        let process = Process::start(settings.delivery.clone(), EPOCH);
        let policies = Policies::new(store.clone(), settings.policy.clone());
        let mut sim = Sim {
            config,
            tracing: std::env::var("HOOKLINE_SIM_TRACE").as_deref() == Ok("1"),
            step: 0,
            rng,
            now: EPOCH,
            rescheduled: BTreeSet::new(),
            place,
            store,
            settings,
            subscribers: Vec::new(),
            live: Vec::new(),
            process,
            shed: Vec::new(),
            policies,
            rollout: None,
            orphans: BTreeMap::new(),
            network: NetworkLog::default(),
            published: Vec::new(),
            ordering_keys: BTreeMap::new(),
            replayed: BTreeSet::new(),
            last_release: EPOCH,
            disk_full: false,
            disk_freed_at: EPOCH,
            summary: Summary::default(),
        };
        sim.trace(|| format!("settings {:?}", sim.settings));
        for tenant in TENANTS.into_iter().flatten() {
            let new = NewTenant {
                id: tenant.to_owned(),
                name: None,
                max_subscribers: None,
                max_events_per_second: None,
            };
            if let Err(e) = sim.store.create_tenant(new, sim.now).await {
                return Err(sim.violation("store answers", format!("create_tenant: {e}")));
            }
        }
        for _ in 0..sim.rng.between(2, 6) {
            sim.add_subscriber().await?;
        }
        // A crowd of new destinations, one to three times the slots, all one tenant's, that
        // hang (they must not take the slots from the others: the slow lane, `slots.rs`) or
        // answer slowly (they hold slots, within their usual time: the other tenants get
        // their share, in lent places).
        if sim.rng.percent(30) {
            let slots = sim.settings.delivery.concurrency as u64;
            let behaviour = *sim
                .rng
                .pick(&[Behaviour::Hangs, Behaviour::Slow])
                .expect("behaviours");
            for _ in 0..sim.rng.between(slots, 3 * slots) {
                sim.add_subscriber_behaving(behaviour, TENANTS[1]).await?;
            }
        }
        Ok(sim)
    }

    fn trace(&self, what: impl FnOnce() -> String) {
        if self.tracing {
            eprintln!("[step {} at {} ms] {}", self.step, self.now - EPOCH, what());
        }
    }

    fn violation(&self, invariant: &'static str, detail: String) -> Violation {
        Violation {
            config: self.config,
            step: self.step,
            invariant,
            detail,
        }
    }

    /// A store error is a violation unless the disk is full and it says so: then nothing of
    /// the write was stored, and the caller goes on as the engine does.
    fn refused(&mut self, what: &str, e: StoreError) -> Result<(), Violation> {
        if self.disk_full && matches!(e, StoreError::StorageFull(_)) {
            self.summary.refused_writes += 1;
            self.trace(|| format!("{what} refused: {e}"));
            return Ok(());
        }
        Err(self.violation("store answers", format!("{what} failed: {e}")))
    }

    async fn run_steps(&mut self) -> Result<(), Violation> {
        while self.step < self.config.steps {
            self.step += 1;
            let advance = self
                .rng
                .between(0, self.settings.max_advance_ms.unsigned_abs());
            self.now += i64::try_from(advance).unwrap_or(0);
            let weights = Action::DRAWN.map(|(_, weight)| weight);
            let action = Action::DRAWN[self.rng.weighted(&weights)].0;
            // On PostgreSQL, half of them run beside the claim, in a transaction of their own:
            // which goes first is up to the database, not the seed.
            // The coin is drawn whatever `changes` says: a seed has one schedule.
            let beside = matches!(self.place, Place::Postgres(_))
                && action.may_run_beside_a_claim()
                && self.rng.percent(50)
                && self.config.changes == Changes::BesideClaims;
            if beside {
                self.trace(|| format!("action {action:?} beside the claim"));
                self.dispatch(action).await?;
            } else {
                self.trace(|| format!("action {action:?}"));
                self.act(action).await?;
                self.dispatch(Action::Nothing).await?;
            }
            self.check().await?;
        }
        self.drain().await
    }

    async fn act(&mut self, action: Action) -> Result<(), Violation> {
        match action {
            Action::Publish => self.publish().await,
            Action::PauseOrResume => self.pause_or_resume().await,
            Action::Cap => self.change_caps().await,
            Action::RateLimit => self.change_rate().await,
            Action::Replay => self.replay().await,
            Action::NewSubscriber => self.add_subscriber().await,
            Action::Revoke => self.revoke().await,
            Action::Crash => self.crash().await,
            Action::FillOrFreeDisk => self.fill_or_free_disk().await,
            Action::NewUrl => self.move_subscriber().await,
            Action::Rollout => rollouts::step(self).await,
            Action::Nothing => Ok(()),
        }
    }

    /// The end of a seed: no more changes, the disk has room, and the clock runs past every
    /// window (and every lease) while the dispatcher works.
    async fn drain(&mut self) -> Result<(), Violation> {
        if self.disk_full {
            self.free_disk().await?;
        }
        // A paced replay opens its last window when it releases its last delivery.
        let horizon = self.now.max(self.last_release)
            + self.settings.window_ms
            + self.settings.lease_ms
            + self.settings.max_advance_ms;
        while self.now <= horizon {
            self.step += 1;
            self.now += self.settings.max_advance_ms.min(1_000);
            self.dispatch(Action::Nothing).await?;
            self.check().await?;
        }
        self.check_end().await
    }

    async fn add_subscriber(&mut self) -> Result<(), Violation> {
        let behaviour = Behaviour::draw(&mut self.rng);
        let tenant = *self.rng.pick(&TENANTS).expect("tenants");
        self.add_subscriber_behaving(behaviour, tenant).await
    }

    async fn add_subscriber_behaving(
        &mut self,
        behaviour: Behaviour,
        tenant: Option<&'static str>,
    ) -> Result<(), Violation> {
        let n = self.subscribers.len();
        let id = format!("s{n}");
        let origin = (*self.rng.pick(&ORIGINS).expect("origins")).to_owned();
        let pattern = (*self.rng.pick(&PATTERNS).expect("patterns")).to_owned();
        let max_in_flight = self
            .rng
            .percent(30)
            .then(|| u32::try_from(self.rng.between(1, 4)).unwrap_or(1));
        let new = NewSubscriber {
            id: id.clone(),
            tenant_id: tenant.map(str::to_owned),
            url: format!("{origin}/hooks/{id}"),
            event_types: vec![pattern.clone()],
            secret: "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0".into(),
            max_in_flight,
            // A rate limit makes each claim lock the subscriber's row (`rate_next_at`).
            rate_limit_per_second: self
                .rng
                .percent(30)
                .then(|| self.rng.between(1, 200) as f64 / 10.0),
            payload_version: None,
            headers: SubscriberHeaders::default(),
        };
        match self.store.create_subscriber(new, self.now).await {
            Ok(_) => {
                self.subscribers.push(SimSubscriber {
                    id,
                    tenant,
                    origin,
                    event_types: vec![pattern],
                    behaviour,
                    status: SubscriberStatus::Active,
                    max_in_flight,
                });
                Ok(())
            }
            Err(e) => self.refused("create_subscriber", e),
        }
    }

    /// A subscriber not revoked, drawn at random.
    fn pick_subscriber(&mut self) -> Option<usize> {
        let open: Vec<usize> = (0..self.subscribers.len())
            .filter(|&i| self.subscribers[i].status != SubscriberStatus::Revoked)
            .collect();
        self.rng.pick(&open).copied()
    }

    async fn patch(&mut self, i: usize, patch: SubscriberPatch) -> Result<bool, Violation> {
        let id = self.subscribers[i].id.clone();
        match self.store.update_subscriber(&id, patch, self.now).await {
            Ok(_) => Ok(true),
            Err(e) => self.refused("update_subscriber", e).map(|()| false),
        }
    }

    async fn publish(&mut self) -> Result<(), Violation> {
        let id = format!("e{}", self.summary.events + self.summary.refused_writes + 1);
        let event_type = *self.rng.pick(&EVENT_TYPES).expect("types");
        let tenant = *self.rng.pick(&TENANTS).expect("tenants");
        let subscribers: BTreeSet<String> = self
            .subscribers
            .iter()
            .filter(|s| s.status != SubscriberStatus::Revoked && s.tenant == tenant)
            .filter(|s| hookline_store::type_patterns::selects(&s.event_types, event_type))
            .map(|s| s.id.clone())
            .collect();
        let mut event = NewEvent::single(&id, event_type, r#"{"n":1}"#, 1);
        event.tenant_id = tenant.map(str::to_owned);
        if self.rng.percent(30) {
            let key = format!("k{}", self.rng.between(0, 2));
            self.ordering_keys.insert(id.clone(), key.clone());
            event.ordering_key = Some(key);
        }
        match self.store.publish(event, self.now).await {
            Ok(PublishOutcome::Accepted(receipt)) => {
                if receipt.deliveries != subscribers.len() as u64 {
                    return Err(self.violation(
                        "a publish fans out to every matching subscriber",
                        format!(
                            "event {id} ({event_type}): {} deliveries, expected {} ({subscribers:?})",
                            receipt.deliveries,
                            subscribers.len()
                        ),
                    ));
                }
                self.summary.events += 1;
                self.summary.deliveries += receipt.deliveries;
                self.published.push(Published { id, subscribers });
                Ok(())
            }
            Ok(other) => {
                Err(self.violation("a new event is accepted", format!("event {id}: {other:?}")))
            }
            Err(e) => {
                self.refused("publish", e)?;
                // Refused: nothing of it may be stored.
                match self.store.get_event(&id).await {
                    Err(StoreError::NotFound(_)) => Ok(()),
                    other => Err(self.violation(
                        "a refused publish stores nothing",
                        format!("event {id} after a refused publish: {other:?}"),
                    )),
                }
            }
        }
    }

    async fn pause_or_resume(&mut self) -> Result<(), Violation> {
        let Some(i) = self.pick_subscriber() else {
            return Ok(());
        };
        let to = match self.subscribers[i].status {
            SubscriberStatus::Active => SubscriberStatus::Paused,
            _ => SubscriberStatus::Active,
        };
        let patch = SubscriberPatch {
            status: Some(to),
            ..SubscriberPatch::default()
        };
        if self.patch(i, patch).await? {
            self.subscribers[i].status = to;
        }
        Ok(())
    }

    async fn change_caps(&mut self) -> Result<(), Violation> {
        let Some(i) = self.pick_subscriber() else {
            return Ok(());
        };
        let cap = self
            .rng
            .percent(70)
            .then(|| u32::try_from(self.rng.between(1, 4)).unwrap_or(1));
        let patch = SubscriberPatch {
            max_in_flight: Some(cap),
            ..SubscriberPatch::default()
        };
        if self.patch(i, patch).await? {
            self.subscribers[i].max_in_flight = cap;
        }
        Ok(())
    }

    async fn change_rate(&mut self) -> Result<(), Violation> {
        let Some(i) = self.pick_subscriber() else {
            return Ok(());
        };
        let rate = self
            .rng
            .percent(70)
            .then(|| self.rng.between(1, 40) as f64 / 10.0);
        let patch = SubscriberPatch {
            rate_limit_per_second: Some(rate),
            ..SubscriberPatch::default()
        };
        self.patch(i, patch).await.map(|_| ())
    }

    /// A new URL, perhaps at the other origin: the cap per host follows it.
    async fn move_subscriber(&mut self) -> Result<(), Violation> {
        let Some(i) = self.pick_subscriber() else {
            return Ok(());
        };
        let origin = (*self.rng.pick(&ORIGINS).expect("origins")).to_owned();
        let url = format!("{origin}/hooks/{}/{}", self.subscribers[i].id, self.step);
        let patch = SubscriberPatch {
            url: Some(url),
            ..SubscriberPatch::default()
        };
        if self.patch(i, patch).await? {
            self.subscribers[i].origin = origin;
        }
        Ok(())
    }

    async fn revoke(&mut self) -> Result<(), Violation> {
        let Some(i) = self.pick_subscriber() else {
            return Ok(());
        };
        let id = self.subscribers[i].id.clone();
        match self.store.revoke_subscriber(&id, self.now).await {
            Ok(_) => {
                self.subscribers[i].status = SubscriberStatus::Revoked;
                Ok(())
            }
            Err(e) => self.refused("revoke_subscriber", e),
        }
    }

    async fn replay(&mut self) -> Result<(), Violation> {
        let reasons = [
            DeadReason::PermanentFailure,
            DeadReason::AttemptsExhausted,
            DeadReason::WindowExpired,
            DeadReason::NextDelayExceedsWindow,
        ];
        let reason = *self.rng.pick(&reasons).expect("reasons");
        let per_second = self
            .rng
            .percent(50)
            .then(|| self.rng.between(1, 20) as f64 / 2.0);
        let request = ReplayRequest {
            tenant_id: None,
            reason,
            subscriber_id: None,
            limit: u32::try_from(self.rng.between(1, 20)).unwrap_or(1),
            per_second,
            requested_by: Some("sim".into()),
            expected: None,
        };
        match self.store.replay(request, self.now).await {
            Ok(replay) => {
                if replay.selected > 0 {
                    self.summary.replays += 1;
                }
                if let Some(per_second) = replay.per_second {
                    let span = Duration::try_from_secs_f64(replay.selected as f64 / per_second)
                        .map_or(i64::MAX, hookline_policy::duration_ms);
                    self.last_release = self.last_release.max(self.now.saturating_add(span));
                }
                self.replayed.extend(replay.delivery_ids);
                Ok(())
            }
            // Nothing dead for that reason.
            Err(StoreError::NotFound(_) | StoreError::Invalid(_)) => Ok(()),
            Err(e) => self.refused("replay", e),
        }
    }

    /// The process dies: every attempt under way is lost with it (the network saw the
    /// requests; the store will record them `lost` once rescued), and a new process opens the
    /// store again.
    async fn crash(&mut self) -> Result<(), Violation> {
        self.summary.crashes += 1;
        self.reopen(None).await
    }

    /// The disk fills or, when full, has room again. On SQLite the file may not grow (writes
    /// that need a new page fail `StorageFull`), set with a restart, as the cap is set when the
    /// store opens. On PostgreSQL one write statement in `every` (1 to 4, drawn), on any table,
    /// fails as the server fails on a full disk (SQLSTATE 53100), wherever in a transaction
    /// it is: a trigger of the seed's schema (`Place::make`), with no restart.
    async fn fill_or_free_disk(&mut self) -> Result<(), Violation> {
        if self.disk_full {
            return self.free_disk().await;
        }
        self.summary.full_disks += 1;
        match &self.place {
            // Below its size: SQLite keeps the file as it is and refuses to grow it.
            Place::Sqlite { .. } => self.reopen(Some(1)).await,
            Place::Postgres(schema) => {
                let every = self.rng.between(1, 4);
                schema
                    .sql(&[&format!("INSERT INTO sim_fault (every) VALUES ({every})")])
                    .await;
                self.disk_full = true;
                Ok(())
            }
        }
    }

    async fn free_disk(&mut self) -> Result<(), Violation> {
        match &self.place {
            Place::Sqlite { .. } => self.reopen(Some(NO_PAGE_CAP)).await,
            Place::Postgres(schema) => {
                schema.sql(&["DELETE FROM sim_fault"]).await;
                self.disk_full = false;
                self.disk_freed_at = self.now;
                Ok(())
            }
        }
    }

    async fn reopen(&mut self, page_cap: Option<u64>) -> Result<(), Violation> {
        for live in std::mem::take(&mut self.live) {
            self.orphan(&live.claimed);
        }
        for shed in std::mem::take(&mut self.shed) {
            self.orphan(&shed.claimed);
        }
        self.process = Process::start(self.settings.delivery.clone(), EPOCH);
        if let (Some(pages), Place::Sqlite { path, .. }) = (page_cap, &self.place) {
            hookline_store::testing::cap_sqlite_pages(path, pages);
            self.disk_full = pages != NO_PAGE_CAP;
            if !self.disk_full {
                self.disk_freed_at = self.now;
            }
        }
        // The new process's store replaces the old one, which is dropped (its writes all
        // answered: nothing of it is pending). Opened without serving, so no file lock stands
        // between the two.
        match hookline_store::open(&self.place.url()).await {
            Ok(store) => {
                self.policies = Policies::new(store.clone(), self.settings.policy.clone());
                self.store = store;
                rollouts::refresh(self).await
            }
            Err(e) => Err(self.violation("the store reopens", format!("{e}"))),
        }
    }

    /// The process dies between the claim's commit and its first request: the claimed
    /// deliveries stay leased with nothing sent, and their rescue records an attempt `lost`.
    async fn die_before_sending(
        &mut self,
        claimed: Vec<ClaimedDelivery>,
        unclaimable: &BTreeSet<String>,
    ) -> Result<(), Violation> {
        self.trace(|| format!("the process dies before sending {} claimed", claimed.len()));
        for d in claimed {
            self.check_claimed(&d, unclaimable)?;
            self.network.by_key.entry(d.key.0).or_default().unsent += 1;
            self.summary.unsent += 1;
            self.left_leased(&d);
        }
        self.crash().await
    }

    /// `d` stays in flight in the store until its lease runs out and a rescue records it.
    fn left_leased(&mut self, d: &ClaimedDelivery) {
        self.orphans
            .insert(d.key.0, d.destination.subscriber_id.clone());
    }

    /// `claimed` stays in flight in the store with nobody attempting it.
    fn orphan(&mut self, claimed: &ClaimedDelivery) {
        self.left_leased(claimed);
        if let Some(seen) = self.network.by_key.get_mut(&claimed.key.0) {
            seen.orphaned += 1;
        }
        self.summary.orphaned += 1;
    }

    fn subscriber(&self, id: &str) -> Option<&SimSubscriber> {
        self.subscribers.iter().find(|s| s.id == id)
    }

    /// One pass of the dispatcher's loop, as `hookline-engine`'s `Dispatcher::run` makes it:
    /// the window sweep, the rescue of expired leases (each recorded `lost` at once), then the
    /// attempts that ended are completed and the next claim made in one call.
    async fn dispatch(&mut self, beside_the_claim: Action) -> Result<(), Violation> {
        let now = self.now;
        self.rescheduled.clear();
        let sweep = WindowSweep {
            now,
            window_ms: self.settings.window_ms,
            caps: self.settings.caps,
            limit: BATCH,
        };
        if let Err(e) = self.store.expire_windows(sweep).await {
            self.refused("expire_windows", e)?;
        }
        // An attempt that ended gave its slot back before its completion is seen (as the
        // engine's `attempt` drops its slot first): the rescue may use it.
        let mut ended = std::mem::take(&mut self.shed);
        ended.extend(self.process.run_until(&mut self.live, now));
        let free = self.process.slots.free();
        let mut finished = Vec::new();
        if free > 0 {
            match self
                .store
                .rescue_expired(now, free, self.settings.lease_ms)
                .await
            {
                Ok(rescued) => {
                    self.trace(|| {
                        let ids: Vec<_> = rescued.iter().map(|d| d.id.as_str()).collect();
                        format!("rescued {ids:?} ({free} slots free)")
                    });
                    for d in rescued {
                        if self.orphans.remove(&d.key.0).is_none() {
                            let under_way = self
                                .live
                                .iter()
                                .find(|l| l.claimed.key == d.key)
                                .map(|l| (l.started_at - EPOCH, l.answer.after_ms));
                            return Err(self.violation(
                                "only a lost attempt's lease runs out",
                                format!(
                                    "rescued {} (attempt {}) at {} ms while its attempt is under \
                                     way (started at and lasting, ms: {under_way:?})",
                                    d.id,
                                    d.attempt,
                                    now - EPOCH
                                ),
                            ));
                        }
                        let Some(lost_at) = d.lost_attempt_started_at else {
                            return Err(self.violation(
                                "a rescue says when the lost attempt started",
                                format!("rescued {} without lost_attempt_started_at", d.id),
                            ));
                        };
                        finished.push(Finished {
                            claimed: d,
                            started_at: lost_at,
                            ended_at: now,
                            result: AttemptResult::Lost,
                            retry_after: None,
                            ending: Ending::Rescue,
                        });
                    }
                }
                Err(e) => self.refused("rescue_expired", e)?,
            }
        }
        // The engine's rescued deliveries each take a slot for the moment it takes to record
        // them: the claim wants that many fewer.
        let rescued = finished.len();
        finished.extend(ended);
        let completions: Vec<(ClaimedDelivery, Completion)> = finished
            .into_iter()
            .map(|f| {
                let completion = self.completion(&f);
                (f.claimed, completion)
            })
            .collect();
        let want = self.process.slots.free().saturating_sub(rescued);
        let slots = self.settings.delivery.concurrency;
        let mut lent = self.process.slots.reserve_lane(slots);
        let request = ClaimRequest {
            now,
            limit: want,
            slots,
            lend: lent.places(),
            lease_ms: self.settings.lease_ms,
            max_in_flight_per_subscriber: self.settings.caps.max_in_flight_per_subscriber,
            max_in_flight_per_host: self.settings.caps.max_in_flight_per_host,
            max_retries: self.process.slots.free_for_retries(),
            exclude_subscribers: self.process.suspects(now),
            window_ended_for_start: now.saturating_sub(self.settings.window_ms),
        };
        self.trace(|| {
            let done: Vec<_> = completions
                .iter()
                .map(|(d, c)| (d.id.as_str(), d.attempt, c.record.outcome, c.transition))
                .collect();
            format!("completing {done:?}")
        });
        let sent: Vec<Completion> = completions.iter().map(|(_, c)| c.clone()).collect();
        // PostgreSQL runs `complete_and_claim`'s completions beside its claim, so whether the
        // claim sees the slots they free is a matter of timing: there the simulation commits
        // the completions first, then claims. What the store must refuse to claim for: the
        // subscribers paused and revoked before the claim, those its completions revoked
        // (a 410) included.
        let (claimed, before) = match self.place {
            Place::Sqlite { .. } => {
                // `run_steps` runs changes beside a claim on PostgreSQL only: with one writer,
                // one would run before it.
                self.act(beside_the_claim).await?;
                let (completing, claimed) = self.store.complete_and_claim(sent, request).await;
                self.completed(&completions, completing.await)?;
                (claimed, self.unclaimable())
            }
            Place::Postgres(_) => {
                let completed = self.store.complete(sent, now).await;
                self.completed(&completions, completed)?;
                let before = self.unclaimable();
                let store = self.store.clone();
                let (claimed, acted) =
                    tokio::join!(store.claim_due(request), self.act(beside_the_claim));
                acted?;
                (claimed, before)
            }
        };
        match claimed {
            Ok(claimed) => {
                self.trace(|| {
                    let ids: Vec<_> = claimed.iter().map(|d| (d.id.as_str(), d.attempt)).collect();
                    format!(
                        "claimed {ids:?} ({} under way; {want} wanted, {} lendable)",
                        self.live.len(),
                        lent.places()
                    )
                });
                // And after what ran beside it: a subscriber resumed meanwhile may be claimed.
                let unclaimable: BTreeSet<String> =
                    before.intersection(&self.unclaimable()).cloned().collect();
                if !claimed.is_empty() && self.rng.percent(2) {
                    drop(lent);
                    // What the pass moved to the lane is checked before the process dies.
                    check::slots(self)?;
                    return self.die_before_sending(claimed, &unclaimable).await;
                }
                self.send(claimed, &unclaimable, &mut lent)?
            }
            Err(e) => self.refused("claim_due", e)?,
        }
        drop(lent);
        check::slots(self)
    }

    /// The subscribers paused or revoked.
    fn unclaimable(&self) -> BTreeSet<String> {
        self.subscribers
            .iter()
            .filter(|s| s.status != SubscriberStatus::Active)
            .map(|s| s.id.clone())
            .collect()
    }

    /// What the store answered to `completions`: a revoking one revoked its subscriber; a
    /// commit refused leaves them in flight until their leases run out.
    fn completed(
        &mut self,
        completions: &[(ClaimedDelivery, Completion)],
        completed: hookline_store::Result<Vec<CompletionResult>>,
    ) -> Result<(), Violation> {
        match completed {
            Ok(results) => {
                for ((d, c), result) in completions.iter().zip(results) {
                    if let Transition::Reschedule { .. } = c.transition {
                        self.rescheduled.insert(d.id.clone());
                    }
                    if result == CompletionResult::LeaseLost {
                        return Err(self.violation(
                            "a completion holding its lease applies",
                            format!("{} (attempt {}) lost its lease", d.id, d.attempt),
                        ));
                    }
                    if c.revoke_subscriber {
                        if let Some(s) = self
                            .subscribers
                            .iter_mut()
                            .find(|s| s.id == d.destination.subscriber_id)
                        {
                            s.status = SubscriberStatus::Revoked;
                        }
                    }
                }
            }
            Err(e) => {
                self.refused("complete", e)?;
                // Not recorded: the rows stay in flight until their leases run out, and the
                // rescue records these attempts as lost, as the engine's `commit` says.
                for (d, c) in completions {
                    if c.record.outcome != Outcome::Lost {
                        self.orphan(d);
                    } else {
                        self.left_leased(d);
                    }
                }
            }
        }
        Ok(())
    }

    /// An attempt that ended, as the engine's `attempt` records and decides it when it ended
    /// (by the policy in force at this pass: a change between its end and the pass is read
    /// early).
    fn completion(&self, f: &Finished) -> Completion {
        let Finished {
            claimed: d,
            started_at,
            ended_at,
            result,
            retry_after,
            ending,
        } = f;
        let (started_at, ended_at, result, retry_after) =
            (*started_at, *ended_at, *result, *retry_after);
        // Decided by the policy in force for its subscriber, as the engine's `attempt`.
        let in_force = self.policies.current();
        let policy = in_force.policy_for(&d.destination.subscriber_id);
        let outcome = policy.classification.classify(result);
        let transition = policy.retry.decide(&Attempted {
            delivery_id: &d.id,
            outcome,
            number: d.attempt,
            window_start: d.window_start,
            now: ended_at,
            retry_after,
        });
        Completion {
            key: d.key,
            lease: d.lease,
            record: AttemptRecord {
                ordinal: d.attempt,
                started_at,
                duration_ms: u64::try_from(ended_at - started_at).unwrap_or(0),
                outcome,
                status: match result {
                    AttemptResult::Status(code) => Some(code),
                    _ => None,
                },
                error: match (ending, outcome) {
                    (Ending::Shed, _) => Some("shed from a full slow lane".into()),
                    (_, Outcome::Success) => None,
                    _ => Some(format!("{result:?}")),
                },
                response_body: None,
                policy: Some(policy.name.clone()),
            },
            transition,
            revoke_subscriber: policy.classification.revokes_subscription(result),
            breaker: policy.breaker,
        }
    }

    /// The claimed deliveries go out: each request is checked as the network carries it.
    fn send(
        &mut self,
        claimed: Vec<ClaimedDelivery>,
        unclaimable: &BTreeSet<String>,
        lent: &mut LaneReservation,
    ) -> Result<(), Violation> {
        let mut claimed_for: BTreeSet<String> = BTreeSet::new();
        // As the dispatcher: the places the claim did not lend go back to the lane. (The
        // dispatcher counts its rescues in the batch too; here they took no slot.)
        let lent_by_claim = claimed.len().saturating_sub(self.process.slots.free());
        lent.keep(lent_by_claim);
        let lendable = lent.places();
        let mut lending = Lending {
            reservation: lent,
            left: lent_by_claim,
        };
        for d in claimed {
            self.check_claimed(&d, unclaimable)?;
            self.network.by_key.entry(d.key.0).or_default().sent += 1;
            self.summary.sent += 1;
            let subscriber = d.destination.subscriber_id.clone();
            let behaviour = match self.subscriber(&subscriber) {
                Some(s) => s.behaviour,
                None => {
                    return Err(self.violation(
                        "deliveries go to known subscribers",
                        format!("claimed {} for unknown {subscriber}", d.id),
                    ))
                }
            };
            let answer = Answer::draw(behaviour, self.settings.attempt_timeout_ms, &mut self.rng);
            claimed_for.insert(subscriber);
            let request = Request { claimed: d, answer };
            let shed = self
                .process
                .begin(&mut self.live, request, &mut lending, self.now);
            self.shed.extend(shed);
        }
        self.summary.lent += (lendable - lending.reservation.places()) as u64;
        check::caps(self, &claimed_for)
    }

    /// What a claimed delivery must be for its request to go out: for an active subscriber,
    /// inside its window, not a rescue, under the `webhook-id` of its every request (recorded
    /// here with its first).
    fn check_claimed(
        &mut self,
        d: &ClaimedDelivery,
        unclaimable: &BTreeSet<String>,
    ) -> Result<(), Violation> {
        let subscriber = &d.destination.subscriber_id;
        if unclaimable.contains(subscriber) {
            return Err(self.violation(
                "nothing is sent to a paused or revoked subscriber",
                format!("claimed {} for {subscriber}", d.id),
            ));
        }
        let window_end = d.window_start + self.settings.window_ms;
        if self.now >= window_end {
            return Err(self.violation(
                "no attempt is sent after its window",
                format!(
                    "{} attempt {} sent at {} ms, its window ended at {} ms",
                    d.id,
                    d.attempt,
                    self.now - EPOCH,
                    window_end - EPOCH
                ),
            ));
        }
        if d.lost_attempt_started_at.is_some() {
            return Err(self.violation(
                "a claim rescues nothing",
                format!("claim_due answered {} as rescued", d.id),
            ));
        }
        let seen = self.network.by_key.entry(d.key.0).or_insert_with(|| Seen {
            webhook_id: d.id.clone(),
            ..Seen::default()
        });
        if seen.webhook_id != d.id {
            let first = seen.webhook_id.clone();
            return Err(self.violation(
                "the same webhook-id on every attempt",
                format!("delivery key {} sent as {first}, now as {}", d.key.0, d.id),
            ));
        }
        Ok(())
    }

    async fn check(&mut self) -> Result<(), Violation> {
        check::step(self).await
    }

    async fn check_end(&mut self) -> Result<(), Violation> {
        check::end(self).await
    }
}

/// Keys of what is in flight in the store as the simulation knows it.
fn in_flight_keys(sim: &Sim) -> BTreeMap<i64, String> {
    let mut keys = sim.orphans.clone();
    let claimed = sim.live.iter().map(|l| &l.claimed);
    for d in claimed.chain(sim.shed.iter().map(|f| &f.claimed)) {
        keys.insert(d.key.0, d.destination.subscriber_id.clone());
    }
    keys
}

/// Runs `config` on a runtime of its own (one thread: the schedule alone decides the order).
pub fn run_blocking(config: SimConfig) -> Result<Summary, Violation> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(run(config))
}
