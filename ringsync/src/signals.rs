//! The signals every daemon (sip-gate, media-ctl, `ringsync serve`) acts
//! on, one way: SIGTERM and SIGINT stop, SIGHUP reloads; and SIGUSR2, on
//! which sip-gate hands over to the binary now installed (R-GW-3).
//!
//! A daemon registers only what it handles: registering SIGHUP replaces its
//! default action (the process exits) for the rest of the process's life,
//! so a daemon that does not reload keeps that default by never asking for
//! [`Signal::Hangup`].

use std::fmt;

/// A signal a daemon acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM (`systemctl stop`): stop.
    Terminate,
    /// SIGINT (ctrl-c): stop.
    Interrupt,
    /// SIGHUP (`systemctl reload`): reload.
    Hangup,
    /// SIGUSR2: upgrade (sip-gate starts the binary now installed and
    /// hands over to it, R-GW-3), as nginx does.
    User2,
}

impl Signal {
    /// The signal's name, as the logs and systemd's status line give it.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Terminate => "SIGTERM",
            Signal::Interrupt => "SIGINT",
            Signal::Hangup => "SIGHUP",
            Signal::User2 => "SIGUSR2",
        }
    }

    /// Whether the signal asks the daemon to stop (SIGTERM, SIGINT).
    pub fn is_stop(self) -> bool {
        matches!(self, Signal::Terminate | Signal::Interrupt)
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The signals a daemon registered, awaited one at a time with
/// [`Signals::recv`]. Registered once, up front: a signal that arrives
/// while the daemon is busy is kept until the next `recv`, never missed.
pub struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    hup: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    usr2: Option<tokio::signal::unix::Signal>,
    /// Elsewhere only ctrl-c, as SIGINT.
    #[cfg(not(unix))]
    int: bool,
}

impl Signals {
    /// SIGTERM and SIGINT: the stop signals.
    pub fn stop() -> std::io::Result<Signals> {
        Signals::new(&[Signal::Terminate, Signal::Interrupt])
    }

    /// SIGHUP: the reload signal.
    pub fn reload() -> std::io::Result<Signals> {
        Signals::new(&[Signal::Hangup])
    }

    /// SIGUSR2: the upgrade signal.
    pub fn upgrade() -> std::io::Result<Signals> {
        Signals::new(&[Signal::User2])
    }

    /// The signals in `which`; must be called within a tokio runtime.
    pub fn new(which: &[Signal]) -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let register =
                |s: Signal, kind: SignalKind| which.contains(&s).then(|| signal(kind)).transpose();
            Ok(Signals {
                term: register(Signal::Terminate, SignalKind::terminate())?,
                int: register(Signal::Interrupt, SignalKind::interrupt())?,
                hup: register(Signal::Hangup, SignalKind::hangup())?,
                usr2: register(Signal::User2, SignalKind::user_defined2())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {
            int: which.contains(&Signal::Interrupt),
        })
    }

    /// The next signal among those registered; never returns when none is.
    pub async fn recv(&mut self) -> Signal {
        #[cfg(unix)]
        {
            async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
                // `None` only once the runtime shuts down: wait no more.
                let got = match s {
                    Some(s) => s.recv().await,
                    None => None,
                };
                if got.is_none() {
                    std::future::pending::<()>().await;
                }
            }
            tokio::select! {
                () = next(&mut self.term) => Signal::Terminate,
                () = next(&mut self.int) => Signal::Interrupt,
                () = next(&mut self.hup) => Signal::Hangup,
                () = next(&mut self.usr2) => Signal::User2,
            }
        }
        #[cfg(not(unix))]
        {
            if !self.int || tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
            Signal::Interrupt
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use nix::sys::signal::{raise, Signal as Raw};
    use std::time::Duration;

    /// One test raises every signal, so no other test of this binary sees
    /// them: each is registered before it is raised (the process would
    /// otherwise take the default action and exit).
    #[tokio::test]
    async fn each_signal_reaches_only_the_signals_that_registered_it() {
        let mut stop = Signals::stop().unwrap();
        let mut reload = Signals::reload().unwrap();
        let wait = Duration::from_secs(5);

        raise(Raw::SIGHUP).unwrap();
        let got = tokio::time::timeout(wait, reload.recv()).await.unwrap();
        assert_eq!(got, Signal::Hangup);
        assert!(!got.is_stop());
        let stray = tokio::time::timeout(Duration::from_millis(200), stop.recv()).await;
        assert!(stray.is_err(), "SIGHUP reached the stop signals: {stray:?}");

        raise(Raw::SIGTERM).unwrap();
        let got = tokio::time::timeout(wait, stop.recv()).await.unwrap();
        assert_eq!((got, got.name()), (Signal::Terminate, "SIGTERM"));
        assert!(got.is_stop());

        raise(Raw::SIGINT).unwrap();
        let got = tokio::time::timeout(wait, stop.recv()).await.unwrap();
        assert_eq!((got, got.to_string()), (Signal::Interrupt, "SIGINT".into()));
        let stray = tokio::time::timeout(Duration::from_millis(200), reload.recv()).await;
        assert!(stray.is_err(), "a stop signal reached SIGHUP's: {stray:?}");

        let mut upgrade = Signals::upgrade().unwrap();
        raise(Raw::SIGUSR2).unwrap();
        let got = tokio::time::timeout(wait, upgrade.recv()).await.unwrap();
        assert_eq!((got, got.name()), (Signal::User2, "SIGUSR2"));
        assert!(!got.is_stop());
        let stray = tokio::time::timeout(Duration::from_millis(200), stop.recv()).await;
        assert!(
            stray.is_err(),
            "SIGUSR2 reached the stop signals: {stray:?}"
        );
    }
}
