//! Validation: what the proxy relies on in a scanned message, checked once
//! ([`SipMessage::validate`]).

use super::name_addr::{parse_contact, parse_name_addr};
use super::via::{parse_via, ViaAt};
use super::{HeaderName, NameAddr, ParseError, RouteSet, SipMessage};
use crate::lex;

impl SipMessage {
    /// Checks what the proxy relies on; the error names the first problem.
    ///
    /// Order matters only for the reason phrase: structural defects first,
    /// then mandatory headers, then their syntax.
    pub fn validate(&self) -> Result<(), ParseError> {
        if let Some(e) = self.defect {
            return Err(e);
        }
        self.check_counts()?;
        if self.call_id().is_none() {
            return Err(ParseError::MissingCallId);
        }
        let (_, cseq_method) = self.cseq_parts().ok_or(ParseError::BadCSeq)?;
        if self.is_request() && self.slice(cseq_method) != self.method_bytes() {
            return Err(ParseError::CSeqMethodMismatch);
        }
        let from = self
            .single_name_addr(HeaderName::From)
            .ok_or(ParseError::BadFrom)?;
        let _ = self.from_tag.set(self.tag_in(from));
        let to = self
            .single_name_addr(HeaderName::To)
            .ok_or(ParseError::BadTo)?;
        let _ = self.to_tag.set(self.tag_in(to));
        self.check_lists()?;
        if let Some(Err(e)) = self.max_forwards() {
            return Err(e);
        }
        Ok(())
    }

    /// At least one Via; exactly one From, To, Call-ID and CSeq, as the
    /// scan counted them.
    fn check_counts(&self) -> Result<(), ParseError> {
        let n = self.counts;
        if n[0] == 0 {
            return Err(ParseError::MissingVia);
        }
        let singles = [
            (n[1], ParseError::MissingFrom, ParseError::DuplicateFrom),
            (n[2], ParseError::MissingTo, ParseError::DuplicateTo),
            (n[3], ParseError::MissingCallId, ParseError::DuplicateCallId),
            (n[4], ParseError::MissingCSeq, ParseError::DuplicateCSeq),
        ];
        for (count, missing, duplicate) in singles {
            match count {
                0 => return Err(missing),
                1 => {}
                _ => return Err(duplicate),
            }
        }
        Ok(())
    }

    /// Every element of Via, Route, Record-Route and Contact parses.
    ///
    /// One pass over the header lines. When several lists are broken the
    /// error is the one the first broken list in that order (Via, Route,
    /// Record-Route, Contact) gives, wherever its line is.
    fn check_lists(&self) -> Result<(), ParseError> {
        let mut vias = 0usize;
        let mut first_bad: Option<(u8, ParseError)> = None;
        // Kept as found, so routing never parses them again.
        let mut routes = RouteSet::new();
        let mut contacts = 0usize;
        for (i, f) in self.headers.iter().enumerate() {
            let (rank, err) = match f.name {
                HeaderName::Via => (0, ParseError::BadVia),
                HeaderName::Route => (1, ParseError::BadRoute),
                HeaderName::RecordRoute => (2, ParseError::BadRecordRoute),
                HeaderName::Contact => (3, ParseError::BadContact),
                _ => continue,
            };
            if first_bad.is_some_and(|(r, _)| r <= rank) {
                continue;
            }
            let ok = match lex::list_elements(&self.raw, f.value.clone()) {
                None => false,
                Some(mut elems) => elems.all(|e| match f.name {
                    HeaderName::Via => match parse_via(&self.raw, e, i) {
                        Some(via) => {
                            let keep = match vias {
                                0 => Some(&self.top_via),
                                1 => Some(&self.next_via),
                                _ => None,
                            };
                            if let Some(cell) = keep {
                                let _ = cell.set(Some(ViaAt::of(&self.raw, &via)));
                            }
                            vias = vias.saturating_add(1);
                            true
                        }
                        None => false,
                    },
                    HeaderName::Contact => match parse_contact(&self.raw, e, i) {
                        Some(c) => {
                            if contacts == 0 {
                                let _ = self.first_contact.set(c);
                            }
                            contacts = contacts.saturating_add(1);
                            true
                        }
                        None => false,
                    },
                    HeaderName::Route => match parse_name_addr(&self.raw, e.clone()) {
                        Some(parts) => {
                            routes.push(NameAddr {
                                uri: parts.uri,
                                range: e,
                                field_index: i,
                            });
                            true
                        }
                        None => false,
                    },
                    _ => parse_name_addr(&self.raw, e).is_some(),
                }),
            };
            if !ok {
                if rank == 0 {
                    return Err(err);
                }
                first_bad = Some((rank, err));
            }
        }
        if vias == 0 {
            return Err(ParseError::BadVia);
        }
        // Every Route line was walked to its end (a broken one, or one
        // before it, would be in `first_bad`): the set is whole.
        if first_bad.is_none_or(|(rank, _)| rank > 1) {
            let _ = self.routes.set(routes);
        }
        if vias == 1 {
            // Every Via parsed: there is no second one to look for later.
            let _ = self.next_via.set(None);
        }
        first_bad.map_or(Ok(()), |(_, e)| Err(e))
    }
}
