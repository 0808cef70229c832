//! The checker of `module_cycles` on small synthetic crates: a cycle found
//! with where each edge is written, an acyclic tree passed.

use std::path::Path;

use super::{cycles, describe, edges, module_of, Source};

fn synthetic(files: &[(&str, &str)]) -> Vec<Source> {
    files
        .iter()
        .filter_map(|(path, text)| {
            Some(Source {
                module: module_of(Path::new(path))?,
                label: path.to_string(),
                text: text.to_string(),
            })
        })
        .collect()
}

#[test]
fn checker_finds_a_cycle_through_a_group_and_super() {
    let sources = synthetic(&[
        ("node.rs", "use crate::store::{etcd::Lease, Other};\n"),
        ("store/mod.rs", "pub mod etcd;\n"),
        (
            "store/etcd/mod.rs",
            "mod lease;\npub fn f() -> crate::node::Freshness { todo() }\n",
        ),
        ("store/etcd/lease.rs", "use super::super::super::node::X;\n"),
    ]);
    let graph = edges(&sources);
    assert_eq!(
        cycles(&graph),
        vec![vec!["node".to_string(), "store::etcd".to_string()]]
    );
    let text = describe("x", &cycles(&graph)[0], &graph);
    assert!(
        text.contains("store::etcd -> node  (store/etcd/mod.rs:2)"),
        "{text}"
    );
    // A module deeper down is a node of its own, outside this cycle.
    assert!(!text.contains("lease.rs"), "{text}");
    assert!(graph
        .iter()
        .any(|e| e.from == "store::etcd::lease" && e.to == "node"));
    assert!(text.contains("node -> store::etcd  (node.rs:1)"), "{text}");
}

#[test]
fn checker_passes_a_tree_and_ignores_comments_strings_and_tests() {
    let sources = synthetic(&[
        ("a.rs", "use crate::b::X;\n// crate::c::Y\nconst S: &str = \"crate::c\";\n"),
        ("b.rs", "pub mod inner;\nuse crate::c::Z;\n"),
        ("b/inner.rs", "use super::X; // the parent, one more edge\n"),
        (
            "c.rs",
            "/* crate::a */\nlet q = '\"'; let r = r#\"crate::a\"#;\n#[cfg(test)]\nmod tests { use crate::a::T; }\n",
        ),
        ("c_tests.rs", "use crate::a::T;\n"),
    ]);
    let graph = edges(&sources);
    let pairs: Vec<(&str, &str)> = graph
        .iter()
        .map(|e| (e.from.as_str(), e.to.as_str()))
        .collect();
    assert_eq!(pairs, vec![("a", "b"), ("b", "c"), ("b::inner", "b")]);
    assert!(cycles(&graph).is_empty());
}

#[test]
fn a_child_naming_its_parent_is_an_edge_a_mod_declaration_is_not() {
    let sources = synthetic(&[
        ("store/mod.rs", "pub mod audit;\npub struct Helper;\n"),
        ("store/audit.rs", "use super::Helper;\n"),
    ]);
    let graph = edges(&sources);
    let pairs: Vec<(&str, &str)> = graph
        .iter()
        .map(|e| (e.from.as_str(), e.to.as_str()))
        .collect();
    assert_eq!(pairs, vec![("store::audit", "store")]);
}

/// Every depth is a node: two siblings three levels down that name each
/// other are a cycle (the one `store::etcd::election` <-> `handover` was,
/// when modules below depth two were folded into their ancestor).
#[test]
fn checker_sees_a_cycle_at_any_depth() {
    let sources = synthetic(&[
        ("store/mod.rs", "pub mod etcd;\n"),
        ("store/etcd/mod.rs", "mod election;\nmod handover;\n"),
        ("store/etcd/election.rs", "use super::handover::json;\n"),
        (
            "store/etcd/handover.rs",
            "fn c() { super::election::campaign() }\n",
        ),
    ]);
    let graph = edges(&sources);
    assert_eq!(
        cycles(&graph),
        vec![vec![
            "store::etcd::election".to_string(),
            "store::etcd::handover".to_string()
        ]]
    );
}
