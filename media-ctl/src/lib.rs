//! mg controller in front of rtpengine media gateways (ng protocol).
//!
//! This crate starts with the ng wire format; the controller itself (drain-aware
//! mg choice, bgmg pins, R-MG-*, R-BG-*) is filled by its own issue.
#![forbid(unsafe_code)]
