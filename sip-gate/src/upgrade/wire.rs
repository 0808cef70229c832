//! The hand-over's frames on its unix stream socket: each a header (the
//! body's length and how many descriptors ride with it, both `u32`
//! big-endian), a JSON body and the descriptors as `SCM_RIGHTS`, sent by
//! one `sendmsg`. Descriptors come back as `OwnedFd` (rustix), so no
//! unsafe code touches them, and one that is never used is closed.
//!
//! The socket is blocking with a timeout on each read and write: a peer
//! that stops talking fails the hand-over instead of holding it.

use std::io::{IoSlice, IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The most descriptors one frame carries (the kernel takes 253).
pub(crate) const MAX_FDS: usize = 200;
/// The largest body accepted (a work book of many registrations).
const MAX_BODY: usize = 256 << 20;
const HEADER: usize = 8;

/// Why the hand-over's link failed.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The socket failed (the peer went, a timeout).
    #[error("hand-over socket: {0}")]
    Io(#[from] std::io::Error),
    /// A body that is not the message expected.
    #[error("hand-over message unreadable: {0}")]
    Json(#[from] serde_json::Error),
    /// Lengths or descriptor counts that do not add up.
    #[error("hand-over frame malformed: {0}")]
    Frame(&'static str),
}

/// Sends `msg` with `fds` (at most [`MAX_FDS`]).
pub(crate) fn send<T: Serialize>(
    sock: &UnixStream,
    msg: &T,
    fds: &[BorrowedFd<'_>],
) -> Result<(), WireError> {
    if fds.len() > MAX_FDS {
        return Err(WireError::Frame("too many descriptors in one frame"));
    }
    let body = serde_json::to_vec(msg)?;
    let len = u32::try_from(body.len()).map_err(|_| WireError::Frame("body too long"))?;
    let mut header = [0u8; HEADER];
    header[..4].copy_from_slice(&len.to_be_bytes());
    header[4..].copy_from_slice(&(fds.len() as u32).to_be_bytes());
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(WireError::Frame(
            "descriptors do not fit the control buffer",
        ));
    }
    let iov = [IoSlice::new(&header), IoSlice::new(&body)];
    let sent = sendmsg(sock.as_fd(), &iov, &mut control, SendFlags::NOSIGNAL)
        .map_err(std::io::Error::from)?;
    // The descriptors rode with the first bytes; the rest follows plainly.
    let mut rest = header.iter().chain(body.iter()).skip(sent).copied();
    let tail: Vec<u8> = rest.by_ref().collect();
    (&*sock).write_all(&tail)?;
    Ok(())
}

/// Receives one frame: its message and its descriptors.
pub(crate) fn recv<T: DeserializeOwned>(sock: &UnixStream) -> Result<(T, Vec<OwnedFd>), WireError> {
    let mut fds = Vec::new();
    let mut header = [0u8; HEADER];
    recv_exact(sock, &mut header, &mut fds)?;
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let want = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if len > MAX_BODY || want > MAX_FDS {
        return Err(WireError::Frame("header out of bounds"));
    }
    let mut body = vec![0u8; len];
    recv_exact(sock, &mut body, &mut fds)?;
    if fds.len() != want {
        return Err(WireError::Frame("descriptor count differs from the header"));
    }
    Ok((serde_json::from_slice(&body)?, fds))
}

/// Fills `buf`, keeping every descriptor that comes with the bytes.
fn recv_exact(sock: &UnixStream, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> Result<(), WireError> {
    let mut got = 0;
    while got < buf.len() {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut iov = [IoSliceMut::new(&mut buf[got..])];
        let r = recvmsg(
            sock.as_fd(),
            &mut iov,
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )
        .map_err(std::io::Error::from)?;
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = m {
                fds.extend(received);
            }
        }
        if r.bytes == 0 {
            return Err(WireError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        got += r.bytes;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Msg {
        text: String,
    }

    /// A frame crosses with its descriptors, which name the same open
    /// files (a socket bound on one side is bound on the other), and a
    /// large body follows whole.
    #[test]
    fn frames_carry_their_descriptors() {
        let (a, b) = UnixStream::pair().unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let at = udp.local_addr().unwrap();
        let theirs = udp.try_clone().unwrap();
        // Larger than the socket's buffer: it goes as the reader reads.
        let sender = std::thread::spawn(move || {
            let big = Msg {
                text: "x".repeat(1 << 20),
            };
            send(&a, &big, &[theirs.as_fd()]).unwrap();
            let none = Msg {
                text: "none".into(),
            };
            send(&a, &none, &[]).unwrap();
        });
        let (m, fds): (Msg, _) = recv(&b).unwrap();
        assert_eq!(m.text.len(), 1 << 20);
        assert_eq!(fds.len(), 1);
        assert_ne!(fds[0].as_raw_fd(), udp.as_raw_fd());
        let got = std::net::UdpSocket::from(fds.into_iter().next().unwrap());
        assert_eq!(got.local_addr().unwrap(), at);
        let (m, fds): (Msg, _) = recv(&b).unwrap();
        assert_eq!((m.text.as_str(), fds.len()), ("none", 0));
        sender.join().unwrap();
        // The sender's end closed with its thread.
        let gone = recv::<Msg>(&b).unwrap_err();
        assert!(matches!(gone, WireError::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof));
    }
}
