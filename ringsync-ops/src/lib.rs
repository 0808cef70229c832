//! ringsync-ops: the operator plane of a site's drain, built on the model
//! (the `ringsync` crate).
//!
//! The operator's interfaces are [`cli`] (the `ringsync` binary) and the
//! admin HTTP [`api`] with its tokens ([`auth`]). [`fetch`] (the model's)
//! gets a node's work report and [`status`] sums every node's into the site's status
//! ([`sitewide`] from the store's node registry). [`handover`] moves the
//! leaders of Active-Passive groups off draining servers, one group per
//! pace, and home again. [`plan`] previews a profile change; [`migrate`]
//! copies a site's store to another.
//!
//! The data plane (sip-gate, media-ctl) does not link this crate: an edit
//! here rebuilds neither.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod api;
pub mod auth;
pub mod cli;
pub mod engine;
pub mod handover;
pub mod migrate;
pub mod plan;
pub mod round;
pub mod sitewide;
pub mod status;

// The model's modules under the paths this plane's files have always used
// (`crate::store`, `crate::view`, ...): they lived in one crate until the
// planes were split.
pub(crate) use ringsync::{config, node, profile, publish, state, store, view, work};

/// The client of the nodes' admin endpoints, in the model since media-ctl's
/// `status` asks with it too.
pub use ringsync::fetch;
