//! One change to a profile set, checked against the site (R-PR-1) and the
//! other profiles, and committed with its revisions: every backend applies
//! changes through here, so the checks and the per-profile revision
//! (optimistic concurrency) are the same whatever the backend.

use crate::store::Refusal;
use std::collections::HashSet;

use super::{StoreError, MAX_DESCRIPTION_LEN};
use crate::config::SiteConfig;
use crate::profile::{
    self, NameError, NewProfile, Profile, ProfilePatch, ProfileSet, ProfileState,
};

/// A change to a profile set as an operator asks for it; backends apply it
/// ([`Op::commit`]) to the freshest set they can read, under their own
/// exclusion, and a create's id is picked against that set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create a profile.
    Create(NewProfile),
    /// Update a profile found by id or name.
    Update {
        /// Id or name.
        id: String,
        /// What to change.
        patch: ProfilePatch,
    },
    /// Delete a profile found by id or name.
    Delete {
        /// Id or name.
        id: String,
    },
    /// Activate or deactivate a profile found by id or name.
    SetState {
        /// Id or name.
        id: String,
        /// The new state.
        state: ProfileState,
    },
}

impl Op {
    /// The id of the existing profile this change touches in `set` (`None`
    /// for a create, or when no profile matches).
    pub fn target_in(&self, set: &ProfileSet) -> Option<String> {
        let id = match self {
            Op::Create(_) => return None,
            Op::Update { id, .. } | Op::Delete { id } | Op::SetState { id, .. } => id,
        };
        set.find(id).map(|p| p.id.clone())
    }

    /// Applies the change to `set` after checking it against the site
    /// (R-PR-1) and the other profiles; a create gets a fresh id
    /// ([`new_id`]). On error `set` is unchanged. Returns the profile as
    /// created, updated or deleted. Does not touch the revision.
    pub fn apply(&self, config: &SiteConfig, set: &mut ProfileSet) -> Result<Profile, StoreError> {
        match self {
            Op::Create(new) => create(new_id(set), new.clone(), config, set),
            Op::Update { id, patch } => {
                let i = find(set, id)?;
                let mut p = set.profiles[i].clone();
                // A name kept as it is is not checked again: a profile stored
                // before these name rules with a name they now refuse can still be
                // updated and (de)activated, and renamed to a good name.
                if let Some(name) = patch.name.as_ref().filter(|n| n.trim() != p.name) {
                    let name = check_name(set, name)?;
                    if set
                        .profiles
                        .iter()
                        .enumerate()
                        .any(|(j, o)| j != i && o.name == name)
                    {
                        return Err(StoreError::Refused(Refusal::DuplicateName { name }));
                    }
                    p.name = name;
                }
                if let Some(d) = &patch.description {
                    check_description(d)?;
                    p.description = d.clone();
                }
                if let Some(servers) = &patch.servers {
                    p.servers = check_servers(config, servers)?;
                }
                set.profiles[i] = p.clone();
                Ok(p)
            }
            Op::Delete { id } => {
                let i = find(set, id)?;
                Ok(set.profiles.remove(i))
            }
            Op::SetState { id, state } => {
                let i = find(set, id)?;
                set.profiles[i].state = *state;
                Ok(set.profiles[i].clone())
            }
        }
    }
}

/// Creates a profile with id `id` in `set` after the checks of
/// [`Op::apply`] (a create whose id is given: a profile set moved from
/// another store keeps its ids). On error `set` is unchanged.
pub fn create(
    id: String,
    new: NewProfile,
    config: &SiteConfig,
    set: &mut ProfileSet,
) -> Result<Profile, StoreError> {
    let name = check_name(set, &new.name)?;
    check_description(&new.description)?;
    let servers = check_servers(config, &new.servers)?;
    if set.profiles.iter().any(|p| p.name == name) {
        return Err(StoreError::Refused(Refusal::DuplicateName { name }));
    }
    let p = Profile {
        id,
        name,
        description: new.description,
        servers,
        state: new.state,
        revision: 0,
    };
    set.profiles.push(p.clone());
    Ok(p)
}

/// What a committed change did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The profile as it was (`None` for a create).
    pub before: Option<Profile>,
    /// The profile as created, updated or deleted (a deleted one as it was).
    pub profile: Profile,
    /// True for a delete.
    pub deleted: bool,
    /// False when the change found the profile already as asked (an
    /// activation of an active profile, an update to the values it has):
    /// then the set and its revision are as they were, and the store writes
    /// nothing, neither the set nor an audit record (R-PR-4 below).
    pub changed: bool,
}

impl Committed {
    /// The profile as it is after the change (`None` once deleted).
    pub fn after(&self) -> Option<&Profile> {
        (!self.deleted).then_some(&self.profile)
    }
}

impl Op {
    /// Applies the change like [`Op::apply`], refusing it with
    /// [`Refusal::Stale`] when `expect` names a revision the profile has
    /// moved past (a change that would change nothing included: the caller
    /// decided on a profile that is no longer there); then moves the set's
    /// revision on and stamps the changed profile with it, unless the change
    /// left the profile exactly as it was: then the revision stays, so no
    /// other operator's `--revision` is made stale by nothing
    /// ([`Committed::changed`] is false). On error `set` is unchanged.
    pub fn commit(
        &self,
        config: &SiteConfig,
        set: &mut ProfileSet,
        expect: Option<u64>,
    ) -> Result<Committed, StoreError> {
        let before = self.target_in(set).and_then(|id| set.find(&id).cloned());
        if let (Some(want), Some(cur)) = (expect, &before) {
            if cur.revision != want {
                return Err(StoreError::Refused(Refusal::Stale {
                    id: cur.id.clone(),
                    expected: want,
                    current: Box::new(cur.clone()),
                }));
            }
        }
        let deleted = matches!(self, Op::Delete { .. });
        let mut profile = self.apply(config, set)?;
        if let Some(b) = before.as_ref().filter(|b| !deleted && **b == profile) {
            // `apply` wrote back the very values the profile had: `set` is
            // as it was.
            return Ok(Committed {
                before: Some(b.clone()),
                profile,
                deleted,
                changed: false,
            });
        }
        set.revision += 1;
        if !deleted {
            profile.revision = set.revision;
            if let Some(i) = set.position(&profile.id) {
                set.profiles[i].revision = set.revision;
            }
        }
        Ok(Committed {
            before,
            profile,
            deleted,
            changed: true,
        })
    }

    /// What it does, in the audit log's words.
    pub fn action(&self) -> &'static str {
        match self {
            Op::Create(_) => "create",
            Op::Update { .. } => "update",
            Op::Delete { .. } => "delete",
            Op::SetState {
                state: ProfileState::Active,
                ..
            } => "activate",
            Op::SetState { .. } => "deactivate",
        }
    }

    /// The profile it names, as the caller named it (the new name for a create).
    pub fn target(&self) -> &str {
        match self {
            Op::Create(new) => &new.name,
            Op::Update { id, .. } | Op::Delete { id } | Op::SetState { id, .. } => id,
        }
    }
}

/// A fresh profile id: `p-` and 8 hex digits, not used in `set`.
pub fn new_id(set: &ProfileSet) -> String {
    loop {
        let id = format!("p-{:08x}", rand::random::<u32>());
        if set.find(&id).is_none() {
            return id;
        }
    }
}

fn find(set: &ProfileSet, id: &str) -> Result<usize, StoreError> {
    set.position(id)
        .ok_or_else(|| StoreError::Refused(Refusal::NotFound { id: id.to_owned() }))
}

/// R-PR-1: a new or renamed profile's name, trimmed, follows the name
/// rules and is no profile's id (ids are looked up first: such a name would
/// find the other profile).
fn check_name(set: &ProfileSet, name: &str) -> Result<String, StoreError> {
    let name = name.trim();
    let invalid = |reason| {
        StoreError::Refused(Refusal::InvalidName {
            name: name.to_owned(),
            reason,
        })
    };
    profile::check_name(name).map_err(invalid)?;
    if let Some(p) = set.profiles.iter().find(|p| p.id == name) {
        return Err(invalid(NameError::IsAnId(p.id.clone())));
    }
    Ok(name.to_owned())
}

fn check_description(d: &str) -> Result<(), StoreError> {
    if d.chars().count() > MAX_DESCRIPTION_LEN {
        return Err(StoreError::Refused(Refusal::InvalidDescription(format!(
            "must be at most {MAX_DESCRIPTION_LEN} characters"
        ))));
    }
    if d.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err(StoreError::Refused(Refusal::InvalidDescription(
            "must not contain control characters other than newline and tab".into(),
        )));
    }
    Ok(())
}

/// R-PR-1: every server must exist in the site; at least one; duplicates dropped.
fn check_servers(config: &SiteConfig, servers: &[String]) -> Result<Vec<String>, StoreError> {
    if servers.is_empty() {
        return Err(StoreError::Refused(Refusal::NoServers));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(servers.len());
    for s in servers {
        let s = s.trim();
        if !config.has_server(s) {
            return Err(StoreError::Refused(Refusal::UnknownServer {
                server: s.to_owned(),
                config: config.path.clone(),
            }));
        }
        if seen.insert(s) {
            out.push(s.to_owned());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn commit_stamps_revisions_and_refuses_a_stale_one() {
        let c = site();
        let mut set = ProfileSet::default();
        let a = Op::Create(new("a", &["srv-a"]));
        let done = a.commit(&c, &mut set, None).unwrap();
        assert_eq!((set.revision, done.profile.revision), (1, 1));
        assert_eq!(done.before, None);
        let act = Op::SetState {
            id: "a".into(),
            state: ProfileState::Active,
        };
        let done = act.commit(&c, &mut set, Some(1)).unwrap();
        assert_eq!(done.before.as_ref().map(|p| p.revision), Some(1));
        assert_eq!((set.revision, set.profiles[0].revision), (2, 2));
        let stale = act.commit(&c, &mut set, Some(1)).unwrap_err();
        assert!(
            matches!(&stale, StoreError::Refused(Refusal::Stale { expected: 1, current, .. }) if current.revision == 2),
            "{stale}"
        );
        assert_eq!(set.revision, 2, "nothing changed");
        let del = Op::Delete { id: "a".into() };
        let done = del.commit(&c, &mut set, Some(2)).unwrap();
        assert!(done.deleted && done.after().is_none() && set.profiles.is_empty());
    }

    /// R-PR-4: an activation of an active profile or an update to the
    /// values it has leaves the set and its revision as they were, and says
    /// so; a stale revision named with it is refused all the same.
    #[test]
    fn r_pr_4_a_no_op_keeps_the_revision() {
        let c = site();
        let mut set = ProfileSet::default();
        Op::Create(new("a", &["srv-a"]))
            .commit(&c, &mut set, None)
            .unwrap();
        let act = Op::SetState {
            id: "a".into(),
            state: ProfileState::Active,
        };
        assert!(act.commit(&c, &mut set, None).unwrap().changed);
        let was = set.clone();
        let again = act.commit(&c, &mut set, Some(2)).unwrap();
        assert!(!again.changed && again.profile.revision == 2, "{again:?}");
        let same = Op::Update {
            id: "a".into(),
            patch: ProfilePatch {
                name: Some(" a ".into()),
                servers: Some(vec!["srv-a".into(), "srv-a".into()]),
                ..Default::default()
            },
        };
        assert!(!same.commit(&c, &mut set, None).unwrap().changed);
        assert_eq!(set, was);
        let stale = act.commit(&c, &mut set, Some(1)).unwrap_err();
        assert!(
            matches!(stale, StoreError::Refused(Refusal::Stale { .. })),
            "{stale}"
        );
    }

    /// R-PR-1: a name equal to a profile's id (one of another shape, kept
    /// by an import) is refused; a stored name the rules refuse stays
    /// usable until renamed.
    #[test]
    fn r_pr_1_a_name_is_never_an_id_and_old_names_stay_usable() {
        let c = site();
        let mut set = ProfileSet {
            revision: 1,
            profiles: vec![Profile {
                id: "maint".into(),
                name: "old name!".into(),
                description: String::new(),
                servers: vec!["srv-a".into()],
                state: ProfileState::Inactive,
                revision: 1,
            }],
        };
        let e = Op::Create(new("maint", &["srv-b"]))
            .commit(&c, &mut set, None)
            .unwrap_err();
        assert!(
            e.to_string().contains("is the id of profile `maint`"),
            "{e}"
        );
        let keep = Op::Update {
            id: "maint".into(),
            patch: ProfilePatch {
                name: Some("old name!".into()),
                description: Some("d".into()),
                ..Default::default()
            },
        };
        assert!(keep.commit(&c, &mut set, None).unwrap().changed);
        assert_eq!(set.profiles[0].name, "old name!");
    }

    pub(crate) fn site() -> SiteConfig {
        SiteConfig::from_str_at(
            "[site]\nname = \"t\"\n[[server]]\nname = \"srv-a\"\n[[server]]\nname = \"srv-b\"\n",
            Path::new("/etc/site/t.toml"),
        )
        .unwrap()
    }

    fn new(name: &str, servers: &[&str]) -> NewProfile {
        NewProfile {
            name: name.into(),
            servers: servers.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn r_pr_1_unknown_server_refused_set_unchanged() {
        let c = site();
        let mut set = ProfileSet::default();
        let e = create("p-1".into(), new("x", &["srv-a", "srv-z"]), &c, &mut set).unwrap_err();
        assert!(
            matches!(&e, StoreError::Refused(Refusal::UnknownServer { server, .. }) if server == "srv-z")
        );
        assert!(e.to_string().contains("srv-z") && e.to_string().contains("/etc/site/t.toml"));
        assert!(set.profiles.is_empty());
        assert!(matches!(
            create("p-1".into(), new("x", &[]), &c, &mut set),
            Err(StoreError::Refused(Refusal::NoServers))
        ));
    }

    #[test]
    fn names_unique_and_valid() {
        let c = site();
        let mut set = ProfileSet::default();
        create("p-1".into(), new("a", &["srv-a", "srv-a"]), &c, &mut set).unwrap();
        assert_eq!(set.profiles[0].servers, ["srv-a"]);
        create("p-2".into(), new("b", &["srv-b"]), &c, &mut set).unwrap();
        assert!(matches!(
            create("p-3".into(), new(" a ", &["srv-a"]), &c, &mut set),
            Err(StoreError::Refused(Refusal::DuplicateName { .. }))
        ));
        let rename = ProfilePatch {
            name: Some("a".into()),
            ..Default::default()
        };
        assert!(matches!(
            Op::Update {
                id: "b".into(),
                patch: rename
            }
            .apply(&c, &mut set),
            Err(StoreError::Refused(Refusal::DuplicateName { .. }))
        ));
        assert!(matches!(
            create("p-3".into(), new("", &["srv-a"]), &c, &mut set),
            Err(StoreError::Refused(Refusal::InvalidName { .. }))
        ));
        assert!(matches!(
            Op::Delete { id: "nope".into() }.apply(&c, &mut set),
            Err(StoreError::Refused(Refusal::NotFound { .. }))
        ));
        let bad = ProfilePatch {
            servers: Some(vec!["srv-q".into()]),
            ..Default::default()
        };
        assert!(Op::Update {
            id: "a".into(),
            patch: bad
        }
        .apply(&c, &mut set)
        .is_err());
        assert_eq!(
            set.profiles[0].servers,
            ["srv-a"],
            "R-PR-1: nothing changed"
        );
    }
}
