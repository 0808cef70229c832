//! media-ctl's integration tests, one binary so the suite links once (issue
//! 42). Each module was a test file of its own and keeps its tests' names
//! under the module's: `cargo test -p media-ctl --test all core_rules::`
//! runs one.
//!
//! `common` is the simulated pool the core's rules run against (no
//! sockets); `real` starts real rtpengine processes and the real binary,
//! each site on its own `127.80.N.0/24`, so the modules run side by side.

mod common;
mod real;

mod capture;
mod cli;
mod core_rules;
mod fuzz_props;
mod kamailio_interop;
mod ng_json;
mod rtpengine_pool;
