//! `cargo run -p xtask -- assets OUT_DIR`: the man pages (`OUT_DIR/man/`,
//! one per command and subcommand, e.g. `ringsync-serve.1`) and the shell
//! completions (`OUT_DIR/completions/{bash,zsh,fish}/`) of `sip-gate`,
//! `media-ctl` and `ringsync`, made from the same clap definitions the
//! binaries parse with, so they cannot drift. `scripts/package.sh` puts
//! them into the Debian packages.

use std::path::PathBuf;

use anyhow::bail;
use clap::CommandFactory;

mod assets;

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
        assets::write(cmd, &out)?;
    }
    Ok(())
}
