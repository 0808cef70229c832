//! The CLI's text for the operator plane: the audit log and the plan of
//! `profile activate --dry-run`.

use std::io::Write;

use super::text::write_table;
use super::CliError;
use crate::plan::ActivationPlan;
use ringsync::profile::Profile;
use ringsync::store::{AuditPage, AuditRecord};
use ringsync::time::rfc3339;

fn zone(z: &std::collections::BTreeSet<String>) -> String {
    if z.is_empty() {
        "(empty)".into()
    } else {
        z.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

/// `profile activate --dry-run`.
pub(super) fn write_plan(
    plan: &ActivationPlan,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let p = &plan.profile;
    writeln!(
        out,
        "dry run: activate profile {} ({}), now {} at revision {}; nothing was changed",
        p.id, p.name, p.state, p.revision
    )?;
    writeln!(
        out,
        "drain zone: {} -> {}",
        zone(&plan.drain_zone_before),
        zone(&plan.drain_zone_after)
    )?;
    if plan.would_drain.is_empty() {
        writeln!(
            out,
            "would drain: nothing (its servers are drained already, or run only bgmg/ws)"
        )?;
    } else {
        let names: Vec<String> = plan
            .would_drain
            .iter()
            .map(|i| format!("{} ({} on {})", i.id, i.service, i.server))
            .collect();
        writeln!(out, "would drain: {}", names.join(", "))?;
    }
    let rows: Vec<Vec<String>> = plan
        .shares
        .iter()
        .flat_map(|s| {
            s.instances.iter().map(move |i| {
                vec![
                    s.service.to_string(),
                    i.id.clone(),
                    i.server.clone(),
                    i.zone_after.as_str().to_owned(),
                    format!("{:.1}%", i.before * 100.0),
                    format!("{:.1}%", i.after * 100.0),
                ]
            })
        })
        .collect();
    if !rows.is_empty() {
        writeln!(
            out,
            "share of new work, from each service's hash ring (health not considered):"
        )?;
        write_table(
            out,
            &[
                "SERVICE",
                "INSTANCE",
                "SERVER",
                "ZONE AFTER",
                "NOW",
                "AFTER",
            ],
            &rows,
        )?;
    }
    for w in &plan.warnings {
        writeln!(out, "WARNING: {w}")?;
    }
    Ok(())
}

/// `ringsync audit`.
pub(super) fn write_audit(page: &AuditPage, out: &mut (dyn Write + Send)) -> Result<(), CliError> {
    let rows: Vec<Vec<String>> = page
        .records
        .iter()
        .map(|r| {
            vec![
                r.seq.to_string(),
                rfc3339(r.at_ms),
                r.who.clone(),
                r.role.clone().unwrap_or_else(|| "-".into()),
                r.from.clone(),
                r.action.clone(),
                profile(r),
                r.status.to_string(),
                what(r),
            ]
        })
        .collect();
    write_table(
        out,
        &[
            "SEQ", "TIME", "WHO", "ROLE", "FROM", "ACTION", "PROFILE", "RESULT", "WHAT",
        ],
        &rows,
    )?;
    for s in &page.skipped {
        writeln!(out, "warning: {s}")?;
    }
    if let Some(next) = page.next {
        writeln!(out, "more: ringsync audit --after {next}")?;
    }
    Ok(())
}

/// The profile a record names: `NAME (ID)` when the store knew it (the
/// same whether the CLI named it by name or the page by id), else the
/// target as the caller gave it (older records, an unknown profile).
fn profile(r: &AuditRecord) -> String {
    match (&r.profile, &r.target) {
        (Some(p), _) => format!("{} ({})", p.name, p.id),
        (None, Some(t)) => t.clone(),
        (None, None) => "-".into(),
    }
}

/// What a record did, in a few words: the error of a refusal, else the
/// fields that changed.
fn what(r: &AuditRecord) -> String {
    if let Some(e) = &r.error {
        return e.lines().next().unwrap_or_default().to_owned();
    }
    match (&r.before, &r.after) {
        (None, Some(a)) => format!("created {}, {}", a.state, servers(a)),
        (Some(b), None) => format!("deleted ({}, {})", b.state, servers(b)),
        (Some(b), Some(a)) => diff(b, a),
        (None, None) => String::new(),
    }
}

fn servers(p: &Profile) -> String {
    format!("servers {}", p.servers.join(","))
}

fn diff(b: &Profile, a: &Profile) -> String {
    let mut parts = Vec::new();
    if b.state != a.state {
        parts.push(format!("{} -> {}", b.state, a.state));
    }
    if b.name != a.name {
        parts.push(format!("name {} -> {}", b.name, a.name));
    }
    if b.servers != a.servers {
        parts.push(format!("{} -> {}", servers(b), a.servers.join(",")));
    }
    if b.description != a.description {
        parts.push("description changed".into());
    }
    if parts.is_empty() {
        parts.push(format!("no change (still {})", a.state));
    }
    parts.join("; ")
}
