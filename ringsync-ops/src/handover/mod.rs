//! Active-Passive handover (R-AP-1..4, R-MN-3): leaders move off draining
//! servers one group per pace, and go home by takeover when the drain is
//! lifted.
//!
//! * [`record`]: what lives in the store (desired and confirmed leader per
//!   group, the planner's last move).
//! * [`plan`]: the planner's pure core, `(groups, view, records, now) → plan`.
//! * [`runner`]: the planner's I/O: election (R-MN-3), reads, publications.
//! * [`clock`]: Unix time from tokio's clock, so tests run on paused time.
//! * [`agent`]: the follower agent a service embeds: lead when desired,
//!   confirm.
//! * [`status`]: what `ringsync handover status` and `/v1/handover` show.
//! * [`work`]: the groups each Active-Passive instance leads, as a work
//!   report (R-ST-2, R-ST-3).

pub mod agent;
pub mod clock;
pub mod plan;
pub use ringsync::handover::record;
pub mod runner;
pub mod status;
pub mod work;

pub use clock::Clock;
pub use plan::{plan, Input, Move, Next, Plan};
pub use record::{Confirmed, Desired, HandoverState, MoveKind, PlannerRecord};
pub use runner::{Planner, PlannerStats};
pub use status::{status, HandoverStatus};
