//! "Are these servers drained yet?" asked of a [`SiteStatus`] (R-ST-1): one
//! judgement for `ringsync wait drained` on the store and for the
//! long-poll `GET /v1/wait` of `ringsync serve`, so both say the same thing
//! with the same words, and the answer of that endpoint, one type for both
//! ends.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::status::SiteStatus;
use crate::sum::InstanceStatus;
use ringsync::view::{InstanceState, Zone};

/// The longest `GET /v1/wait` holds a request: a client that wants longer
/// asks again (the CLI does), so a forgotten request costs a bounded time.
pub const MAX_WAIT: Duration = Duration::from_secs(300);

/// How one look at the site came out for the servers asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Every instance of them is `drained`.
    Drained,
    /// These instances are in the normal zone (no active profile drains
    /// their server): they would never drain.
    NotDraining(Vec<String>),
    /// Not yet.
    Pending,
}

/// One look at the site for some servers.
#[derive(Debug, Clone)]
pub(crate) struct Look {
    pub(crate) verdict: Verdict,
    /// Their instances, in config order.
    pub(crate) instances: Vec<InstanceStatus>,
    /// The progress line (`0 of 1 drained; sg-a draining (work 3)`).
    pub(crate) progress: String,
}

/// A server asked about that has no instance in the site.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no instance on server `{server}` in site `{site}`")]
pub(crate) struct UnknownServer {
    pub(crate) server: String,
    pub(crate) site: String,
}

/// Looks at `st` for the instances of `servers`.
pub(crate) fn look(st: &SiteStatus, servers: &[String]) -> Result<Look, UnknownServer> {
    if let Some(bad) = servers
        .iter()
        .find(|s| !st.instances.iter().any(|i| &i.server == *s))
    {
        return Err(UnknownServer {
            server: bad.clone(),
            site: st.site.clone(),
        });
    }
    // bgmg and ws are never drained (R-BG-1, R-WS-1): they stay in the
    // normal zone whatever drains their server, so they are not waited for.
    let instances: Vec<InstanceStatus> = (st.instances.iter())
        .filter(|i| servers.contains(&i.server) && !i.service.never_drained())
        .cloned()
        .collect();
    // By zone, not state: an instance of the normal zone never drains,
    // whether it is up, down or unknown.
    let outside: Vec<String> = (instances.iter())
        .filter(|i| i.zone == Zone::Normal)
        .map(|i| i.id.clone())
        .collect();
    let verdict = if !outside.is_empty() {
        Verdict::NotDraining(outside)
    } else if instances.iter().all(|i| i.state == InstanceState::Drained) {
        Verdict::Drained
    } else {
        Verdict::Pending
    };
    let progress = progress(&instances);
    Ok(Look {
        verdict,
        instances,
        progress,
    })
}

/// The ids of the instances whose state `pick` takes.
pub(crate) fn ids(
    instances: &[InstanceStatus],
    pick: impl Fn(InstanceState) -> bool,
) -> Vec<String> {
    (instances.iter())
        .filter(|i| pick(i.state))
        .map(|i| i.id.clone())
        .collect()
}

/// `N of M drained; sg-a draining (work 3), mg-a unknown`.
fn progress(mine: &[InstanceStatus]) -> String {
    let drained = mine
        .iter()
        .filter(|i| i.state == InstanceState::Drained)
        .count();
    let mut line = format!("{drained} of {} drained", mine.len());
    let rest: Vec<String> = (mine.iter())
        .filter(|i| i.state != InstanceState::Drained)
        .map(|i| match i.work {
            Some(w) => format!("{} {} (work {w})", i.id, i.state.as_str()),
            None => format!("{} {}", i.id, i.state.as_str()),
        })
        .collect();
    if !rest.is_empty() {
        line.push_str("; ");
        line.push_str(&rest.join(", "));
    }
    line
}

/// A short tag of a progress line: a client names the one it last saw
/// (`changed=`) and is answered as soon as the line differs.
pub(crate) fn digest(progress: &str) -> String {
    let h = Sha256::digest(progress.as_bytes());
    h[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// How a `GET /v1/wait` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every instance of the servers is `drained` (200).
    Drained,
    /// The progress differs from the `changed` digest given (200).
    Changed,
    /// The timeout passed first (408).
    Timeout,
    /// An instance of the servers is in the normal zone: it would never
    /// drain (409).
    NotDraining,
}

/// The body of every `GET /v1/wait` answer but a refused request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitAnswer {
    /// How it ended.
    pub outcome: Outcome,
    /// The servers waited for (those asked and the profile's), sorted.
    pub servers: Vec<String>,
    /// The progress line `ringsync wait drained` prints.
    pub progress: String,
    /// The tag of `progress`, for the next request's `changed`.
    pub digest: String,
    /// The instances not `drained` yet.
    pub left: Vec<String>,
    /// Those of `left` whose state nobody can say (R-ST-4).
    pub unknown: Vec<String>,
    /// Those of `left` in the normal zone (outcome `not_draining`).
    pub not_draining: Vec<String>,
    /// The profile revision of the view judged.
    pub revision: u64,
    /// The instances of the servers, as `GET /v1/status` shows them.
    pub instances: Vec<InstanceStatus>,
}

impl WaitAnswer {
    pub(crate) fn new(outcome: Outcome, servers: &[String], revision: u64, look: Look) -> Self {
        let not_draining = match &look.verdict {
            Verdict::NotDraining(v) => v.clone(),
            _ => Vec::new(),
        };
        WaitAnswer {
            outcome,
            servers: servers.to_vec(),
            digest: digest(&look.progress),
            left: ids(&look.instances, |s| s != InstanceState::Drained),
            unknown: ids(&look.instances, |s| s == InstanceState::Unknown),
            not_draining,
            revision,
            progress: look.progress,
            instances: look.instances,
        }
    }
}

/// `300`, `300s`, `500ms`, `5m`, `2h`.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = n
        .parse()
        .map_err(|_| format!("`{s}`: a number of seconds, or with ms, s, m or h"))?;
    let ms = match unit {
        "ms" => n,
        "s" => n.saturating_mul(1000),
        "m" => n.saturating_mul(60_000),
        "h" => n.saturating_mul(3_600_000),
        _ => return Err(format!("`{s}`: the unit is ms, s, m or h")),
    };
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_seconds_or_a_unit() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("2d").is_err());
        assert!(parse_duration("m").is_err());
    }

    #[test]
    fn a_digest_follows_the_progress_line() {
        let a = digest("0 of 1 drained; sg-a draining (work 3)");
        assert_eq!(a.len(), 16);
        assert_eq!(a, digest("0 of 1 drained; sg-a draining (work 3)"));
        assert_ne!(a, digest("0 of 1 drained; sg-a draining (work 2)"));
    }
}
