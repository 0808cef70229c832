//! Deservice (drain) profiles: the operator's objects, and the set of them
//! that a store holds.
//!
//! This module is plain data and the rules of a profile name (R-PR-1).
//! Validation against the site (R-PR-1) lives in [`crate::store`], so every
//! backend applies the same checks.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Whether a profile's drain is applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileState {
    /// Stored, not applied.
    #[default]
    Inactive,
    /// Drain applied: its servers are in the drain zone (R-PR-3).
    Active,
}

impl ProfileState {
    /// The name used in files, the API and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ProfileState::Inactive => "inactive",
            ProfileState::Active => "active",
        }
    }
}

impl std::fmt::Display for ProfileState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Longest accepted profile name, in characters (docs/api.md).
pub const MAX_NAME_LEN: usize = 64;

/// Why a name is refused for a new or renamed profile (R-PR-1). Names
/// already stored are never re-checked: a file written before these rules
/// still loads, and its profiles keep their names until renamed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Nothing but whitespace.
    #[error("must not be empty")]
    Empty,
    /// Longer than [`MAX_NAME_LEN`].
    #[error("must be at most {MAX_NAME_LEN} characters, not {0}")]
    TooLong(usize),
    /// Starts with `-`, `_` or `.` (so it never reads as a command-line flag
    /// or a hidden file).
    #[error("must start with a letter or a digit, not `{0}`")]
    BadStart(char),
    /// A character outside the allowed set.
    #[error("may hold only ASCII letters, digits, `-`, `_` and `.`; `{0}` is not allowed")]
    BadChar(char),
    /// Has the shape of a generated id, so `show NAME` could one day find
    /// the profile that is given that id instead.
    #[error("looks like a profile id (`p-` and 8 hex digits); ids are made by ringsync, pick another name")]
    LooksLikeId,
    /// Is the id of a profile of the site (one imported with an id of
    /// another shape): ids are looked up before names, so it would never be
    /// found by this name.
    #[error("is the id of profile `{0}`; pick another name")]
    IsAnId(String),
}

/// Checks a name for a new or renamed profile (R-PR-1): 1 to
/// [`MAX_NAME_LEN`] ASCII letters, digits, `-`, `_` and `.`, starting with a
/// letter or a digit, and not shaped like an id ([`looks_like_id`]).
pub fn check_name(name: &str) -> Result<(), NameError> {
    let Some(first) = name.chars().next() else {
        return Err(NameError::Empty);
    };
    let len = name.chars().count();
    if len > MAX_NAME_LEN {
        return Err(NameError::TooLong(len));
    }
    if !first.is_ascii_alphanumeric() {
        return Err(NameError::BadStart(first));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(NameError::BadChar(c));
    }
    if looks_like_id(name) {
        return Err(NameError::LooksLikeId);
    }
    Ok(())
}

/// True for the shape of the ids ringsync makes (`p-` and 8 hex digits, in
/// either case, so `P-CAFE0001` is refused as a name too).
pub fn looks_like_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10 && b[..2].eq_ignore_ascii_case(b"p-") && b[2..].iter().all(u8::is_ascii_hexdigit)
}

/// A deservice profile: a named set of servers to drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Stable identifier, e.g. `p-1a2b3c4d`.
    pub id: String,
    /// Name, unique on the site.
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Server names; every one exists in the site configuration (R-PR-1).
    pub servers: Vec<String>,
    /// Applied or not.
    #[serde(default)]
    pub state: ProfileState,
    /// The set revision of the change that last created or changed this
    /// profile (0 in files written before profiles carried one). An update,
    /// activation, deactivation or deletion that names a revision is
    /// refused when the profile has moved on (optimistic concurrency).
    #[serde(default)]
    pub revision: u64,
}

/// What an operator gives to create a profile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewProfile {
    /// Name, unique on the site.
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Server names (at least one).
    pub servers: Vec<String>,
    /// Initial state; `inactive` unless given.
    #[serde(default)]
    pub state: ProfileState,
}

/// A partial update of a profile: fields that are `None` are kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfilePatch {
    /// New name.
    #[serde(default)]
    pub name: Option<String>,
    /// New description.
    #[serde(default)]
    pub description: Option<String>,
    /// New server list (replaces the old one).
    #[serde(default)]
    pub servers: Option<Vec<String>>,
}

/// Every profile of a site at one revision: what a store holds and publishes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSet {
    /// Incremented by every change; 0 for a store never written.
    pub revision: u64,
    /// The profiles, in creation order.
    pub profiles: Vec<Profile>,
}

impl ProfileSet {
    /// The drain zone: the union of the servers of all active profiles.
    /// A server stays in it while any active profile names it (R-PR-3).
    pub fn drain_zone(&self) -> BTreeSet<String> {
        self.profiles
            .iter()
            .filter(|p| p.state == ProfileState::Active)
            .flat_map(|p| p.servers.iter().cloned())
            .collect()
    }

    /// The position of the profile with this id, or else with this name.
    /// Ids win; no name written since the name rules can be an id's (shaped like
    /// one, or equal to one of the set's), so the two never collide.
    pub fn position(&self, id_or_name: &str) -> Option<usize> {
        self.profiles
            .iter()
            .position(|p| p.id == id_or_name)
            .or_else(|| self.profiles.iter().position(|p| p.name == id_or_name))
    }

    /// The profile with this id, or else with this name.
    pub fn find(&self, id_or_name: &str) -> Option<&Profile> {
        self.position(id_or_name).map(|i| &self.profiles[i])
    }

    /// Number of active profiles.
    pub fn active_count(&self) -> usize {
        self.profiles
            .iter()
            .filter(|p| p.state == ProfileState::Active)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(id: &str, servers: &[&str], state: ProfileState) -> Profile {
        Profile {
            id: id.into(),
            name: format!("name-{id}"),
            description: String::new(),
            servers: servers.iter().map(|s| s.to_string()).collect(),
            state,
            revision: 0,
        }
    }

    #[test]
    fn r_pr_3_server_in_two_active_profiles_stays_drained_until_both_inactive() {
        let mut set = ProfileSet {
            revision: 1,
            profiles: vec![
                p("p-1", &["srv-a", "srv-b"], ProfileState::Active),
                p("p-2", &["srv-b"], ProfileState::Active),
                p("p-3", &["srv-c"], ProfileState::Inactive),
            ],
        };
        let zone = |s: &ProfileSet| s.drain_zone().into_iter().collect::<Vec<_>>();
        assert_eq!(zone(&set), ["srv-a", "srv-b"]);
        set.profiles[0].state = ProfileState::Inactive;
        assert_eq!(zone(&set), ["srv-b"], "srv-b still named by active p-2");
        set.profiles[1].state = ProfileState::Inactive;
        assert!(set.drain_zone().is_empty());
    }

    #[test]
    fn find_by_id_then_name() {
        let mut a = p("p-1", &["srv-a"], ProfileState::Inactive);
        a.name = "p-2".into();
        let b = p("p-2", &["srv-b"], ProfileState::Inactive);
        let set = ProfileSet {
            revision: 0,
            profiles: vec![a, b],
        };
        assert_eq!(set.find("p-2").unwrap().servers, ["srv-b"]);
        assert_eq!(set.find("name-p-2").unwrap().id, "p-2");
        assert!(set.find("nope").is_none());
    }

    /// R-PR-1: the name rules, one case each.
    #[test]
    fn r_pr_1_names_as_docs_api_md_says() {
        for ok in [
            "maint-a",
            "a",
            "A.b_c-9",
            "7",
            "p-1234567",
            "p-123456789",
            "p-cafe000g",
        ] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        let long = "a".repeat(MAX_NAME_LEN + 1);
        assert_eq!(check_name(&"a".repeat(MAX_NAME_LEN)), Ok(()));
        assert_eq!(check_name(&long), Err(NameError::TooLong(65)));
        assert_eq!(check_name(""), Err(NameError::Empty));
        assert_eq!(check_name("bad name!"), Err(NameError::BadChar(' ')));
        assert_eq!(check_name("-x"), Err(NameError::BadStart('-')));
        assert_eq!(check_name("é"), Err(NameError::BadStart('é')));
        assert_eq!(check_name("a/b"), Err(NameError::BadChar('/')));
        for id in ["p-cafe0001", "P-CAFE0001", "p-00000000"] {
            assert_eq!(check_name(id), Err(NameError::LooksLikeId), "{id}");
        }
    }

    #[test]
    fn serde_shape() {
        let json = r#"{"revision":3,"profiles":[{"id":"p-1","name":"n","description":"d","servers":["srv-a"],"state":"active","revision":3}]}"#;
        let set: ProfileSet = serde_json::from_str(json).unwrap();
        assert_eq!(set.profiles[0].state, ProfileState::Active);
        assert_eq!(serde_json::to_string(&set).unwrap(), json);
        // Files written before profiles carried a revision still load.
        let old = r#"{"revision":3,"profiles":[{"id":"p-1","name":"n","servers":["srv-a"]}]}"#;
        let set: ProfileSet = serde_json::from_str(old).unwrap();
        assert_eq!(set.profiles[0].revision, 0);
    }
}
