//! The layout of counts and of an operator's site file: the same loader,
//! the same mapping.

use std::path::{Path, PathBuf};

use super::counts::Counts;
use super::layout::{Layout, RunSpec, StoreKind, Svc};

fn run() -> RunSpec {
    RunSpec {
        net: [127, 61, 2],
        gates: 2,
        store: StoreKind::Embedded,
        gate_deadline_s: 20,
        mg_drain_window_s: None,
        ap_pace_s: Some(5),
    }
}

fn counts() -> Counts {
    Counts {
        sg: 3,
        esg: 2,
        mg: 3,
        bgmg: true,
        ap_groups: 2,
    }
}

fn nyc() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/rehearsal/sites/nyc-1.toml")
}

fn load(text: &str) -> ringsync::SiteConfig {
    ringsync::SiteConfig::from_str_at(text, "site.toml".as_ref())
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[test]
fn counts_give_every_instance_its_own_address_on_the_run_network() {
    let l = Layout::from_counts(&counts(), &run()).unwrap();
    let inst = l.instances();
    assert_eq!(inst.len(), 3 + 2 + 3 + 3);
    let mut ips: Vec<_> = inst.iter().map(|i| i.ip).collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), inst.len());
    assert_eq!(inst[0].id, "sg-a");
    assert_eq!(inst[0].addr(), "127.61.2.20:5060".parse().unwrap());
    assert_eq!(inst[5].addr(), "127.61.2.60:22222".parse().unwrap());
    assert_eq!(l.servers(), ["srv-a", "srv-b", "srv-c"]);
    assert_eq!(l.mg_drain_window_s(), 10);
    assert_eq!(
        l.gate_listener(1, "providers"),
        Some("127.61.2.2:5070".parse().unwrap())
    );
    assert_eq!(l.account("single").unwrap().home.as_deref(), Some("esg-a"));
    assert_eq!(
        l.account("multi").unwrap().caller.to_string(),
        "127.61.2.100"
    );
}

#[test]
fn the_site_file_of_every_gate_loads_with_ringsync() {
    let l = Layout::from_counts(&counts(), &run()).unwrap();
    for k in 0..2 {
        let c = load(&l.site_toml(k, &[]));
        assert_eq!(c.instances.len(), 11 + 2 * 3);
        assert_eq!(c.ap_groups.len(), 2);
        assert_eq!(c.ap_groups[0].home, "ap1-a");
        assert_eq!(c.accounts.len(), 2);
        assert!(c.timers.ap_test_pace_allowed);
        assert_eq!(c.admin.gate_bind, l.gate_admin(k));
        assert_eq!(
            c.listener("subscribers").unwrap().bind,
            l.gate_listener(k, "subscribers").unwrap()
        );
    }
    let etcd = Layout::from_counts(
        &counts(),
        &RunSpec {
            store: StoreKind::Etcd,
            ..run()
        },
    )
    .unwrap();
    load(&etcd.site_toml(1, &["http://127.61.2.11:2379".into()]));
}

#[test]
fn an_operators_site_keeps_its_names_and_moves_every_address() {
    let l = Layout::from_file(&nyc(), &run()).unwrap();
    assert_eq!(l.servers(), ["nyc-srv1", "nyc-srv2", "nyc-srv3"]);
    assert_eq!(l.count(Svc::Sg), 3);
    let sg2 = l
        .instances()
        .into_iter()
        .find(|i| i.id == "sg-nyc-2")
        .unwrap();
    assert_eq!(sg2.addr(), "127.61.2.21:5060".parse().unwrap());
    // Three listeners on port 5060 of three addresses: the first keeps it.
    let ports: Vec<u16> = l.listeners().iter().map(|x| x.port).collect();
    assert_eq!(ports, [5060, 5100, 5101]);
    assert_eq!(
        l.account("carrier-y").unwrap().home.as_deref(),
        Some("esg-nyc-1")
    );
    assert_eq!(l.ap()[0].home, "bill-nyc-1");
    assert_eq!(
        l.profiles()[0],
        ("maint-srv2".to_string(), vec!["nyc-srv2".to_string()])
    );
    // The file's own timers, unless the run shortens them.
    assert_eq!(l.mg_drain_window_s(), 180);
    let m = l
        .mapping()
        .iter()
        .find(|m| m.what == "instance sg-nyc-2 sip")
        .unwrap();
    assert_eq!(
        (m.site.as_str(), m.rehearsal.as_str()),
        ("10.20.1.12:5060", "127.61.2.21:5060")
    );
    let text = l.site_toml(0, &[]);
    assert!(!text.contains("10.20."), "{text}");
    let c = load(&text);
    // Exceptions and domains stay as the operator wrote them.
    assert_eq!(c.instance("sg-nyc-1").unwrap().exceptions.len(), 2);
    assert_eq!(c.accounts[0].matcher.domain, ["carrier-x.example"]);
    assert_eq!(
        c.accounts[0].matcher.source[0].to_string(),
        "127.61.2.100/32"
    );
}

/// The layout of `text` as a site file, next to a certificate and key.
fn layout_of(text: &str) -> Result<Layout, String> {
    let dir = tempfile::tempdir().unwrap();
    crate::tls::self_signed(dir.path(), "sip.nyc.example.net").unwrap();
    let p = dir.path().join("site.toml");
    std::fs::write(&p, text).unwrap();
    Layout::from_file(&p, &run())
}

fn edited(from: &str, to: &str) -> Result<Layout, String> {
    let text = std::fs::read_to_string(nyc()).unwrap();
    assert!(text.contains(from), "{from}");
    layout_of(&text.replace(from, to))
}

const TLS: &str = "[tls]\ncert = \"cert.pem\"\nkey = \"key.pem\"\n\n[health]";
const CORE: &str = "transports = [\"udp\"]\nmode = \"balance\"\npool = \"esg\"\nleg = \"inside\"";

fn with_tls(core_transports: &str) -> Result<Layout, String> {
    let text = std::fs::read_to_string(nyc()).unwrap();
    assert!(text.contains(CORE));
    let core = CORE.replace("[\"udp\"]", core_transports);
    layout_of(&text.replace("[health]", TLS).replace(CORE, &core))
}

#[test]
fn tls_is_left_out_of_a_listener_that_also_serves_udp() {
    let l = with_tls("[\"udp\", \"tls\"]").unwrap();
    assert!(l.listener("core").unwrap().udp);
    assert!(
        l.notes().iter().any(|n| n.contains("listener core: tls")),
        "{:?}",
        l.notes()
    );
    let text = l.site_toml(0, &[]);
    assert!(!text.contains("tls"), "{text}");
}

#[test]
fn what_cannot_run_on_loopback_is_refused_naming_the_field() {
    let e = with_tls("[\"tls\"]").unwrap_err();
    assert!(e.contains("listener `core`.transports"), "{e}");
    // ringsync's own loader speaks for the file: file, line, field.
    let e = edited("server = \"nyc-srv3\"", "server = \"nyc-srv9\"").unwrap_err();
    assert!(e.contains("nyc-srv9"), "{e}");
    let e = Layout::from_file(Path::new("/nonexistent/site.toml"), &run()).unwrap_err();
    assert!(e.contains("/nonexistent/site.toml"), "{e}");
    let many: String = (0..21)
        .map(|i| format!("\n[[instance]]\nid = \"sgx-{i}\"\nservice = \"sg\"\nserver = \"nyc-srv1\"\nsip = \"10.9.0.{i}:5060\"\n"))
        .collect();
    let e = edited("# --- external SIP", &format!("{many}\n# --- external SIP")).unwrap_err();
    assert!(e.contains("at most 20 sg"), "{e}");
}

#[test]
fn out_of_range_counts_are_refused_with_the_field() {
    let e = Layout::from_counts(&Counts { sg: 21, ..counts() }, &run()).unwrap_err();
    assert!(e.contains("sg = 21"), "{e}");
    let l = Layout::from_counts(&counts(), &RunSpec { gates: 0, ..run() }).unwrap();
    assert!(l.check().unwrap_err().contains("gates"));
}
