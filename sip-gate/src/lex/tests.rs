//! Tests of the lexer.

use super::lines::{HeadEnd, RawHeader};
use super::*;

#[test]
fn lexer_folding_and_trim() {
    let m = b"X\r\nA :  one\r\n two \r\n\tthree\r\nbad line\r\nB:\r\n\r\n";
    let head = find_head_end(m).unwrap();
    let lines: Vec<_> = header_lines(m, 3..head.header_end).collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(&m[lines[0].name.clone()], b"A");
    assert_eq!(&m[lines[0].value.clone()], b"one\r\n two \r\n\tthree");
    assert_eq!(
        &m[lines[0].line.clone()],
        b"A :  one\r\n two \r\n\tthree\r\n"
    );
    assert!(!lines[1].well_formed);
    assert!(lines[2].well_formed);
    assert!(lines[2].value.is_empty());
    let m = b"X\r\n Via: a\r\n\r\n";
    let lines: Vec<_> = header_lines(m, 3..m.len() - 2).collect();
    assert_eq!(lines.len(), 1);
    assert!(!lines[0].well_formed);
}

/// A name followed by a CR before its colon takes the general path and is
/// still well formed (the CR is whitespace to the trim): the walk asks
/// `known` about it there too, so the message layer classifies it as before.
#[test]
fn a_well_formed_odd_line_is_classified_too() {
    let m = b"X\r\nVia\r: a\r\n\r\n";
    let mut open = header_lines_open(m, 3);
    let (line, known) = open
        .next_named(|n| n.eq_ignore_ascii_case(b"via").then_some(()))
        .unwrap();
    assert!(line.well_formed);
    assert_eq!(&m[line.name.clone()], b"Via");
    assert_eq!(&m[line.value.clone()], b"a");
    assert_eq!(known, Some(()));
}

#[test]
fn split_list_respects_quotes_and_angles() {
    let v = br#"a, "x,\"y" <sip:a,b>;p=1 , ,<c>"#;
    let parts = split_list(v, 0..v.len()).unwrap();
    let parts: Vec<&[u8]> = parts.into_iter().map(|r| &v[r]).collect();
    assert_eq!(
        parts,
        vec![&b"a"[..], &br#""x,\"y" <sip:a,b>;p=1"#[..], &b"<c>"[..]]
    );
    assert_eq!(split_list(b"<a", 0..2), None);
    assert_eq!(split_list(b"\"a", 0..2), None);
}

/// The splitter as first written, byte by byte: the jumping one and the
/// one-element shortcut must find exactly what it finds.
fn split_list_bytewise(buf: &[u8], value: Range<usize>) -> Option<Vec<Range<usize>>> {
    let end = value.end.min(buf.len());
    let (mut out, mut elem_start, mut p, mut in_angle) =
        (Vec::new(), value.start, value.start, false);
    while p < end {
        match buf[p] {
            b'"' if !in_angle => {
                p = quoted_end(buf, p, end)?;
                continue;
            }
            b'<' => in_angle = true,
            b'>' => in_angle = false,
            b',' if !in_angle => {
                let e = trim(buf, elem_start..p);
                if !e.is_empty() {
                    out.push(e);
                }
                elem_start = p + 1;
            }
            _ => {}
        }
        p += 1;
    }
    if in_angle {
        return None;
    }
    let e = trim(buf, elem_start..end);
    if !e.is_empty() {
        out.push(e);
    }
    Some(out)
}

/// The header-line walk as first written, byte by byte: the word-at-a-time
/// colon search and the skipped token check of known names must find
/// exactly what it finds.
fn header_lines_bytewise(buf: &[u8], start: usize) -> (Vec<RawHeader>, Option<HeadEnd>) {
    let line_end = |from: usize| match buf[from..].iter().position(|&b| b == b'\n') {
        Some(i) => from + i + 1,
        None => buf.len(),
    };
    let (mut lines, mut pos) = (Vec::new(), start);
    while pos < buf.len() {
        let rest = &buf[pos..];
        if rest.starts_with(b"\n") || rest.starts_with(b"\r\n") {
            let body_start = pos + if rest[0] == b'\n' { 1 } else { 2 };
            let head = HeadEnd {
                header_end: pos,
                body_start,
            };
            return (lines, Some(head));
        }
        let (start, first_end) = (pos, line_end(pos));
        let mut end = first_end;
        while end < buf.len() && matches!(buf[end], b' ' | b'\t') {
            end = line_end(end);
        }
        pos = end;
        let first = &buf[start..first_end];
        let name_len = first.iter().take_while(|&&b| is_token(b)).count();
        let gap = first[name_len..]
            .iter()
            .take_while(|&&b| b == b' ' || b == b'\t')
            .count();
        if name_len > 0 && first.get(name_len + gap) == Some(&b':') {
            let colon = start + name_len + gap;
            lines.push(RawHeader {
                line: start..end,
                name: start..start + name_len,
                value: trim(buf, colon + 1..end),
                well_formed: true,
            });
            continue;
        }
        let Some(colon) = first.iter().position(|&b| b == b':') else {
            lines.push(RawHeader {
                line: start..end,
                name: start..start,
                value: start..start,
                well_formed: false,
            });
            continue;
        };
        let name = trim(buf, start..start + colon);
        let ok = !name.is_empty()
            && name.start == start
            && buf[name.clone()].iter().all(|&b| is_token(b));
        lines.push(RawHeader {
            line: start..end,
            name,
            value: trim(buf, start + colon + 1..end),
            well_formed: ok,
        });
    }
    (lines, None)
}

proptest::proptest! {
    /// Lines made of pieces that meet every branch: names shorter and
    /// longer than the word-searched window, colons past a line end, folds,
    /// bare CR and LF, non-token bytes; known names (`Via`, any case)
    /// skip the token check and are reported as known.
    #[test]
    fn header_walk_matches_the_bytewise_walk(
        pieces in proptest::collection::vec(
            proptest::sample::select(vec![
                &b"Via"[..], b"vIA", b"X-A-Name-Longer-Than-The-Window", b"Content-Length",
                b"a", b"-", b":", b" ", b"\t", b"\r\n", b"\n", b"\r", b"\r\n ", b"x y",
                b"<\"", b"\0", b"1", b";",
            ]),
            0..40),
    ) {
        let mut v = b"INVITE sip:a SIP/2.0\r\n".to_vec();
        for p in pieces {
            v.extend_from_slice(p);
        }
        let (want, want_head) = header_lines_bytewise(&v, 22);
        let mut open = header_lines_open(&v, 22);
        let mut got = Vec::new();
        let via = |n: &[u8]| n.eq_ignore_ascii_case(b"via").then_some(());
        while let Some((line, known)) = open.next_named(via) {
            let name = &v[line.name.clone()];
            proptest::prop_assert_eq!(known.is_some(), line.well_formed && via(name).is_some());
            got.push(line);
        }
        proptest::prop_assert_eq!(&got, &want);
        proptest::prop_assert_eq!(open.head_end(), want_head);
        let plain: Vec<_> = header_lines(&v, 22..v.len()).collect();
        proptest::prop_assert_eq!(&plain[..want.len()], &want[..]);
    }

    #[test]
    fn split_list_matches_the_bytewise_splitter(
        v in proptest::collection::vec(
            proptest::sample::select(b"ab ,<>\"\\;\r\n\t=".to_vec()), 0..40),
        cut in 0usize..8,
    ) {
        let start = cut.min(v.len());
        let want = split_list_bytewise(&v, start..v.len());
        proptest::prop_assert_eq!(split_list(&v, start..v.len()), want.clone());
        let listed = list_elements(&v, start..v.len()).map(|e| e.collect::<Vec<_>>());
        proptest::prop_assert_eq!(listed, want);
    }

    /// The walk that indexes the header lines finds the empty line where
    /// `find_head_end` does, and the lines `header_lines` finds before it.
    #[test]
    fn open_walk_ends_where_find_head_end_does(
        v in proptest::collection::vec(
            proptest::sample::select(b"a: \r\n\t".to_vec()), 0..60),
    ) {
        let Some(first) = memchr::memchr(b'\n', &v).map(|i| i + 1) else {
            return Ok(());
        };
        let mut open = header_lines_open(&v, first);
        let lines: Vec<_> = open.by_ref().collect();
        let head = find_head_end(&v);
        proptest::prop_assert_eq!(open.head_end(), head);
        if let Some(h) = head {
            let want: Vec<_> = header_lines(&v, first..h.header_end).collect();
            proptest::prop_assert_eq!(lines, want);
        }
    }
}

#[test]
fn params_walked_found_and_refused_whole() {
    let b = b";tag=a1 ; Expires = 60;lr;tag=second;q=\"x;y\"";
    let all = parse_params(b, 0..b.len()).unwrap();
    assert_eq!(all.len(), 5);
    assert_eq!(&b[all[4].value.clone().unwrap()], b"\"x;y\"");
    let tag = find_param(b, 0..b.len(), b"TAG").unwrap();
    assert_eq!(&b[tag.value.unwrap()], b"a1", "the first one");
    let exp = find_param(b, 0..b.len(), b"expires").unwrap();
    assert_eq!(&b[exp.value.unwrap()], b"60");
    assert!(find_param(b, 0..b.len(), b"lr").unwrap().value.is_none());
    assert!(find_param(b, 0..b.len(), b"maddr").is_none());
    // Malformed anywhere, even after the match: nothing found.
    let bad = b";tag=a1;=x";
    assert!(find_param(bad, 0..bad.len(), b"tag").is_none());
    assert!(parse_params(bad, 0..bad.len()).is_none());
    assert!(
        walk_params(b"tag=a1", 0..6, |_| {}).is_none(),
        "no leading ;"
    );
    for c in 0..=255u8 {
        let want = c.is_ascii_alphanumeric() || b"-.!%*_+`'~".contains(&c);
        assert_eq!(is_token(c), want, "{c}");
    }
}

#[test]
fn token_names_compare_as_eq_ignore_ascii_case() {
    let tokens: Vec<u8> = (0..=255u8).filter(|&b| is_token(b)).collect();
    for &a in &tokens {
        for &b in &tokens {
            assert_eq!(
                name_is(&[a], &(0..1), &[b]),
                a.eq_ignore_ascii_case(&b),
                "{a} {b}"
            );
        }
    }
    assert!(name_is(b"xBranCH", &(1..7), b"branch"));
    assert!(!name_is(b"branch", &(0..5), b"branch"), "length differs");
}
