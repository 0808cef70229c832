//! Which service names a site file may use.
//!
//! sg, esg, mg, bgmg and ws are built in. Any other name is an
//! Active-Passive service, and it is declared by an `[[ap_group]]` whose
//! instances run it: an Active-Passive instance outside every group has
//! no leader to be, so a name no group uses is far more likely a typo
//! (`service = "sgg"`) than a service, and is refused with the closest
//! known name instead of silently becoming an Active-Passive instance.

use toml::Spanned;

use super::raw::{RawApGroup, RawInstance};
use super::types::{Instance, Service};
use super::validator::Validator;
use super::ConfigError;

const BUILT_IN: [&str; 5] = ["sg", "esg", "mg", "bgmg", "ws"];

/// Every instance's service is built in or declared by an `[[ap_group]]`.
pub(super) fn declared(
    v: &Validator<'_>,
    raw: &[Spanned<RawInstance>],
    instances: &[Instance],
    groups: &[Spanned<RawApGroup>],
) -> Result<(), ConfigError> {
    // A group's members all run its first member's service (`ap.rs`), so
    // that is the one the group declares: a misspelt later member does not
    // declare its misspelling.
    let in_a_group = |name: &str| {
        groups.iter().any(|g| {
            let first = g.get_ref().members.get_ref().first();
            instances
                .iter()
                .any(|i| first.is_some_and(|f| i.id == *f.get_ref()) && i.service.as_str() == name)
        })
    };
    let mut known: Vec<&str> = BUILT_IN.to_vec();
    known.extend(
        instances
            .iter()
            .map(|i| i.service.as_str())
            .filter(|s| !BUILT_IN.contains(s) && in_a_group(s)),
    );
    for (i, (inst, r)) in instances.iter().zip(raw).enumerate() {
        let Service::Other(name) = &inst.service else {
            continue;
        };
        if known.contains(&name.as_str()) {
            continue;
        }
        let why = match closest(name, &known) {
            Some(near) => format!("unknown service \"{name}\" (did you mean \"{near}\"?)"),
            None => format!(
                "unknown service \"{name}\": the services are sg, esg, mg, bgmg, ws, and \
                 Active-Passive services, each declared by an [[ap_group]] of its instances"
            ),
        };
        let service = &r.get_ref().service;
        return Err(v.err(service.span(), format!("instance[{i}].service"), why));
    }
    Ok(())
}

/// The known name nearest to `name`, if it is near enough to be what was
/// meant: at most two edits, and fewer edits than either name has letters
/// (`"x"` is not a misspelt `"sg"`).
fn closest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (edits(name, k), *k))
        .filter(|(d, k)| *d <= 2 && *d < name.len().min(k.len()))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance, in characters.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::{closest, edits};

    #[test]
    fn edit_distance() {
        assert_eq!(edits("sgg", "sg"), 1);
        assert_eq!(edits("", "esg"), 3);
        assert_eq!(edits("billing", "billing"), 0);
        assert_eq!(edits("esg", "sg"), 1);
        assert_eq!(edits("kitten", "sitting"), 3);
    }

    #[test]
    fn closest_names_only_near_ones() {
        let known = ["sg", "esg", "mg", "bgmg", "ws", "billing"];
        assert_eq!(closest("sgg", &known), Some("sg"));
        assert_eq!(closest("bgm", &known), Some("bgmg"));
        assert_eq!(closest("biling", &known), Some("billing"));
        assert_eq!(closest("x", &known), None);
        assert_eq!(closest("payments", &known), None);
    }
}
