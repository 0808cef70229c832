//! ringsync-ops' integration tests, one binary so the suite links once
//! (issue 42). Each module was a test file of its own and keeps its tests'
//! names under the module's: `cargo test -p ringsync-ops --test all names::`
//! runs one.
//!
//! The modules now share a process and run side by side: each keeps its own
//! loopback addresses (its etcd on its own 127.0.N.11, the engines on
//! 127.0.86-88.x, the browser's site on 127.47.28.x; the rest bind port 0),
//! and none sets environment variables, the current directory or any other
//! process-wide state (the `ringsync` binary they start gets its environment
//! through its `Command`).

mod common;

mod api;
mod api_cli;
mod audit_rotation;
mod backup;
mod cli;
mod crash;
mod engines;
mod etcd_cli;
mod etcd_nodes;
mod handover_cli;
mod handover_etcd;
mod handover_midplan;
mod handover_paced;
mod install;
mod names;
mod node_kinds;
mod operator;
mod page;
mod page_browser;
mod tokens_file;
mod truth;
mod wait_stop;
