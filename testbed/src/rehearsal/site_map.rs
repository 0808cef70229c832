//! The site a run played, in the report: what it was built from and where
//! every address of the site file went on loopback.

use std::fmt::Write as _;

use serde::Serialize;

use crate::site::{Layout, Mapped, Svc};

/// The site of a run: its source, the address mapping and what the run
/// changed besides addresses.
#[derive(Debug, Clone, Serialize)]
pub struct SiteMap {
    /// The operator's site file, or `None` for a site built from counts.
    pub file: Option<String>,
    /// The run's `/24`.
    pub net: String,
    /// Every address of the site file and its stand-in.
    pub mapping: Vec<Mapped>,
    /// Gate node `k`'s address, which the listeners' "gate address" means.
    pub gates: Vec<String>,
    /// What the run changed besides addresses, and why.
    pub notes: Vec<String>,
}

impl SiteMap {
    /// The map of a layout.
    pub fn new(l: &Layout) -> SiteMap {
        let [a, b, c] = l.run.net;
        SiteMap {
            file: l.source.as_ref().map(|p| p.display().to_string()),
            net: format!("{a}.{b}.{c}.0/24"),
            mapping: l.mapping().to_vec(),
            gates: (0..l.gates()).map(|k| l.gate_ip(k).to_string()).collect(),
            notes: l.notes().to_vec(),
        }
    }

    /// The mapping as a Markdown table (also what `testbed run` prints at
    /// the start).
    pub fn markdown(&self) -> String {
        let mut m = String::new();
        let from = self.file.as_deref().unwrap_or("counts");
        let _ = writeln!(
            m,
            "Site file {from} on {}; gate nodes on {}.\n",
            self.net,
            self.gates.join(", ")
        );
        let w = self
            .mapping
            .iter()
            .map(|x| x.what.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let s = self
            .mapping
            .iter()
            .map(|x| x.site.len())
            .max()
            .unwrap_or(9)
            .max(9);
        let _ = writeln!(m, "| {:w$} | {:s$} | rehearsal |", "what", "site file");
        let _ = writeln!(m, "|{}|{}|---|", "-".repeat(w + 2), "-".repeat(s + 2));
        for x in &self.mapping {
            let _ = writeln!(m, "| {:w$} | {:s$} | {} |", x.what, x.site, x.rehearsal);
        }
        for n in &self.notes {
            let _ = writeln!(m, "\n- {n}");
        }
        m
    }
}

/// One line about the site: its instances and how the run treats it.
pub fn words(l: &Layout) -> String {
    let from = match &l.source {
        Some(p) => format!("{} (", p.display()),
        None => "(".to_string(),
    };
    format!(
        "{from}{} sg, {} esg, {} mg, {} bgmg, {} Active-Passive group(s)), {} gate node(s), {:?} store, mg drain window {} s, on {}.{}.{}.0/24",
        l.count(Svc::Sg),
        l.count(Svc::Esg),
        l.count(Svc::Mg),
        l.count(Svc::Bgmg),
        l.ap().len(),
        l.gates(),
        l.store(),
        l.mg_drain_window_s(),
        l.run.net[0],
        l.run.net[1],
        l.run.net[2]
    )
}
