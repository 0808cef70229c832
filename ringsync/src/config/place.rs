//! The dotted field at a place in the site file's text.
//!
//! serde's errors (a value of the wrong type, a socket address that does not
//! parse, an unknown key) come back from `toml` with a span but no field:
//! `invalid socket address syntax` at 152:8 does not say which of forty
//! `bind`s is meant when the file was generated. The file is parsed a
//! second time into `toml`'s spanned document, only when there is an error,
//! and the innermost key or value at the error's span names the field the
//! way validation does (`listener[1].bind`, `instance[3].exceptions[0].source`).

use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// The dotted path of the innermost key or value at `span` of `text`, or
/// `None` when nothing there is a key or value (a syntax error, say).
pub(super) fn field_at(text: &str, span: &Range<usize>) -> Option<String> {
    let doc = DeTable::parse(text).ok()?;
    in_table(doc.get_ref(), "", span)
}

fn in_table(table: &DeTable<'_>, path: &str, at: &Range<usize>) -> Option<String> {
    for (key, value) in table.iter() {
        let p = if path.is_empty() {
            key.get_ref().to_string()
        } else {
            format!("{path}.{}", key.get_ref())
        };
        if let Some(deeper) = in_value(value, &p, at) {
            return Some(deeper);
        }
        if covers(&key.span(), at) || covers(&value.span(), at) {
            return Some(p);
        }
    }
    None
}

/// Inside `value` only: a table's own span is its header (its keys follow
/// it), so every key is searched, not only those inside the span.
fn in_value(value: &Spanned<DeValue<'_>>, path: &str, at: &Range<usize>) -> Option<String> {
    match value.get_ref() {
        DeValue::Table(t) => in_table(t, path, at),
        DeValue::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            let p = format!("{path}[{i}]");
            in_value(item, &p, at).or_else(|| covers(&item.span(), at).then_some(p))
        }),
        _ => None,
    }
}

/// Does `outer` hold the start of `at`? An error's span may run past the
/// value (to the end of its line), so only where it starts counts.
fn covers(outer: &Range<usize>, at: &Range<usize>) -> bool {
    outer.start <= at.start && at.start < outer.end.max(outer.start + 1)
}

#[cfg(test)]
mod tests {
    use super::field_at;

    fn at(text: &str, needle: &str) -> Option<String> {
        let start = text.find(needle).expect("needle in text");
        field_at(text, &(start..start + needle.len()))
    }

    #[test]
    fn names_keys_values_and_array_items() {
        let text = "[site]\nname = \"x\"\n\
                    [[listener]]\nname = \"a\"\nbind = \"1.2.3.4:5\"\n\
                    [[listener]]\nname = \"b\"\nbind = \"localhost:5070\"\n\
                    [dns]\nnameservers = [\"1.1.1.1:53\", \"bad\"]\n\
                    [[instance]]\nid = \"i\"\nexceptions = [{ source = \"nope\" }]\n";
        assert_eq!(
            at(text, "\"localhost:5070\"").as_deref(),
            Some("listener[1].bind")
        );
        assert_eq!(at(text, "\"bad\"").as_deref(), Some("dns.nameservers[1]"));
        assert_eq!(
            at(text, "\"nope\"").as_deref(),
            Some("instance[0].exceptions[0].source")
        );
        assert_eq!(at(text, "name = \"x\"").as_deref(), Some("site.name"));
    }

    #[test]
    fn nothing_at_a_place_without_a_key() {
        assert_eq!(field_at("[site]\nname = \"x\"\n\n", &(17..18)), None);
        assert_eq!(field_at("not toml at all = = =", &(0..3)), None);
    }
}
