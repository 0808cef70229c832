//! What activating a profile would do, before it is done (`profile activate
//! --dry-run`): which instances would drain, how each Active-Active
//! service's share of new work moves between its instances (read off the
//! hash rings the nodes would build), and which instance would be left the
//! last of its service in the normal zone.
//!
//! The plan is computed from the site file and the profiles alone, so the
//! CLI on the store and the API compute the same one; instances' health is
//! not taken into account (every instance counts as up).

use ringsync::store::Refusal;
use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use ringsync::config::{Service, SiteConfig};
use ringsync::profile::{Profile, ProfileSet, ProfileState};
use ringsync::store::StoreError;
use ringsync::view::{DrainView, Zone};

/// What activating one profile would change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActivationPlan {
    /// The profile, as it is now.
    pub profile: Profile,
    /// The drain zone now and after the activation (R-PR-3).
    pub drain_zone_before: BTreeSet<String>,
    /// See `drain_zone_before`.
    pub drain_zone_after: BTreeSet<String>,
    /// Instances in the normal zone now that would be draining after.
    pub would_drain: Vec<PlannedInstance>,
    /// Per Active-Active service touched: each instance's share of new work.
    pub shares: Vec<ServiceShares>,
    /// What the operator must know before going ahead.
    pub warnings: Vec<String>,
}

/// An instance named in a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedInstance {
    /// Instance id.
    pub id: String,
    /// Its service.
    pub service: Service,
    /// Its server.
    pub server: String,
}

/// One service's hash ring before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceShares {
    /// The service.
    pub service: Service,
    /// Every instance of it, in site-file order.
    pub instances: Vec<Share>,
}

/// One instance's share of its service's new work (0 to 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Share {
    /// Instance id.
    pub id: String,
    /// Its server.
    pub server: String,
    /// Its zone after the activation.
    pub zone_after: Zone,
    /// Its share of the ring now.
    pub before: f64,
    /// Its share of the ring after.
    pub after: f64,
}

/// The plan of activating the profile `id` (id or name) in `set`.
pub fn activation(
    config: &Arc<SiteConfig>,
    set: &ProfileSet,
    id: &str,
) -> Result<ActivationPlan, StoreError> {
    let profile = set
        .find(id)
        .cloned()
        .ok_or_else(|| StoreError::Refused(Refusal::NotFound { id: id.to_owned() }))?;
    let mut next = set.clone();
    if let Some(i) = next.position(&profile.id) {
        next.profiles[i].state = ProfileState::Active;
    }
    let before = DrainView::build(config.clone(), set, &[], &[]);
    let after = DrainView::build(config.clone(), &next, &[], &[]);
    let would_drain: Vec<PlannedInstance> = before
        .instances()
        .iter()
        .zip(after.instances())
        .filter(|(b, a)| b.zone == Zone::Normal && a.zone == Zone::Drain)
        .map(|(_, a)| PlannedInstance {
            id: a.id.clone(),
            service: a.service.clone(),
            server: a.server.clone(),
        })
        .collect();
    let touched: BTreeSet<&Service> = would_drain.iter().map(|i| &i.service).collect();
    let shares = touched
        .iter()
        .filter_map(|s| ring_shares(&before, &after, s))
        .collect();
    let warnings = touched
        .iter()
        .filter_map(|s| last_of_service(&after, s))
        .collect();
    Ok(ActivationPlan {
        profile,
        drain_zone_before: before.drain_zone().clone(),
        drain_zone_after: after.drain_zone().clone(),
        would_drain,
        shares,
        warnings,
    })
}

fn ring_shares(before: &DrainView, after: &DrainView, service: &Service) -> Option<ServiceShares> {
    let b = before.ring(service)?.shares();
    let a = after.ring(service)?.shares();
    // In millionths: short decimals read back exactly, so the plan the API
    // sends is the one the CLI on the store prints.
    let of = |v: &[(usize, f64)], i: usize| {
        let share = v.iter().find(|(m, _)| *m == i).map_or(0.0, |s| s.1);
        (share * 1e6).round() / 1e6
    };
    let instances = after
        .instances()
        .iter()
        .enumerate()
        .filter(|(_, iv)| &iv.service == service)
        .map(|(i, iv)| Share {
            id: iv.id.clone(),
            server: iv.server.clone(),
            zone_after: iv.zone,
            before: of(&b, i),
            after: of(&a, i),
        })
        .collect();
    Some(ServiceShares {
        service: service.clone(),
        instances,
    })
}

/// The loud warning when the activation leaves a service with one
/// instance in the normal zone, or none.
fn last_of_service(after: &DrainView, service: &Service) -> Option<String> {
    let normal: Vec<&str> = after
        .instances()
        .iter()
        .filter(|i| &i.service == service && i.zone == Zone::Normal)
        .map(|i| i.id.as_str())
        .collect();
    let aa = service.is_active_active();
    match normal.as_slice() {
        [] if aa => Some(format!(
            "every {service} instance would be draining: new {service} work still goes to the \
             draining instances (R-AA-4), so this drain moves no new work away{}",
            if service.is_sip() {
                " and their gates answer no 503 (R-SG-2)"
            } else {
                ""
            }
        )),
        [] => Some(format!(
            "every {service} instance would be draining: Active-Passive groups of {service} \
             with no follower in the normal zone keep their leader and are blocked (R-AP-4)"
        )),
        [last] if aa => Some(format!(
            "{last} would be the last {service} in the normal zone: it takes all new {service} \
             work; if it goes down, the draining instances take new work again (R-AA-4){}",
            if service.is_sip() {
                " and their 503s stop (R-SG-2)"
            } else {
                ""
            }
        )),
        [last] => Some(format!(
            "{last} would be the last {service} in the normal zone: every {service} leader \
             would move to it (R-AP-1)"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringsync::profile::Profile;

    fn site() -> Arc<SiteConfig> {
        let text = "[site]\nname = \"t\"\n\
            [[server]]\nname = \"a\"\n[[server]]\nname = \"b\"\n[[server]]\nname = \"c\"\n\
            [[instance]]\nid = \"sg-a\"\nservice = \"sg\"\nserver = \"a\"\nsip = \"127.0.0.1:5001\"\n\
            [[instance]]\nid = \"sg-b\"\nservice = \"sg\"\nserver = \"b\"\nsip = \"127.0.0.1:5002\"\n\
            [[instance]]\nid = \"sg-c\"\nservice = \"sg\"\nserver = \"c\"\nsip = \"127.0.0.1:5003\"\n\
            [[instance]]\nid = \"bgmg-a\"\nservice = \"bgmg\"\nserver = \"a\"\nng = \"127.0.0.1:6001\"\n";
        Arc::new(SiteConfig::from_str_at(text, std::path::Path::new("/t.toml")).unwrap())
    }

    fn set(profiles: &[(&str, &[&str], ProfileState)]) -> ProfileSet {
        ProfileSet {
            revision: 1,
            profiles: profiles
                .iter()
                .map(|(name, servers, state)| Profile {
                    id: format!("p-{name}"),
                    name: name.to_string(),
                    description: String::new(),
                    servers: servers.iter().map(|s| s.to_string()).collect(),
                    state: *state,
                    revision: 1,
                })
                .collect(),
        }
    }

    #[test]
    fn draining_one_of_three_moves_its_share_to_the_others() {
        let set = set(&[("x", &["a"], ProfileState::Inactive)]);
        let plan = activation(&site(), &set, "x").unwrap();
        let ids: Vec<&str> = plan.would_drain.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["sg-a"], "bgmg is never drained (R-BG-1)");
        let sg = &plan.shares[0].instances;
        assert!(sg[0].before > 0.2 && sg[0].after == 0.0, "{sg:?}");
        // R-AA-2: what moves is sg-a's share, spread over the others.
        let gained: f64 = sg[1..].iter().map(|s| s.after - s.before).sum();
        assert!((gained - sg[0].before).abs() < 1e-5);
        assert!(sg[1..].iter().all(|s| s.after > s.before));
        assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
    }

    #[test]
    fn the_last_in_the_normal_zone_and_none_are_warned_about() {
        let two = set(&[
            ("x", &["a"], ProfileState::Active),
            ("y", &["b"], ProfileState::Inactive),
        ]);
        let plan = activation(&site(), &two, "y").unwrap();
        assert_eq!(plan.warnings.len(), 1);
        assert!(
            plan.warnings[0].starts_with("sg-c would be the last sg"),
            "{:?}",
            plan.warnings
        );
        let all = set(&[
            ("x", &["a", "b"], ProfileState::Active),
            ("y", &["c"], ProfileState::Inactive),
        ]);
        let plan = activation(&site(), &all, "y").unwrap();
        assert!(plan.warnings[0].contains("R-AA-4"), "{:?}", plan.warnings);
        assert!(matches!(
            activation(&site(), &all, "nope"),
            Err(StoreError::Refused(Refusal::NotFound { .. }))
        ));
    }
}
