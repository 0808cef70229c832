//! The work of Active-Passive instances (R-ST-2, R-ST-3): the groups an
//! instance leads (confirmed by its service) or is to lead (published by
//! the planner; the home while nothing is published). The handover records
//! are the one place that knows it, so they report it as one more node of
//! the site ([`NodeKind::Handover`]): a draining instance that leads no group
//! and is to lead none is `drained`; one whose move is not confirmed yet
//! still counts its group, also when its service never confirmed anything
//! (R-ST-4: a leader nobody saw hand over is still the leader).

use ringsync::config::{Service, SiteConfig};
use ringsync::view::Health;
use ringsync::work::{InstanceWork, NodeKind, NodeOutcome, WorkCounts, WorkReport};

use super::record::HandoverState;

/// The name the handover records report under.
pub const NODE: &str = "handover-records";

/// The report of the handover records: every member of an Active-Passive
/// group with the groups it leads or is to lead. `revision` and `generation`
/// are the drain view's the report goes with.
pub fn report(
    config: &SiteConfig,
    state: &HandoverState,
    revision: u64,
    now_ms: u64,
) -> WorkReport {
    let instances = config
        .instances
        .iter()
        // Only group members: of another instance the records know nothing.
        .filter(|i| matches!(i.service, Service::Other(_)))
        .filter(|i| config.ap_groups.iter().any(|g| g.members.contains(&i.id)))
        .map(|i| {
            let groups = config
                .ap_groups
                .iter()
                .filter(|g| holds(state, &g.name, &g.home, &i.id))
                .count() as u64;
            let work = InstanceWork {
                health: Health::Unknown,
                counts: WorkCounts {
                    groups,
                    ..WorkCounts::default()
                },
                ..InstanceWork::default()
            };
            (i.id.clone(), work)
        })
        .collect();
    WorkReport {
        backups: Vec::new(),
        run: None,
        site: config.site.name.clone(),
        node: NODE.into(),
        kind: NodeKind::Handover,
        scope: "Active-Passive groups each instance leads (confirmed by its service) or is to \
                lead (desired by the planner; the home while nothing is published)"
            .into(),
        started_ms: 0,
        generated_ms: now_ms,
        revision,
        generation: 0,
        instances,
        // The handover records are no process running a site file.
        site_hash: String::new(),
    }
}

/// True when `member` holds `group` (R-ST-3, R-ST-4): it leads it (the
/// leader its service confirmed; the home while the service has confirmed
/// none, since nobody said it stopped leading), it is to lead it (the
/// planner's desired leader), or it led it before a move its service has not
/// confirmed yet. Until the service confirms, the old leader may still be the
/// one leading: stopping it then would lose the group's leader.
fn holds(state: &HandoverState, group: &str, home: &str, member: &str) -> bool {
    let confirmed = state.confirmed.get(group);
    let leads = confirmed.map_or(home, |c| c.leader.as_str()) == member;
    let to_lead = state.desired_leader(group, home) == member;
    let unconfirmed_from = state
        .desired
        .get(group)
        .is_some_and(|d| d.from == member && confirmed.is_none_or(|c| c.leader != d.leader));
    leads || to_lead || unconfirmed_from
}

/// The outcome `crate::sum::sum` adds: the report, or why the records could not
/// be read (then every Active-Passive instance stays unknown, R-ST-3).
pub fn outcome(
    config: &SiteConfig,
    state: Result<&HandoverState, String>,
    revision: u64,
    now_ms: u64,
) -> NodeOutcome {
    NodeOutcome {
        node: NODE.into(),
        kind: NodeKind::Handover,
        report: state
            .map(|s| report(config, s, revision, now_ms))
            .map_err(|e| format!("handover records unreadable: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handover::record::{Confirmed, Desired, MoveKind};
    use ringsync::profile::{Profile, ProfileSet, ProfileState};
    use ringsync::view::{DrainView, InstanceState};
    use std::path::Path;
    use std::sync::Arc;

    const SITE: &str =
        "[site]\nname = \"t\"\n[[server]]\nname = \"srv-a\"\n[[server]]\nname = \"srv-b\"\n\
        [[instance]]\nid = \"bill-a\"\nservice = \"billing\"\nserver = \"srv-a\"\n\
        [[instance]]\nid = \"bill-b\"\nservice = \"billing\"\nserver = \"srv-b\"\n\
        [[instance]]\nid = \"idle-a\"\nservice = \"billing\"\nserver = \"srv-a\"\n\
        [[ap_group]]\nname = \"billing\"\nmembers = [\"bill-a\", \"bill-b\"]\nhome = \"bill-a\"\n";

    fn desired(leader: &str) -> Desired {
        Desired {
            leader: leader.into(),
            from: "bill-a".into(),
            kind: MoveKind::Handover,
            seq: 1,
            attempt: 1,
            at_ms: 1,
            step: 1,
            steps: 1,
            reason: String::new(),
            planner: "n".into(),
        }
    }

    #[test]
    fn r_st_3_an_ap_instance_is_drained_once_it_leads_no_group_and_is_to_lead_none() {
        let config = SiteConfig::from_str_at(SITE, Path::new("/t.toml")).unwrap();
        let profiles = ProfileSet {
            revision: 1,
            profiles: vec![Profile {
                id: "p".into(),
                name: "p".into(),
                description: String::new(),
                revision: 1,
                servers: vec!["srv-a".into()],
                state: ProfileState::Active,
            }],
        };
        let view = DrainView::build(Arc::new(config.clone()), &profiles, &[], &[]);
        let state_of = |s: &HandoverState, id: &str| {
            let sum = crate::sum::sum(&view, &[outcome(&config, Ok(s), 1, 5)]);
            sum.into_iter().find(|i| i.id == id).unwrap()
        };
        // Nothing published: the home is to lead.
        let mut s = HandoverState::default();
        let a = state_of(&s, "bill-a");
        assert_eq!((a.state, a.work), (InstanceState::Draining, Some(1)));
        // An instance in no group: the records know nothing of it (R-ST-4).
        let idle = state_of(&s, "idle-a");
        assert_eq!((idle.state, idle.work), (InstanceState::Unknown, None));
        // R-ST-4: moved, and the service never confirmed anything: the home
        // may still lead, so it is not drained.
        s.desired.insert("billing".into(), desired("bill-b"));
        let a = state_of(&s, "bill-a");
        assert_eq!((a.state, a.work), (InstanceState::Draining, Some(1)));
        assert_eq!(state_of(&s, "bill-b").counts.groups, 1);
        // Moved but not confirmed: the old leader still leads.
        s.confirmed.insert(
            "billing".into(),
            Confirmed {
                leader: "bill-a".into(),
                seq: 0,
                at_ms: 1,
            },
        );
        assert_eq!(state_of(&s, "bill-a").work, Some(1));
        // Confirmed: no work left on srv-a.
        s.confirmed.get_mut("billing").unwrap().leader = "bill-b".into();
        let a = state_of(&s, "bill-a");
        assert_eq!((a.state, a.work), (InstanceState::Drained, Some(0)));
        assert_eq!(state_of(&s, "bill-b").counts.groups, 1);
        // Records unreadable: unknown, never drained.
        let sum = crate::sum::sum(&view, &[outcome(&config, Err("down".into()), 1, 5)]);
        let a = sum.iter().find(|i| i.id == "bill-a").unwrap();
        assert_eq!((a.state, a.work), (InstanceState::Unknown, None));
        assert!(
            a.unknown[0].contains("handover records unreadable: down"),
            "{:?}",
            a.unknown
        );
    }
}
