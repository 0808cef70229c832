//! The gate's upgrade (R-GW-3): the run serving now (the old run) starts
//! the binary installed at its path (the new run) and hands over to it,
//! over a unix socket, every listening socket, the plain TCP connections
//! and the state, so that nobody notices.
//!
//! The trigger is SIGUSR2 or `sip-gate upgrade` (which asks over the same
//! socket and waits for the outcome). The old run listens on its upgrade
//! socket for as long as it serves ([`Upgrader`], `old.rs`); it spawns the
//! new run with [`ENV_FROM`] naming that socket and only talks to the
//! process it spawned (the peer's pid and uid are checked). Then, on one
//! connection, in this order:
//!
//! 1. new → old `Take {version}`; old → new `Offer` (the hand-over's
//!    version, the flow epoch, the first connection id the new run may
//!    give, each listener's addresses) with the upgrade socket, the admin
//!    socket and every listener's UDP and TCP sockets as `SCM_RIGHTS`, and
//!    `Table`: its plain TCP connections as they are (ids, listeners,
//!    peers, flows), while it serves on.
//! 2. The new run checks the version (a mismatch: `Refuse`, the old run
//!    logs why and keeps serving), opens the store, builds the gate on the
//!    sockets it got without reading them yet, registers the connections
//!    of the table (their messages queue until their sockets come), and
//!    says `Ready`.
//! 3. The old run stops reading the listeners and pauses
//!    (`transport/pause.rs`): it waits only for the messages being handled
//!    and for its UDP workers (woken at once), not for every connection.
//!    It sends what changed in the table since (`Table`, `Gone`), the
//!    connections it keeps (`Kept`), the work book, the bans and the
//!    transactions (`State`); the new run takes them in and reads the
//!    listeners (what came meanwhile waited in the kernel's queues). The
//!    old run stops each plain TCP and plain WebSocket connection between
//!    two messages, the busy ones (read or wrote within 500 ms) while the
//!    state goes and the idle ones once those were passed, and passes its
//!    socket as its writer gives it up (`Conns`: its id, the bytes read but not yet
//!    framed, and a WebSocket message begun in fragments), then
//!    `Passed`; the new run reads each connection from then on and says
//!    `Done`; only then does the old run stop serving its admin endpoint
//!    and upgrade socket, and leave the service to the new run, which
//!    tells systemd `MAINPID=` and `READY=1`. So the pause a message sees
//!    is the state's passage, not the connections'.
//! 4. The old run keeps its TLS and WSS connections (they cannot move:
//!    `transport/handover.rs`): their sockets and framing only. Each
//!    message read on one goes to the new run over the same link (`In`),
//!    whose core decides; what it sends into one comes back (`Out`) and
//!    the old run writes it (`keeper.rs`). The old run exits when the last
//!    closes, or closes the rest properly at `--upgrade-keep-s`.
//!
//! A new run that fails before `Ready` changes nothing for the old run; one
//! that fails between `Ready` and `Done` takes with it the connections it
//! was given (what its crash would lose), and the old run reads the
//! listeners again. A second trigger while a hand-over runs is refused.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::transport::{Kept, Stopped};
use crate::txn::{ConnId, SavedTxn};
use crate::work::WorkSnapshot;

mod keeper;
mod new;
mod old;
mod wire;

pub use new::{Inheritance, Taken};
pub use old::Upgrader;
pub use wire::WireError;

/// The hand-over's version: a new run takes over only from an old run of
/// the same version (what it sends must mean what it reads).
pub const VERSION: u32 = 3;
/// Set in the new run's environment: the upgrade socket of the old run.
pub const ENV_FROM: &str = "SIP_GATE_UPGRADE_FROM";
/// The version the new run speaks instead of [`VERSION`]; only to test the
/// refusal of a hand-over whose version differs.
pub const ENV_VERSION: &str = "SIP_GATE_UPGRADE_VERSION";

/// How long the new run waits after it said `Ready`, in ms; only to test
/// a new run that dies between `Ready` and `Done`.
pub const ENV_HOLD_MS: &str = "SIP_GATE_UPGRADE_HOLD_MS";

/// Why an upgrade did not happen (the old run keeps serving) or a new run
/// could not take over.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    /// Another upgrade runs.
    #[error("an upgrade is already running")]
    Busy,
    /// This run already handed over.
    #[error("this run has handed over already")]
    HandedOver,
    /// The new binary could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The binary.
        program: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The new run ended before it took over.
    #[error("the new run exited before it took over ({0})")]
    Exited(std::process::ExitStatus),
    /// The new run did not come in time.
    #[error("the new run did not take over within {0} s")]
    Timeout(u64),
    /// The new run refused the hand-over.
    #[error("the new run refused the hand-over: {0}")]
    Refused(String),
    /// The link between the runs failed.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A socket could not be used.
    #[error("hand-over: {0}")]
    Io(#[from] std::io::Error),
    /// The other side sent what the protocol does not expect there.
    #[error("hand-over: unexpected message ({0})")]
    Unexpected(String),
    /// The running gate did not upgrade (`sip-gate upgrade`), and why.
    #[error("{0}")]
    Declined(String),
    /// The new run's gate did not start.
    #[error("the new run's gate did not start: {0}")]
    Gate(String),
}

impl UpgradeError {
    /// Whether the other run is gone (its end of the link closed).
    pub fn peer_gone(&self) -> bool {
        use std::io::ErrorKind::{BrokenPipe, ConnectionReset, UnexpectedEof};
        match self {
            UpgradeError::Wire(WireError::Io(e)) | UpgradeError::Io(e) => {
                matches!(e.kind(), UnexpectedEof | ConnectionReset | BrokenPipe)
            }
            _ => false,
        }
    }
}

/// Where the packaged unit's `RuntimeDirectory=` is.
const RUN_DIR: &str = "/run/sip-gate";

/// The upgrade socket's path for a gate whose admin endpoint is `admin`:
/// in `$RUNTIME_DIRECTORY` (systemd's `RuntimeDirectory=`) when set, else
/// in `/run/sip-gate` when it exists (so `sip-gate upgrade`, run outside
/// the unit, finds the packaged gate's), else in the temporary directory;
/// one per gate on the host.
pub fn socket_path(admin: std::net::SocketAddr) -> PathBuf {
    let dir = std::env::var_os("RUNTIME_DIRECTORY")
        .map(PathBuf::from)
        .or_else(|| Path::new(RUN_DIR).is_dir().then(|| PathBuf::from(RUN_DIR)))
        .unwrap_or_else(std::env::temp_dir);
    dir.join(format!("sip-gate-{admin}.upgrade"))
}

/// `sip-gate upgrade`: asks the gate listening on `path` to upgrade and
/// waits for the outcome: the new run's pid, or why not.
pub fn request(path: &Path) -> Result<u32, UpgradeError> {
    let link = std::os::unix::net::UnixStream::connect(path)?;
    wire::send(&link, &Msg::Upgrade, &[])?;
    match wire::recv::<Msg>(&link)?.0 {
        Msg::Upgraded { pid } => Ok(pid),
        Msg::Failed { reason } => Err(UpgradeError::Declined(reason)),
        other => Err(UpgradeError::Unexpected(other.name().into())),
    }
}

/// The messages on the upgrade socket (see the module doc).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Msg {
    Upgrade,
    Upgraded {
        pid: u32,
    },
    Failed {
        reason: String,
    },
    Take {
        version: u32,
    },
    Offer(Offer),
    Refuse {
        reason: String,
    },
    Ready,
    /// The plain TCP connections that move, before their sockets: all
    /// while the old run still serves, then those new or changed at the
    /// pause.
    Table {
        conns: Vec<Stopped>,
    },
    /// Sockets of connections of the table, with what was read of each.
    Conns {
        conns: Vec<ConnState>,
    },
    /// Every socket that could be passed was.
    Passed,
    /// Connections of an earlier table that closed before the pause.
    Gone {
        conns: Vec<ConnId>,
    },
    Kept {
        conns: Vec<Kept>,
    },
    State {
        work: Box<WorkSnapshot>,
        bans: Vec<crate::BanInfo>,
        /// The transactions, and the instance ids their indexes mean.
        txns: (Vec<String>, Vec<SavedTxn>),
    },
    Done,
    In {
        conn: Kept,
        data: Vec<u8>,
    },
    Out {
        conn: ConnId,
        data: Vec<u8>,
    },
    Closed {
        conn: ConnId,
    },
}

impl Msg {
    fn name(&self) -> &'static str {
        match self {
            Msg::Upgrade => "upgrade",
            Msg::Upgraded { .. } => "upgraded",
            Msg::Failed { .. } => "failed",
            Msg::Take { .. } => "take",
            Msg::Offer(_) => "offer",
            Msg::Refuse { .. } => "refuse",
            Msg::Ready => "ready",
            Msg::Table { .. } => "table",
            Msg::Conns { .. } => "conns",
            Msg::Passed => "passed",
            Msg::Gone { .. } => "gone",
            Msg::Kept { .. } => "kept",
            Msg::In { .. } => "in",
            Msg::Out { .. } => "out",
            Msg::Closed { .. } => "closed",
            Msg::State { .. } => "state",
            Msg::Done => "done",
        }
    }
}

/// What the old run offers, with its sockets: the upgrade socket, the
/// admin socket, then each listener's UDP sockets and TCP socket.
#[derive(Debug, Serialize, Deserialize)]
struct Offer {
    version: u32,
    /// The flow tokens' epoch, kept by the new run.
    epoch: u32,
    /// The first connection id the new run gives: far above the old run's,
    /// which may still open connections for what it keeps.
    first_conn: ConnId,
    listeners: Vec<OfferedListener>,
    /// The old run, named in the new run's reports (issue 39); absent
    /// from a run that predates it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    run: Option<ringsync::work::RunRef>,
}

/// One listener as offered.
#[derive(Debug, Serialize, Deserialize)]
struct OfferedListener {
    name: String,
    /// `bind` and `advertise` as the old run's site file says.
    file: (std::net::SocketAddr, std::net::SocketAddr),
    /// As bound.
    bound: (std::net::SocketAddr, std::net::SocketAddr),
    udp: usize,
    tcp: bool,
}

/// A plain TCP or WebSocket connection's socket passed on (it rides as
/// `SCM_RIGHTS`), with the bytes read of it and not yet framed, and a
/// WebSocket message begun in fragments (text or not, its bytes so far).
#[derive(Debug, Serialize, Deserialize)]
struct ConnState {
    id: ConnId,
    unread: Vec<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    begun: Option<(bool, Vec<u8>)>,
}

/// Connection ids the new run starts above the old run's next one: the
/// old run may still open connections for what it keeps.
const CONN_GAP: ConnId = 1 << 32;
