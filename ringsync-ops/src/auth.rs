//! Who may call the admin API: bearer tokens with a role each.
//!
//! The tokens file keeps only hashes: SHA-256 over a version tag, the
//! token's name, its role and the token itself, so the file can be read
//! without giving a token away, and a role edited by hand no longer matches
//! (to change a role, add a new token). A token is 32 random bytes, far
//! beyond guessing, so one fast hash is enough (a slow password hash is for
//! secrets people choose). Checks compare hashes in constant time and look
//! at every entry, whichever matches.
//!
//! `ringsync serve` re-reads the file when it changes ([`Tokens::watch`]): a
//! file that does not load then keeps the tokens it had, and says so in the
//! log and in `ringsync_tokens_reload_errors_total`.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use crate::tokens_file;
pub use crate::tokens_file::TokenError;
use ringsync::files::stamp;

/// How often `serve` looks at the tokens file for changes.
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);
/// The start of every token this version makes.
pub const TOKEN_PREFIX: &str = "rs1_";
const HASH_TAG: &[u8] = b"ringsync-token-v1";

/// What a token lets its holder do. Each role may do what the ones before it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[derive(clap::ValueEnum)]
pub enum Role {
    /// Status, profile lists, metrics, the audit log.
    Read,
    /// Also create, update, activate and deactivate profiles.
    Operate,
    /// Also delete profiles and override handovers.
    Admin,
}

impl Role {
    /// Every role, weakest first.
    pub const ALL: [Role; 3] = [Role::Read, Role::Operate, Role::Admin];

    /// The name used in files, the API and the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Operate => "operate",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Role, String> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown role `{s}`, expected read, operate or admin"))
    }
}

/// One token as the file keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    /// Who holds it: the audit log's `who`.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// Hex SHA-256 of the tag, the name, the role and the token.
    pub sha256: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    #[serde(default)]
    token: Vec<TokenEntry>,
}

/// The tokens of one file version, ready to check bearer tokens against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenSet {
    entries: Vec<(TokenEntry, [u8; 32])>,
}

/// The holder of a valid token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The token's name.
    pub name: String,
    /// Its role.
    pub role: Role,
}

fn digest(name: &str, role: Role, token: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [
        HASH_TAG,
        name.as_bytes(),
        role.as_str().as_bytes(),
        token.as_bytes(),
    ] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    h.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

fn check_token_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err(format!("token name `{name}` must be 1 to 64 characters"));
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@')))
    {
        Some(c) => Err(format!(
            "token name `{name}` has `{c}`; use letters, digits, `-`, `_`, `.`, `@`"
        )),
        None => Ok(()),
    }
}

impl TokenSet {
    /// Parses a tokens file's text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<TokenSet, TokenError> {
        let invalid = |detail: String| TokenError::Invalid {
            path: path.to_owned(),
            detail,
        };
        let file: TokensFile = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let mut entries: Vec<(TokenEntry, [u8; 32])> = Vec::with_capacity(file.token.len());
        for e in file.token {
            check_token_name(&e.name).map_err(&invalid)?;
            if entries.iter().any(|(o, _)| o.name == e.name) {
                return Err(invalid(format!("token name `{}` appears twice", e.name)));
            }
            let hash = unhex(&e.sha256).ok_or_else(|| {
                invalid(format!("token `{}`: sha256 must be 64 hex digits", e.name))
            })?;
            entries.push((e, hash));
        }
        Ok(TokenSet { entries })
    }

    /// Reads and parses a tokens file.
    pub fn load(path: &Path) -> Result<TokenSet, TokenError> {
        let text = fs::read_to_string(path).map_err(|source| TokenError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// How many tokens.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True without tokens (then no call is let in).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Who holds `token`, if anyone. Every entry is checked, in constant
    /// time each, whichever matches.
    pub fn check(&self, token: &str) -> Option<Holder> {
        let mut found = None;
        for (e, hash) in &self.entries {
            let ok: bool = digest(&e.name, e.role, token).ct_eq(hash).into();
            if ok {
                found = Some(Holder {
                    name: e.name.clone(),
                    role: e.role,
                });
            }
        }
        found
    }

    /// Whether a token named `name` with `role` is still in the set: a
    /// browser session ends when its token is removed or its role changed.
    pub fn holds(&self, name: &str, role: Role) -> bool {
        self.entries
            .iter()
            .any(|(e, _)| e.name == name && e.role == role)
    }
}

/// Reads the tokens file at `path` for a change; a missing file is empty.
fn read_file(path: &Path) -> Result<TokensFile, TokenError> {
    match fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).map_err(|e| TokenError::Invalid {
            path: path.to_owned(),
            detail: e.to_string(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(TokensFile::default()),
        Err(source) => Err(TokenError::Io {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Writes `file` over the tokens file at `path` (see [`tokens_file`]: a new
/// file `0640` with group `group` or `sip-gate`, an existing one keeps its
/// mode and owner).
fn write_file(path: &Path, file: &TokensFile, group: Option<&str>) -> Result<(), TokenError> {
    let text = toml::to_string(file).map_err(|e| TokenError::Invalid {
        path: path.to_owned(),
        detail: e.to_string(),
    })?;
    let header = "# ringsync admin API tokens (hashes only), written by `ringsync token add`.\n";
    tokens_file::replace(path, &format!("{header}{text}"), group)
}

/// Makes a token for `name` with `role`, adds its hash to the file at
/// `path` (created if missing, replaced atomically; owner and mode as
/// [`tokens_file`] says, `group` for its group) and returns the token: the
/// only time it is ever shown.
pub fn add_token(
    path: &Path,
    name: &str,
    role: Role,
    group: Option<&str>,
) -> Result<String, TokenError> {
    let invalid = |detail: String| TokenError::Invalid {
        path: path.to_owned(),
        detail,
    };
    check_token_name(name).map_err(invalid)?;
    let mut file = read_file(path)?;
    if file.token.iter().any(|e| e.name == name) {
        return Err(invalid(format!(
            "a token named `{name}` already exists (`ringsync token remove {name}` first to replace it)"
        )));
    }
    let token = format!("{TOKEN_PREFIX}{}", hex(&rand::random::<[u8; 32]>()));
    file.token.push(TokenEntry {
        name: name.to_owned(),
        role,
        sha256: hex(&digest(name, role, &token)),
    });
    write_file(path, &file, group)?;
    Ok(token)
}

/// Removes the token named `name` from the file at `path` (written as
/// [`add_token`] writes it): its holder is refused from the next reload on.
pub fn remove_token(path: &Path, name: &str, group: Option<&str>) -> Result<Role, TokenError> {
    let mut file = read_file(path)?;
    let Some(at) = file.token.iter().position(|e| e.name == name) else {
        return Err(TokenError::Invalid {
            path: path.to_owned(),
            detail: format!("no token named `{name}`"),
        });
    };
    let role = file.token.remove(at).role;
    write_file(path, &file, group)?;
    Ok(role)
}

/// The live tokens of `serve`: swapped whole when the file changes.
#[derive(Debug)]
pub struct Tokens {
    path: PathBuf,
    current: ArcSwap<TokenSet>,
}

impl Tokens {
    /// Loads the file; a file that does not load is an error at start.
    pub fn open(path: &Path) -> Result<Arc<Tokens>, TokenError> {
        let set = TokenSet::load(path)?;
        if set.is_empty() {
            tracing::warn!(file = %path.display(), "the tokens file holds no token: every API call but /healthz and /readyz is refused");
        }
        Ok(Arc::new(Tokens {
            path: path.to_owned(),
            current: ArcSwap::from_pointee(set),
        }))
    }

    /// The tokens in force.
    pub fn current(&self) -> Arc<TokenSet> {
        self.current.load_full()
    }

    /// Re-reads the file whenever it changes, until `shutdown`. A version
    /// that does not load leaves the tokens in force as they are.
    pub async fn watch(self: Arc<Self>, shutdown: CancellationToken) {
        let mut last = stamp(&self.path);
        let mut tick = tokio::time::interval(RELOAD_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let now = stamp(&self.path);
            if now == last {
                continue;
            }
            last = now;
            self.reload();
        }
    }

    /// Loads the file again now.
    pub fn reload(&self) {
        match TokenSet::load(&self.path) {
            Ok(set) => {
                tracing::info!(file = %self.path.display(), tokens = set.len(), "tokens file reloaded");
                self.current.store(Arc::new(set));
            }
            Err(e) => {
                metrics::counter!("ringsync_tokens_reload_errors_total").increment(1);
                tracing::error!(error = %e, "tokens file changed but does not load; keeping the tokens in force");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_then_check_roles_and_tampering() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        let gid = nix::unistd::getgid();
        let group = nix::unistd::Group::from_gid(gid).unwrap().unwrap().name;
        let alice = add_token(&path, "alice", Role::Operate, Some(&group)).unwrap();
        let bob = add_token(&path, "bob", Role::Read, None).unwrap();
        assert!(alice.starts_with(TOKEN_PREFIX) && alice.len() == 68);
        let text = fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&alice[4..]), "only hashes at rest");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o640);
        }
        let set = TokenSet::load(&path).unwrap();
        assert_eq!(set.check(&alice).map(|h| h.role), Some(Role::Operate));
        assert_eq!(set.check(&bob).map(|h| h.name), Some("bob".into()));
        assert_eq!(set.check("rs1_nope"), None);
        assert_eq!(set.check(""), None);
        assert!(
            add_token(&path, "alice", Role::Admin, None).is_err(),
            "names unique"
        );
        // Raising bob's role by hand breaks his token instead.
        let edited = text.replacen("role = \"read\"", "role = \"admin\"", 1);
        let set = TokenSet::parse(&edited, &path).unwrap();
        assert_eq!(set.check(&bob), None);
    }

    #[test]
    fn bad_files_are_errors() {
        let p = Path::new("/t/tokens.toml");
        for (text, what) in [
            (
                "[[token]]\nname = \"a\"\nrole = \"root\"\nsha256 = \"00\"\n",
                "unknown variant",
            ),
            (
                "[[token]]\nname = \"a\"\nrole = \"read\"\nsha256 = \"00\"\n",
                "64 hex",
            ),
            (
                "[[token]]\nname = \"a b\"\nrole = \"read\"\nsha256 = \"00\"\n",
                "has ` `",
            ),
            ("bogus = 1\n", "unknown field"),
        ] {
            let e = TokenSet::parse(text, p).unwrap_err().to_string();
            assert!(e.contains(what) && e.contains("/t/tokens.toml"), "{e}");
        }
        assert!(TokenSet::parse("", p).unwrap().is_empty());
    }
}
