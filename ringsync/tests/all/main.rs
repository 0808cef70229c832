//! ringsync's integration tests, one binary so the suite links once (issue
//! 42). Each module was a test file of its own and keeps its tests' names
//! under the module's: `cargo test -p ringsync --test all store::` runs one.
//!
//! The etcd store's tests (and their helpers) build only with the `etcd`
//! feature (default-on), so `--no-default-features` still builds the rest.
//! The modules share a process: each etcd test keeps its own loopback net,
//! and none sets environment variables, the current directory or any other
//! process-wide state.

mod common;
// A sibling of `common` rather than its child: ringsync-ops includes
// `common` too and declares these helpers itself.
#[cfg(feature = "etcd")]
#[path = "common/etcd.rs"]
mod etcd_common;

#[cfg(feature = "etcd")]
mod etcd_store;
mod store;
