//! The old run's side of the upgrade (R-GW-3): its upgrade socket, the
//! new run it starts, and what it gives that run (see `mod.rs`).

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::{wire, ConnState, Msg, Offer, OfferedListener, UpgradeError, CONN_GAP, VERSION};
use crate::node::Admin;
use crate::transport::{GiveUp, NetHandle, Stopped};
use crate::{Core, Gate};

/// How long the new run may take from its start to `Ready` (it opens the
/// store), and each later step.
const NEW_RUN_WAIT: Duration = Duration::from_secs(30);
/// How many 1 ms turns the busy connections get to be given up alone: the
/// others are asked once as many sockets were passed, or after these.
const BUSY_TURNS: u32 = 10;
/// How long plain TCP and WebSocket connections get to stop between two
/// messages.
const MOVE_WAIT: Duration = Duration::from_secs(2);

/// The old run's upgrade: its socket, and the hand-over it runs on a
/// trigger ([`Upgrader::upgrade`]).
pub struct Upgrader {
    path: PathBuf,
    program: PathBuf,
    args: Vec<OsString>,
    busy: AtomicBool,
    /// The pid of the run that took over, once one did.
    handed: watch::Sender<Option<u32>>,
    /// Where the control loop passes a `Take` while an upgrade waits.
    takes: Mutex<Option<mpsc::Sender<(UnixStream, u32)>>>,
    net: NetHandle,
    core: Arc<Core>,
    file_addrs: Vec<(std::net::SocketAddr, std::net::SocketAddr)>,
    admin: Arc<std::net::TcpListener>,
    admin_stop: CancellationToken,
    control: Arc<UnixListener>,
    control_stop: CancellationToken,
    /// Cancelled when the link to the run that took over breaks.
    lost: CancellationToken,
    /// This run, as the run that takes over names it.
    run: Option<ringsync::work::RunRef>,
}

impl std::fmt::Debug for Upgrader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upgrader")
            .field("path", &self.path)
            .finish()
    }
}

impl Upgrader {
    /// Listens on the upgrade socket at `path` (or on `inherited`, the one
    /// an earlier run handed over) until `shutdown` or a hand-over; the
    /// new runs it starts are this binary, with this process's arguments.
    pub fn start(
        gate: &Gate,
        admin: &Admin,
        (path, inherited): (&Path, Option<UnixListener>),
        shutdown: &CancellationToken,
    ) -> std::io::Result<Arc<Upgrader>> {
        let control = match inherited {
            Some(l) => l,
            None => bind(path)?,
        };
        control.set_nonblocking(true)?;
        let accept = tokio::net::UnixListener::from_std(control.try_clone()?)?;
        let exe = std::env::current_exe()?;
        // A binary replaced since this one started shows as "(deleted)":
        // the path is where the new one is.
        let program = match exe.to_str().and_then(|s| s.strip_suffix(" (deleted)")) {
            Some(p) => PathBuf::from(p),
            None => exe,
        };
        let me = Arc::new(Upgrader {
            path: path.to_path_buf(),
            program,
            args: std::env::args_os().skip(1).collect(),
            busy: AtomicBool::new(false),
            handed: watch::Sender::new(None),
            takes: Mutex::new(None),
            net: gate.net().clone(),
            core: gate.core().clone(),
            file_addrs: gate.file_addrs().to_vec(),
            admin: admin.socket.clone(),
            admin_stop: admin.stop.clone(),
            control: Arc::new(control),
            control_stop: shutdown.child_token(),
            lost: CancellationToken::new(),
            run: admin.node.run.as_ref().map(ringsync::work::RunInfo::to_ref),
        });
        tracing::info!(socket = %path.display(), program = %me.program.display(), "upgrade on SIGUSR2 or `sip-gate upgrade` (R-GW-3)");
        tokio::spawn(me.clone().serve(accept));
        Ok(me)
    }

    /// Resolves with the new run's pid once this run has handed over.
    pub async fn handed_over(&self) -> u32 {
        let mut rx = self.handed.subscribe();
        loop {
            if let Some(pid) = *rx.borrow_and_update() {
                return pid;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Cancelled once the run that took over is gone: the connections this
    /// run kept have nobody to decide for them.
    pub fn link_lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Upgrades: starts the binary at this run's path and hands over to
    /// it; the new run's pid, or why not (this run then serves on, as if
    /// nothing happened, but for what a new run that failed mid-way took).
    pub async fn upgrade(self: &Arc<Self>) -> Result<u32, UpgradeError> {
        let result = self.hand_over().await;
        if let Ok(pid) = &result {
            self.handed.send_replace(Some(*pid));
        }
        result
    }

    /// [`Self::upgrade`] without saying it is done: the caller says so
    /// ([`Self::handed`]) once it has told whoever asked, since the word
    /// lets this run end (with nothing kept, at once).
    async fn hand_over(self: &Arc<Self>) -> Result<u32, UpgradeError> {
        if self.handed.borrow().is_some() {
            return Err(UpgradeError::HandedOver);
        }
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err(UpgradeError::Busy);
        }
        let result = self.run().await;
        if result.is_err() {
            self.busy.store(false, Ordering::Release);
        }
        result
    }

    async fn run(self: &Arc<Self>) -> Result<u32, UpgradeError> {
        let (tx, mut rx) = mpsc::channel(4);
        *self.takes.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .env(super::ENV_FROM, &self.path)
            // The new run pings the watchdog once it is the main process.
            .env_remove("WATCHDOG_PID")
            .stdin(Stdio::null())
            .spawn()
            .map_err(|source| UpgradeError::Spawn {
                program: self.program.clone(),
                source,
            })?;
        let pid = child.id();
        tracing::info!(pid, program = %self.program.display(), "upgrade: new run started");
        let until = Instant::now() + NEW_RUN_WAIT;
        let link = loop {
            tokio::select! {
                take = rx.recv() => match take {
                    Some((link, from)) if from == pid => break link,
                    Some((_, from)) => tracing::warn!(from, "upgrade: a take from a process this run did not start: ignored"),
                    None => return Err(UpgradeError::Unexpected("control socket closed".into())),
                },
                _ = tokio::time::sleep(Duration::from_millis(50)) => {
                    if let Some(status) = child.try_wait()? {
                        return Err(UpgradeError::Exited(status));
                    }
                    if Instant::now() >= until {
                        reap(child, true);
                        return Err(UpgradeError::Timeout(NEW_RUN_WAIT.as_secs()));
                    }
                }
            }
        };
        *self.takes.lock().unwrap_or_else(|e| e.into_inner()) = None;
        match self.give(Arc::new(link)).await {
            Ok(()) => {
                reap(child, false);
                Ok(pid)
            }
            Err(e) => {
                reap(child, true);
                Err(e)
            }
        }
    }

    /// The hand-over on `link` (see the module doc, steps 1 to 3).
    async fn give(&self, link: Arc<UnixStream>) -> Result<(), UpgradeError> {
        link.set_read_timeout(Some(NEW_RUN_WAIT))?;
        link.set_write_timeout(Some(NEW_RUN_WAIT))?;
        let (offer, fds) = self.offer()?;
        // With the offer, while this run serves on: its plain connections,
        // which the new run registers before it says it is ready, so that
        // the pause has only what changed since to pass.
        let listed = self.net.movers();
        let early = listed.clone();
        let sent = call(&link, move |l| {
            wire::send(l, &Msg::Offer(offer), &borrow(&fds))?;
            wire::send(l, &Msg::Table { conns: early }, &[])
        })
        .await;
        // A new run that refuses the offer may answer and close before the
        // table is written (the write then fails with a broken pipe): its
        // answer, already in the socket, is the reason to report.
        let answer = call(&link, wire::recv::<Msg>).await;
        let answer = match (sent, answer) {
            (_, Ok((Msg::Refuse { reason }, _))) => return Err(UpgradeError::Refused(reason)),
            (Err(e), _) => return Err(e),
            (Ok(()), answer) => answer?.0,
        };
        match answer {
            Msg::Ready => {}
            other => return Err(UpgradeError::Unexpected(other.name().into())),
        }
        tracing::info!("upgrade: the new run is ready: handing over the connections and the state");
        // This one stops reading the listeners, and the messages of the
        // connections it keeps wait for the new run.
        self.net.stop_listening();
        let relayed = self.net.start_relay();
        match self.pass(&link, listed).await {
            Ok(()) => {
                super::keeper::keep(self.net.clone(), link.clone(), relayed, self.lost.clone());
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "upgrade: the new run failed after it was ready: reading the listeners again (the connections passed to it are lost)");
                self.net.stop_relay(relayed);
                self.net.resume_listening()?;
                Err(e)
            }
        }
    }

    /// Step 3, in the order that keeps the pause short: the state is still
    /// once the messages being handled are; what changed in the table the
    /// new run has (`listed`), the connections kept and the state go first
    /// (the new run then reads the listeners), the sockets after them as
    /// their writers give them up (each connection waits only for its
    /// own); then the new run's `Done`.
    async fn pass(&self, link: &Arc<UnixStream>, listed: Vec<Stopped>) -> Result<(), UpgradeError> {
        let paused = Instant::now();
        let until = paused + MOVE_WAIT;
        let (table, give_up) = self.net.pause(until).await;
        let stopped = paused.elapsed();
        let kept = self.net.kept(&table);
        let (count, n_kept) = (table.len(), kept.len());
        let (changed, gone) = changes(listed, &table);
        let work = Box::new(self.core.work_now(Instant::now()));
        let now = Instant::now();
        let bans = self.core.site().bans.list(now);
        let ids = self
            .core
            .config()
            .instances
            .iter()
            .map(|i| i.id.clone())
            .collect();
        let txns = (ids, self.core.txns_now(now));
        let state = Msg::State { work, bans, txns };
        // The state is taken: the busy connections stop while it goes (a
        // connection given up leaves this run's tables), so that their
        // sockets are ready to follow it at once.
        let busy = give_up.busy();
        call(link, move |l| {
            wire::send(l, &Msg::Table { conns: changed }, &[])?;
            wire::send(l, &Msg::Gone { conns: gone }, &[])?;
            wire::send(l, &Msg::Kept { conns: kept }, &[])?;
            wire::send(l, &state, &[])
        })
        .await?;
        let state_sent = paused.elapsed();
        // The new run reads the listeners: now the connections' sockets,
        // the busy ones first.
        let (passed, busy_sent) = self.pass_sockets(link, &give_up, busy, until).await?;
        let busy_sent = busy_sent.saturating_duration_since(paused);
        let sockets_sent = paused.elapsed();
        call(link, |l| wire::send(l, &Msg::Passed, &[])).await?;
        match call(link, wire::recv::<Msg>).await?.0 {
            Msg::Done => {}
            other => return Err(UpgradeError::Unexpected(other.name().into())),
        }
        self.admin_stop.cancel();
        self.control_stop.cancel();
        tracing::info!(
            connections = passed,
            listed = count,
            kept = n_kept,
            paused_ms = ms(stopped),
            state_ms = ms(state_sent),
            busy,
            busy_ms = ms(busy_sent),
            sockets_ms = ms(sockets_sent),
            done_ms = ms(paused.elapsed()),
            "upgrade: handed over; keeping the TLS and WSS connections until they close, their messages relayed to the new run"
        );
        Ok(())
    }

    /// The sockets of the connections that move, in frames of at most
    /// [`wire::MAX_FDS`], as their writers give them up; until none is
    /// left or `until`. The `busy` ones were asked first: the others are
    /// once as many were passed, or after [`BUSY_TURNS`]. How many were
    /// passed, and when the others were asked.
    async fn pass_sockets(
        &self,
        link: &Arc<UnixStream>,
        give_up: &GiveUp,
        busy: usize,
        until: Instant,
    ) -> Result<(usize, Instant), UpgradeError> {
        let mut passed = 0;
        let mut turns = 0;
        let mut idle_asked = None;
        loop {
            let (moved, more) = self.net.take_moved();
            turns += 1;
            let mut moved = moved.into_iter().peekable();
            while moved.peek().is_some() {
                let chunk = moved.by_ref().take(wire::MAX_FDS);
                let (conns, fds): (Vec<ConnState>, Vec<OwnedFd>) = chunk
                    .map(|m| {
                        let state = ConnState {
                            id: m.id,
                            unread: m.unread,
                            begun: m.begun,
                        };
                        (state, m.fd)
                    })
                    .unzip();
                passed += conns.len();
                call(link, move |l| {
                    wire::send(l, &Msg::Conns { conns }, &borrow(&fds))
                })
                .await?;
            }
            if idle_asked.is_none() && (passed >= busy || turns >= BUSY_TURNS) {
                give_up.idle();
                idle_asked = Some(Instant::now());
            }
            if !more || Instant::now() >= until {
                return Ok((passed, idle_asked.unwrap_or_else(Instant::now)));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The offer and its descriptors (duplicates: this run keeps its own
    /// until the hand-over is done).
    fn offer(&self) -> Result<(Offer, Vec<OwnedFd>), UpgradeError> {
        let mut fds = vec![
            self.control.as_fd().try_clone_to_owned()?,
            self.admin.as_fd().try_clone_to_owned()?,
        ];
        let config = self.core.config();
        let mut listeners = Vec::new();
        for (i, s) in self.net.sockets().into_iter().enumerate() {
            let l = config.listeners.get(i);
            let file = self.file_addrs.get(i).copied();
            let (Some(l), Some(file)) = (l, file) else {
                return Err(UpgradeError::Unexpected("listener list changed".into()));
            };
            for u in &s.udp {
                fds.push(u.as_fd().try_clone_to_owned()?);
            }
            if let Some(t) = &s.tcp {
                fds.push(t.as_fd().try_clone_to_owned()?);
            }
            listeners.push(OfferedListener {
                name: l.name.clone(),
                file,
                bound: (l.bind, l.advertise),
                udp: s.udp.len(),
                tcp: s.tcp.is_some(),
            });
        }
        if fds.len() > wire::MAX_FDS {
            return Err(UpgradeError::Unexpected(format!(
                "{} listening sockets: more than one frame carries",
                fds.len()
            )));
        }
        let offer = Offer {
            version: VERSION,
            epoch: self.core.flow_epoch(),
            first_conn: self.net.next_conn().saturating_add(CONN_GAP),
            listeners,
            run: self.run.clone(),
        };
        Ok((offer, fds))
    }

    /// The upgrade socket's loop: `sip-gate upgrade` asks, a new run takes.
    async fn serve(self: Arc<Self>, accept: tokio::net::UnixListener) {
        loop {
            let stream = tokio::select! {
                _ = self.control_stop.cancelled() => return,
                r = accept.accept() => match r {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "upgrade socket: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let me = self.clone();
            tokio::spawn(async move {
                if let Err(e) = me.on_connection(stream).await {
                    tracing::warn!(error = %e, "upgrade socket: connection failed");
                }
            });
        }
    }

    async fn on_connection(
        self: &Arc<Self>,
        stream: tokio::net::UnixStream,
    ) -> Result<(), UpgradeError> {
        let cred = rustix::net::sockopt::socket_peercred(&stream).map_err(std::io::Error::from)?;
        // The gate's own user, or root (a package's maintainer script).
        if cred.uid != rustix::process::geteuid() && !cred.uid.is_root() {
            tracing::warn!(
                uid = cred.uid.as_raw(),
                "upgrade socket: a process of another user: refused"
            );
            return Ok(());
        }
        let pid = cred.pid.as_raw_pid() as u32;
        let link = stream.into_std()?;
        link.set_nonblocking(false)?;
        link.set_read_timeout(Some(NEW_RUN_WAIT))?;
        let link = Arc::new(link);
        match call(&link, wire::recv::<Msg>).await?.0 {
            Msg::Upgrade => {
                tracing::info!(from = pid, "upgrade asked by `sip-gate upgrade`");
                let result = self.hand_over().await;
                let reply = match &result {
                    Ok(pid) => Msg::Upgraded { pid: *pid },
                    Err(e) => {
                        tracing::error!(error = %e, "upgrade failed: this run serves on");
                        Msg::Failed {
                            reason: e.to_string(),
                        }
                    }
                };
                // The answer before the word that lets this run end: with
                // nothing kept it exits at once, and `sip-gate upgrade`
                // read an end of file instead of its answer.
                let sent = call(&link, move |l| wire::send(l, &reply, &[])).await;
                if let Ok(pid) = result {
                    self.handed.send_replace(Some(pid));
                }
                sent?;
            }
            Msg::Take { version } => {
                tracing::info!(
                    from = pid,
                    version,
                    "upgrade: the new run asks to take over"
                );
                let tx = self.takes.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let link = Arc::try_unwrap(link)
                    .map_err(|_| UpgradeError::Unexpected("link still shared".into()))?;
                match tx {
                    Some(tx) => {
                        let _ = tx.send((link, pid)).await;
                    }
                    None => tracing::warn!(
                        from = pid,
                        "upgrade: a take with no upgrade running: ignored"
                    ),
                }
            }
            other => return Err(UpgradeError::Unexpected(other.name().into())),
        }
        Ok(())
    }
}

/// Binds the upgrade socket at `path` (a stale one left by a crash is
/// removed), readable and writable by this user only.
fn bind(path: &Path) -> std::io::Result<UnixListener> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let l = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

fn borrow(fds: &[OwnedFd]) -> Vec<std::os::fd::BorrowedFd<'_>> {
    fds.iter().map(AsFd::as_fd).collect()
}

/// Runs a blocking step on the link off the runtime's workers.
pub(super) async fn call<T: Send + 'static>(
    link: &Arc<UnixStream>,
    f: impl FnOnce(&UnixStream) -> Result<T, wire::WireError> + Send + 'static,
) -> Result<T, UpgradeError> {
    let l = link.clone();
    tokio::task::spawn_blocking(move || f(&l))
        .await
        .map_err(|e| UpgradeError::Unexpected(e.to_string()))?
        .map_err(UpgradeError::from)
}

/// Waits for the child in the background (killed first when `kill`), so
/// it leaves no zombie behind.
fn reap(mut child: Child, kill: bool) {
    std::thread::spawn(move || {
        if kill {
            let _ = child.kill();
        }
        let _ = child.wait();
    });
}

/// What differs between the table the new run registered (`listed`) and
/// the one at the pause (`now`): the entries new or changed (a flow's hold
/// moved by a second or more), and the ids gone.
fn changes(listed: Vec<Stopped>, now: &[Stopped]) -> (Vec<Stopped>, Vec<crate::txn::ConnId>) {
    let mut before: std::collections::HashMap<_, _> =
        listed.into_iter().map(|s| (s.id, s)).collect();
    let changed = now
        .iter()
        .filter(|s| match before.remove(&s.id) {
            Some(b) => {
                let held = |x: &Stopped| x.held.map(|d| d.as_secs());
                b.flow != s.flow || held(&b) != held(s)
            }
            None => true,
        })
        .copied()
        .collect();
    (changed, before.into_keys().collect())
}

/// Milliseconds, for the hand-over's log line.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
