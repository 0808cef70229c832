//! `cargo run -p xtask -- assets OUT_DIR`: the man pages (`OUT_DIR/man/`,
//! one per command and subcommand, e.g. `ringsync-serve.1`) and the shell
//! completions (`OUT_DIR/completions/{bash,zsh,fish}/`) of `sip-gate`,
//! `media-ctl` and `ringsync`, made from the same clap definitions the
//! binaries parse with, so they cannot drift. `scripts/package.sh` puts
//! them into the Debian packages.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::CommandFactory;
use clap_complete::Shell;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let (Some(task), Some(out)) = (args.next(), args.next()) else {
        bail!("usage: xtask assets OUT_DIR");
    };
    if task != "assets" {
        bail!("unknown task {task:?}; usage: xtask assets OUT_DIR");
    }
    let out = PathBuf::from(out);
    for cmd in [
        sip_gate::cli::Args::command().name("sip-gate"),
        media_ctl::cli::Args::command().name("media-ctl"),
        ringsync_ops::cli::Cli::command(),
    ] {
        assets(cmd, &out)?;
    }
    Ok(())
}

/// Man pages and completions of one binary under `out`.
fn assets(mut cmd: clap::Command, out: &Path) -> anyhow::Result<()> {
    let man = out.join("man");
    std::fs::create_dir_all(&man).with_context(|| format!("creating {}", man.display()))?;
    cmd.build();
    clap_mangen::generate_to(cmd.clone(), &man)
        .with_context(|| format!("man pages of {} in {}", cmd.get_name(), man.display()))?;
    // clap's own `help` subcommands are no pages of their own.
    for entry in std::fs::read_dir(&man)? {
        let path = entry?.path();
        let file = path.file_name().and_then(|f| f.to_str()).unwrap_or("");
        if file.starts_with(&format!("{}-", cmd.get_name())) && file.contains("-help") {
            std::fs::remove_file(&path)?;
        }
    }
    let name = cmd.get_name().to_owned();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let dir = out.join("completions").join(shell.to_string());
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        clap_complete::generate_to(shell, &mut cmd, &name, &dir)
            .with_context(|| format!("{shell} completion of {name} in {}", dir.display()))?;
    }
    Ok(())
}
