//! media-ctl: the mg controller in front of rtpengine media gateways.
//!
//! This crate starts with the ng protocol's wire format ([`ng`]), which both
//! of the controller's sides speak: sg/esg (or Kamailio/OpenSIPS rtpengine
//! modules) send it `offer`/`answer`/`delete`, and it relays them to the mg it
//! picked. The controller itself (drain-aware mg choice, bgmg pins; R-MG-*,
//! R-BG-*) is built in its own issue on top of this.
#![forbid(unsafe_code)]

pub mod ng;

pub use ng::{NgError, NgMessage, Value};
