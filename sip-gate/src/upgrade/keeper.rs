//! The link after a hand-over (R-GW-3): the old run keeps its TLS and
//! WSS connections and passes their messages to the new run, which
//! decides and sends back what goes into them (`transport/relay.rs`). Two
//! threads on each side, one reading the link and one writing it, so
//! neither side's runtime waits on the other.

use std::collections::HashSet;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::{wire, Msg};
use crate::transport::{Kept, NetHandle, Relayed};
use crate::txn::ConnId;

/// How long a write to the link may block before the other run counts as
/// gone.
const WRITE_WAIT: Duration = Duration::from_secs(5);

/// The old run: relays its connections' messages (those queued in `rx`
/// since the cut-over first) to the new run and writes what comes back,
/// until the link closes (then `lost`).
pub(super) fn keep(
    net: NetHandle,
    link: Arc<UnixStream>,
    rx: std::sync::mpsc::Receiver<Relayed>,
    lost: CancellationToken,
) {
    let _ = link.set_read_timeout(None);
    let _ = link.set_write_timeout(Some(WRITE_WAIT));
    let out = link.clone();
    let writer_lost = lost.clone();
    spawn("upgrade-keep-out", move || {
        for r in rx {
            let msg = match r {
                Relayed::In { conn, data } => Msg::In {
                    conn,
                    data: data.to_vec(),
                },
                Relayed::Closed(conn) => Msg::Closed { conn },
            };
            if wire::send(&out, &msg, &[]).is_err() {
                writer_lost.cancel();
                return;
            }
        }
    });
    spawn("upgrade-keep-in", move || loop {
        match wire::recv::<Msg>(&link) {
            Ok((Msg::Out { conn, data }, _)) => net.relay_out(conn, Bytes::from(data)),
            Ok((other, _)) => tracing::debug!(msg = other.name(), "keeper: unexpected message"),
            Err(e) => {
                tracing::warn!(error = %e, "keeper: the new run is gone: closing the connections kept");
                lost.cancel();
                return;
            }
        }
    });
}

/// The new run: takes in the connections the old run keeps (`kept`) and
/// handles what it relays, until the link closes; then they are closed
/// here too.
pub(super) fn relay(net: NetHandle, link: Arc<UnixStream>, kept: Vec<Kept>) {
    let _ = link.set_read_timeout(None);
    let _ = link.set_write_timeout(Some(WRITE_WAIT));
    let (out_tx, out_rx) = std::sync::mpsc::channel::<(ConnId, Bytes)>();
    let mut known = HashSet::new();
    for k in kept {
        known.insert(k.id);
        net.adopt_relayed(k, out_tx.clone());
    }
    let out = link.clone();
    spawn("upgrade-relay-out", move || {
        for (conn, data) in out_rx {
            let msg = Msg::Out {
                conn,
                data: data.to_vec(),
            };
            if wire::send(&out, &msg, &[]).is_err() {
                return;
            }
        }
    });
    spawn("upgrade-relay-in", move || loop {
        match wire::recv::<Msg>(&link) {
            Ok((Msg::In { conn, data }, _)) => {
                // One the old run opened after it listed what it keeps.
                if known.insert(conn.id) {
                    net.adopt_relayed(conn, out_tx.clone());
                }
                net.relayed_in(conn, Bytes::from(data));
            }
            Ok((Msg::Closed { conn }, _)) => {
                known.remove(&conn);
                net.relayed_closed(conn);
            }
            Ok((other, _)) => tracing::debug!(msg = other.name(), "relay: unexpected message"),
            Err(_) => {
                tracing::info!(
                    left = known.len(),
                    "the old run ended: the connections it kept are closed"
                );
                for id in known.drain() {
                    net.relayed_closed(id);
                }
                return;
            }
        }
    });
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) {
    if let Err(e) = std::thread::Builder::new().name(name.into()).spawn(f) {
        tracing::error!(error = %e, thread = name, "cannot start the upgrade link's thread");
    }
}
