//! media-ctl: the drain-aware mg controller in front of rtpengine media
//! gateways.
//!
//! sg/esg (or Kamailio's and OpenSIPS's `rtpengine` modules) send their ng
//! commands here instead of to one rtpengine. media-ctl places every new
//! call on an mg of the site's pool and keeps every later command of the
//! call on it (R-MG-2), sheds a draining mg gradually over the drain window
//! (R-MG-1, R-MG-4) but never the last one up (R-MG-3), pins the calls of
//! an sg/esg to the bgmg on its server (R-BG-*), and refuses to move a
//! call whose mg is down (R-MG-5).
//!
//! Layers, one per module: [`ng`] (wire format) → [`command`] (what a
//! request asks) → the pure core: [`calls`] (call table), [`weights`]
//! (drain ramps), [`chooser`] (which mg), [`pool`], [`health`],
//! [`upstream`] (commands in flight), [`cache`] (retransmissions),
//! [`fanout`], [`census`] → [`controller`] (one datagram in, a decision
//! out) → [`transport`] (sockets and timers) and [`admin`] (HTTP), with
//! [`status`] for what operators read; [`run`] is the daemon's run.
#![warn(unreachable_pub)]

// === wire format ===
mod command;
pub mod ng;
mod ng_json;

// === the pure core ===
mod answers;
mod cache;
mod calls;
mod census;
mod chooser;
mod controller;
mod fanout;
mod health;
mod pool;
mod upstream;
mod weights;

// === I/O and operators ===
pub mod admin;
pub mod cli;
mod metrics;
pub mod run;
pub mod status;
mod transport;

pub use controller::{Controller, Decision, Out, Settings};
pub use ng::{NgError, NgMessage, Value};
pub use status::{Assign, MgStatus, Status};
pub use transport::{MediaCtl, StartError};
