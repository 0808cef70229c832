//! `cargo run -p xtask -- assets OUT_DIR`: the man pages (`OUT_DIR/man/`,
//! one per command and subcommand, e.g. `ringsync-serve.1`, and the site
//! file's `sip-gate.toml.5` made from docs/config.md) and the shell
//! completions (`OUT_DIR/completions/{bash,zsh,fish}/`) of `sip-gate`,
//! `media-ctl` and `ringsync`, made from the same clap definitions the
//! binaries parse with, so they cannot drift. `scripts/package.sh` puts
//! them into the Debian packages.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::CommandFactory;

mod assets;
mod config_page;

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
    site_page(&out.join("man"))
}

/// `sip-gate.toml.5` from docs/config.md, dated by `SOURCE_DATE_EPOCH`
/// (reproducible builds) or today.
fn site_page(man: &std::path::Path) -> anyhow::Result<()> {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/config.md");
    let markdown = std::fs::read_to_string(&source)
        .with_context(|| format!("reading {}", source.display()))?;
    let secs = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) => s
            .parse::<u64>()
            .context("SOURCE_DATE_EPOCH is not a number")?,
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs(),
    };
    let date = &ringsync::time::rfc3339(secs * 1000)[..10];
    let page = config_page::render(&markdown, env!("CARGO_PKG_VERSION"), date);
    let path = man.join("sip-gate.toml.5");
    std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
