//! Child processes shared by the launchers: spawn with output in files,
//! signal, kill the whole tree on drop.

use std::{
    fs::{self, File},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    thread,
    time::{Duration, Instant},
};

use crate::{proc_stats, Error, Result};

/// A spawned program whose stdout/stderr go to files in a directory the
/// owner keeps alive. Dropping it kills the process and its descendants.
#[derive(Debug)]
pub(crate) struct Proc {
    program: String,
    child: Child,
    stderr: PathBuf,
    exited: Option<ExitStatus>,
}

impl Proc {
    pub(crate) fn spawn(cmd: Command, program: &str, dir: &Path) -> Result<Self> {
        Proc::spawn_with(cmd, program, dir, Stdio::null())
    }

    /// [`Proc::spawn`] with its stdin a pipe held open while it runs: for
    /// a program that stops at the end of its input (`openssl s_server`).
    pub(crate) fn spawn_stdin_open(cmd: Command, program: &str, dir: &Path) -> Result<Self> {
        Proc::spawn_with(cmd, program, dir, Stdio::piped())
    }

    fn spawn_with(mut cmd: Command, program: &str, dir: &Path, stdin: Stdio) -> Result<Self> {
        let stdout = dir.join(format!("{program}.stdout"));
        let stderr = dir.join(format!("{program}.stderr"));
        let open = |p: &PathBuf| {
            File::create(p).map_err(|source| Error::File {
                path: p.clone(),
                source,
            })
        };
        cmd.stdin(stdin)
            .stdout(open(&stdout)?)
            .stderr(open(&stderr)?);
        let child = cmd.spawn().map_err(|source| Error::Spawn {
            program: program.to_string(),
            source,
        })?;
        Ok(Self {
            program: program.to_string(),
            child,
            stderr,
            exited: None,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn program(&self) -> &str {
        &self.program
    }

    /// The exit status if the process has ended.
    pub(crate) fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait()?;
        }
        Ok(self.exited)
    }

    /// Waits for the exit up to `timeout`; `None` if still running.
    pub(crate) fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The error for "exited before being ready", with the stderr tail.
    pub(crate) fn exited_early(&self, status: ExitStatus) -> Error {
        Error::ExitedEarly {
            program: self.program.clone(),
            status: status.to_string(),
            stderr: tail(&self.stderr, 2000),
        }
    }

    /// The end of the process's stderr.
    pub(crate) fn stderr_tail(&self, max: usize) -> String {
        tail(&self.stderr, max)
    }

    /// Sends `signal` (a name such as `TERM`) to the process only.
    pub(crate) fn signal(&self, signal: &str) {
        signal_pid(self.pid(), signal);
    }

    /// SIGTERM, up to `grace` for a clean exit, then SIGKILL to the whole
    /// tree (Kamailio's workers outlive a killed main process).
    pub(crate) fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.try_wait() {
            return Some(status);
        }
        let tree = proc_stats::descendants(self.pid());
        self.signal("TERM");
        if let Ok(Some(status)) = self.wait_timeout(grace) {
            kill_all(&tree);
            return Some(status);
        }
        let tree = {
            let mut t = proc_stats::descendants(self.pid());
            t.extend(tree);
            t
        };
        kill_all(&tree);
        let _ = self.child.kill();
        let status = self.child.wait().ok();
        self.exited = status;
        status
    }
}

impl Proc {
    /// SIGKILL to the process and its descendants at once, and waits for it.
    pub(crate) fn kill(&mut self) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.try_wait() {
            return Some(status);
        }
        let mut tree = proc_stats::descendants(self.pid());
        tree.push(self.pid());
        kill_all(&tree);
        let status = self.child.wait().ok();
        self.exited = status;
        status
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exited.is_none() {
            self.stop(Duration::from_millis(500));
        }
    }
}

fn kill_all(pids: &[u32]) {
    for pid in pids {
        signal_pid(*pid, "KILL");
    }
}

/// std has no kill(2) without unsafe code; procps' kill does it.
pub(crate) fn signal_pid(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The last `max` bytes of a text file (lossy), for error messages.
pub(crate) fn tail(path: &Path, max: usize) -> String {
    let data = fs::read(path).unwrap_or_default();
    let start = data.len().saturating_sub(max);
    String::from_utf8_lossy(&data[start..]).trim().to_string()
}
