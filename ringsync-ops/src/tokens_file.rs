//! Writing the admin API's tokens file so the `ringsync serve` that reads
//! it can (R-PR-1: who may change anything is who holds a token in it).
//!
//! `serve` runs as the `sip-gate` user, and `ringsync token add` as root,
//! so a file written owner-only (0600) by root locks serve out at its next
//! start. A new file is therefore written `0640` with group `sip-gate` (or
//! `--group`), as the site file is (`root:sip-gate 0640`); an existing file
//! keeps its mode, owner and group (the operator's choice), `--group`
//! changing only the group. A file that cannot get its group is refused
//! with the reason rather than written unreadable.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The group a new tokens file gets unless `--group` names another: the
/// one `ringsync serve`, the gates and media-ctl run as (the package makes it).
pub const DEFAULT_GROUP: &str = "sip-gate";
/// The mode of a new tokens file: its owner writes, its group (serve) reads.
pub const NEW_MODE: u32 = 0o640;

/// Why a tokens file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file cannot be read or written.
    #[error("tokens file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a tokens file.
    #[error("tokens file {}: {detail}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The file cannot be given the group `ringsync serve` reads it as
    /// (nothing was written).
    #[error("tokens file {}: not written: {detail}", path.display())]
    Owner {
        /// The file.
        path: PathBuf,
        /// Why.
        detail: String,
    },
}

/// Who owns the file to write and how it may be read.
struct Owner {
    mode: u32,
    uid: Option<u32>,
    gid: u32,
    group: String,
}

fn refuse(path: &Path, detail: String) -> TokenError {
    TokenError::Owner {
        path: path.to_owned(),
        detail,
    }
}

/// The gid of group `name`.
fn gid_of(path: &Path, name: &str, asked: bool) -> Result<u32, TokenError> {
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) if asked => Err(refuse(path, format!("no group `{name}` on this host"))),
        Ok(None) => Err(refuse(
            path,
            format!(
                "no group `{name}` on this host (the package makes it; `ringsync serve` reads \
                 this file as it): pass --group GROUP, the group `ringsync serve` runs as"
            ),
        )),
        Err(e) => Err(refuse(path, format!("cannot look group `{name}` up: {e}"))),
    }
}

/// The owner the file at `path` gets: its own if it exists, else
/// [`NEW_MODE`] and `group` (default [`DEFAULT_GROUP`]).
fn owner_for(path: &Path, group: Option<&str>) -> Result<Owner, TokenError> {
    use std::os::unix::fs::MetadataExt;
    let io = |source| TokenError::Io {
        path: path.to_owned(),
        source,
    };
    let existing = match fs::metadata(path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(e)),
    };
    let (mode, uid) = existing
        .as_ref()
        .map_or((NEW_MODE, None), |m| (m.mode() & 0o7777, Some(m.uid())));
    let (gid, group) = match (group, &existing) {
        (Some(g), _) => (gid_of(path, g, true)?, g.to_owned()),
        (None, Some(m)) => (m.gid(), format!("gid {}", m.gid())),
        (None, None) => (gid_of(path, DEFAULT_GROUP, false)?, DEFAULT_GROUP.into()),
    };
    Ok(Owner {
        mode,
        uid,
        gid,
        group,
    })
}

/// Replaces the file at `path` with `text` atomically (a temporary file
/// beside it, fsynced, renamed over it), owned and readable as described in
/// the module's documentation. Nothing is replaced when the owner cannot be
/// set.
pub(crate) fn replace(path: &Path, text: &str, group: Option<&str>) -> Result<(), TokenError> {
    let owner = owner_for(path, group)?;
    let mut tmp_path = path.as_os_str().to_owned();
    tmp_path.push(".tmp");
    let tmp_path = PathBuf::from(tmp_path);
    let written = write_owned(&tmp_path, path, text, &owner);
    let result = written.and_then(|()| {
        fs::rename(&tmp_path, path).map_err(|source| TokenError::Io {
            path: path.to_owned(),
            source,
        })
    });
    if result.is_err() {
        let _ = fs::remove_file(&tmp_path);
    }
    result
}

fn write_owned(tmp_path: &Path, path: &Path, text: &str, o: &Owner) -> Result<(), TokenError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let io = |source| TokenError::Io {
        path: tmp_path.to_owned(),
        source,
    };
    // Owner-only until owner and mode are set: no moment readable by others.
    let mut tmp = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(tmp_path)
        .map_err(io)?;
    tmp.write_all(text.as_bytes()).map_err(io)?;
    std::os::unix::fs::fchown(&tmp, o.uid, Some(o.gid)).map_err(|e| {
        refuse(
            path,
            format!(
                "cannot give it group {} ({e}): run as root, or as a member of that group",
                o.group
            ),
        )
    })?;
    // After the chown, which may clear set-id bits.
    tmp.set_permissions(fs::Permissions::from_mode(o.mode))
        .map_err(io)?;
    tmp.sync_all().map_err(io)
}
