//! A real Prometheus (Debian `prometheus`) on loopback for the alerting
//! tests: its own config and TSDB in a private temp dir, short scrape and
//! evaluation intervals, the rules files given, no system service involved.

use std::{
    fs,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::{Duration, Instant},
};

use tempfile::TempDir;

use crate::{http, process::Proc, Error, Result};

/// Builder for one Prometheus.
#[derive(Clone, Debug)]
pub struct Prometheus {
    listen: SocketAddr,
    interval: Duration,
    rules: Vec<PathBuf>,
    jobs: Vec<(String, Vec<SocketAddr>)>,
}

impl Prometheus {
    /// Prometheus serving its API on `listen`, scraping and evaluating
    /// every second.
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            interval: Duration::from_secs(1),
            rules: Vec::new(),
            jobs: Vec::new(),
        }
    }

    /// A rules file to load (by absolute path).
    pub fn rules(mut self, path: impl Into<PathBuf>) -> Self {
        self.rules.push(path.into());
        self
    }

    /// A scrape job named `name` over `targets` (`/metrics`, plain HTTP).
    pub fn job(mut self, name: &str, targets: &[SocketAddr]) -> Self {
        self.jobs.push((name.to_owned(), targets.to_vec()));
        self
    }

    /// The config file Prometheus runs.
    pub fn config(&self) -> String {
        let s = self.interval.as_secs().max(1);
        let mut c = format!(
            "# written by testbed::Prometheus\nglobal:\n  scrape_interval: {s}s\n  scrape_timeout: {s}s\n  evaluation_interval: {s}s\nrule_files:\n"
        );
        for r in &self.rules {
            c.push_str(&format!("  - {:?}\n", r.display().to_string()));
        }
        c.push_str("scrape_configs:\n");
        for (name, targets) in &self.jobs {
            let t: Vec<String> = targets
                .iter()
                .map(|a| format!("{:?}", a.to_string()))
                .collect();
            c.push_str(&format!(
                "  - job_name: {name:?}\n    static_configs:\n      - targets: [{}]\n",
                t.join(", ")
            ));
        }
        c
    }

    /// Starts Prometheus and returns once `/-/ready` answers 200.
    pub fn start(self) -> Result<PrometheusHandle> {
        let dir = tempfile::Builder::new()
            .prefix("testbed-prometheus-")
            .tempdir()?;
        let conf = dir.path().join("prometheus.yml");
        fs::write(&conf, self.config()).map_err(|source| Error::File {
            path: conf.clone(),
            source,
        })?;
        let mut cmd = Command::new("prometheus");
        cmd.arg(format!("--config.file={}", conf.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={}", self.listen));
        let mut proc = Proc::spawn(cmd, "prometheus", dir.path()).map_err(|e| match e {
            Error::Spawn { program, source } if source.kind() == std::io::ErrorKind::NotFound => {
                Error::NotInstalled {
                    program,
                    package: "prometheus".into(),
                }
            }
            e => e,
        })?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if http::get(self.listen, "/-/ready").is_ok_and(|r| r.status == 200) {
                break;
            }
            if let Some(status) = proc.try_wait()? {
                return Err(proc.exited_early(status));
            }
            if Instant::now() >= deadline {
                return Err(Error::NotListening {
                    program: "prometheus".into(),
                    addr: self.listen.to_string(),
                    after: Duration::from_secs(20),
                });
            }
            thread::sleep(Duration::from_millis(100));
        }
        Ok(PrometheusHandle {
            proc,
            addr: self.listen,
            _dir: dir,
        })
    }
}

/// A running Prometheus; dropping it stops it.
#[derive(Debug)]
pub struct PrometheusHandle {
    proc: Proc,
    addr: SocketAddr,
    _dir: TempDir,
}

impl PrometheusHandle {
    /// Where its API answers.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `GET /api/v1/alerts`: the alerts pending or firing, as `(name,
    /// state, the whole alert)` (`state`: `pending`, `firing`).
    pub fn alerts(&self) -> Result<Vec<(String, String, serde_json::Value)>> {
        let v: serde_json::Value = self.api("/api/v1/alerts")?;
        let list = v["data"]["alerts"].as_array().cloned().unwrap_or_default();
        Ok(list
            .into_iter()
            .map(|a| {
                let name = a["labels"]["alertname"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let state = a["state"].as_str().unwrap_or_default().to_owned();
                (name, state, a)
            })
            .collect())
    }

    /// An instant query's whole answer (`status` is `error` for an
    /// expression Prometheus refuses, with `error` saying why).
    pub fn query(&self, expr: &str) -> Result<serde_json::Value> {
        self.api(&format!("/api/v1/query?query={}", encode(expr)))
    }

    /// The value of an instant query that returns one sample, if it does.
    pub fn query_one(&self, expr: &str) -> Result<Option<f64>> {
        let v = self.query(expr)?;
        Ok(v["data"]["result"]
            .as_array()
            .filter(|r| r.len() == 1)
            .and_then(|r| r[0]["value"][1].as_str().and_then(|s| s.parse().ok())))
    }

    fn api(&self, path: &str) -> Result<serde_json::Value> {
        let r = http::get(self.addr, path)?;
        r.json().ok_or_else(|| Error::ExitedEarly {
            program: "prometheus".into(),
            status: format!("HTTP {}", r.status),
            stderr: r.body.chars().take(400).collect(),
        })
    }

    /// The end of its log, for failure messages.
    pub fn log_tail(&self, max: usize) -> String {
        self.proc.stderr_tail(max)
    }

    /// Its data and config directory.
    pub fn dir(&self) -> &Path {
        self._dir.path()
    }
}

/// Percent-encodes a query parameter (everything but unreserved bytes).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
