//! The page's data endpoint (`GET /v1/page`): one JSON document made only
//! of what the API itself serves, so the page has no source of truth of its
//! own: the site status of `/v1/status` (R-ST-1, R-ST-3), the profiles of
//! `/v1/profiles`, the handover of `/v1/handover` and the tail of
//! `/v1/audit`, plus the servers as rows and what the caller may do.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::api::AdminApi;
use crate::auth::Role;
use crate::handover::status::HandoverStatus;
use crate::status::SiteStatus;
use ringsync::profile::{Profile, ProfileState};
use ringsync::store::{AuditQuery, AuditRecord};

/// Audit records the page shows.
pub const AUDIT_TAIL: usize = 15;

/// How far back the audit tail looks (Unix ms); older records are on
/// `/v1/audit`.
const AUDIT_WINDOW_MS: u64 = 24 * 3600 * 1000;

/// Pages of the audit log read at most for the tail.
const AUDIT_PAGES: usize = 4;

/// Everything the page draws but the chart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageData {
    /// The caller and what it may do (the page hides what it may not).
    pub viewer: Viewer,
    /// The servers in config order, each with its instances.
    pub servers: Vec<ServerRow>,
    /// `GET /v1/status`, as is.
    pub status: SiteStatus,
    /// Every profile with its state and revision (`GET /v1/profiles`).
    pub profiles: Vec<Profile>,
    /// `GET /v1/handover`; absent when the store keeps no handover records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover: Option<HandoverStatus>,
    /// The last [`AUDIT_TAIL`] records of the last day, oldest first.
    pub audit: Vec<AuditRecord>,
    /// What could not be read (the store gone away...), said on the page.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// Who reads the page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Viewer {
    /// The token's name (`anonymous` without a tokens file).
    pub name: String,
    /// Its role.
    pub role: Role,
    /// May create, activate and deactivate profiles (`operate`).
    pub can_operate: bool,
    /// May delete them (`admin`).
    pub can_delete: bool,
}

impl Viewer {
    /// The viewer with this name and role.
    pub fn new(name: &str, role: Role) -> Viewer {
        Viewer {
            name: name.to_owned(),
            role,
            can_operate: role >= Role::Operate,
            can_delete: role >= Role::Admin,
        }
    }
}

/// One server: a row of the page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerRow {
    /// Its name.
    pub name: String,
    /// In the drain zone (named by an active profile, R-PR-3).
    pub draining: bool,
    /// The active profiles that name it.
    pub profiles: Vec<String>,
    /// Its instances' ids, in config order (`status.instances` has them).
    pub instances: Vec<String>,
}

/// The page's data for `viewer`, read now.
pub async fn read(api: &AdminApi, viewer: Viewer) -> PageData {
    let status = api.site_status();
    let mut errors = Vec::new();
    let profiles = match api.store().list().await {
        Ok(set) => set.profiles.clone(),
        Err(e) => {
            errors.push(format!("profiles: {e}"));
            api.store().watch().borrow().profiles.clone()
        }
    };
    let handover = if api.store().handover().is_some() {
        match api.handover_status().await {
            Ok(h) => Some(h),
            Err(e) => {
                errors.push(format!("handover: {e}"));
                None
            }
        }
    } else {
        None
    };
    let audit = match audit_tail(api, ringsync::work::now_ms()).await {
        Ok(a) => a,
        Err(e) => {
            errors.push(format!("audit log: {e}"));
            Vec::new()
        }
    };
    let servers = rows(api, &profiles);
    PageData {
        viewer,
        servers,
        status,
        profiles,
        handover,
        audit,
        errors,
    }
}

/// The servers of the site file as rows.
fn rows(api: &AdminApi, profiles: &[Profile]) -> Vec<ServerRow> {
    let config = api.drain().config();
    let active: Vec<&Profile> = profiles
        .iter()
        .filter(|p| p.state == ProfileState::Active)
        .collect();
    let zone: BTreeSet<&str> = active
        .iter()
        .flat_map(|p| p.servers.iter().map(String::as_str))
        .collect();
    config
        .servers
        .iter()
        .map(|s| ServerRow {
            name: s.name.clone(),
            draining: zone.contains(s.name.as_str()),
            profiles: active
                .iter()
                .filter(|p| p.servers.contains(&s.name))
                .map(|p| p.name.clone())
                .collect(),
            instances: config
                .instances
                .iter()
                .filter(|i| i.server == s.name)
                .map(|i| i.id.clone())
                .collect(),
        })
        .collect()
}

/// The last [`AUDIT_TAIL`] records of the last day, reading a few pages at
/// most: a long log costs the page no more than that.
async fn audit_tail(
    api: &AdminApi,
    now_ms: u64,
) -> Result<Vec<AuditRecord>, ringsync::store::StoreError> {
    let mut q = AuditQuery {
        after: None,
        since_ms: Some(now_ms.saturating_sub(AUDIT_WINDOW_MS)),
        limit: Some(ringsync::store::audit::MAX_PAGE),
    };
    let mut tail: Vec<AuditRecord> = Vec::new();
    for _ in 0..AUDIT_PAGES {
        let page = api.store().audit_log(q.clone()).await?;
        tail.extend(page.records);
        let keep = tail.len().saturating_sub(AUDIT_TAIL);
        tail.drain(..keep);
        match page.next {
            Some(next) => q.after = Some(next),
            None => break,
        }
    }
    Ok(tail)
}
