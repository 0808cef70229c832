//! `ringsync backup FILE` and `ringsync restore FILE`: the CLI's side of
//! [`crate::backup`], on the store the site file names.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;

use super::CliError;
use crate::backup::{self, BackupError, Imported};
use ringsync::config::SiteConfig;
use ringsync::store::{self, Actor};

/// `backup` options.
#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The file to write (replaced whole, never left half-written).
    pub file: PathBuf,
}

/// `restore` options.
#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The backup file.
    pub file: PathBuf,
    /// Restore a backup taken of another site.
    #[arg(long)]
    pub force: bool,
}

impl From<BackupError> for CliError {
    fn from(e: BackupError) -> CliError {
        match e {
            BackupError::Store(e) => CliError::Store(e),
            e => CliError::Usage(e.to_string()),
        }
    }
}

pub(super) async fn backup(
    config: &Arc<SiteConfig>,
    args: BackupArgs,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let store = store::open(config).await?;
    let bytes = backup::take(config, store.as_ref()).await?;
    write_whole(&args.file, &bytes)
        .map_err(|e| CliError::Usage(format!("{}: {e}", args.file.display())))?;
    writeln!(
        out,
        "backup of site `{}` written to {} ({} bytes)",
        config.site.name,
        args.file.display(),
        bytes.len()
    )?;
    Ok(())
}

/// Writes a temporary file next to `path`, syncs it and renames it over.
fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

pub(super) async fn restore(
    config: &Arc<SiteConfig>,
    args: RestoreArgs,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let name = args.file.display().to_string();
    let bytes = std::fs::read(&args.file).map_err(|e| CliError::Usage(format!("{name}: {e}")))?;
    let store = store::open(config).await?;
    let done = backup::restore(
        config,
        store.as_ref(),
        &name,
        &bytes,
        args.force,
        Actor::local(),
    )
    .await?;
    let profiles = match done.profiles {
        Imported::Copied { profiles } => format!("{profiles} profile(s) written"),
        Imported::AlreadyThere { profiles } => format!("{profiles} profile(s) already there"),
    };
    writeln!(
        out,
        "restored the backup of site `{}` into {}: {profiles}, {} audit record(s) added, \
         {} handover group(s); profile revision {}",
        done.site, config.site.name, done.audit_added, done.handover_groups, done.revision
    )?;
    Ok(())
}
