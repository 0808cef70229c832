//! What the Active-Passive handover keeps in the store (R-AP-1..4): the
//! records the stores read and write. The planner and the agent that act
//! on them are the operator plane's (`ringsync-ops`).

pub mod record;

pub use record::{Confirmed, Desired, HandoverState, MoveKind, PlannerRecord};
