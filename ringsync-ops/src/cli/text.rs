//! The CLI's tables: what an operator reads in a terminal. `--json` prints
//! the same data as the API serves it instead.

use std::io::Write;

use super::CliError;
use crate::engine::EngineStatus;
use crate::round::NodeAnswer;
use crate::status::SiteStatus;
use crate::sum::InstanceStatus;
use ringsync::profile::{Profile, ProfileSet};
use ringsync::work::{self, WorkCounts};

/// `profile show`.
pub(super) fn write_profile(p: &Profile, out: &mut (dyn Write + Send)) -> Result<(), CliError> {
    writeln!(out, "id:          {}", p.id)?;
    writeln!(out, "name:        {}", p.name)?;
    writeln!(out, "state:       {}", p.state)?;
    writeln!(out, "servers:     {}", p.servers.join(", "))?;
    writeln!(out, "description: {}", p.description)?;
    writeln!(out, "revision:    {}", p.revision)?;
    Ok(())
}

/// `profile list`.
pub(super) fn write_list(set: &ProfileSet, out: &mut (dyn Write + Send)) -> Result<(), CliError> {
    let rows: Vec<Vec<String>> = set
        .profiles
        .iter()
        .map(|p| {
            vec![
                p.id.clone(),
                p.name.clone(),
                p.state.to_string(),
                p.servers.join(","),
                p.description.lines().next().unwrap_or_default().to_owned(),
            ]
        })
        .collect();
    write_table(
        out,
        &["ID", "NAME", "STATE", "SERVERS", "DESCRIPTION"],
        &rows,
    )?;
    writeln!(
        out,
        "{} profile(s), {} active, revision {}",
        set.profiles.len(),
        set.active_count(),
        set.revision
    )?;
    Ok(())
}

/// `ringsync status`: the drain zone, one row per instance with its summed
/// work, its drain ETA and why its work is unknown, then one line per node.
pub(super) fn write_status(st: &SiteStatus, out: &mut (dyn Write + Send)) -> Result<(), CliError> {
    let zone: Vec<&str> = st.drain_zone.iter().map(String::as_str).collect();
    writeln!(
        out,
        "site {}, profile revision {}, drain zone: {}",
        st.site,
        st.revision,
        if zone.is_empty() {
            "(empty)".into()
        } else {
            zone.join(", ")
        }
    )?;
    let rows: Vec<Vec<String>> = st
        .instances
        .iter()
        .map(|i| {
            vec![
                i.id.clone(),
                i.service.to_string(),
                i.server.clone(),
                i.zone.as_str().to_owned(),
                state_cell(i),
                work_cell(i),
                eta_cell(i, st.generated_ms),
                why_cell(i, st.generated_ms),
            ]
        })
        .collect();
    write_table(
        out,
        &[
            "INSTANCE",
            "SERVICE",
            "SERVER",
            "ZONE",
            "STATE",
            "WORK",
            "ETA",
            "UNKNOWN BECAUSE",
        ],
        &rows,
    )?;
    for n in &st.nodes {
        writeln!(out, "{}", node_line(n, st))?;
    }
    write_unreachable(st, out)?;
    write_backups(st, out)?;
    if let Some(f) = &st.store {
        writeln!(out, "{}", f.describe(st.generated_ms))?;
    }
    if let Some(w) = st.site_file.as_ref().and_then(|f| f.warning.as_ref()) {
        writeln!(out, "warning: {w}")?;
    }
    if let Some(engines) = &st.engines {
        write_engines(engines, out)?;
    }
    Ok(())
}

/// The transports over which nodes could not reach an instance lately.
fn write_unreachable(st: &SiteStatus, out: &mut (dyn Write + Send)) -> Result<(), CliError> {
    for i in &st.instances {
        for u in &i.unreachable {
            let hold = if u.what.until_ms > st.generated_ms {
                format!(
                    "no new work over it until {} ({})",
                    ringsync::time::rfc3339(u.what.until_ms),
                    work::in_words(u.what.until_ms, st.generated_ms)
                )
            } else {
                "its hold is over".to_owned()
            };
            writeln!(
                out,
                "{} unreachable over {} from {} since {}: {}; {hold}",
                i.id,
                transport_name(u.what.transport),
                u.node,
                ringsync::time::rfc3339(u.what.since_ms),
                u.what.reason,
            )?;
        }
    }
    Ok(())
}

/// R-HT-1: every pool in backup, as each gate that sends it there says.
fn write_backups(st: &SiteStatus, out: &mut (dyn Write + Send)) -> Result<(), CliError> {
    for b in &st.backups {
        writeln!(
            out,
            "pool {} backup: new dialogs go to {} on {} since {}: {}",
            b.what.pool,
            b.what.backup,
            b.node,
            ringsync::time::rfc3339(b.what.since_ms),
            b.what.reason,
        )?;
    }
    Ok(())
}

/// The "engines" section (R-EX-1): one line per engine, then what it says
/// of each instance it does not hold as the view wants.
fn write_engines(engines: &[EngineStatus], out: &mut (dyn Write + Send)) -> Result<(), CliError> {
    writeln!(out, "engines:")?;
    for e in engines {
        let reach = match (e.reachable, e.since_ms) {
            (Some(true), Some(t)) => format!("reachable since {}", ringsync::time::rfc3339(t)),
            (Some(false), Some(t)) => format!("UNREACHABLE since {}", ringsync::time::rfc3339(t)),
            _ => "not asked yet".to_owned(),
        };
        let holds = e.revision.map_or("holds no revision".to_owned(), |r| {
            format!("holds revision {r}")
        });
        let role = if e.acting {
            ""
        } else {
            " (standby: driven by another node)"
        };
        writeln!(
            out,
            "  {} ({} {}): {reach}, {holds}{role}",
            e.name, e.kind, e.address
        )?;
        if let Some(err) = &e.error {
            writeln!(out, "    failing: {err}")?;
        }
        if let Some(c) = &e.last_correction {
            writeln!(
                out,
                "    last correction at {}: {} was {}, set {}",
                ringsync::time::rfc3339(c.at_ms),
                c.instance,
                c.found,
                c.want.as_str()
            )?;
        }
        for i in e.instances.iter().filter(|i| !i.agrees) {
            let says = i.says.as_deref().unwrap_or("nothing");
            writeln!(
                out,
                "    {} ({}): wants {}, engine says {says}",
                i.id,
                i.target,
                i.want.as_str()
            )?;
        }
    }
    Ok(())
}

/// The state, and the stream transports some node could not reach the
/// instance over lately: `up (tcp unreachable)`. The state comes from the
/// UDP health probe, so it alone would say `up`.
fn state_cell(i: &InstanceStatus) -> String {
    let mut down: Vec<&str> = i
        .unreachable
        .iter()
        .map(|u| transport_name(u.what.transport))
        .collect();
    down.sort_unstable();
    down.dedup();
    if down.is_empty() {
        i.state.to_string()
    } else {
        format!("{} ({} unreachable)", i.state, down.join(", "))
    }
}

fn transport_name(t: ringsync::config::Transport) -> &'static str {
    match t {
        ringsync::config::Transport::Udp => "udp",
        ringsync::config::Transport::Tcp => "tcp",
        ringsync::config::Transport::Tls => "tls",
        ringsync::config::Transport::Ws => "ws",
        ringsync::config::Transport::Wss => "wss",
    }
}

/// The summed work: `0`, `3 (2 dlg, 1 txn)`, or for an unknown sum the
/// lower bound the reporting nodes give: `?`, `>=3 (3 reg)`.
fn work_cell(i: &InstanceStatus) -> String {
    let total = i.counts.total();
    let kinds = kinds(&i.counts);
    match i.work {
        Some(0) => "0".into(),
        Some(n) => format!("{n} ({kinds})"),
        None if total == 0 => "?".into(),
        None => format!(">={total} ({kinds})"),
    }
}

fn kinds(c: &WorkCounts) -> String {
    [
        (c.transactions, "txn"),
        (c.dialogs, "dlg"),
        (c.registrations, "reg"),
        (c.subscriptions, "sub"),
        (c.calls, "calls"),
        (c.groups, "grp"),
        (c.connections, "conn"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect::<Vec<_>>()
    .join(", ")
}

/// When the work should be gone, from now.
fn eta_cell(i: &InstanceStatus, now_ms: u64) -> String {
    i.eta
        .until_ms()
        .map_or_else(|| "-".into(), |at| work::in_words(at, now_ms))
}

/// Why the sum is unknown, and when it will be known if a node said.
fn why_cell(i: &InstanceStatus, now_ms: u64) -> String {
    let mut why = i.unknown.join("; ");
    if let Some(at) = i.known_at_ms {
        why.push_str(&format!(" (known {})", work::in_words(at, now_ms)));
    }
    why
}

/// One node: who answered, and whether its view is behind the store.
fn node_line(n: &NodeAnswer, st: &SiteStatus) -> String {
    let head = format!("node {} at {}:", n.kind, n.addr);
    if let Some(e) = &n.error {
        return format!("{head} no work report: {e}");
    }
    let mut line = format!("{head} {}", n.node.as_deref().unwrap_or("?"));
    if let Some(rev) = n.revision {
        line.push_str(&format!(", profile revision {rev}"));
        if rev < st.revision {
            line.push_str(" (behind: it has not applied the latest change)");
        }
    }
    if let Some(since) = n.stale_since_ms {
        line.push_str(&format!(
            ", its store stale since {} (keeping its last view)",
            ringsync::time::rfc3339(since)
        ));
    }
    if let Some(h) = &n.site_hash {
        line.push_str(&format!(", site file {h}"));
    }
    if let Some(run) = &n.run {
        line.push_str(&format!(", {}", run.describe()));
    }
    line
}

pub(super) fn write_table(
    out: &mut (dyn Write + Send),
    header: &[&str],
    rows: &[Vec<String>],
) -> Result<(), CliError> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s.trim_end().to_owned()
    };
    writeln!(out, "{}", line(header.to_vec()))?;
    for row in rows {
        writeln!(out, "{}", line(row.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}
