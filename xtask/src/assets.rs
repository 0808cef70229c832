//! One binary's man pages and shell completions.

use std::path::Path;

use anyhow::Context;
use clap_complete::Shell;

/// Man pages and completions of one binary under `out`.
pub(crate) fn write(mut cmd: clap::Command, out: &Path) -> anyhow::Result<()> {
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
