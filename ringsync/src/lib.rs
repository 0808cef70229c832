//! ringsync: the drain model of a site.
//!
//! Site configuration ([`config`]), deservice profiles ([`profile`]), the
//! stores profiles live in ([`store`]), consistent hash rings ([`ring`]), the
//! immutable drain view ([`view`]) and the live handle every process holds
//! ([`state`]). Nodes report the work they hold as one shared shape
//! ([`work`]); [`fetch`] gets a node's report and [`status`] sums every
//! node's into the site's status. [`handover`] moves the leaders of
//! Active-Passive groups off draining servers, one group per pace, and home
//! again. The operator's interfaces are [`cli`] and the admin HTTP [`api`]. Every other crate loads its site through
//! [`config::SiteConfig::load`], so there is one schema and one set of errors.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod api;
pub mod auth;
pub mod cli;
pub mod config;
pub mod fetch;
pub mod handover;
pub mod logs;
pub mod migrate;
pub mod node;
pub mod plan;
pub mod profile;
pub mod publish;
pub mod ring;
pub mod sitewide;
pub mod state;
pub mod status;
pub mod store;
pub mod view;
pub mod work;

pub use config::{ConfigError, SiteConfig};
pub use profile::{NewProfile, Profile, ProfilePatch, ProfileSet, ProfileState};
pub use store::{Store, StoreError};
