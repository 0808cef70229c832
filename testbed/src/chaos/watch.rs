//! `ringsync status` as an operator would read it, every 250 ms: which
//! instances it says are `drained`, for the checker to hold against what
//! the far ends truly held at that moment; and a `ringsync wait drained`
//! ([`super::waits`]) for each server whose instance enters a drain.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::waits::Waiters;
use crate::site::{ringsync, BinDir};

/// How often the status is read.
pub const EVERY: Duration = Duration::from_millis(250);

/// One `ringsync status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StatusSample {
    /// Seconds after the start when the CLI was started ...
    pub t0: f64,
    /// ... and when it answered: the status describes a moment in between.
    pub t1: f64,
    /// Each instance's state (`normal`, `draining`, `drained`, ...).
    pub states: BTreeMap<String, String>,
}

impl StatusSample {
    /// The instances it said were drained.
    pub fn drained(&self) -> impl Iterator<Item = &str> {
        self.states
            .iter()
            .filter(|(_, s)| s.as_str() == "drained")
            .map(|(i, _)| i.as_str())
    }
}

/// Whether a state is in the drain zone (`draining`, `drained`,
/// `draining_down`): the instance's server is drained by an active
/// profile.
fn in_drain(state: &str) -> bool {
    matches!(state, "draining" | "drained" | "draining_down")
}

/// Reads the status every [`EVERY`] until `stop`; the samples that
/// answered, and how many did not. When an instance of `servers`
/// (instance -> server) goes from another state into the drain zone,
/// `waiters` starts a `ringsync wait drained` for its server.
pub fn spawn(
    bins: BinDir,
    site: PathBuf,
    start: Instant,
    stop: Arc<AtomicBool>,
    servers: BTreeMap<String, String>,
    waiters: Waiters,
) -> thread::JoinHandle<(Vec<StatusSample>, usize)> {
    thread::spawn(move || {
        let (mut out, mut failed) = (Vec::<StatusSample>::new(), 0);
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let t0 = start.elapsed().as_secs_f64();
            match ringsync(&bins, &site, &["status"]) {
                Ok(v) => {
                    let states = v["instances"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|i| {
                            Some((
                                i["id"].as_str()?.to_owned(),
                                i["state"].as_str()?.to_owned(),
                            ))
                        })
                        .collect::<BTreeMap<String, String>>();
                    for (i, st) in &states {
                        let before = out.last().and_then(|p| p.states.get(i));
                        if in_drain(st) && !before.is_some_and(|b| in_drain(b)) {
                            if let Some(srv) = servers.get(i) {
                                waiters.start(srv);
                            }
                        }
                    }
                    out.push(StatusSample {
                        t0,
                        t1: start.elapsed().as_secs_f64(),
                        states,
                    });
                }
                Err(_) => failed += 1,
            }
            next += EVERY;
            let now = Instant::now();
            if next < now {
                next = now;
            }
            thread::sleep(next - now);
        }
        (out, failed)
    })
}
