//! Where the project's binaries are, found one way for every test,
//! benchmark and rehearsal.
//!
//! Cargo builds a package's binaries only for that package's own tests
//! (`CARGO_BIN_EXE_*`), so a sip-gate test that runs `ringsync`, or a
//! testbed test that runs `sip-gate`, would find a stale binary or none.
//! Under cargo (`cargo test`, `cargo bench`, `cargo run`), a binary of
//! another package is therefore built first (`cargo build -p PKG --bin
//! NAME`, a no-op when it is fresh) into the target directory the caller
//! runs from; the package under test already has its binaries built. Not
//! under cargo (`testbed run` started by hand), the binaries must be there.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::{Error, Result};

/// Which package builds each of the project's binaries.
const PACKAGES: &[(&str, &str)] = &[
    ("sip-gate", "sip-gate"),
    ("media-ctl", "media-ctl"),
    ("ringsync", "ringsync"),
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
        let Some(&(_, package)) = PACKAGES.iter().find(|(p, _)| *p == program) else {
            return Ok(());
        };
        if std::env::var("CARGO_PKG_NAME").is_ok_and(|p| p == package) {
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
        cmd.args(["build", "--quiet", "--offline", "-p", package, "--bin", program])
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
