//! Active-Passive checks: `[[ap_group]]` (members, home, priority) and the
//! pace of leader moves in `[timers]` (R-AP-2).

use toml::Spanned;

use super::raw::RawApGroup;
use super::types::{ApGroup, Instance, Timers};
use super::validator::{service_of, Validator};
use super::ConfigError;

type Result<T> = std::result::Result<T, ConfigError>;

/// The default `priority` of a group: groups without one move after those
/// that ask to go first.
pub const DEFAULT_PRIORITY: u32 = 100;

/// `[timers]`: `ap_pace_s` is at least one minute (R-AP-2) unless the site
/// explicitly allows a test pace, and never 0.
pub(super) fn timers(v: &Validator<'_>, raw: Option<Spanned<Timers>>) -> Result<Timers> {
    let Some(raw) = raw else {
        return Ok(Timers::default());
    };
    let span = raw.span();
    let t = raw.into_inner();
    if t.ap_pace_s == 0 {
        return Err(v.err(span, "timers.ap_pace_s", "must be at least 1"));
    }
    if t.ap_pace_s < Timers::MIN_AP_PACE_S && !t.ap_test_pace_allowed {
        return Err(v.err(
            span,
            "timers.ap_pace_s",
            format!(
                "{} s is below the minimum of {} s between Active-Passive leader moves \
                 (R-AP-2); a test or lab site may set `ap_test_pace_allowed = true` in [timers]",
                t.ap_pace_s,
                Timers::MIN_AP_PACE_S
            ),
        ));
    }
    Ok(t)
}

/// `[[ap_group]]`: unique names, two or more Active-Passive members, a
/// home among them.
pub(super) fn groups(
    v: &Validator<'_>,
    raw: &[Spanned<RawApGroup>],
    instances: &[Instance],
) -> Result<Vec<ApGroup>> {
    let mut groups: Vec<ApGroup> = Vec::new();
    for (i, spanned) in raw.iter().enumerate() {
        let r = spanned.get_ref();
        let name = r.name.get_ref();
        v.name(&r.name, format!("ap_group[{i}].name"))?;
        if groups.iter().any(|g| &g.name == name) {
            return Err(v.err(
                r.name.span(),
                format!("ap_group[{i}].name"),
                format!("duplicate group `{name}`"),
            ));
        }
        if r.members.get_ref().len() < 2 {
            return Err(v.err(
                r.members.span(),
                format!("ap_group[{i}].members"),
                "an Active-Passive group needs at least two members",
            ));
        }
        let members = members(v, i, r, instances)?;
        if !members.contains(r.home.get_ref()) {
            return Err(v.err(
                r.home.span(),
                format!("ap_group[{i}].home"),
                format!("home `{}` is not a member of the group", r.home.get_ref()),
            ));
        }
        groups.push(ApGroup {
            name: name.clone(),
            members,
            home: r.home.get_ref().clone(),
            priority: r.priority.unwrap_or(DEFAULT_PRIORITY),
        });
    }
    Ok(groups)
}

/// The members of group `i`: known instances of one Active-Passive
/// service (the first member's), each listed once.
fn members(
    v: &Validator<'_>,
    i: usize,
    r: &RawApGroup,
    instances: &[Instance],
) -> Result<Vec<String>> {
    let mut members: Vec<String> = Vec::new();
    for (j, m) in r.members.get_ref().iter().enumerate() {
        let field = format!("ap_group[{i}].members[{j}]");
        match service_of(instances, m.get_ref()) {
            None => {
                return Err(v.err(
                    m.span(),
                    field,
                    format!("unknown instance `{}`", m.get_ref()),
                ))
            }
            Some(s) if s.is_active_active() || s.never_drained() => {
                return Err(v.err(
                    m.span(),
                    field,
                    format!(
                        "`{}` runs `{s}`, which is not an Active-Passive service",
                        m.get_ref()
                    ),
                ))
            }
            Some(s) => {
                let first = &r.members.get_ref()[0];
                if let Some(f) = service_of(instances, first.get_ref()).filter(|f| *f != s) {
                    let why = format!(
                        "`{}` runs `{s}`, but `{}` runs `{f}`: a group's members run one service",
                        m.get_ref(),
                        first.get_ref()
                    );
                    return Err(v.err(m.span(), field, why));
                }
            }
        }
        if members.contains(m.get_ref()) {
            return Err(v.err(
                m.span(),
                field,
                format!("`{}` is listed twice", m.get_ref()),
            ));
        }
        members.push(m.get_ref().clone());
    }
    Ok(members)
}
