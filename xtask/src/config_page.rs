//! `sip-gate.toml(5)`: the site file's man page, made from docs/config.md so
//! the page and the reference cannot say different things.
//!
//! A small Markdown-to-roff conversion for the constructs that file uses:
//! headings, paragraphs, fenced code, bullet lists and tables (a table row
//! becomes a tagged paragraph: the first cell as the tag, the others after
//! it with their column names). Links keep their text; inline code is bold.

/// The page, in roff (man macros), for `markdown` dated `date`.
pub(crate) fn render(markdown: &str, version: &str, date: &str) -> String {
    let mut out = format!(
        ".TH SIP-GATE.TOML 5 \"{date}\" \"sip-gate {version}\" \"File Formats\"\n\
         .SH NAME\nsip-gate.toml \\- the site file of sip-gate, media-ctl and ringsync\n\
         .SH SYNOPSIS\n/etc/sip-gate/site.toml\n"
    );
    let mut lines = markdown.lines().peekable();
    let mut described = false;
    while let Some(line) = lines.next() {
        if let Some(fence) = line.strip_prefix("```") {
            let _language = fence;
            out.push_str(".PP\n.RS 4\n.nf\n");
            for code in lines.by_ref() {
                if code.starts_with("```") {
                    break;
                }
                out.push_str(&literal(code));
            }
            out.push_str(".fi\n.RE\n");
        } else if line.starts_with("# ") {
            // The title: the page's NAME says it.
        } else if let Some(h) = line.strip_prefix("### ") {
            out.push_str(&format!(".SS \"{}\"\n", quoted(&inline(h))));
        } else if let Some(h) = line.strip_prefix("## ") {
            out.push_str(&format!(".SH \"{}\"\n", quoted(&inline(&h.to_uppercase()))));
        } else if line.starts_with('|') {
            let header = cells(line);
            lines.next_if(|l| l.starts_with("|-") || l.starts_with("| -"));
            while let Some(row) = lines.next_if(|l| l.starts_with('|')) {
                out.push_str(&table_row(&header, &cells(row)));
            }
        } else if let Some(item) = line.strip_prefix("- ").or(line.strip_prefix("* ")) {
            let mut text = item.to_owned();
            while let Some(more) = lines.next_if(|l| l.starts_with("  ") && !l.trim().is_empty()) {
                text.push(' ');
                text.push_str(more.trim());
            }
            out.push_str(".IP \\(bu 2\n");
            out.push_str(&text_line(&inline(&text)));
        } else if !line.trim().is_empty() {
            if !described {
                out.push_str(".SH DESCRIPTION\n");
                described = true;
            }
            let mut text = line.trim().to_owned();
            while let Some(more) = lines.next_if(|l| paragraph_goes_on(l)) {
                text.push(' ');
                text.push_str(more.trim());
            }
            out.push_str(".PP\n");
            out.push_str(&text_line(&inline(&text)));
        }
    }
    out.push_str(".SH SEE ALSO\nsip-gate(1), media-ctl(1), ringsync(1)\n");
    out
}

/// Whether `line` continues the paragraph above it.
fn paragraph_goes_on(line: &str) -> bool {
    !(line.trim().is_empty()
        || line.starts_with('#')
        || line.starts_with('|')
        || line.starts_with("```")
        || line.starts_with("- ")
        || line.starts_with("* "))
}

/// A table row as a tagged paragraph.
fn table_row(header: &[String], row: &[String]) -> String {
    let Some((tag, rest)) = row.split_first() else {
        return String::new();
    };
    let mut body = Vec::new();
    for (i, cell) in rest.iter().enumerate() {
        if cell.is_empty() {
            continue;
        }
        // The last column is the prose; the ones between are named.
        match header.get(i + 1) {
            Some(name) if i + 1 < rest.len() => body.push(format!("{name}: {}", inline(cell))),
            _ => body.push(inline(cell)),
        }
    }
    format!(
        ".TP\n{}{}",
        text_line(&inline(tag)),
        text_line(&body.join(". "))
    )
}

/// The cells of a table row: split on `|` not escaped as `\|`.
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                cell.push('|');
            }
            '|' => cells.push(std::mem::take(&mut cell)),
            c => cell.push(c),
        }
    }
    cells.push(cell);
    cells.into_iter().map(|c| c.trim().to_owned()).collect()
}

/// Inline Markdown to roff: `code` bold, [text](link) its text, **x** bold;
/// roff's own characters escaped.
fn inline(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '`' {
            if let Some(end) = rest[1..].find('`') {
                out.push_str("\\fB");
                out.push_str(&escape(&rest[1..1 + end]));
                out.push_str("\\fR");
                rest = &rest[end + 2..];
                continue;
            }
        } else if c == '[' {
            if let Some((label, after)) = link(rest) {
                out.push_str(&inline(label));
                rest = after;
                continue;
            }
        } else if let Some(bold) = rest.strip_prefix("**") {
            if let Some(end) = bold.find("**") {
                out.push_str("\\fB");
                out.push_str(&inline(&bold[..end]));
                out.push_str("\\fR");
                rest = &bold[end + 2..];
                continue;
            }
        }
        out.push_str(&escape(&rest[..c.len_utf8()]));
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// `[label](target)rest` as (label, rest).
fn link(text: &str) -> Option<(&str, &str)> {
    let close = text.find("](")?;
    let end = text[close..].find(')')? + close;
    Some((&text[1..close], &text[end + 1..]))
}

/// roff's escape character and the hyphen in running text.
fn escape(text: &str) -> String {
    text.replace('\\', "\\e")
}

/// A line of running text, safe at the start of a roff line.
fn text_line(text: &str) -> String {
    if text.starts_with('.') || text.starts_with('\'') {
        format!("\\&{text}\n")
    } else {
        format!("{text}\n")
    }
}

/// A literal (code) line: escapes only.
fn literal(line: &str) -> String {
    text_line(&escape(line))
}

/// Text inside a macro's double-quoted argument.
fn quoted(text: &str) -> String {
    text.replace('"', "\\(dq")
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn headings_tables_code_and_lists_become_man_macros() {
        let md = "# Site configuration reference\n\nOne TOML file,\nread by `sip-gate`.\n\n\
                  ## `[site]` (required)\n\n| field | type | meaning |\n|---|---|---|\n\
                  | `name` | string | The site's name \\| id. See [ops](operations.md). |\n\n\
                  ### Errors\n\n```\n.starts with a dot \\n\n```\n\n- one item\n  goes on\n";
        let page = render(md, "0.1.0", "2026-12-07");
        assert!(page.starts_with(".TH SIP-GATE.TOML 5 \"2026-12-07\" \"sip-gate 0.1.0\""));
        assert!(page.contains(".SH DESCRIPTION\n.PP\nOne TOML file, read by \\fBsip-gate\\fR.\n"));
        assert!(
            page.contains(".SH \"\\fB[SITE]\\fR (REQUIRED)\"\n"),
            "{page}"
        );
        assert!(
            page.contains(".TP\n\\fBname\\fR\ntype: string. The site's name | id. See ops.\n"),
            "{page}"
        );
        assert!(page.contains(".SS \"Errors\"\n"));
        assert!(
            page.contains(".nf\n\\&.starts with a dot \\en\n.fi\n"),
            "{page}"
        );
        assert!(page.contains(".IP \\(bu 2\none item goes on\n"), "{page}");
        assert!(!page.contains("Site configuration reference"));
    }
}
