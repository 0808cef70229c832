use std::{io, path::PathBuf, time::Duration};

/// What went wrong while starting, watching or stopping a peer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A program could not be started (not installed, not executable).
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program name.
        program: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A peer's program is not installed.
    #[error("{program} is not installed: install the Debian package `{package}` (scripts/setup.sh does)")]
    NotInstalled {
        /// The program name.
        program: String,
        /// The Debian package that ships it.
        package: String,
    },
    /// A peer exited before it was ready (bad config, port taken, ...).
    #[error("{program} exited early with {status}: {stderr}")]
    ExitedEarly {
        /// The program name.
        program: String,
        /// Its exit status, as printed by std.
        status: String,
        /// The end of what it wrote on stderr.
        stderr: String,
    },
    /// A peer did not start listening in time.
    #[error("{program} not listening on {addr} after {after:?}")]
    NotListening {
        /// The program name.
        program: String,
        /// The address it should listen on (`proto:ip:port`).
        addr: String,
        /// How long we waited.
        after: Duration,
    },
    /// A peer did not finish in time; it has been killed.
    #[error("{program} still running after {after:?}; killed")]
    Timeout {
        /// The program name.
        program: String,
        /// How long we waited.
        after: Duration,
    },
    /// A file the harness reads or writes could not be used.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// SIPp's statistics file was missing or not in the expected format.
    #[error("SIPp statistics {path}: {reason}")]
    Stats {
        /// The CSV file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// A `/proc` entry could not be read or parsed (process gone, ...).
    #[error("/proc/{pid}: {reason}")]
    Proc {
        /// The process id.
        pid: u32,
        /// What was wrong.
        reason: String,
    },
    /// No free port could be found on an address.
    #[error("no free port on {ip}: {source}")]
    NoFreePort {
        /// The address.
        ip: std::net::IpAddr,
        /// The last bind error.
        #[source]
        source: io::Error,
    },
    /// A command for SIPp's control port, on a SIPp started without one
    /// ([`crate::Sipp::control`]).
    #[error("sipp on {local} has no control port")]
    NoControlPort {
        /// Where that SIPp sends from.
        local: std::net::SocketAddr,
    },
    /// One of the project's binaries is not built where testbed looks.
    #[error("{program} not found in {dir}: build the workspace's binaries first (cargo build --bins), or point TESTBED_BIN_DIR at them")]
    NotBuilt {
        /// The program name.
        program: String,
        /// Where it was looked for.
        dir: PathBuf,
    },
    /// A command the rehearsal runs (the ringsync CLI) failed.
    #[error("{command}: {message}")]
    Command {
        /// The command line, shortened.
        command: String,
        /// What it said.
        message: String,
    },
    /// A site or scenario description is wrong.
    #[error("{path}: {message}")]
    Scenario {
        /// The file (or `builder` for a site built in code).
        path: PathBuf,
        /// What is wrong, naming the field.
        message: String,
    },
    /// A condition a test waited for did not come in time ([`crate::wait_for`]).
    #[error("timed out after {after:?} waiting for {what}")]
    WaitedFor {
        /// What was waited for.
        what: String,
        /// How long.
        after: Duration,
    },
    /// An HTTP exchange with an admin endpoint failed ([`crate::http`]).
    #[error("{request}: {reason}")]
    Http {
        /// The request, `GET http://ADDR/PATH`.
        request: String,
        /// What went wrong (connect, read, not HTTP).
        reason: String,
    },
    /// A certificate could not be made ([`crate::tls::self_signed`]).
    #[error("a certificate for {name}: {reason}")]
    Certificate {
        /// The name it was for.
        name: String,
        /// What rcgen said.
        reason: String,
    },
    /// The run was interrupted (Ctrl-C, SIGTERM); everything was stopped.
    #[error("interrupted: everything the run started has been stopped")]
    Interrupted,
    /// Other socket or process I/O.
    #[error(transparent)]
    Io(#[from] io::Error),
}
