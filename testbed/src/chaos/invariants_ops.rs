//! The invariants on the site's state rather than on calls: the last mg
//! is never drained, and the operators' changes are audited once each and
//! add up to what the store holds.

use std::collections::BTreeMap;

use super::evidence::{verdict, Evidence, Invariant};
use super::operators::{ours, AuditEntry, OpOutcome, OpRecord};

/// States in which media-ctl still gives an mg new calls (as its
/// `/readyz` counts them: a lift that starts from weight 0 is served by
/// the normal zone's least loaded mg).
const ASSIGNABLE: &[&str] = &[
    "normal",
    "ramping_down",
    "ramping_up",
    "queued_for_drain",
    "pinned",
];

/// In every sample in which media-ctl answered, some mg still took new
/// calls (R-MG-3: the last one is kept, queued for drain).
pub fn last_mg_kept(e: &Evidence) -> Invariant {
    const NAME: &str = "the last mg is never drained";
    let seen: Vec<_> = e
        .samples
        .iter()
        .filter(|s| !s.mg_assign.is_empty())
        .collect();
    if seen.is_empty() {
        return verdict(
            NAME,
            Some("media-ctl never answered: nothing to judge".into()),
            "0 samples".into(),
        );
    }
    let first = seen
        .iter()
        .find(|s| {
            !s.mg_assign
                .values()
                .any(|a| ASSIGNABLE.contains(&a.as_str()))
        })
        .map(|s| {
            format!(
                "at {:.2} s no mg took new calls: {:?} (drain zone {:?})",
                s.t, s.mg_assign, s.mg_drain_zone
            )
        });
    verdict(
        NAME,
        first,
        format!("{} samples of media-ctl's status", seen.len()),
    )
}

/// A stale revision is refused; every change made is in the audit log
/// exactly once (and the log holds no made change nobody asked for); the
/// store ends as the last changes made say.
pub fn operators(e: &Evidence) -> Invariant {
    const NAME: &str = "operator changes: stale refused, audited once, end state";
    let mut made: Vec<&OpRecord> = e.ops.iter().filter(|o| o.made().is_some()).collect();
    made.sort_by_key(|o| o.order());
    let count = |f: fn(&OpOutcome) -> bool| e.ops.iter().filter(|o| f(&o.outcome)).count();
    let refused = count(|o| matches!(o, OpOutcome::Refused { .. }));
    let failed = count(|o| matches!(o, OpOutcome::Failed { .. }));
    let per_audit = e.ops.iter().filter(|o| o.made_per_audit).count();
    let ours = |p: &Option<String>| p.as_deref().is_some_and(ours);
    let audited: Vec<&AuditEntry> = e
        .audit
        .iter()
        .filter(|a| (200..300).contains(&a.status) && a.revision.is_some() && ours(&a.profile))
        .collect();
    let first = stale_accepted(e)
        .or_else(|| made_on_a_stale_revision(&made))
        .or_else(|| audited_once(&made, &audited))
        .or_else(|| end_state_is_their_sum(e, &made));
    verdict(
        NAME,
        first,
        format!(
            "{} changes asked, {} made ({per_audit} of them failed for the CLI, made per the audit log), {} unchanged, {refused} refused ({} stale on purpose), {failed} failed; {} audit records of made changes",
            e.ops.len(),
            made.len(),
            e.ops.len() - made.len() - refused - failed,
            e.ops.iter().filter(|o| o.stale_on_purpose).count(),
            audited.len()
        ),
    )
}

/// A change given a revision its operator knew was stale, accepted.
fn stale_accepted(e: &Evidence) -> Option<String> {
    e.ops.iter().filter(|o| o.stale_on_purpose).find_map(|o| match o.outcome {
        OpOutcome::Accepted { revision, .. } => Some(format!(
            "operator {}'s {} {} --revision {} at {:.2} s (stale on purpose) was accepted (revision {revision})",
            o.operator,
            o.action,
            o.profile,
            o.if_revision.unwrap_or(0),
            o.t0
        )),
        _ => None,
    })
}

/// A change made with a revision other than the one the change made before
/// it left the profile at.
fn made_on_a_stale_revision(made: &[&OpRecord]) -> Option<String> {
    let mut last: BTreeMap<&str, u64> = BTreeMap::new();
    let mut first = None;
    for o in made {
        let rev = o.made().unwrap_or(0);
        if let (Some(asked), Some(prev)) = (o.if_revision, last.get(o.profile.as_str())) {
            if asked != *prev && first.is_none() {
                first = Some(format!(
                    "operator {}'s {} {} --revision {asked} at {:.2} s was made (revision {rev}) though the profile was at revision {prev}",
                    o.operator, o.action, o.profile, o.t0
                ));
            }
        }
        last.insert(&o.profile, rev);
    }
    first
}

/// A change made that the audit log holds other than once, or a made
/// change in the log that no operator was told was made.
fn audited_once(made: &[&OpRecord], audited: &[&AuditEntry]) -> Option<String> {
    let twice = made.iter().find_map(|o| {
        let n = audited.iter().filter(|a| a.records(o)).count();
        (n != 1).then(|| {
            format!(
                "operator {}'s {} {} at {:.2} s (revision {}) is in the audit log {n} times",
                o.operator,
                o.action,
                o.profile,
                o.t0,
                o.made().unwrap_or(0)
            )
        })
    });
    twice.or_else(|| {
        audited
            .iter()
            .find(|a| !made.iter().any(|o| a.records(o)))
            .map(|a| {
                format!(
                    "the audit log has {} {} at revision {} that no operator was told was made",
                    a.action,
                    a.profile.as_deref().unwrap_or("?"),
                    a.revision.unwrap_or(0)
                )
            })
    })
}

/// The store's profiles at the end differ from what the changes made add
/// up to.
fn end_state_is_their_sum(e: &Evidence, made: &[&OpRecord]) -> Option<String> {
    let want = end_state(made);
    let Some(have) = &e.store_end else {
        return Some("the store's profiles could not be read at the end".into());
    };
    let have: BTreeMap<_, _> = have
        .iter()
        .filter(|(n, _)| ours(n))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    (have != want).then(|| format!("the store ends with {have:?}, the changes made say {want:?}"))
}

/// Profile name → (active, servers) after the changes made, in order.
fn end_state(made: &[&OpRecord]) -> BTreeMap<String, (bool, Vec<String>)> {
    let mut m: BTreeMap<String, (bool, Vec<String>)> = BTreeMap::new();
    for o in made {
        match o.action.as_str() {
            "create" => {
                m.insert(o.profile.clone(), (false, o.servers.clone()));
            }
            "activate" | "deactivate" => {
                if let Some(p) = m.get_mut(&o.profile) {
                    p.0 = o.action == "activate";
                }
            }
            "delete" => {
                m.remove(&o.profile);
            }
            _ => {}
        }
    }
    m
}
