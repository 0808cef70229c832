//! Says in the log when the gate applies a new drain view: its profile
//! revision and which instances entered or left the drain zone (as
//! media-ctl says when its drain zone changes). Health changes publish
//! views too; those are logged where the probes decide them (`health.rs`).

use std::sync::Arc;

use ringsync::view::{DrainView, Zone};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Logs every view from `rx` whose revision or drain zone differs from the
/// last one logged, until `shutdown`.
pub(crate) async fn run(mut rx: watch::Receiver<Arc<DrainView>>, shutdown: CancellationToken) {
    let mut last = rx.borrow_and_update().clone();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = rx.changed() => if changed.is_err() { return },
        }
        let view = rx.borrow_and_update().clone();
        let (entering, leaving) = zone_changes(&last, &view);
        if view.revision() != last.revision() || !entering.is_empty() || !leaving.is_empty() {
            tracing::info!(
                revision = view.revision(),
                drain_zone = ?view.drain_zone(),
                entering = ?entering,
                leaving = ?leaving,
                "applied drain view: instances entering the drain zone take no new work, those leaving it take new work again"
            );
        }
        last = view;
    }
}

/// The ids of the instances that entered the drain zone from `before` to
/// `after`, and of those that left it.
fn zone_changes<'a>(before: &DrainView, after: &'a DrainView) -> (Vec<&'a str>, Vec<&'a str>) {
    let mut entering = Vec::new();
    let mut leaving = Vec::new();
    for (b, a) in before.instances().iter().zip(after.instances()) {
        match (b.zone, a.zone) {
            (Zone::Normal, Zone::Drain) => entering.push(a.id.as_str()),
            (Zone::Drain, Zone::Normal) => leaving.push(a.id.as_str()),
            _ => {}
        }
    }
    (entering, leaving)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringsync::config::SiteConfig;
    use ringsync::profile::{Profile, ProfileSet, ProfileState};
    use std::path::Path;

    #[test]
    fn names_the_instances_that_change_zone() {
        let text = "[site]\nname = \"t\"\n[[server]]\nname = \"srv-a\"\n[[server]]\nname = \"srv-b\"\n\
             [[instance]]\nid = \"sg-a\"\nservice = \"sg\"\nserver = \"srv-a\"\nsip = \"127.0.0.1:1\"\n\
             [[instance]]\nid = \"sg-b\"\nservice = \"sg\"\nserver = \"srv-b\"\nsip = \"127.0.0.1:2\"\n";
        let c = Arc::new(SiteConfig::from_str_at(text, Path::new("/t.toml")).unwrap());
        let drain = |servers: &[&str]| ProfileSet {
            revision: 1,
            profiles: vec![Profile {
                id: "p".into(),
                name: "p".into(),
                description: String::new(),
                revision: 0,
                servers: servers.iter().map(|s| s.to_string()).collect(),
                state: ProfileState::Active,
            }],
        };
        let none = DrainView::build(c.clone(), &ProfileSet::default(), &[], &[]);
        let a = DrainView::build(c.clone(), &drain(&["srv-a"]), &[], &[]);
        let b = DrainView::build(c, &drain(&["srv-b"]), &[], &[]);
        assert_eq!(zone_changes(&none, &a), (vec!["sg-a"], vec![]));
        assert_eq!(zone_changes(&a, &b), (vec!["sg-b"], vec!["sg-a"]));
        assert_eq!(zone_changes(&b, &b), (vec![], vec![]));
    }
}
