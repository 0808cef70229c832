//! The new run's side of the upgrade (R-GW-3): take the old run's offer,
//! start the gate on its sockets, take its connections and its work book,
//! then read the listeners (see `mod.rs`).

use std::net::{TcpListener, UdpSocket};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringsync::config::SiteConfig;
use ringsync::state::DrainState;
use tokio_util::sync::CancellationToken;

use super::{wire, Msg, Offer, UpgradeError, ENV_FROM, ENV_VERSION, VERSION};
use crate::transport::{BoundListener, Moved, Pending};
use crate::Gate;

/// How long each step of the old run may take.
const STEP_WAIT: Duration = Duration::from_secs(30);

/// What a run started by an upgrade takes from the old run: its offer and
/// its sockets, and the link to it.
pub struct Inheritance {
    link: UnixStream,
    offer: Offer,
    control: Option<OwnedFd>,
    admin: Option<OwnedFd>,
    /// Each listener's UDP sockets and TCP socket.
    sockets: Vec<(Vec<OwnedFd>, Option<OwnedFd>)>,
}

impl std::fmt::Debug for Inheritance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inheritance")
            .field("offer", &self.offer)
            .finish()
    }
}

/// How the taking over went.
#[derive(Debug, Clone, Copy, Default)]
pub struct Taken {
    /// Plain TCP connections taken in.
    pub connections: usize,
    /// TLS and WSS connections the old run keeps, relayed.
    pub relayed: usize,
    /// Transactions taken in (in flight, and completed ones kept for
    /// their retransmissions).
    pub transactions: usize,
    /// Work book entries taken in: calls, registrations, subscriptions.
    pub work: (usize, usize, usize),
}

impl Inheritance {
    /// In a run an upgrade started ([`ENV_FROM`] set): asks the old run to
    /// take over and reads its offer; a version this run cannot read is
    /// refused (the old run logs why and serves on). `None` in any other
    /// run.
    pub fn from_env() -> Option<Result<Inheritance, UpgradeError>> {
        let path = std::env::var_os(ENV_FROM)?;
        Some(Inheritance::take(Path::new(&path)))
    }

    fn take(path: &Path) -> Result<Inheritance, UpgradeError> {
        let link = UnixStream::connect(path)?;
        link.set_read_timeout(Some(STEP_WAIT))?;
        link.set_write_timeout(Some(STEP_WAIT))?;
        let version = std::env::var(ENV_VERSION)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(VERSION);
        wire::send(&link, &Msg::Take { version }, &[])?;
        // The version first: an offer of another version may not parse.
        let (value, fds) = wire::recv::<serde_json::Value>(&link)?;
        let theirs = value.get("version").and_then(serde_json::Value::as_u64);
        if theirs != Some(u64::from(version)) {
            let reason = format!(
                "the old run hands over at version {}, this run reads version {version}",
                theirs.map_or("?".into(), |v| v.to_string())
            );
            let _ = wire::send(
                &link,
                &Msg::Refuse {
                    reason: reason.clone(),
                },
                &[],
            );
            return Err(UpgradeError::Refused(reason));
        }
        let offer = match serde_json::from_value::<Msg>(value).map_err(wire::WireError::from)? {
            Msg::Offer(o) => o,
            other => return Err(UpgradeError::Unexpected(other.name().into())),
        };
        let mut fds = fds.into_iter();
        let (control, admin) = (fds.next(), fds.next());
        let mut sockets = Vec::new();
        for l in &offer.listeners {
            let udp: Vec<OwnedFd> = fds.by_ref().take(l.udp).collect();
            let tcp = if l.tcp { fds.next() } else { None };
            if udp.len() != l.udp || tcp.is_some() != l.tcp {
                return Err(UpgradeError::Unexpected(
                    "fewer sockets than offered".into(),
                ));
            }
            sockets.push((udp, tcp));
        }
        Ok(Inheritance {
            link,
            offer,
            control,
            admin,
            sockets,
        })
    }

    /// The run this one takes over from, if it said.
    pub fn from_run(&self) -> Option<ringsync::work::RunRef> {
        self.offer.run.clone()
    }

    /// Tells the old run this one cannot take over (it serves on), and why.
    pub fn refuse(&self, reason: &str) {
        let msg = Msg::Refuse {
            reason: reason.into(),
        };
        let _ = wire::send(&self.link, &msg, &[]);
    }

    /// The admin endpoint's socket, once.
    pub fn admin_listener(&mut self) -> Option<TcpListener> {
        self.admin.take().map(TcpListener::from)
    }

    /// The upgrade socket, once: this run listens on it from now on.
    pub fn control_listener(&mut self) -> Option<UnixListener> {
        self.control.take().map(UnixListener::from)
    }

    /// Starts the gate on the old run's sockets, its listeners not read
    /// yet ([`Inheritance::finish`] does): the site file's listeners must
    /// be the old run's (name, `bind`, `advertise` as written), else this
    /// run cannot take them.
    pub async fn start_gate(
        &mut self,
        file: SiteConfig,
        drain: Arc<DrainState>,
        shutdown: CancellationToken,
    ) -> Result<Gate, UpgradeError> {
        let offered = &self.offer.listeners;
        let same = file.listeners.len() == offered.len()
            && file
                .listeners
                .iter()
                .zip(offered)
                .all(|(l, o)| l.name == o.name && (l.bind, l.advertise) == o.file);
        if !same {
            return Err(UpgradeError::Refused(
                "the site file's listeners differ from the running gate's: restart instead".into(),
            ));
        }
        let mut config = file.clone();
        let mut bound = Vec::new();
        for ((l, o), (udp, tcp)) in config
            .listeners
            .iter_mut()
            .zip(offered)
            .zip(std::mem::take(&mut self.sockets))
        {
            (l.bind, l.advertise) = o.bound;
            let udp = udp
                .into_iter()
                .map(|fd| Arc::new(UdpSocket::from(fd)))
                .collect();
            let tcp = match tcp {
                Some(fd) => {
                    let std = TcpListener::from(fd);
                    std.set_nonblocking(true)?;
                    Some(tokio::net::TcpListener::from_std(std)?)
                }
                None => None,
            };
            bound.push(BoundListener { udp, tcp });
        }
        let inherit = Some((self.offer.epoch, self.offer.first_conn));
        Gate::start_bound(Arc::new(config), file, bound, drain, (shutdown, inherit))
            .map_err(|e| UpgradeError::Gate(e.to_string()))
    }

    /// Says `Ready`, takes the old run's connections and work book, reads
    /// the listeners and says `Done`: from now on this run serves.
    ///
    /// When the old run goes (killed) before it is done, this run serves
    /// alone (reading the listeners if it did not yet): it then lacks only
    /// what the old run had not passed yet, as a crash of the old run would
    /// lose; the connections listed whose sockets had not come are closed.
    /// Any other failure is returned (this run then exits, and the old run
    /// reads the listeners again).
    pub async fn finish(self, gate: &mut Gate) -> Result<Taken, UpgradeError> {
        let link = Arc::new(self.link);
        let mut got = Progress::default();
        match receive(&link, gate, &mut got).await {
            Ok(taken) => Ok(taken),
            Err(e) if e.peer_gone() => {
                tracing::error!(
                    error = %e,
                    connections = got.taken.connections,
                    lost = got.pending.len(),
                    "upgrade: the old run went before it was done: serving alone"
                );
                gate.net().drop_pending(std::mem::take(&mut got.pending));
                if !got.listening {
                    gate.start_listening()?;
                }
                Ok(got.taken)
            }
            Err(e) => Err(e),
        }
    }
}

/// How far [`receive`] got.
#[derive(Debug, Default)]
struct Progress {
    taken: Taken,
    /// The connections listed whose sockets have not come.
    pending: Pending,
    /// The listeners are read.
    listening: bool,
}

/// [`Inheritance::finish`]'s steps: the table of the connections that
/// move, the ones the old run keeps and the state; then this run reads
/// the listeners, and takes each connection's socket as it comes.
async fn receive(
    link: &Arc<UnixStream>,
    gate: &mut Gate,
    got: &mut Progress,
) -> Result<Taken, UpgradeError> {
    // The old run's connections as they were at its offer, registered
    // before this run says it is ready (the pause passes what changed).
    match super::old::call(link, wire::recv::<Msg>).await?.0 {
        Msg::Table { conns } => gate.net().adopt_table(&mut got.pending, conns),
        other => return Err(UpgradeError::Unexpected(other.name().into())),
    }
    super::old::call(link, |l| wire::send(l, &Msg::Ready, &[])).await?;
    if let Some(ms) = std::env::var(super::ENV_HOLD_MS)
        .ok()
        .and_then(|v| v.parse().ok())
    {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let mut kept = Vec::new();
    let (work, bans, (ids, txns)) = loop {
        match super::old::call(link, wire::recv::<Msg>).await?.0 {
            // All are in the table before the listeners are read.
            Msg::Table { conns } => gate.net().adopt_table(&mut got.pending, conns),
            Msg::Gone { conns } => gate.net().drop_listed(&mut got.pending, &conns),
            Msg::Kept { conns } => kept = conns,
            Msg::State { work, bans, txns } => break (work, bans, txns),
            other => return Err(UpgradeError::Unexpected(other.name().into())),
        }
    };
    got.taken.work = work.sizes();
    got.taken.transactions = restore(gate, &work, &bans, (&ids, &txns));
    gate.start_listening()?;
    got.listening = true;
    // The instant this run serves: the benchmark (docs/benchmarks.md)
    // reads it from the log's time.
    tracing::info!(
        waiting = got.pending.len(),
        "upgrade: reading the listeners; the connections' sockets come next"
    );
    loop {
        let (msg, fds) = super::old::call(link, wire::recv::<Msg>).await?;
        match msg {
            Msg::Conns { conns } => {
                if conns.len() != fds.len() {
                    return Err(UpgradeError::Unexpected(
                        "a connection without its socket".into(),
                    ));
                }
                let moved = conns
                    .into_iter()
                    .zip(fds)
                    .map(|(c, fd)| Moved {
                        id: c.id,
                        fd,
                        unread: c.unread,
                        begun: c.begun,
                    })
                    .collect();
                got.taken.connections += gate.net().attach(&mut got.pending, moved)?;
            }
            Msg::Passed => break,
            other => return Err(UpgradeError::Unexpected(other.name().into())),
        }
    }
    if !got.pending.is_empty() {
        tracing::info!(
            closed = got.pending.len(),
            "upgrade: connections that closed in the old run before their sockets were passed"
        );
    }
    gate.net().drop_pending(std::mem::take(&mut got.pending));
    super::old::call(link, |l| wire::send(l, &Msg::Done, &[])).await?;
    got.taken.relayed = kept.len();
    super::keeper::relay(gate.net().clone(), link.clone(), kept);
    Ok(got.taken)
}

/// Takes in the old run's bans, transactions and work book; how many
/// transactions were taken.
fn restore(
    gate: &Gate,
    work: &crate::work::WorkSnapshot,
    bans: &[crate::BanInfo],
    (ids, txns): (&[String], &[crate::txn::SavedTxn]),
) -> usize {
    let now = Instant::now();
    let banned = gate.core().site().bans.restore(bans, now);
    if banned < bans.len() {
        tracing::warn!(
            bans = bans.len(),
            taken = banned,
            "upgrade: some bans not taken (their listener has no [listener.auth_ban] now, or its table is full)"
        );
    }
    // Instance indexes mean the same here only with the same instances.
    let config = gate.core().config();
    let same = config.instances.iter().map(|i| &i.id).eq(ids.iter());
    let taken = if same {
        gate.core().take_txns(txns, now)
    } else {
        tracing::warn!("upgrade: the site's instances changed: the transactions in flight are not taken (their answers are relayed by their Via)");
        0
    };
    if let Err(e) = gate.core().restore_work(work, now) {
        tracing::warn!("{e}: the work set up before the upgrade is unknown for the [work] window");
    }
    taken
}
