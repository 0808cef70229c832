//! Commands sent to every media gateway at once: `list` and `statistics`
//! (answered with the pool's sum), and the search for a call media-ctl does
//! not know (after a restart, or an offer that arrives in a reply): its
//! command goes to the mg that knows the call, never to a new one
//! (R-MG-2, R-MG-5).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use bytes::Bytes;

use crate::command::Command;
use crate::ng::{NgMessage, Value};

/// What the fan-out is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FanKind {
    /// `list`: every mg's call-ids, up to `limit` in all.
    List {
        /// Most call-ids in the answer.
        limit: usize,
    },
    /// `statistics`: summed counters and every mg's own.
    Statistics,
    /// `query` of every mg for an unknown call, before relaying `command`.
    Lookup {
        /// The client's command.
        command: Command,
        /// Its call-id.
        call: Box<[u8]>,
        /// Its dictionary as received.
        payload: Bytes,
    },
}

/// One mg's part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Part {
    /// Instance index.
    pub mg: usize,
    /// Instance id (for warnings and the per-mg statistics).
    pub id: String,
    /// Its answer's dictionary, or why there is none.
    pub answer: Option<Result<Bytes, String>>,
}

/// A fan-out in progress.
#[derive(Debug, Clone)]
pub(crate) struct Fan {
    /// The client.
    pub client: SocketAddr,
    /// The client's cookie.
    pub cookie: Box<[u8]>,
    /// The client asked in JSON.
    pub json: bool,
    /// What for.
    pub kind: FanKind,
    /// One per mg asked.
    pub parts: Vec<Part>,
}

impl Fan {
    /// Every part answered or failed.
    pub(crate) fn complete(&self) -> bool {
        self.parts.iter().all(|p| p.answer.is_some())
    }

    /// The answer to `list` or `statistics` (call once complete).
    pub(crate) fn reply(&self) -> Vec<u8> {
        let mut d = BTreeMap::new();
        d.insert(b"result".to_vec(), Value::str("ok"));
        let failed: Vec<String> = self
            .parts
            .iter()
            .filter_map(|p| match &p.answer {
                Some(Err(e)) => Some(format!("{}: {e}", p.id)),
                None => Some(format!("{}: no answer", p.id)),
                Some(Ok(_)) => None,
            })
            .collect();
        if !failed.is_empty() {
            d.insert(b"warning".to_vec(), Value::str(&failed.join("; ")));
        }
        let answers = self.parts.iter().filter_map(|p| match &p.answer {
            Some(Ok(b)) => Some((p, b)),
            _ => None,
        });
        match &self.kind {
            FanKind::List { limit } => {
                let mut calls = Vec::new();
                for (_, b) in answers {
                    if let Some(Value::List(l)) = dict(b).remove(&b"calls"[..]) {
                        calls.extend(l);
                    }
                }
                calls.truncate(*limit);
                d.insert(b"calls".to_vec(), Value::List(calls));
            }
            FanKind::Statistics => {
                let mut current = BTreeMap::new();
                let mut total = BTreeMap::new();
                let mut per_mg = BTreeMap::new();
                for (p, b) in answers {
                    let Some(Value::Dict(stats)) = dict(b).remove(&b"statistics"[..]) else {
                        continue;
                    };
                    sum_ints(&mut current, stats.get(&b"currentstatistics"[..]));
                    sum_ints(&mut total, stats.get(&b"totalstatistics"[..]));
                    per_mg.insert(p.id.as_bytes().to_vec(), Value::Dict(stats));
                }
                let mut s = BTreeMap::new();
                s.insert(b"currentstatistics".to_vec(), Value::Dict(current));
                s.insert(b"totalstatistics".to_vec(), Value::Dict(total));
                s.insert(b"mgs".to_vec(), Value::Dict(per_mg));
                d.insert(b"statistics".to_vec(), Value::Dict(s));
            }
            FanKind::Lookup { .. } => {}
        }
        NgMessage {
            cookie: self.cookie.to_vec(),
            dict: d,
        }
        .to_bytes()
    }

    /// For a lookup: the mg whose `query` found the call, or `Err` with the
    /// ids of mgs that did not answer (the call may be on one of them).
    pub(crate) fn found(&self) -> Result<Option<usize>, Vec<String>> {
        if let Some(p) = self
            .parts
            .iter()
            .find(|p| matches!(&p.answer, Some(Ok(b)) if result_of(b) == Some(&b"ok"[..])))
        {
            return Ok(Some(p.mg));
        }
        let silent: Vec<String> = self
            .parts
            .iter()
            .filter(|p| !matches!(&p.answer, Some(Ok(_))))
            .map(|p| p.id.clone())
            .collect();
        if silent.is_empty() {
            Ok(None)
        } else {
            Err(silent)
        }
    }
}

/// The `result` of an answer's dictionary.
pub(crate) fn result_of(payload: &[u8]) -> Option<&[u8]> {
    crate::ng::DictView::parse(payload).ok()?.bytes("result")
}

fn dict(payload: &[u8]) -> BTreeMap<Vec<u8>, Value> {
    match Value::decode(payload) {
        Ok(Value::Dict(d)) => d,
        _ => BTreeMap::new(),
    }
}

fn sum_ints(into: &mut BTreeMap<Vec<u8>, Value>, from: Option<&Value>) {
    let Some(Value::Dict(from)) = from else {
        return;
    };
    for (k, v) in from {
        if let Value::Int(n) = v {
            let slot = into.entry(k.clone()).or_insert(Value::Int(0));
            if let Value::Int(s) = slot {
                *s = s.saturating_add(*n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ng::DictView;

    fn fan(kind: FanKind, answers: &[Option<Result<&[u8], &str>>]) -> Fan {
        Fan {
            json: false,
            client: "127.0.0.1:9".parse().unwrap(),
            cookie: Box::from(&b"k"[..]),
            kind,
            parts: answers
                .iter()
                .enumerate()
                .map(|(i, a)| Part {
                    mg: i,
                    id: format!("mg-{i}"),
                    answer: a.map(|r| r.map(Bytes::copy_from_slice).map_err(str::to_owned)),
                })
                .collect(),
        }
    }

    #[test]
    fn list_joins_the_pools_calls_up_to_the_limit() {
        let f = fan(
            FanKind::List { limit: 3 },
            &[
                Some(Ok(b"d5:callsl1:a1:be6:result2:oke")),
                Some(Ok(b"d5:callsl1:c1:de6:result2:oke")),
                Some(Err("no answer within 2000 ms")),
            ],
        );
        assert!(f.complete());
        let r = f.reply();
        let (_, payload) = crate::ng::split_cookie(&r).unwrap();
        let v = dict(payload);
        assert_eq!(
            v[&b"calls"[..]],
            Value::List(vec![Value::str("a"), Value::str("b"), Value::str("c")])
        );
        let d = DictView::parse(payload).unwrap();
        assert_eq!(d.bytes("result"), Some(&b"ok"[..]));
        assert!(String::from_utf8_lossy(d.bytes("warning").unwrap()).contains("mg-2"));
    }

    #[test]
    fn statistics_sums_counters_and_keeps_each_mgs_own() {
        let a = b"d10:statisticsd17:currentstatisticsd11:sessionsowni2e13:sessionstotali2ee15:totalstatisticsd6:uptime1:515:managedsessionsi7eee6:result2:oke";
        let b = b"d10:statisticsd17:currentstatisticsd11:sessionsowni3e13:sessionstotali4ee15:totalstatisticsd15:managedsessionsi1eee6:result2:oke";
        let f = fan(FanKind::Statistics, &[Some(Ok(a)), Some(Ok(b))]);
        let r = f.reply();
        let (_, payload) = crate::ng::split_cookie(&r).unwrap();
        let Value::Dict(s) = &dict(payload)[&b"statistics"[..]] else {
            panic!()
        };
        let Value::Dict(cur) = &s[&b"currentstatistics"[..]] else {
            panic!()
        };
        assert_eq!(cur[&b"sessionstotal"[..]], Value::Int(6));
        assert_eq!(cur[&b"sessionsown"[..]], Value::Int(5));
        let Value::Dict(tot) = &s[&b"totalstatistics"[..]] else {
            panic!()
        };
        assert_eq!(tot[&b"managedsessions"[..]], Value::Int(8));
        assert!(!tot.contains_key(&b"uptime"[..]), "text is not summed");
        let Value::Dict(mgs) = &s[&b"mgs"[..]] else {
            panic!()
        };
        assert_eq!(mgs.len(), 2);
    }

    #[test]
    fn lookup_finds_the_mg_or_names_the_silent_ones() {
        let k = || FanKind::Lookup {
            command: Command::Answer,
            call: Box::from(&b"c"[..]),
            payload: Bytes::new(),
        };
        let err: &[u8] = b"d12:error-reason15:Unknown call-id6:result5:errore";
        let ok: &[u8] = b"d6:result2:oke";
        assert_eq!(
            fan(k(), &[Some(Ok(err)), Some(Ok(ok))]).found(),
            Ok(Some(1))
        );
        assert_eq!(fan(k(), &[Some(Ok(err)), Some(Ok(err))]).found(), Ok(None));
        assert_eq!(
            fan(k(), &[Some(Ok(err)), Some(Err("timeout"))]).found(),
            Err(vec!["mg-1".to_string()])
        );
    }
}
