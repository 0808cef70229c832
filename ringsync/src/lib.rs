//! ringsync: the drain model of a site.
//!
//! Site configuration ([`config`]), deservice profiles, the drain view,
//! consistent hash rings and the stores profiles live in. Every other crate
//! loads its site through [`config::SiteConfig::load`], so there is one schema
//! and one set of errors.
#![forbid(unsafe_code)]

pub mod config;

pub use config::{ConfigError, SiteConfig};
