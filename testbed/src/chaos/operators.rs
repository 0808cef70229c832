//! Several operators changing drain profiles at once through the ringsync
//! CLI, each on a seeded stream of its own: create, activate, deactivate,
//! delete, most with the revision they read a moment before (stale when
//! another operator changed the profile meanwhile), some with a revision
//! they know is stale, which the store must refuse.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::rng::Rng;
use crate::site::{ringsync, BinDir};

/// The profiles the operators play with, and their servers.
pub const PROFILES: &[(&str, &[&str])] = &[
    ("chaos-a", &["srv-a"]),
    ("chaos-b", &["srv-b"]),
    ("chaos-ac", &["srv-a", "srv-c"]),
];

/// The profile a maintenance automation drains: activated, held for as
/// long as the maintenance would take (30-60 s, so its server's whole
/// drain can finish and `ringsync wait drained` return), lifted, and again
/// 5-15 s later. No other operator touches it.
pub const MAINTENANCE: (&str, &[&str]) = ("chaos-maint", &["srv-c"]);

/// Whether `name` is one of the run's own profiles.
pub fn ours(name: &str) -> bool {
    name == MAINTENANCE.0 || PROFILES.iter().any(|p| p.0 == name)
}

/// One change an operator asked for, and what the store said.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpRecord {
    /// Operator number.
    pub operator: usize,
    /// Seconds after the start when the CLI was started.
    pub t0: f64,
    /// ... and when it answered.
    pub t1: f64,
    /// `create`, `activate`, `deactivate`, `delete`.
    pub action: String,
    /// Profile name.
    pub profile: String,
    /// Its servers (as created).
    pub servers: Vec<String>,
    /// `--revision` given, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub if_revision: Option<u64>,
    /// Given a revision the operator knew was stale: must be refused.
    pub stale_on_purpose: bool,
    /// What came of it.
    pub outcome: OpOutcome,
    /// A failed change the audit log shows was made: its outcome is the
    /// audit record's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub made_per_audit: bool,
}

/// An audit record, as far as the checker reads it.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, Serialize)]
pub struct AuditEntry {
    /// When it was written, seconds after the run's start.
    #[serde(default)]
    pub at_s: f64,
    /// `create`, `activate`, ...
    pub action: String,
    /// The profile's name, when the store knew it.
    #[serde(default)]
    pub profile: Option<String>,
    /// 200/201 made, 4xx refused.
    pub status: u16,
    /// The set's revision after a change that was made.
    #[serde(default)]
    pub revision: Option<u64>,
    /// The profile's revision before the change, when it existed.
    #[serde(default)]
    pub before_revision: Option<u64>,
}

impl AuditEntry {
    /// Whether this record is of the change `o` made. A deletion's answer
    /// names the profile as it was (its revision before), every other
    /// change's the profile as it is after (the set's new revision).
    pub fn records(&self, o: &OpRecord) -> bool {
        let rev = if o.action == "delete" {
            self.before_revision
        } else {
            self.revision
        };
        self.action == o.action
            && self.profile.as_deref() == Some(o.profile.as_str())
            && rev.is_some()
            && rev == o.made()
    }
}

/// The changes with every failed one whose outcome the audit log shows
/// (a made change of that action on that profile, written while the CLI
/// ran, that no answered change accounts for) taken as made.
pub fn resolve(ops: &[OpRecord], audit: &[AuditEntry]) -> Vec<OpRecord> {
    let mut out = ops.to_vec();
    let mut claimed: Vec<bool> = audit
        .iter()
        .map(|a| ops.iter().any(|o| a.records(o)))
        .collect();
    for o in out
        .iter_mut()
        .filter(|o| matches!(o.outcome, OpOutcome::Failed { .. }))
    {
        let found = audit.iter().enumerate().find(|(i, a)| {
            !claimed[*i]
                && (200..300).contains(&a.status)
                && a.action == o.action
                && a.profile.as_deref() == Some(o.profile.as_str())
                && a.at_s >= o.t0 - 0.5
                && a.at_s <= o.t1 + 0.5
        });
        if let Some((i, a)) = found {
            let rev = if o.action == "delete" {
                a.before_revision
            } else {
                a.revision
            };
            if let Some(revision) = rev {
                claimed[i] = true;
                o.outcome = OpOutcome::Accepted {
                    revision,
                    changed: true,
                };
                o.made_per_audit = true;
            }
        }
    }
    out
}

/// The store's answer to a change.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum OpOutcome {
    /// Done: the profile's revision after it; `changed` false when it was
    /// already as asked (nothing written, nothing audited).
    Accepted {
        /// The profile's revision after the change.
        revision: u64,
        /// Whether anything was written.
        changed: bool,
    },
    /// Refused by the store (a stale revision, an unknown profile, a name
    /// taken), with the CLI's message: nothing was changed.
    Refused {
        /// What the CLI said.
        message: String,
    },
    /// Failed otherwise (the store away, a timeout): it may or may not
    /// have been made; the audit log tells ([`resolve`]).
    Failed {
        /// What the CLI said.
        message: String,
    },
}

/// What the store says when it refuses a change (ringsync's `Refusal`):
/// anything else is a failure whose outcome is unknown.
const REFUSALS: &[&str] = &["as asked", "already exists", "no profile with id or name"];

impl OpRecord {
    /// Its place among the changes made to its profile: by revision, a
    /// deletion (which answers with the revision the profile had) right
    /// after the change that gave the profile that revision.
    pub fn order(&self) -> (Option<u64>, bool) {
        (self.made(), self.action == "delete")
    }

    /// The revision of a change that was made and written.
    pub fn made(&self) -> Option<u64> {
        match self.outcome {
            OpOutcome::Accepted {
                revision,
                changed: true,
            } => Some(revision),
            _ => None,
        }
    }
}

/// The operators of a run, each a thread until `stop`.
pub struct Operators {
    threads: Vec<thread::JoinHandle<Vec<OpRecord>>>,
}

impl Operators {
    /// Starts `n` operators on the site file `site`, with streams drawn
    /// from `seed`, and the maintenance automation ([`MAINTENANCE`], the
    /// operator numbered `n`); times are seconds after `start`.
    pub fn start(
        n: usize,
        seed: u64,
        bins: &BinDir,
        site: PathBuf,
        start: Instant,
        stop: Arc<AtomicBool>,
    ) -> Operators {
        let mut threads: Vec<thread::JoinHandle<Vec<OpRecord>>> = (0..n)
            .map(|k| {
                let mut op = Operator::new(k, Rng::fork(seed, k as u64 + 1), bins, &site, start);
                let stop = stop.clone();
                thread::spawn(move || {
                    while nap(&stop, op.rng.range(1.0, 3.0)) {
                        op.one();
                    }
                    op.done
                })
            })
            .collect();
        let mut op = Operator::new(n, Rng::fork(seed, 100), bins, &site, start);
        threads.push(thread::spawn(move || {
            while nap(&stop, op.rng.range(5.0, 15.0)) {
                op.maintain(&stop);
            }
            op.done
        }));
        Operators { threads }
    }

    /// Waits for every operator (after `stop` was set); every change asked
    /// for, in the order they were started.
    pub fn finish(self) -> Vec<OpRecord> {
        let mut all: Vec<OpRecord> = self
            .threads
            .into_iter()
            .flat_map(|t| t.join().unwrap_or_default())
            .collect();
        all.sort_by(|a, b| a.t0.total_cmp(&b.t0));
        all
    }
}

/// Sleeps `secs` unless `stop` is set first; whether to go on.
fn nap(stop: &AtomicBool, secs: f64) -> bool {
    let until = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(50));
    }
    !stop.load(Ordering::Relaxed)
}

struct Operator {
    k: usize,
    rng: Rng,
    bins: BinDir,
    site: PathBuf,
    start: Instant,
    done: Vec<OpRecord>,
}

impl Operator {
    fn new(k: usize, rng: Rng, bins: &BinDir, site: &std::path::Path, start: Instant) -> Operator {
        Operator {
            k,
            rng,
            bins: bins.clone(),
            site: site.to_path_buf(),
            start,
            done: Vec::new(),
        }
    }

    /// Reads the profiles, picks one and a change, maybe waits a moment
    /// (another operator may change it meanwhile), and asks.
    fn one(&mut self) {
        let (name, servers) = PROFILES[self.rng.below(PROFILES.len())];
        let seen = self.read(name);
        let (action, rev) = match seen {
            None => ("create", None),
            Some((rev, active)) => {
                let action = match self.rng.weighted(&[4, 4, 1]) {
                    0 if !active => "activate",
                    0 | 1 if active => "deactivate",
                    0 | 1 => "activate",
                    _ => "delete",
                };
                (action, Some(rev))
            }
        };
        let mode = self.rng.weighted(&[6, 1, 3]);
        let stale = mode == 1 && rev.is_some_and(|r| r > 1);
        let if_revision = match mode {
            0 => rev,
            1 if stale => rev.map(|r| r - 1),
            _ => None,
        };
        // A pause between reading and changing: the window in which
        // another operator's change makes this revision stale.
        thread::sleep(Duration::from_secs_f64(self.rng.range(0.0, 0.8)));
        self.ask(action, (name, servers), if_revision, stale);
    }

    /// The maintenance: its profile activated (created first if missing),
    /// held 30-60 s, lifted.
    fn maintain(&mut self, stop: &AtomicBool) {
        let (name, servers) = MAINTENANCE;
        let Some((rev, active)) = self.read(name).or_else(|| {
            self.ask("create", MAINTENANCE, None, false);
            self.read(name)
        }) else {
            return;
        };
        if !active {
            self.ask("activate", (name, servers), Some(rev), false);
        }
        nap(stop, self.rng.range(30.0, 60.0));
        let rev = self.read(name).map(|(r, _)| r);
        self.ask("deactivate", (name, servers), rev, false);
    }

    /// Asks for `action` on the profile, records the answer.
    fn ask(
        &mut self,
        action: &str,
        (name, servers): (&str, &[&str]),
        if_revision: Option<u64>,
        stale: bool,
    ) {
        let t0 = self.start.elapsed().as_secs_f64();
        let rev_text = if_revision.map(|r| r.to_string());
        let mut args: Vec<&str> = vec!["profile", action];
        if action == "create" {
            args.extend(["--name", name]);
            for s in servers {
                args.extend(["--server", s]);
            }
        } else {
            args.push(name);
        }
        if let Some(r) = &rev_text {
            args.extend(["--revision", r]);
        }
        let outcome = match ringsync(&self.bins, &self.site, &args) {
            Ok(v) => OpOutcome::Accepted {
                revision: v["revision"].as_u64().unwrap_or(0),
                changed: v["changed"].as_bool().unwrap_or(true),
            },
            Err(e) => {
                let message = e.to_string();
                if REFUSALS.iter().any(|r| message.contains(r)) {
                    OpOutcome::Refused { message }
                } else {
                    OpOutcome::Failed { message }
                }
            }
        };
        self.done.push(OpRecord {
            operator: self.k,
            t0,
            t1: self.start.elapsed().as_secs_f64(),
            action: action.into(),
            profile: name.into(),
            servers: servers.iter().map(|s| s.to_string()).collect(),
            if_revision,
            stale_on_purpose: stale,
            outcome,
            made_per_audit: false,
        });
    }

    /// The profile's revision and whether it is active, if it exists.
    fn read(&self, name: &str) -> Option<(u64, bool)> {
        let list = ringsync(&self.bins, &self.site, &["profile", "list"]).ok()?;
        let ps = list.as_array().or_else(|| list["profiles"].as_array())?;
        let p = ps.iter().find(|p| p["name"] == name)?;
        Some((p["revision"].as_u64()?, p["state"] == "active"))
    }
}
