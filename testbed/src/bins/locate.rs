//! Where the project's binaries are, found one way for every test,
//! benchmark and rehearsal.
//!
//! Cargo builds a package's binaries only for that package's own tests
//! (`CARGO_BIN_EXE_*`), so a sip-gate test that runs `ringsync`, or a
//! testbed test that runs `sip-gate`, would find a stale binary or none.
//! Under cargo (`cargo test`, `cargo bench`, `cargo run`), a binary of
//! another package that is missing, or older than a source file it is
//! built from, is therefore built first (`cargo build -p PKG --bin NAME`)
//! into the target directory the caller runs from; the package under test
//! already has its binaries built. The age check, not cargo, decides first:
//! `cargo build -p PKG` resolves features for PKG alone, unlike a workspace
//! run, so after `cargo test --workspace` it would build the dependencies
//! again for nothing. Not under cargo (`testbed run` started by hand), the
//! binaries must be there.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::{Error, Result};

/// Which package builds each of the project's binaries, and the workspace
/// directories its sources are in (its own and those of the workspace
/// crates it links).
const PACKAGES: &[(&str, &str, &[&str])] = &[
    ("sip-gate", "sip-gate", &["sip-gate", "ringsync"]),
    ("media-ctl", "media-ctl", &["media-ctl", "ringsync"]),
    ("ringsync", "ringsync-ops", &["ringsync-ops", "ringsync"]),
];

/// Where `sip-gate`, `media-ctl` and `ringsync` are found.
#[derive(Debug, Clone)]
pub struct BinDir {
    dir: PathBuf,
    /// Build a stale or missing binary with cargo first (the located
    /// target directory under cargo; never a directory given explicitly).
    build: bool,
}

impl BinDir {
    /// `TESTBED_BIN_DIR` if set (used as is), else the target directory of
    /// the running program (`target/debug` for `testbed` itself and, one up
    /// from `deps/`, for a test or a benchmark), building what is missing or
    /// stale when cargo runs us.
    pub fn locate() -> BinDir {
        if let Some(d) = std::env::var_os("TESTBED_BIN_DIR") {
            return BinDir::at(d);
        }
        let exe = std::env::current_exe().unwrap_or_default();
        let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
        if dir.file_name().is_some_and(|n| n == "deps") {
            dir.pop();
        }
        BinDir {
            dir,
            build: std::env::var_os("CARGO").is_some(),
        }
    }

    /// A directory given explicitly: nothing is built into it.
    pub fn at(dir: impl Into<PathBuf>) -> BinDir {
        BinDir {
            dir: dir.into(),
            build: false,
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of `program`, built first when cargo runs us and it is
    /// another package's; an error says how to build it when it is missing.
    pub fn program(&self, program: &str) -> Result<PathBuf> {
        if self.build {
            self.build(program)?;
        }
        let p = self.dir.join(program);
        if p.is_file() {
            Ok(p)
        } else {
            Err(Error::NotBuilt {
                program: program.into(),
                dir: self.dir.clone(),
            })
        }
    }

    /// `cargo build -p PKG --bin PROGRAM` once per process, unless PKG is
    /// the package under test (cargo built its binaries already, with the
    /// features of this run: building them again with other features would
    /// replace the binary the test's own `CARGO_BIN_EXE_*` names).
    fn build(&self, program: &str) -> Result<()> {
        static BUILT: Mutex<Option<HashMap<String, Result<(), String>>>> = Mutex::new(None);
        let Some(&(_, package, sources)) = PACKAGES.iter().find(|(p, ..)| *p == program) else {
            return Ok(());
        };
        if std::env::var("CARGO_PKG_NAME").is_ok_and(|p| p == package) {
            return Ok(());
        }
        if fresh(&self.dir.join(program), sources) {
            return Ok(());
        }
        let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
        let done = built
            .get_or_insert_with(HashMap::new)
            .entry(program.to_owned())
            .or_insert_with(|| self.cargo_build(package, program));
        done.clone().map_err(|message| Error::Command {
            command: format!("cargo build -p {package} --bin {program}"),
            message,
        })
    }

    fn cargo_build(&self, package: &str, program: &str) -> Result<(), String> {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let target = self
            .dir
            .parent()
            .ok_or_else(|| format!("{} has no parent target directory", self.dir.display()))?;
        let mut cmd = Command::new(cargo);
        cmd.args([
            "build",
            "--quiet",
            "--offline",
            "-p",
            package,
            "--bin",
            program,
        ])
        .env("CARGO_TARGET_DIR", target)
        .current_dir(crate::repo_root());
        if self.dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("exited with {status}"))
        }
    }
}

/// True when `bin` exists and is newer than every file of `sources` (their
/// `Cargo.toml` and everything under `src/`) and the workspace's
/// `Cargo.toml` and `Cargo.lock`.
fn fresh(bin: &Path, sources: &[&str]) -> bool {
    let Ok(built) = std::fs::metadata(bin).and_then(|m| m.modified()) else {
        return false;
    };
    let root = crate::repo_root();
    let mut files = vec![root.join("Cargo.toml"), root.join("Cargo.lock")];
    let mut dirs = Vec::new();
    for s in sources {
        files.push(root.join(s).join("Cargo.toml"));
        dirs.push(root.join(s).join("src"));
    }
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => dirs.push(e.path()),
                Ok(_) => files.push(e.path()),
                Err(_) => {}
            }
        }
    }
    files.iter().all(|f| {
        std::fs::metadata(f)
            .and_then(|m| m.modified())
            .map_or(true, |m| m <= built)
    })
}
