//! ringsync: the drain model of a site, the part every node links.
//!
//! Site configuration ([`config`]), deservice profiles ([`profile`]), the
//! stores profiles live in ([`store`]), consistent hash rings ([`ring`]), the
//! immutable drain view ([`view`]) and the live handle every process holds
//! ([`state`]). Nodes report the work they hold as one shared shape
//! ([`work`]), registered and published by [`node`] and [`publish`];
//! [`daemon`] is the one start-up and shutdown every data-plane node runs
//! against its store, [`runtime`] what every daemon starts and stops
//! with (recorder, signals, systemd, tasks). The Active-Passive handover's records are in
//! [`handover`]. [`notify`] tells systemd a daemon is ready, stopping
//! or alive; [`signals`] are what every daemon stops or reloads on.
//! [`tls`] serves a certificate that is re-read when its files change.
//! [`capture`] sends copies of messages to HEP collectors (`[capture]`).
//! Every other crate
//! loads its site through [`config::SiteConfig::load`], so there is one
//! schema and one set of errors.
//!
//! The operator plane (the `ringsync` CLI, the admin API, status, the
//! handover planner and agent) is the `ringsync-ops` crate, built on this
//! one; the data plane (sip-gate, media-ctl) links only this crate.
//!
//! The etcd store ([`store`]'s `etcd` module) is the `etcd` feature, on by
//! default. Without it ringsync builds without etcd-client (and tonic,
//! prost, protoc at build time), and a site file with `[store] kind =
//! "etcd"` is a config error naming the feature ([`config::NO_ETCD`]).
#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub mod admin;
pub mod bans;
pub mod capture;
pub mod config;
pub mod daemon;
pub mod files;
pub mod handover;
pub mod logs;
pub mod node;
pub mod notify;
pub mod profile;
pub mod publish;
pub mod ring;
pub mod runtime;
pub mod signals;
pub mod state;
pub mod store;
pub mod time;
pub mod tls;
pub mod view;
pub mod work;

pub use config::{ConfigError, SiteConfig};
pub use profile::{NewProfile, Profile, ProfilePatch, ProfileSet, ProfileState};
pub use store::{Store, StoreError};
