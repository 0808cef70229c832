//! Splicing: the bytes a proxy forwards are the received bytes plus a few
//! non-overlapping edits in the header section (Via, Max-Forwards, Route,
//! Record-Route). Nothing is re-serialised, so headers the proxy does not
//! understand travel untouched, and the body is never touched.

use std::cell::Cell;
use std::ops::Range;

use bytes::Bytes;
use smallvec::{smallvec, SmallVec};
use thiserror::Error;

use crate::message::SipMessage;

/// Why a set of edits cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EditError {
    /// A range is reversed or reaches past the header section: edits may
    /// only touch `0..=header_end` so the body is forwarded as received.
    #[error("edit {start}..{end} outside the header section (ends at {header_end})")]
    OutOfHeaders {
        /// Start of the offending range.
        start: usize,
        /// End of the offending range.
        end: usize,
        /// Where the header section ends.
        header_end: usize,
    },
    /// Two edits touch the same bytes (or an insertion falls inside a
    /// replaced range); the result would depend on their order.
    #[error("edits {first:?} and {second:?} overlap")]
    Overlap {
        /// The earlier edit's range.
        first: Range<usize>,
        /// The later edit's range.
        second: Range<usize>,
    },
    /// No such header line, or the element is not one of its list elements,
    /// or the line's list cannot be split.
    #[error("no such header element")]
    NoSuchElement,
}

/// One edit: replace `range` with the bytes at `text` in the splice's text
/// buffer (an insertion has an empty range). Every new piece lies there,
/// so an edit is two ranges, owns nothing, and costs no allocation.
#[derive(Debug, Clone)]
struct Edit {
    range: Range<usize>,
    text: Range<usize>,
}

thread_local! {
    /// The text buffer each splice on this thread borrows and gives back
    /// when dropped: once it has grown to fit a forward's new header lines,
    /// writing them allocates nothing.
    static TEXT: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Edits a forward makes without spilling to the heap (a request's Via,
/// Record-Route, `received`, Max-Forwards and Routes).
const USUAL_EDITS: usize = 8;

/// Collects edits against one message and applies them in one allocation:
/// the outgoing bytes, each original slice and each new piece copied once.
#[derive(Debug)]
pub struct Splice<'m> {
    msg: &'m SipMessage,
    edits: SmallVec<[Edit; USUAL_EDITS]>,
    /// The bytes the edits put in, borrowed from [`TEXT`].
    text: Vec<u8>,
}

impl Clone for Splice<'_> {
    fn clone(&self) -> Self {
        Splice {
            msg: self.msg,
            edits: self.edits.clone(),
            text: self.text.clone(),
        }
    }
}

impl Drop for Splice<'_> {
    fn drop(&mut self) {
        let mut text = std::mem::take(&mut self.text);
        // A splice that copied in a large piece leaves no large buffer
        // behind on its thread.
        if text.capacity() <= MAX_LENT_TEXT {
            text.clear();
            TEXT.set(text);
        }
    }
}

/// The largest text buffer a thread keeps for its next splice.
const MAX_LENT_TEXT: usize = 4096;

impl<'m> Splice<'m> {
    /// Starts a splice with no edits.
    pub fn new(msg: &'m SipMessage) -> Self {
        Splice {
            msg,
            edits: SmallVec::new(),
            text: TEXT.take(),
        }
    }

    /// The message being edited.
    pub fn message(&self) -> &'m SipMessage {
        self.msg
    }

    /// Inserts `bytes` before offset `at`. Several insertions at the same
    /// offset keep the order in which they were added.
    pub fn insert(&mut self, at: usize, bytes: impl AsRef<[u8]>) {
        self.replace(at..at, bytes);
    }

    /// Replaces `range` with `bytes`.
    pub fn replace(&mut self, range: Range<usize>, bytes: impl AsRef<[u8]>) {
        self.replace_with(range, |text| text.extend_from_slice(bytes.as_ref()));
    }

    /// [`Splice::replace`] with the bytes `write` appends to the splice's
    /// text buffer (no allocation of their own).
    pub(crate) fn replace_with(&mut self, range: Range<usize>, write: impl FnOnce(&mut Vec<u8>)) {
        let start = self.text.len();
        write(&mut self.text);
        self.edits.push(Edit {
            range,
            text: start..self.text.len(),
        });
    }

    /// The bytes an edit puts in.
    fn piece(&self, e: &Edit) -> &[u8] {
        self.text.get(e.text.clone()).unwrap_or_default()
    }

    /// Removes `range`.
    pub fn remove(&mut self, range: Range<usize>) {
        self.replace(range, b"");
    }

    /// Inserts a complete header line (with its CRLF) above every existing
    /// header, e.g. the proxy's own Via or Record-Route.
    pub fn prepend_header(&mut self, line: impl AsRef<[u8]>) {
        self.insert(self.msg.headers_start(), line);
    }

    /// Inserts a complete header line (with its CRLF) after every existing
    /// header, e.g. a missing Max-Forwards.
    pub fn append_header(&mut self, line: impl AsRef<[u8]>) {
        self.insert(self.msg.header_end(), line);
    }

    /// Removes a whole header line, folded continuation lines included.
    pub fn remove_header(&mut self, field_index: usize) -> Result<(), EditError> {
        let f = self
            .msg
            .headers()
            .get(field_index)
            .ok_or(EditError::NoSuchElement)?;
        self.remove(f.line.clone());
        Ok(())
    }

    /// Replaces the value of a header line, keeping its name and line end.
    pub fn replace_value(
        &mut self,
        field_index: usize,
        bytes: impl AsRef<[u8]>,
    ) -> Result<(), EditError> {
        let f = self
            .msg
            .headers()
            .get(field_index)
            .ok_or(EditError::NoSuchElement)?;
        self.replace(f.value.clone(), bytes);
        Ok(())
    }

    /// Removes one element of a comma-joined list (Via, Route,
    /// Record-Route, Contact) given its line and its exact range (as in
    /// [`crate::message::Via::range`] or [`crate::message::NameAddr::range`]).
    ///
    /// The comma goes with it: the first of `a, b` leaves `b`, the last
    /// leaves `a`. The only element removes the whole line, folded
    /// continuations included, so no empty header is left behind.
    pub fn remove_element(
        &mut self,
        field_index: usize,
        element: Range<usize>,
    ) -> Result<(), EditError> {
        self.remove_elements(field_index, &[element])
    }

    /// Removes several elements of one list line, with their commas, as
    /// [`Splice::remove_element`] does for one. Adjacent elements (the
    /// gate's two Routes in `<a>, <b>, <c>`) go as one edit, so the edits
    /// never overlap; removing every element removes the line.
    pub fn remove_elements(
        &mut self,
        field_index: usize,
        elements: &[Range<usize>],
    ) -> Result<(), EditError> {
        let line = self
            .msg
            .headers()
            .get(field_index)
            .ok_or(EditError::NoSuchElement)?;
        // The line's only element (its whole value; the elements of a list
        // are disjoint parts of it): the line goes, unsplit. A response's
        // top Via and the gate's Route nearly always are one.
        if let [only] = elements {
            if *only == line.value && !only.is_empty() {
                return self.remove_header(field_index);
            }
        }
        // A response loses its top Via, a request the gate's Routes: a few
        // elements, held without an allocation.
        let elems: SmallVec<[Range<usize>; 4]> = self
            .msg
            .elements(field_index)
            .ok_or(EditError::NoSuchElement)?
            .collect();
        let mut gone: SmallVec<[bool; 8]> = smallvec![false; elems.len()];
        for e in elements {
            let pos = elems
                .iter()
                .position(|x| x == e)
                .ok_or(EditError::NoSuchElement)?;
            gone[pos] = true;
        }
        if gone.iter().all(|&g| g) {
            return self.remove_header(field_index);
        }
        let mut i = 0;
        while i < elems.len() {
            if !gone[i] {
                i += 1;
                continue;
            }
            let first = i;
            while gone.get(i) == Some(&true) {
                i += 1;
            }
            let range = match (
                first.checked_sub(1).and_then(|p| elems.get(p)),
                elems.get(i),
            ) {
                // After a kept element: from the end of that one.
                (Some(kept), _) => kept.end..elems[i - 1].end,
                // At the start: up to the next kept element.
                (None, Some(kept)) => elems[first].start..kept.start,
                (None, None) => return self.remove_header(field_index),
            };
            self.remove(range);
        }
        Ok(())
    }

    /// Removes the topmost via-value (what a proxy does to a response
    /// before sending it upstream).
    pub fn remove_top_via(&mut self) -> Result<(), EditError> {
        let via = self.msg.top_via().ok_or(EditError::NoSuchElement)?;
        self.remove_element(via.field_index, via.range)
    }

    /// Applies the edits and returns the new message bytes.
    ///
    /// Edits are sorted by position (stably, so insertions at one offset
    /// keep their order); overlapping edits and edits outside the header
    /// section are errors.
    pub fn finish(mut self) -> Result<Bytes, EditError> {
        let raw = self.msg.raw();
        if self.edits.is_empty() {
            return Ok(raw.clone());
        }
        let header_end = self.msg.header_end();
        for e in &self.edits {
            if e.range.start > e.range.end || e.range.end > header_end {
                return Err(EditError::OutOfHeaders {
                    start: e.range.start,
                    end: e.range.end,
                    header_end,
                });
            }
        }
        self.edits.sort_by_key(|e| (e.range.start, e.range.end));
        let mut len = raw.len();
        let mut prev_end = 0usize;
        let mut prev: Option<&Range<usize>> = None;
        let this = &self;
        for e in &this.edits {
            if let Some(p) = prev {
                if e.range.start < prev_end {
                    return Err(EditError::Overlap {
                        first: p.clone(),
                        second: e.range.clone(),
                    });
                }
            }
            prev_end = e.range.end;
            prev = Some(&e.range);
            // Ranges are inside raw (checked above), so this cannot wrap;
            // saturating keeps it panic-free regardless.
            len = len
                .saturating_sub(e.range.len())
                .saturating_add(this.piece(e).len());
        }

        // Exactly `len` bytes: a vector without spare capacity becomes
        // `Bytes` without a second allocation.
        let mut out = Vec::with_capacity(len);
        let mut pos = 0usize;
        for e in &this.edits {
            out.extend_from_slice(raw.get(pos..e.range.start).unwrap_or_default());
            out.extend_from_slice(this.piece(e));
            pos = e.range.end;
        }
        out.extend_from_slice(raw.get(pos..).unwrap_or_default());
        Ok(Bytes::from(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::HeaderName;

    fn msg(s: &[u8]) -> SipMessage {
        SipMessage::parse(Bytes::copy_from_slice(s)).unwrap()
    }

    const BODY: &[u8] = b"\r\n\r\nVia: x\0\xff\r\n";

    fn response() -> Vec<u8> {
        let mut v = b"SIP/2.0 200 OK\r\n\
Via: SIP/2.0/UDP proxy.example.com;branch=z9hG4bKp, SIP/2.0/UDP client.example.com;branch=z9hG4bKc\r\n\
Via: SIP/2.0/UDP\r\n  far.example.com;branch=z9hG4bKf\r\n\
From: <sip:a@b>;tag=1\r\nTo: <sip:c@d>;tag=2\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\n\
Content-Length: 14\r\n\r\n"
            .to_vec();
        v.extend_from_slice(BODY);
        v
    }

    #[test]
    fn no_edits_is_identity() {
        let raw = response();
        let m = msg(&raw);
        assert_eq!(&Splice::new(&m).finish().unwrap()[..], &raw[..]);
    }

    #[test]
    fn remove_first_of_two_vias() {
        let m = msg(&response());
        let mut s = Splice::new(&m);
        s.remove_top_via().unwrap();
        let out = s.finish().unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("\r\nVia: SIP/2.0/UDP client.example.com;branch=z9hG4bKc\r\n"));
        let m2 = msg(&out);
        assert_eq!(m2.top_via().unwrap().branch, Some(&b"z9hG4bKc"[..]));
        assert_eq!(m2.body(), BODY);
    }

    #[test]
    fn remove_last_and_only_element() {
        let m = msg(&response());
        let vias: Vec<_> = m.vias().collect();
        // Second element of the first line: the comma before it goes too.
        let mut s = Splice::new(&m);
        s.remove_element(vias[1].field_index, vias[1].range.clone())
            .unwrap();
        let out = s.finish().unwrap();
        assert!(String::from_utf8_lossy(&out)
            .contains("Via: SIP/2.0/UDP proxy.example.com;branch=z9hG4bKp\r\nVia:"));
        // Only element of a folded line: the whole line goes.
        let mut s = Splice::new(&m);
        s.remove_element(vias[2].field_index, vias[2].range.clone())
            .unwrap();
        let out = s.finish().unwrap();
        let m2 = msg(&out);
        assert_eq!(m2.vias().count(), 2);
        assert!(!String::from_utf8_lossy(&out).contains("far.example.com"));
        assert_eq!(m2.body(), BODY);
        assert_eq!(
            out.len(),
            m.raw().len() - m.headers()[vias[2].field_index].line.len()
        );
    }

    #[test]
    fn remove_several_elements_of_one_line() {
        let raw = b"OPTIONS sip:x SIP/2.0\r\nRoute: <sip:a;lr>, <sip:b;lr>, <sip:c;lr>, <sip:d>\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\n\r\n";
        let m = SipMessage::scan(Bytes::from_static(raw)).unwrap();
        let r = m.routes();
        let line = r[0].field_index;
        let cases: [(&[usize], &str); 5] = [
            (&[0, 1], "Route: <sip:c;lr>, <sip:d>\r\n"),
            (&[0, 3], "Route: <sip:b;lr>, <sip:c;lr>\r\n"),
            (&[1, 2], "Route: <sip:a;lr>, <sip:d>\r\n"),
            (&[2, 3], "Route: <sip:a;lr>, <sip:b;lr>\r\n"),
            (&[0, 1, 2, 3], ""),
        ];
        for (gone, want) in cases {
            let mut s = Splice::new(&m);
            let ranges: Vec<_> = gone.iter().map(|&i| r[i].range.clone()).collect();
            s.remove_elements(line, &ranges).unwrap();
            let out = s.finish().unwrap();
            let want = format!(
                "OPTIONS sip:x SIP/2.0\r\n{want}Via: SIP/2.0/UDP h;branch=z9hG4bK1\r\n\r\n"
            );
            assert_eq!(String::from_utf8_lossy(&out), want, "{gone:?}");
        }
    }

    #[test]
    fn insert_replace_and_errors() {
        let m = msg(&response());
        let mut s = Splice::new(&m);
        s.prepend_header(&b"Via: SIP/2.0/UDP me;branch=z9hG4bKme\r\n"[..]);
        s.append_header(&b"Max-Forwards: 69\r\n"[..]);
        let cid = m
            .headers()
            .iter()
            .position(|f| f.name == HeaderName::CallId)
            .unwrap();
        s.replace_value(cid, &b"y"[..]).unwrap();
        let out = s.finish().unwrap();
        let m2 = msg(&out);
        assert_eq!(m2.top_via().unwrap().branch, Some(&b"z9hG4bKme"[..]));
        assert_eq!(m2.max_forwards(), Some(Ok(69)));
        assert_eq!(m2.call_id(), Some(&b"y"[..]));
        assert_eq!(m2.body(), BODY);

        // Overlap is an error, not a panic.
        let mut s = Splice::new(&m);
        s.remove(20..30);
        s.insert(25, &b"x"[..]);
        assert!(matches!(s.finish(), Err(EditError::Overlap { .. })));
        let mut s = Splice::new(&m);
        s.remove(20..30);
        s.replace(29..31, &b"x"[..]);
        assert!(matches!(s.finish(), Err(EditError::Overlap { .. })));
        // Adjacent edits are fine.
        let mut s = Splice::new(&m);
        s.remove(20..30);
        s.insert(30, &b"x"[..]);
        s.insert(20, &b"y"[..]);
        assert!(s.finish().is_ok());
        // The body is off limits, and so are reversed ranges.
        let mut s = Splice::new(&m);
        s.remove(m.header_end()..m.header_end() + 1);
        assert!(matches!(s.finish(), Err(EditError::OutOfHeaders { .. })));
        let mut s = Splice::new(&m);
        #[allow(clippy::reversed_empty_ranges)]
        s.remove(10..5);
        assert!(matches!(s.finish(), Err(EditError::OutOfHeaders { .. })));
        let mut s = Splice::new(&m);
        assert_eq!(s.remove_element(0, 0..1), Err(EditError::NoSuchElement));
        assert_eq!(s.remove_header(999), Err(EditError::NoSuchElement));
    }

    #[test]
    fn insertions_at_same_offset_keep_order() {
        let m = msg(&response());
        let mut s = Splice::new(&m);
        s.prepend_header(&b"Record-Route: <sip:a;lr>\r\n"[..]);
        s.prepend_header(&b"Via: SIP/2.0/UDP me;branch=z9hG4bKme\r\n"[..]);
        let out = s.finish().unwrap();
        assert!(out.starts_with(
            b"SIP/2.0 200 OK\r\nRecord-Route: <sip:a;lr>\r\nVia: SIP/2.0/UDP me;branch=z9hG4bKme\r\n"
        ));
    }
}
