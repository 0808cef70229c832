//! Commands in flight to the mgs, and the cookies media-ctl gives them.
//!
//! Clients choose their cookies, so two clients may use the same one, and
//! rtpengine caches answers by cookie alone. media-ctl therefore sends every
//! command under its own cookie, `<prefix><n>`, and maps the answer back to
//! the client's cookie. The prefix is random per process start, so a
//! restarted media-ctl never meets the answers rtpengine cached for the
//! previous one. Pings carry `<prefix>p<instance>.<seq>`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dashmap::DashMap;

use crate::command::Command;

/// What an mg's answer is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tag {
    /// A command in the pending table.
    Command(u64),
    /// A health ping of instance `idx`, round `seq`.
    Ping {
        /// Instance index.
        idx: usize,
        /// Ping round.
        seq: u64,
    },
}

/// Who waits for a command's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A client, under its own cookie.
    Client {
        /// Where the command came from.
        addr: SocketAddr,
        /// The client's cookie.
        cookie: Box<[u8]>,
        /// The client asked in JSON.
        json: bool,
    },
    /// One part of a command fanned out to the pool (`list`,
    /// `statistics`, or the search for a call media-ctl does not know).
    Part {
        /// The fan-out's id.
        fan: u64,
        /// The part's position.
        part: usize,
    },
    /// media-ctl's own `query` of a call idle for too long.
    IdleCheck,
    /// media-ctl's own `statistics`, to learn whether an mg holds calls it
    /// does not know of (after a start).
    Census,
}

/// One command sent to an mg and not answered yet.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// Who waits.
    pub origin: Origin,
    /// The command.
    pub command: Command,
    /// Its call, for call-scoped commands.
    pub call: Option<Box<[u8]>>,
    /// The instance it went to.
    pub mg: usize,
    /// The datagram sent (re-sent as is on a client retransmission).
    pub datagram: Bytes,
    /// When it was sent.
    pub sent: Instant,
}

/// The pending table and the cookie scheme.
#[derive(Debug)]
pub(crate) struct Upstream {
    prefix: Vec<u8>,
    next: AtomicU64,
    pending: DashMap<u64, Pending>,
}

impl Upstream {
    /// A table whose cookies start with `prefix` (no space in it).
    pub(crate) fn new(prefix: &str) -> Upstream {
        Upstream {
            prefix: prefix.as_bytes().to_vec(),
            next: AtomicU64::new(1),
            pending: DashMap::new(),
        }
    }

    /// A table with a random prefix (`mc<8 hex>-`).
    pub(crate) fn random() -> Upstream {
        Upstream::new(&format!("mc{:08x}-", rand::random::<u32>()))
    }

    /// Registers a command for `payload` (a bencoded dictionary) and returns
    /// its id and the datagram to send: `<our cookie> <payload>`.
    pub(crate) fn send(
        &self,
        origin: Origin,
        command: Command,
        call: Option<&[u8]>,
        mg: usize,
        payload: &[u8],
        now: Instant,
    ) -> (u64, Bytes) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut d = Vec::with_capacity(self.prefix.len() + 21 + payload.len());
        d.extend_from_slice(&self.prefix);
        d.extend_from_slice(id.to_string().as_bytes());
        d.push(b' ');
        d.extend_from_slice(payload);
        let datagram = Bytes::from(d);
        self.pending.insert(
            id,
            Pending {
                origin,
                command,
                call: call.map(Box::from),
                mg,
                datagram: datagram.clone(),
                sent: now,
            },
        );
        (id, datagram)
    }

    /// The ping datagram for instance `idx`, round `seq`.
    pub(crate) fn ping(&self, idx: usize, seq: u64) -> Bytes {
        let mut d = self.prefix.clone();
        d.extend_from_slice(format!("p{idx}.{seq} d7:command4:pinge").as_bytes());
        Bytes::from(d)
    }

    /// What an answer's cookie refers to; `None` for cookies media-ctl never
    /// made (a stray datagram, an answer meant for a previous process).
    pub(crate) fn tag(&self, cookie: &[u8]) -> Option<Tag> {
        let rest = std::str::from_utf8(cookie.strip_prefix(self.prefix.as_slice())?).ok()?;
        if let Some(ping) = rest.strip_prefix('p') {
            let (idx, seq) = ping.split_once('.')?;
            return Some(Tag::Ping {
                idx: idx.parse().ok()?,
                seq: seq.parse().ok()?,
            });
        }
        rest.parse().ok().map(Tag::Command)
    }

    /// Takes the pending command answered under `id`.
    pub(crate) fn take(&self, id: u64) -> Option<Pending> {
        self.pending.remove(&id).map(|(_, p)| p)
    }

    /// Puts a taken command back (an answer came from the wrong address).
    pub(crate) fn restore(&self, id: u64, p: Pending) {
        self.pending.insert(id, p);
    }

    /// The datagram of a pending command (for a client retransmission).
    pub(crate) fn resend(&self, id: u64) -> Option<(usize, Bytes)> {
        self.pending.get(&id).map(|p| (p.mg, p.datagram.clone()))
    }

    /// Removes and returns the commands sent `timeout` or longer ago.
    pub(crate) fn expired(&self, now: Instant, timeout: Duration) -> Vec<Pending> {
        let ids: Vec<u64> = self
            .pending
            .iter()
            .filter(|e| now.saturating_duration_since(e.sent) >= timeout)
            .map(|e| *e.key())
            .collect();
        ids.into_iter().filter_map(|id| self.take(id)).collect()
    }

    /// Commands in flight.
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ng::split_cookie;

    #[test]
    fn cookies_map_answers_back_and_nothing_else() {
        let u = Upstream::new("mcabc-");
        let t0 = Instant::now();
        let client = Origin::Client {
            json: false,
            addr: "127.0.0.1:5".parse().unwrap(),
            cookie: Box::from(&b"k1"[..]),
        };
        let (_, d) = u.send(
            client.clone(),
            Command::Offer,
            Some(b"c1"),
            2,
            b"d7:command5:offere",
            t0,
        );
        let (cookie, payload) = split_cookie(&d).unwrap();
        assert_eq!(payload, b"d7:command5:offere", "payload relayed untouched");
        let Some(Tag::Command(id)) = u.tag(cookie) else {
            panic!("{cookie:?}")
        };
        assert_eq!(u.resend(id).unwrap().0, 2);
        let p = u.take(id).unwrap();
        assert_eq!((p.origin, p.mg), (client, 2));
        assert!(u.take(id).is_none(), "answered once");

        let ping = u.ping(7, 42);
        let (cookie, _) = split_cookie(&ping).unwrap();
        assert_eq!(u.tag(cookie), Some(Tag::Ping { idx: 7, seq: 42 }));
        for stray in [
            &b"k1"[..],
            b"mcabc-",
            b"mcabc-x",
            b"mcxyz-1",
            b"mcabc-p1",
            b"mcabc-p.1",
        ] {
            assert_eq!(u.tag(stray), None, "{:?}", String::from_utf8_lossy(stray));
        }
    }

    #[test]
    fn expired_commands_leave_the_table() {
        let u = Upstream::new("m-");
        let t0 = Instant::now();
        u.send(Origin::IdleCheck, Command::Query, Some(b"c"), 0, b"de", t0);
        u.send(
            Origin::Census,
            Command::Statistics,
            None,
            1,
            b"de",
            t0 + Duration::from_secs(1),
        );
        let gone = u.expired(t0 + Duration::from_millis(1500), Duration::from_secs(1));
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].origin, Origin::IdleCheck);
        assert_eq!(u.len(), 1);
    }
}
