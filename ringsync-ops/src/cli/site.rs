//! Where the CLI's commands act: on the store itself (the site file says
//! which) or through a remote `ringsync serve` (`--api`). Both give the
//! same types, so every command renders its result in one place whatever
//! the mode.

use ringsync::store::Refusal;
use std::sync::Arc;

use hyper::Method;
use serde::Serialize;

use super::remote::{segment, Remote};
use super::{CliError, NodeArgs};
use crate::fetch::Fetcher;
use crate::plan::{self, ActivationPlan};
use crate::status::{self, SiteStatus};
use ringsync::config::SiteConfig;
use ringsync::profile::{Profile, ProfileSet, ProfileState};
use ringsync::store::audit::Actor;
use ringsync::store::{self, AuditPage, AuditQuery, Op, Store, StoreError, WriteRequest};
use ringsync::view::DrainView;

/// The site a command acts on.
pub(super) enum Site {
    /// The store the site file names, opened here; changes audited as the
    /// local user.
    Local {
        config: Arc<SiteConfig>,
        store: Arc<dyn Store>,
    },
    /// A remote `ringsync serve`.
    Remote(Remote),
}

/// The body of a change that names only a revision.
#[derive(Serialize)]
struct RevisionBody {
    revision: u64,
}

/// The body of a PATCH.
#[derive(Serialize)]
struct PatchBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    servers: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    revision: Option<u64>,
}

const NONE: Option<&()> = None;

impl Site {
    /// Opens the site's store.
    pub(super) async fn local(config: Arc<SiteConfig>) -> Result<Site, CliError> {
        let store = store::open(&config).await?;
        Ok(Site::Local { config, store })
    }

    pub(super) async fn list(&self) -> Result<ProfileSet, CliError> {
        match self {
            Site::Local { store, .. } => Ok((*store.list().await?).clone()),
            Site::Remote(r) => r.call(Method::GET, "/v1/profiles", NONE).await,
        }
    }

    pub(super) async fn show(&self, id: &str) -> Result<Profile, CliError> {
        match self {
            Site::Local { .. } => self.list().await?.find(id).cloned().ok_or_else(|| {
                CliError::Store(StoreError::Refused(Refusal::NotFound { id: id.to_owned() }))
            }),
            Site::Remote(r) => {
                let path = format!("/v1/profiles/{}", segment(id));
                r.call(Method::GET, &path, NONE).await
            }
        }
    }

    /// Makes a change, refused if `expect` names a revision the profile
    /// has moved past.
    /// The profile as it is after it, and whether anything changed.
    pub(super) async fn write(
        &self,
        op: Op,
        expect: Option<u64>,
    ) -> Result<(Profile, bool), CliError> {
        let r = match self {
            Site::Local { store, .. } => {
                let audit = Some(Actor::local().record_op(&op, expect));
                let w = WriteRequest { op, expect, audit };
                let c = store.write(w).await?.committed;
                return Ok((c.profile, c.changed));
            }
            Site::Remote(r) => r,
        };
        let rev = expect.map(|revision| RevisionBody { revision });
        match &op {
            Op::Create(new) => r.call_change(Method::POST, "/v1/profiles", Some(new)).await,
            Op::Update { id, patch } => {
                let body = PatchBody {
                    name: patch.name.as_deref(),
                    description: patch.description.as_deref(),
                    servers: patch.servers.as_deref(),
                    revision: expect,
                };
                let path = format!("/v1/profiles/{}", segment(id));
                r.call_change(Method::PATCH, &path, Some(&body)).await
            }
            Op::Delete { id } => {
                let path = format!("/v1/profiles/{}", segment(id));
                r.call_change(Method::DELETE, &path, rev.as_ref()).await
            }
            Op::SetState { id, state } => {
                let verb = match state {
                    ProfileState::Active => "activate",
                    ProfileState::Inactive => "deactivate",
                };
                let path = format!("/v1/profiles/{}/{verb}", segment(id));
                r.call_change(Method::POST, &path, rev.as_ref()).await
            }
        }
    }

    /// What activating the profile would do.
    pub(super) async fn plan(&self, id: &str) -> Result<ActivationPlan, CliError> {
        match self {
            Site::Local { config, store } => {
                Ok(plan::activation(config, &*store.list().await?, id)?)
            }
            Site::Remote(r) => {
                let path = format!("/v1/profiles/{}/activate?dry_run=true", segment(id));
                r.call(Method::POST, &path, NONE).await
            }
        }
    }

    /// The site's status: asked of the nodes here, or of the server, which
    /// asks its own nodes.
    pub(super) async fn status(&self, nodes: &NodeArgs) -> Result<SiteStatus, CliError> {
        let (config, store) = match self {
            Site::Local { config, store } => (config, store),
            Site::Remote(r) => {
                if nodes.gate.is_some() || nodes.media.is_some() {
                    return Err(CliError::Usage(
                        "--gate and --media ask nodes from here; with --api the server asks its own"
                            .into(),
                    ));
                }
                return r.call(Method::GET, "/v1/status", NONE).await;
            }
        };
        let set = store.list().await?;
        let view = DrainView::build(config.clone(), &set, &[], &[]);
        // Several nodes (etcd): the reports they published; else ask them.
        let round = match crate::sitewide::round(store.as_ref()).await? {
            Some(round) => {
                crate::sitewide::ask_live(round, &Fetcher::default(), &config.site.name).await
            }
            None => {
                let nodes = status::local_nodes(config, nodes.gate, nodes.media);
                status::ask_all(&Fetcher::default(), &config.site.name, &nodes).await
            }
        };
        let mut round = round;
        // R-ST-3: Active-Passive work is the groups an instance leads.
        if let Some(o) = super::handover::work_outcome(config, store.as_ref(), set.revision).await {
            round.outcomes.push(o);
        }
        let mut st = round.status(&view);
        st.store = Some(store.freshness().borrow().clone());
        Ok(st)
    }

    /// A page of the audit log.
    pub(super) async fn audit(&self, q: &AuditQuery) -> Result<AuditPage, CliError> {
        match self {
            Site::Local { store, .. } => Ok(store.audit_log(q.clone()).await?),
            Site::Remote(r) => {
                let mut args = Vec::new();
                if let Some(a) = q.after {
                    args.push(format!("after={a}"));
                }
                if let Some(s) = q.since_ms {
                    args.push(format!("since_ms={s}"));
                }
                if let Some(l) = q.limit {
                    args.push(format!("limit={l}"));
                }
                let path = format!("/v1/audit?{}", args.join("&"));
                r.call(Method::GET, &path, NONE).await
            }
        }
    }
}
