//! ringsync-ops: the operator plane of a site's drain, built on the model
//! (the `ringsync` crate).
//!
//! The operator's interfaces are [`cli`] (the `ringsync` binary) and the
//! admin HTTP [`api`] with its tokens ([`auth`]). [`fetch`] gets a node's
//! work report over HTTP, [`sum`] adds up every node's per instance, and
//! [`status`] makes the site's status of them ([`sitewide`] from the
//! store's node registry). [`handover`] moves the
//! leaders of Active-Passive groups off draining servers, one group per
//! pace, and home again. [`drained`] judges whether servers are drained
//! (`wait drained`, `GET /v1/wait`). [`plan`] previews a profile change; [`migrate`]
//! copies a site's store to another.
//!
//! The data plane (sip-gate, media-ctl) does not link this crate: an edit
//! here rebuilds neither.
#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub mod api;
pub mod auth;
pub mod backup;
pub mod cli;
pub mod drained;
pub mod engine;
pub mod fetch;
pub mod handover;
pub mod migrate;
pub mod page;
pub mod plan;
pub mod round;
pub mod session;
pub mod sitewide;
pub mod status;
pub mod sum;
pub mod tokens_file;
