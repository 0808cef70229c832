//! Scenario files: what parses, and how mistakes are named.
use super::*;

fn parse(text: &str) -> std::result::Result<Scenario, String> {
    let s: Scenario = toml::from_str(text).map_err(|e| e.to_string())?;
    s.check()?;
    Ok(s)
}

#[test]
fn a_timeline_parses_and_ends_after_its_last_effect() {
    let s = parse(
        r#"
name = "t"
rules = ["R-SG-4", "R-AA-1"]
[site]
sg = 3
net = "127.60.1"
[[step]]
at_s = 0
do = "load"
rate = 10
duration_s = 20
hold_s = 4
[[step]]
at_s = 5
do = "activate"
profile = "maint-a"
servers = ["srv-a"]
"#,
    )
    .unwrap();
    assert_eq!(s.steps.len(), 2);
    assert_eq!(s.end_s(), 0.0 + 20.0 + 4.0 + 1.0 + 3.0);
    assert_eq!(s.builder().unwrap().layout().unwrap().run.net, [127, 60, 1]);
}

#[test]
fn mistakes_are_named() {
    let base = "name = \"t\"\n[site]\nsg = 2\n";
    let e = parse(&format!(
        "{base}[[step]]\nat_s = 1\ndo = \"activate\"\nprofile = \"p\"\nservers = [\"srv-q\"]\n"
    ))
    .unwrap_err();
    assert!(e.contains("step[0]") && e.contains("srv-q"), "{e}");
    let e = parse(&format!(
        "{base}[[step]]\nat_s = 1\ndo = \"load\"\nrate = 5000\nduration_s = 1\nhold_s = 1\n"
    ))
    .unwrap_err();
    assert!(e.contains("rate = 5000"), "{e}");
    let e = parse("name = \"t\"\nrules = [\"R-XX-9\"]\n").unwrap_err();
    assert!(e.contains("R-XX-9"), "{e}");
    let e = parse(&format!(
        "{base}[[step]]\nat_s = 1\ndo = \"stop_etcd\"\nfor_s = 3\n"
    ))
    .unwrap_err();
    assert!(e.contains("etcd"), "{e}");
    let e = parse(&format!("{base}[[step]]\nat_s = 1\ndo = \"explode\"\n")).unwrap_err();
    assert!(e.contains("explode"), "{e}");
    // The single-instance account is an esg account.
    let e = parse(&format!(
        "{base}esg = 1\n[[step]]\nat_s = 0\ndo = \"load\"\naccount = \"single\"\nrate = 1\nduration_s = 1\nhold_s = 1\n"
    ))
    .unwrap_err();
    assert!(e.contains("esg account"), "{e}");
    let e = parse(&format!(
        "{base}[[step]]\nat_s = 0\ndo = \"load\"\naccount = \"single\"\nrate = 1\nduration_s = 1\nhold_s = 1\n"
    ))
    .unwrap_err();
    assert!(e.contains("account `single`: not on this site"), "{e}");
    let e = parse("name = \"t\"\n[site]\nsg = 2\ngate_deadline_s = 0\n").unwrap_err();
    assert!(e.contains("gate_deadline_s = 0"), "{e}");
    let e = parse("name = \"t\"\n[site]\nsg = 1\nmg = 0\nap_groups = 2\n").unwrap_err();
    assert!(e.contains("two servers"), "{e}");
}

fn own(steps: &str) -> std::result::Result<Scenario, String> {
    let site = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/examples/rehearsal/sites/nyc-1.toml"
    );
    parse(&format!("name = \"t\"\nsite = \"{site}\"\n{steps}"))
}

#[test]
fn a_timeline_on_an_operators_site_uses_its_names() {
    let s = own(concat!(
        "[[step]]\nat_s = 0\ndo = \"load\"\nlistener = \"carriers\"\naccount = \"carrier-y\"\nrate = 1\nduration_s = 1\nhold_s = 1\n",
        "[[step]]\nat_s = 1\ndo = \"activate\"\nprofile = \"maint-srv2\"\n",
        "[[step]]\nat_s = 2\ndo = \"kill_instance\"\ninstance = \"sg-nyc-2\"\n",
    ))
    .unwrap();
    let l = s.builder().unwrap().layout().unwrap();
    let r = s.resolved(&l);
    assert_eq!(r.steps[1].action.label(), "activate maint-srv2 (nyc-srv2)");
    let e = own("[[step]]\nat_s = 1\ndo = \"activate\"\nprofile = \"maint-srv7\"\n").unwrap_err();
    assert!(
        e.contains("maint-srv7") && e.contains("maint-srv2, maint-srv1"),
        "{e}"
    );
    let e = own("[[step]]\nat_s = 1\ndo = \"kill_instance\"\ninstance = \"sg-a\"\n").unwrap_err();
    assert!(e.contains("sg-nyc-1"), "{e}");
    let e = own("[[step]]\nat_s = 0\ndo = \"load\"\nrate = 1\nduration_s = 1\nhold_s = 1\n")
        .unwrap_err();
    assert!(
        e.contains("listener `subscribers`") && e.contains("public, carriers, core"),
        "{e}"
    );
    let e = parse("name = \"t\"\n[site]\nfile = \"x.toml\"\nsg = 3\n").unwrap_err();
    assert!(e.contains("site.sg"), "{e}");
}
