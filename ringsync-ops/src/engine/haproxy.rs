//! HAProxy's runtime API (the stats socket at level admin, over TCP or a
//! unix socket): `show servers state <backend>` to read,
//! `set server <backend>/<server> state drain|ready` to change.
//!
//! The driver owns the forced-drain bit of a server's admin state (0x08
//! in `srv_admin_state`): set for a draining instance, clear for a normal
//! one. A server an operator put in maintenance by hand is not a
//! divergence while its instance is normal. One command per connection:
//! the API closes a non-interactive connection after its answer.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::backend::{Backend, Seen, Want};
use super::error::{bounded, EngineError};
use ringsync::config::{RuntimeAddress, Service};

/// `srv_admin_state`'s forced drain (`SRV_ADMF_FDRAIN`).
const FORCED_DRAIN: u32 = 0x08;
/// `srv_admin_state`'s maintenance bits (forced, inherited, config, resolution).
const MAINT: u32 = 0x01 | 0x02 | 0x04 | 0x20;
/// Most bytes of one answer read.
const MAX_ANSWER: u64 = 4 << 20;

/// One HAProxy's backends.
pub(crate) struct Haproxy {
    address: RuntimeAddress,
    timeout: Duration,
    /// instance id → (backend, server).
    targets: BTreeMap<String, (String, String)>,
}

impl Haproxy {
    pub(crate) fn new(
        address: &RuntimeAddress,
        backends: &BTreeMap<Service, String>,
        servers: &BTreeMap<String, String>,
        services: &HashMap<String, Service>,
        timeout: Duration,
    ) -> Haproxy {
        let targets = servers
            .iter()
            .filter_map(|(id, srv)| {
                let be = backends.get(services.get(id)?)?;
                Some((id.clone(), (be.clone(), srv.clone())))
            })
            .collect();
        Haproxy {
            address: address.clone(),
            timeout,
            targets,
        }
    }

    /// Sends one command, reads the answer to the end.
    async fn command(&self, line: &str) -> Result<String, EngineError> {
        let at = self.address.to_string();
        let unreachable = |e: std::io::Error| EngineError::Unreachable {
            at: at.clone(),
            reason: e.to_string(),
        };
        let exchange = async {
            match &self.address {
                RuntimeAddress::Tcp(a) => {
                    let s = tokio::net::TcpStream::connect(a)
                        .await
                        .map_err(unreachable)?;
                    talk(s, line).await.map_err(unreachable)
                }
                RuntimeAddress::Unix(p) => {
                    let s = tokio::net::UnixStream::connect(p)
                        .await
                        .map_err(unreachable)?;
                    talk(s, line).await.map_err(unreachable)
                }
            }
        };
        let bytes = bounded(&at, self.timeout, exchange).await?;
        String::from_utf8(bytes).map_err(|_| EngineError::Garbage {
            at,
            reason: "an answer that is not text".into(),
        })
    }

    fn garbage(&self, reason: String) -> EngineError {
        EngineError::Garbage {
            at: self.address.to_string(),
            reason,
        }
    }
}

async fn talk<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, line: &str) -> std::io::Result<Vec<u8>> {
    s.write_all(format!("{line}\n").as_bytes()).await?;
    let mut out = Vec::new();
    (&mut s).take(MAX_ANSWER).read_to_end(&mut out).await?;
    Ok(out)
}

/// `show servers state`'s answer as (backend, server) → admin state bits,
/// columns found by the header's names.
pub(crate) fn parse_state(text: &str) -> Result<HashMap<(String, String), u32>, String> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let version = lines.next().ok_or("an empty answer")?;
    if version != "1" {
        return Err(format!(
            "expected the state format version 1, got `{}`",
            cut(version)
        ));
    }
    let header = lines
        .next()
        .and_then(|h| h.strip_prefix('#'))
        .ok_or("no `#` header line")?;
    let cols: Vec<&str> = header.split_whitespace().collect();
    let col = |n: &str| {
        cols.iter()
            .position(|c| *c == n)
            .ok_or(format!("no `{n}` column"))
    };
    let (be, srv, admin) = (col("be_name")?, col("srv_name")?, col("srv_admin_state")?);
    let mut out = HashMap::new();
    for l in lines {
        let f: Vec<&str> = l.split_whitespace().collect();
        let get = |i: usize| {
            f.get(i)
                .copied()
                .ok_or(format!("a short line `{}`", cut(l)))
        };
        let bits = get(admin)?
            .parse::<u32>()
            .map_err(|_| format!("a non-numeric admin state in `{}`", cut(l)))?;
        out.insert((get(be)?.to_owned(), get(srv)?.to_owned()), bits);
    }
    Ok(out)
}

fn cut(s: &str) -> String {
    s.chars().take(80).collect()
}

/// The admin state in words, for status.
fn words(bits: u32) -> String {
    let mut w = Vec::new();
    if bits & MAINT != 0 {
        w.push("maint");
    }
    if bits & (FORCED_DRAIN | 0x10) != 0 {
        w.push("drain");
    }
    if w.is_empty() {
        w.push("ready");
    }
    w.join("+")
}

impl Backend for Haproxy {
    fn address(&self) -> String {
        self.address.to_string()
    }

    fn read(&self) -> BoxFuture<'_, Result<BTreeMap<String, Seen>, EngineError>> {
        Box::pin(async move {
            let mut backends: Vec<&String> = self.targets.values().map(|(b, _)| b).collect();
            backends.sort();
            backends.dedup();
            let mut state = HashMap::new();
            for b in backends {
                let text = self.command(&format!("show servers state {b}")).await?;
                if text.trim() == "Can't find backend." {
                    continue;
                }
                let s = parse_state(&text)
                    .map_err(|r| self.garbage(format!("show servers state {b}: {r}")))?;
                state.extend(s);
            }
            Ok(self
                .targets
                .iter()
                .filter_map(|(id, key)| {
                    let bits = *state.get(key)?;
                    Some((
                        id.clone(),
                        Seen {
                            says: words(bits),
                            excluded: bits & FORCED_DRAIN != 0,
                        },
                    ))
                })
                .collect())
        })
    }

    fn apply<'a>(&'a self, id: &'a str, want: Want) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async move {
            let Some((be, srv)) = self.targets.get(id) else {
                return Err(self.garbage(format!("no server for `{id}`")));
            };
            let state = match want {
                Want::Drain => "drain",
                Want::Active => "ready",
            };
            let answer = self
                .command(&format!("set server {be}/{srv} state {state}"))
                .await?;
            // Success is an empty answer; anything else is HAProxy's refusal.
            match answer.trim() {
                "" => Ok(()),
                words => Err(EngineError::Refused {
                    at: self.address.to_string(),
                    reason: cut(words),
                }),
            }
        })
    }

    fn target(&self, id: &str) -> Option<String> {
        self.targets.get(id).map(|(b, s)| format!("{b}/{s}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_ex_1_servers_state_parses_and_garbage_is_named() {
        let text = "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight\n\
                    3 be_ws 1 ws-1 127.0.87.41 2 8 1\n3 be_ws 2 ws-2 127.0.87.42 0 1 1\n\n";
        let s = parse_state(text).unwrap();
        assert_eq!(s[&("be_ws".to_owned(), "ws-1".to_owned())], 8);
        assert_eq!(words(8), "drain");
        assert_eq!(words(1), "maint");
        assert_eq!(words(0), "ready");
        assert!(parse_state("HTTP/1.0 400 Bad request\r\n").is_err());
        assert!(parse_state("1\n# be_name srv_name\nx y\n").is_err());
        assert!(parse_state("1\n# be_name srv_name srv_admin_state\nbe s nine\n").is_err());
    }
}
