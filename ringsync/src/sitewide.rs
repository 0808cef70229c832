//! Site-wide status from a store's node registry (R-ST-1, R-ST-3, R-MN-2):
//! every registered node with its liveness and freshness, and every
//! instance's state from the sum of the nodes' work reports.
//!
//! Used by `ringsync status` on a store that keeps nodes (etcd); on the
//! embedded store status asks the nodes' admin addresses instead.

use std::io::Write;

use serde::Serialize;

use crate::node::{self, NodeEntry};
use crate::profile::ProfileSet;
use crate::state::DrainState;
use crate::store::{Freshness, Store, StoreError};
use crate::work::{self, InstanceStatus};

/// What `ringsync status` shows on a site with a node registry.
#[derive(Debug, Clone, Serialize)]
pub struct SiteStatus {
    /// Site name.
    pub site: String,
    /// Profile revision.
    pub revision: u64,
    /// Servers in the drain zone.
    pub drain_zone: Vec<String>,
    /// Whether the profiles read are current.
    pub store: Freshness,
    /// Every registered node.
    pub nodes: Vec<NodeEntry>,
    /// Every instance, summed over the nodes (R-ST-3).
    pub instances: Vec<InstanceStatus>,
}

/// Reads profiles and the registry; `None` when the store keeps no registry.
pub async fn read(
    store: &dyn Store,
    state: &DrainState,
    set: &ProfileSet,
) -> Result<Option<SiteStatus>, StoreError> {
    let Some(nodes) = store.nodes().await? else {
        return Ok(None);
    };
    let now = work::now_ms();
    let view = state.view();
    let instances = work::sum(&view, &node::outcomes(&nodes, now));
    Ok(Some(SiteStatus {
        site: view.config().site.name.clone(),
        revision: set.revision,
        drain_zone: view.drain_zone().iter().cloned().collect(),
        store: store.freshness().borrow().clone(),
        nodes,
        instances,
    }))
}

/// The table form.
pub fn write_text(s: &SiteStatus, out: &mut (dyn Write + Send)) -> std::io::Result<()> {
    let now = work::now_ms();
    writeln!(
        out,
        "site {}, profile revision {}, drain zone: {}",
        s.site,
        s.revision,
        if s.drain_zone.is_empty() {
            "(empty)".to_owned()
        } else {
            s.drain_zone.join(", ")
        }
    )?;
    writeln!(out, "{}", s.store.describe(now))?;
    let rows: Vec<Vec<String>> = s
        .instances
        .iter()
        .map(|i| {
            vec![
                i.id.clone(),
                i.service.to_string(),
                i.server.clone(),
                i.zone.as_str().to_owned(),
                i.state.to_string(),
                i.work
                    .map_or_else(|| format!("≥{}", i.counts.total()), |w| w.to_string()),
                i.eta
                    .until_ms()
                    .map_or_else(String::new, |t| work::in_words(t, now)),
            ]
        })
        .collect();
    table(
        out,
        &[
            "INSTANCE", "SERVICE", "SERVER", "ZONE", "STATE", "WORK", "ETA",
        ],
        &rows,
    )?;
    writeln!(out)?;
    let rows: Vec<Vec<String>> = s
        .nodes
        .iter()
        .map(|n| {
            vec![
                n.id.node.clone(),
                n.id.role.to_string(),
                n.id.address.clone(),
                n.describe(now),
            ]
        })
        .collect();
    table(out, &["NODE", "ROLE", "ADDRESS", "STATE"], &rows)?;
    for i in &s.instances {
        for u in &i.unknown {
            writeln!(out, "note: {}: work unknown: {u}", i.id)?;
        }
    }
    Ok(())
}

fn table(
    out: &mut (dyn Write + Send),
    header: &[&str],
    rows: &[Vec<String>],
) -> std::io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (c, w) in cells.iter().zip(&widths) {
            let pad = w.saturating_sub(c.chars().count());
            s.push_str(c);
            s.push_str(&" ".repeat(pad + 2));
        }
        s.trim_end().to_owned()
    };
    writeln!(out, "{}", line(header.to_vec()))?;
    for row in rows {
        writeln!(out, "{}", line(row.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}
