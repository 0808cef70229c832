//! The drain zone over time, from the changes the operators made (their
//! accepted, written changes in revision order): when each server was in
//! it. A change takes effect somewhere between the CLI's start and its
//! answer, so two readings: `narrow` (in the zone only once the
//! activation answered, out as soon as the lift started) and `wide` (from
//! the activation's start to the lift's answer).

use std::collections::BTreeMap;

use super::operators::OpRecord;

/// Per server, the merged intervals it was in the zone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Zone(BTreeMap<String, Vec<(f64, f64)>>);

impl Zone {
    /// The zone the made changes of `ops` describe, until `end`.
    pub fn from_ops(ops: &[OpRecord], end: f64, wide: bool) -> Zone {
        let mut made: Vec<&OpRecord> = ops.iter().filter(|o| o.made().is_some()).collect();
        made.sort_by_key(|o| o.order());
        // Per profile: since when it is active, and its servers.
        let mut active: BTreeMap<&str, (f64, &[String])> = BTreeMap::new();
        let mut spans: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for o in made {
            let (on, off) = if wide { (o.t0, o.t1) } else { (o.t1, o.t0) };
            match o.action.as_str() {
                "activate" => {
                    active.entry(&o.profile).or_insert((on, &o.servers));
                }
                "deactivate" | "delete" => {
                    if let Some((from, servers)) = active.remove(o.profile.as_str()) {
                        for s in servers {
                            spans.entry(s.clone()).or_default().push((from, off));
                        }
                    }
                }
                _ => {}
            }
        }
        for (from, servers) in active.into_values() {
            for s in servers {
                spans.entry(s.clone()).or_default().push((from, end));
            }
        }
        for v in spans.values_mut() {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut merged: Vec<(f64, f64)> = Vec::new();
            for (a, b) in v.drain(..) {
                match merged.last_mut() {
                    Some(last) if a <= last.1 => last.1 = last.1.max(b),
                    _ => merged.push((a, b)),
                }
            }
            *v = merged;
        }
        Zone(spans)
    }

    /// Since when `server` had been in the zone without a break at `t`.
    pub fn since(&self, server: &str, t: f64) -> Option<f64> {
        self.0
            .get(server)?
            .iter()
            .find(|(a, b)| *a <= t && t <= *b)
            .map(|x| x.0)
    }

    /// Whether `server` was in the zone at any moment of `[a, b]`.
    pub fn touches(&self, server: &str, a: f64, b: f64) -> bool {
        self.0
            .get(server)
            .is_some_and(|v| v.iter().any(|(x, y)| *x <= b && a <= *y))
    }
}
