//! testbed's integration tests, one binary so the suite links once (issue
//! 42). Each module was a test file of its own and keeps its tests' names
//! under the module's: `cargo test -p testbed --test all site::` runs one.
//!
//! The modules now share a process and run side by side: each keeps its own
//! loopback addresses (the nets its docs name), and none sets environment
//! variables, the current directory or any other process-wide state.

mod common;

mod bins;
mod chaos;
mod cli;
mod conn_bench;
mod etcd;
mod flood_bench;
mod kamailio;
mod module_cycles;
mod observability;
mod reg_avalanche;
mod rehearsal;
mod rehearsal_gates;
mod rehearsal_shipped;
mod relay;
mod rtpengine;
mod sd_notify;
mod sipp_pairs;
mod site;
mod systemd_units;
