//! What a command asks for: the ng command names rtpengine knows, which of
//! them belong to a call, and a borrowed view of one request.

use crate::ng::{split_cookie, DictView, NgError};

/// Largest datagram accepted, in bytes. rtpengine reads ng datagrams into a
/// 64 KiB buffer; anything near that is not a command a SIP proxy sends.
pub(crate) const MAX_DATAGRAM: usize = 60_000;

/// The commands of rtpengine's ng protocol (10.x).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// Liveness; answered `pong` by media-ctl itself.
    Ping,
    /// SDP offer; the first one of a call-id starts a new call.
    Offer,
    /// SDP answer.
    Answer,
    /// Ends a call (or one branch of it).
    Delete,
    /// Call state and statistics.
    Query,
    /// Call-ids on the media gateway; aggregated over the pool.
    List,
    /// Gateway statistics; aggregated over the pool.
    Statistics,
    /// Starts a publishing call (conferencing); creates a call like `offer`.
    Publish,
    /// Any other command of one call (recording, media blocking, DTMF,
    /// playback, subscriptions): relayed to the call's mg.
    InCall(&'static str),
}

/// Every call-scoped command that is neither offer, answer, delete, query
/// nor publish; matched ASCII case-insensitively.
const IN_CALL: [&str; 18] = [
    "start recording",
    "stop recording",
    "pause recording",
    "start forwarding",
    "stop forwarding",
    "block DTMF",
    "unblock DTMF",
    "block media",
    "unblock media",
    "silence media",
    "unsilence media",
    "play media",
    "stop media",
    "play DTMF",
    "subscribe request",
    "subscribe answer",
    "unsubscribe",
    "connect",
];

impl Command {
    /// The command named `name`, or `None` for anything rtpengine would
    /// answer "Unrecognized command".
    pub fn from_name(name: &[u8]) -> Option<Command> {
        let is = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
        Some(match () {
            _ if is("ping") => Command::Ping,
            _ if is("offer") => Command::Offer,
            _ if is("answer") => Command::Answer,
            _ if is("delete") => Command::Delete,
            _ if is("query") => Command::Query,
            _ if is("list") => Command::List,
            _ if is("statistics") => Command::Statistics,
            _ if is("publish") => Command::Publish,
            _ => Command::InCall(IN_CALL.iter().find(|c| is(c))?),
        })
    }

    /// The name, also the metrics label (bounded: no client text).
    pub fn name(self) -> &'static str {
        match self {
            Command::Ping => "ping",
            Command::Offer => "offer",
            Command::Answer => "answer",
            Command::Delete => "delete",
            Command::Query => "query",
            Command::List => "list",
            Command::Statistics => "statistics",
            Command::Publish => "publish",
            Command::InCall(name) => name,
        }
    }

    /// True for commands about one call (they carry a `call-id`).
    pub fn is_call_scoped(self) -> bool {
        !matches!(self, Command::Ping | Command::List | Command::Statistics)
    }

    /// True for commands that may start a call on an mg.
    pub fn creates_call(self) -> bool {
        matches!(self, Command::Offer | Command::Publish)
    }
}

/// Why a datagram is refused before any routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// No cookie: nothing to reply to; dropped and counted.
    #[error("no cookie")]
    NoCookie,
    /// Larger than [`MAX_DATAGRAM`].
    #[error("oversized datagram")]
    Oversized,
    /// The payload is not a bencoded dictionary.
    #[error("Could not decode bencode dictionary")]
    Bencode(NgError),
    /// No `command` string.
    #[error("No command given")]
    NoCommand,
    /// A command rtpengine does not know.
    #[error("Unrecognized command")]
    UnknownCommand,
    /// A call-scoped command without `call-id`.
    #[error("No call-id in message")]
    NoCallId,
}

impl Refusal {
    /// The bounded metrics label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Refusal::NoCookie => "no_cookie",
            Refusal::Oversized => "oversized",
            Refusal::Bencode(_) => "bad_bencode",
            Refusal::NoCommand => "no_command",
            Refusal::UnknownCommand => "unknown_command",
            Refusal::NoCallId => "no_call_id",
        }
    }
}

/// One ng request, borrowed from its datagram.
#[derive(Debug, Clone)]
pub(crate) struct Request<'a> {
    /// The client's cookie.
    pub cookie: &'a [u8],
    /// The command.
    pub command: Command,
    /// `call-id`, present for call-scoped commands.
    pub call_id: Option<&'a [u8]>,
    /// `to-tag`: on an `offer` it marks a re-INVITE of an existing dialog.
    pub to_tag: Option<&'a [u8]>,
    /// `limit` of a `list`.
    pub limit: Option<i64>,
    /// The bencoded dictionary exactly as received (relayed untouched), or
    /// the one a JSON request stood for.
    pub payload: &'a [u8],
    /// The client asked in JSON and is answered in JSON.
    pub json: bool,
}

impl<'a> Request<'a> {
    /// Reads a request. On error, the cookie (when there is one) is
    /// returned too, so the caller can answer with an ng error.
    pub(crate) fn parse(datagram: &'a [u8]) -> Result<Request<'a>, (Option<&'a [u8]>, Refusal)> {
        let (cookie, payload) = split_cookie(datagram).map_err(|_| (None, Refusal::NoCookie))?;
        let refuse = |r| (Some(cookie), r);
        if datagram.len() > MAX_DATAGRAM {
            return Err(refuse(Refusal::Oversized));
        }
        let dict = DictView::parse(payload).map_err(|e| refuse(Refusal::Bencode(e)))?;
        let name = dict
            .bytes("command")
            .ok_or_else(|| refuse(Refusal::NoCommand))?;
        let command = Command::from_name(name).ok_or_else(|| refuse(Refusal::UnknownCommand))?;
        let call_id = dict.bytes("call-id").filter(|c| !c.is_empty());
        if command.is_call_scoped() && call_id.is_none() {
            return Err(refuse(Refusal::NoCallId));
        }
        Ok(Request {
            cookie,
            command,
            call_id,
            to_tag: dict.bytes("to-tag").filter(|t| !t.is_empty()),
            limit: dict.int("limit"),
            payload,
            json: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_kamailio_sends() {
        let d = b"7_3 d7:call-id5:abc@x7:command5:offer8:from-tag2:f113:received-froml3:IP49:127.0.0.1e3:sdp3:v=08:supportsl10:load limite10:via-branch5:z9hG4e";
        let r = Request::parse(d).unwrap();
        assert_eq!(r.cookie, b"7_3");
        assert_eq!(r.command, Command::Offer);
        assert_eq!(r.call_id, Some(&b"abc@x"[..]));
        assert_eq!(r.to_tag, None);
        assert_eq!(r.payload, &d[4..]);
        let r = Request::parse(b"c d7:command10:block DTMF7:call-id1:xe").unwrap();
        assert_eq!(r.command, Command::InCall("block DTMF"));
        assert_eq!(
            Command::from_name(b"BLOCK dtmf"),
            Some(Command::InCall("block DTMF"))
        );
        let r = Request::parse(b"c d7:command4:list5:limiti10ee").unwrap();
        assert_eq!((r.command, r.limit), (Command::List, Some(10)));
    }

    #[test]
    fn refusals_keep_the_cookie_when_there_is_one() {
        type Case = (&'static [u8], Option<&'static [u8]>, Refusal);
        let cases: [Case; 6] = [
            (b"nocookie", None, Refusal::NoCookie),
            (
                b"c1 d7:commanxe",
                Some(b"c1"),
                Refusal::Bencode(NgError::Malformed(4)),
            ),
            (b"c2 d1:ai1ee", Some(b"c2"), Refusal::NoCommand),
            (
                b"c3 d7:command5:bogose",
                Some(b"c3"),
                Refusal::UnknownCommand,
            ),
            (b"c4 d7:command6:answere", Some(b"c4"), Refusal::NoCallId),
            (
                b"c5 d7:command6:answer7:call-id0:e",
                Some(b"c5"),
                Refusal::NoCallId,
            ),
        ];
        for (d, cookie, why) in cases {
            let (c, r) = Request::parse(d).unwrap_err();
            assert_eq!(c, cookie, "{:?}", String::from_utf8_lossy(d));
            assert_eq!(
                std::mem::discriminant(&r),
                std::mem::discriminant(&why),
                "{r:?}"
            );
        }
        let big = [
            b"c6 d3:sdp60000:".to_vec(),
            vec![b'x'; 60_000],
            b"e".to_vec(),
        ]
        .concat();
        assert_eq!(
            Request::parse(&big).unwrap_err(),
            (Some(&b"c6"[..]), Refusal::Oversized)
        );
    }
}
