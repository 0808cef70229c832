//! The follower agent a service embeds (one per group member): it watches
//! its group's records, makes the member lead when the planner wants it to
//! and follow otherwise, and confirms the leader it has, which is what
//! completes a move (R-AP-1, R-AP-3).
//!
//! The service says how it leads and follows through [`Member`]; the
//! agent does the rest. `ringsync agent` runs one with a simulated member,
//! which is how the tests and the testbed stand in for real services.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::record::{Confirmed, HandoverState};
use ringsync::config::SiteConfig;
use ringsync::store::HandoverStore;

/// How soon a failed lead or confirmation is tried again.
pub const RETRY: Duration = Duration::from_secs(1);

/// What a group member does when the agent says so.
pub trait Member: Send {
    /// Takes leadership; resolves once this member leads, or with why it cannot.
    fn lead(&mut self, seq: u64) -> BoxFuture<'_, Result<(), String>>;
    /// Gives leadership up (another member is to lead).
    fn follow(&mut self, leader: &str) -> BoxFuture<'_, ()>;
}

/// Why an agent cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// The site defines no such group.
    #[error("the site defines no Active-Passive group `{0}`")]
    UnknownGroup(String),
    /// The instance is not a member of the group.
    #[error("`{member}` is not a member of group `{group}` (members: {members})")]
    NotAMember {
        /// The group.
        group: String,
        /// The instance asked for.
        member: String,
        /// Its members.
        members: String,
    },
}

/// One member's agent.
pub struct Agent {
    store: Arc<dyn HandoverStore>,
    group: String,
    member: String,
    home: String,
}

impl Agent {
    /// The agent of `member` in `group`, checked against the site.
    pub fn new(
        config: &SiteConfig,
        store: Arc<dyn HandoverStore>,
        group: &str,
        member: &str,
    ) -> Result<Agent, AgentError> {
        let g = config
            .ap_groups
            .iter()
            .find(|g| g.name == group)
            .ok_or_else(|| AgentError::UnknownGroup(group.to_owned()))?;
        if !g.members.iter().any(|m| m == member) {
            return Err(AgentError::NotAMember {
                group: group.to_owned(),
                member: member.to_owned(),
                members: g.members.join(", "),
            });
        }
        Ok(Agent {
            store,
            group: group.to_owned(),
            member: member.to_owned(),
            home: g.home.clone(),
        })
    }

    /// Follows the group's records until `shutdown`, leading through
    /// `service` when this member is the desired leader and confirming it.
    pub async fn run(self, service: &mut dyn Member, shutdown: CancellationToken) {
        let mut records = self.store.watch();
        // The store's own read first: the watch may not have its first value yet.
        while let Err(e) = self.store.read().await {
            tracing::warn!(group = %self.group, error = %e, "handover records unreadable; waiting");
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(RETRY) => {}
            }
        }
        let mut leading = false;
        loop {
            let state = records.borrow_and_update().clone();
            let pending = self.step(&state, &mut leading, service).await;
            tokio::select! {
                _ = shutdown.cancelled() => return,
                r = records.changed() => if r.is_err() { return },
                _ = tokio::time::sleep(RETRY), if pending => {}
            }
        }
    }

    /// Acts on one snapshot; true when something failed and must be retried.
    async fn step(
        &self,
        state: &HandoverState,
        leading: &mut bool,
        service: &mut dyn Member,
    ) -> bool {
        let want = state.desired_leader(&self.group, &self.home);
        let seq = state.desired.get(&self.group).map_or(0, |d| d.seq);
        if want != self.member {
            if *leading {
                service.follow(want).await;
                *leading = false;
                // When the member stopped leading, for whoever checks that
                // a group never has two leaders (`testbed chaos`).
                tracing::info!(group = %self.group, member = %self.member, leader = %want, "following");
            }
            return false;
        }
        if !*leading {
            if let Err(why) = service.lead(seq).await {
                tracing::warn!(group = %self.group, member = %self.member, why, "cannot lead yet");
                return true;
            }
            *leading = true;
            // When the member began to lead (its confirmation comes after).
            tracing::info!(group = %self.group, member = %self.member, seq, "leading");
        }
        let done = state
            .confirmed
            .get(&self.group)
            .is_some_and(|c| c.leader == self.member && c.seq >= seq);
        if done {
            return false;
        }
        let c = Confirmed {
            leader: self.member.clone(),
            seq,
            at_ms: ringsync::work::now_ms(),
        };
        match self.store.confirm(&self.group, c).await {
            Ok(()) => {
                tracing::info!(group = %self.group, member = %self.member, seq, "leadership confirmed");
                false
            }
            Err(e) => {
                tracing::warn!(group = %self.group, error = %e, "confirmation not written; retrying");
                true
            }
        }
    }
}
