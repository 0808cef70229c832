//! Subscribers behind NAT (RFC 5626 as an edge proxy, RFC 3327 Path): the
//! flow token that names how a subscriber is reached ([`token`]) and the
//! subscribers' open TCP connections ([`table`]).

pub(crate) mod table;
pub(crate) mod token;

pub(crate) use table::FlowTable;
pub(crate) use token::{Flow, FlowKey, FlowTokenError, PREFIX};
