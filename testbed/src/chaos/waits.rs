//! `ringsync wait drained` as automation runs it: started for a server as
//! soon as the status shows one of its instances entering a drain, and
//! the moment it returned recorded, for the checker to hold against what
//! the far ends held then.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

use serde::Serialize;

use crate::site::BinDir;

/// How long one wait may take before it gives up (exit 4 or 3).
pub const TIMEOUT_S: u32 = 60;

/// One `ringsync wait drained --server S` and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitReturn {
    /// The server waited for.
    pub server: String,
    /// Seconds after the start when it was started ...
    pub t0: f64,
    /// ... and when it returned.
    pub t1: f64,
    /// Its exit code (0 drained, 3 unknown, 4 work left at the timeout,
    /// 5 not in the drain zone, 1 other); `None`: ended by a signal.
    pub code: Option<i32>,
    /// The last line it wrote (its progress, or why it failed).
    pub said: String,
}

/// The waits started so far, and the servers with one running.
#[derive(Debug, Default)]
struct State {
    done: Vec<WaitReturn>,
    running: Vec<(String, u32)>,
}

/// Starts and follows the waits.
#[derive(Debug, Clone)]
pub struct Waiters {
    bins: BinDir,
    site: PathBuf,
    start: Instant,
    state: Arc<Mutex<State>>,
    threads: Arc<Mutex<Vec<thread::JoinHandle<()>>>>,
}

impl Waiters {
    /// Waiters on the site of `site`, times counted from `start`.
    pub fn new(bins: BinDir, site: PathBuf, start: Instant) -> Waiters {
        Waiters {
            bins,
            site,
            start,
            state: Arc::default(),
            threads: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts `ringsync wait drained --server server` unless one runs for
    /// it already.
    pub fn start(&self, server: &str) {
        if self.lock().running.iter().any(|(s, _)| s == server) {
            return;
        }
        let Ok(program) = self.bins.program("ringsync") else {
            return;
        };
        let t0 = self.start.elapsed().as_secs_f64();
        let child = Command::new(program)
            .arg("--config")
            .arg(&self.site)
            .args(["wait", "drained", "--server", server, "--timeout"])
            .arg(format!("{TIMEOUT_S}s"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let Ok(child) = child else {
            return;
        };
        self.lock().running.push((server.to_owned(), child.id()));
        let (me, server) = (self.clone(), server.to_owned());
        let t = thread::spawn(move || {
            let out = child.wait_with_output().ok();
            let t1 = me.start.elapsed().as_secs_f64();
            let said = out.as_ref().map_or(String::new(), |o| {
                let text = [&o.stdout[..], &o.stderr[..]].concat();
                let text = String::from_utf8_lossy(&text).into_owned();
                text.lines().last().unwrap_or_default().to_owned()
            });
            let mut st = me.lock();
            st.running.retain(|(s, _)| *s != server);
            st.done.push(WaitReturn {
                server,
                t0,
                t1,
                code: out.and_then(|o| o.status.code()),
                said,
            });
        });
        self.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(t);
    }

    /// Ends the waits still running (SIGTERM) and returns every one.
    pub fn finish(self) -> Vec<WaitReturn> {
        for (_, pid) in self.lock().running.clone() {
            crate::process::signal_pid(pid, "TERM");
        }
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
        let mut done = std::mem::take(&mut self.lock().done);
        done.sort_by(|a, b| a.t0.total_cmp(&b.t0));
        done
    }
}
