//! Active-Passive handover (R-AP-1..4, R-MN-3): leaders move off draining
//! servers one group per pace, and go home by takeover when the drain is
//! lifted.
//!
//! * [`record`]: what lives in the store (desired and confirmed leader per
//!   group, the planner's last move).
//! * [`plan`]: the planner's pure core, `(groups, view, records, now) → plan`.

pub mod plan;
pub mod record;

pub use plan::{plan, Input, Move, Next, Plan};
pub use record::{Confirmed, Desired, HandoverState, MoveKind, PlannerRecord};
