//! No import cycles between the modules of any workspace crate (issue 24).
//!
//! A cycle between modules (`a` uses `b`, `b` uses `a`) means neither can be
//! read, tested or moved without the other; the helper they share belongs a
//! floor down, in a module both import. This test walks every workspace
//! crate's `src/`, builds the graph of its modules and fails listing every
//! cycle, each edge with the file and line that makes it.
//!
//! The checker is dependency-free string scanning, and these are its limits:
//! - A node is a module at any depth (`node`, `store::etcd`,
//!   `store::etcd::election`). The crate root (`lib.rs`) is no node: a path
//!   naming a root item is not followed.
//! - An edge is a path starting with `crate::` or `super::` (in `use` items,
//!   brace groups included, and in code), resolved against the file's module
//!   path. Relative paths (`child::f`, `self::child`) and glob re-exports are
//!   not followed, and a `super::` inside an inline module is resolved as if
//!   it were written at file level.
//! - A parent declaring `mod child` is no edge; a child naming its parent's
//!   items is.
//! - Comments, string and char literals, `#[cfg(test)]` inline modules, and
//!   test files (`tests.rs`, `*_tests.rs`) are left out; `main.rs` and
//!   `src/bin/` are their own crate roots and use the library by its name.
//! - Macros that build paths are not expanded.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// One module reference: from node, to node, with where it was written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    from: String,
    to: String,
    at: String,
}

/// A source file of one crate: its module path (`["store", "etcd", "mod"]`
/// normalised to `["store", "etcd"]`) and its text.
struct Source {
    module: Vec<String>,
    label: String,
    text: String,
}

/// The module path of a file relative to `src/`, or `None` for a crate root
/// or a file the graph leaves out.
fn module_of(rel: &Path) -> Option<Vec<String>> {
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let (last, dirs) = parts.split_last()?;
    if dirs.first().map(String::as_str) == Some("bin") {
        return None;
    }
    let stem = last.strip_suffix(".rs")?;
    if stem == "tests" || stem.ends_with("_tests") {
        return None;
    }
    let mut module: Vec<String> = dirs.to_vec();
    match stem {
        "lib" | "main" if dirs.is_empty() => return None,
        "mod" => {}
        _ => module.push(stem.to_string()),
    }
    if module.is_empty() {
        return None;
    }
    Some(module)
}

/// The text with comments and string/char literals blanked (newlines kept,
/// so line numbers still hold).
fn strip(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !is_ident(b[i - 1]))
        {
            // A raw string: r"..." or r#"..."#; `r#ident` is no string.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &b[i..j.min(b.len())] {
                out.push(blank(ch));
            }
            i = j;
        } else if c == '"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != '"' {
                j += if b[j] == '\\' { 2 } else { 1 };
            }
            for &ch in &b[i..(j + 1).min(b.len())] {
                out.push(blank(ch));
            }
            i = j + 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let end = if next == Some('\\') {
                (i + 2..b.len()).find(|&j| b[j] == '\'')
            } else if b.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    for _ in i..=e {
                        out.push(' ');
                    }
                    i = e + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The stripped text with every `#[cfg(test)]`-gated inline module blanked.
fn without_test_modules(text: &str) -> String {
    let mut out: Vec<char> = text.chars().collect();
    let s: String = out.iter().collect();
    let mut from = 0;
    while let Some(found) = s[from..].find("#[cfg(test)]") {
        let start = from + found;
        from = start + 1;
        let rest = &s[start + "#[cfg(test)]".len()..];
        let trimmed = rest.trim_start();
        // Further attributes may sit between `#[cfg(test)]` and `mod`.
        let mut tail = trimmed;
        while tail.starts_with("#[") {
            match tail.find(']') {
                Some(e) => tail = tail[e + 1..].trim_start(),
                None => break,
            }
        }
        let tail = tail.strip_prefix("pub ").unwrap_or(tail);
        let Some(tail) = tail.strip_prefix("mod ") else {
            continue;
        };
        let name_end = tail.find(|c: char| !is_ident(c)).unwrap_or(tail.len());
        let after = tail[name_end..].trim_start();
        if !after.starts_with('{') {
            continue;
        }
        let open = s.len() - after.len();
        let mut depth = 0;
        let mut end = s.len();
        for (k, ch) in s[open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        // Byte offsets equal char offsets here only for ASCII; map safely.
        let (cs, ce) = (s[..start].chars().count(), s[..end].chars().count());
        for ch in &mut out[cs..ce] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
        from = end;
    }
    out.into_iter().collect()
}

/// Every path the code names from `crate::` or `super::`, with its line,
/// brace groups of `use` items expanded, as absolute segment lists.
fn paths_in(module: &[String], text: &str) -> Vec<(Vec<String>, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let at_word = i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':');
        if at_word && (starts(&chars, i, "crate::") || starts(&chars, i, "super::")) {
            let line = chars[..i].iter().filter(|&&c| c == '\n').count() + 1;
            let (mut tree, end) = use_tree(&chars, i);
            for p in tree.drain(..) {
                if let Some(abs) = resolve(module, &p) {
                    found.push((abs, line));
                }
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    found
}

fn starts(chars: &[char], i: usize, word: &str) -> bool {
    word.chars()
        .enumerate()
        .all(|(k, w)| chars.get(i + k) == Some(&w))
}

/// Reads a path from `i` (`a::b::{c, d::e}`), returning each leaf path.
fn use_tree(chars: &[char], mut i: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix: Vec<String> = Vec::new();
    loop {
        while chars.get(i).is_some_and(|c| c.is_whitespace()) {
            i += 1;
        }
        if chars.get(i) == Some(&'{') {
            let mut all = Vec::new();
            i += 1;
            loop {
                while chars.get(i).is_some_and(|c| c.is_whitespace() || *c == ',') {
                    i += 1;
                }
                match chars.get(i) {
                    None => return (all, i),
                    Some('}') => return (all, i + 1),
                    _ => {}
                }
                let (subs, end) = use_tree(chars, i);
                for s in subs {
                    let mut p = prefix.clone();
                    p.extend(s);
                    all.push(p);
                }
                if end == i {
                    i += 1;
                } else {
                    i = end;
                }
            }
        }
        let start = i;
        while chars.get(i).is_some_and(|c| is_ident(*c)) {
            i += 1;
        }
        if i == start {
            return (vec![prefix], i);
        }
        prefix.push(chars[start..i].iter().collect());
        let mut j = i;
        while chars.get(j).is_some_and(|c| c.is_whitespace()) {
            j += 1;
        }
        if starts(chars, j, "::") {
            i = j + 2;
        } else {
            return (vec![prefix], i);
        }
    }
}

/// An absolute module path (`crate::` dropped) for a path as written.
fn resolve(module: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut segs = path.iter().peekable();
    let mut base: Vec<String> = match segs.peek().map(|s| s.as_str()) {
        Some("crate") => {
            segs.next();
            Vec::new()
        }
        Some("super") => {
            let mut b = module.to_vec();
            while segs.peek().map(|s| s.as_str()) == Some("super") {
                segs.next();
                b.pop()?;
            }
            b
        }
        _ => return None,
    };
    base.extend(segs.cloned());
    Some(base)
}

/// The node a module path belongs to: its longest prefix that is a module
/// of the crate (a path into an item names the item's module).
fn node_of(path: &[String], modules: &BTreeSet<Vec<String>>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
        .map(|p| p.join("::"))
}

/// The module graph of a crate's sources: its nodes and edges.
fn edges(sources: &[Source]) -> Vec<Edge> {
    let modules: BTreeSet<Vec<String>> = sources
        .iter()
        .flat_map(|s| (1..=s.module.len()).map(|n| s.module[..n].to_vec()))
        .collect();
    let mut all = BTreeSet::new();
    for s in sources {
        let Some(from) = node_of(&s.module, &modules) else {
            continue;
        };
        let text = without_test_modules(&strip(&s.text));
        for (path, line) in paths_in(&s.module, &text) {
            if let Some(to) = node_of(&path, &modules) {
                if to != from {
                    all.insert(Edge {
                        from: from.clone(),
                        to,
                        at: format!("{}:{line}", s.label),
                    });
                }
            }
        }
    }
    all.into_iter().collect()
}

/// The strongly connected components of more than one node (Tarjan), each
/// sorted, so every cycle of the graph lies inside one of them.
fn cycles(edges: &[Edge]) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in edges {
        next.entry(&e.from).or_default().insert(&e.to);
        next.entry(&e.to).or_default();
    }
    struct Walk<'a> {
        next: &'a BTreeMap<&'a str, BTreeSet<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, v: &'a str) {
        let n = w.index.len();
        w.index.insert(v, n);
        w.low.insert(v, n);
        w.stack.push(v);
        w.on.insert(v);
        for &u in &w.next[v] {
            if !w.index.contains_key(u) {
                visit(w, u);
                let l = w.low[v].min(w.low[u]);
                w.low.insert(v, l);
            } else if w.on.contains(u) {
                let l = w.low[v].min(w.index[u]);
                w.low.insert(v, l);
            }
        }
        if w.low[v] == w.index[v] {
            let mut comp = Vec::new();
            while let Some(u) = w.stack.pop() {
                w.on.remove(u);
                comp.push(u.to_string());
                if u == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                w.out.push(comp);
            }
        }
    }
    let mut w = Walk {
        next: &next,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in next.keys() {
        if !w.index.contains_key(v) {
            visit(&mut w, v);
        }
    }
    w.out.sort();
    w.out
}

/// A cycle as the lead reads it: its nodes, and each edge inside it with
/// where it is written.
fn describe(krate: &str, comp: &[String], edges: &[Edge]) -> String {
    let mut s = format!("{krate}: {{{}}}\n", comp.join(", "));
    for e in edges {
        if comp.contains(&e.from) && comp.contains(&e.to) {
            s.push_str(&format!("    {} -> {}  ({})\n", e.from, e.to, e.at));
        }
    }
    s
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testbed sits in the workspace")
        .to_path_buf()
}

/// The workspace members, read from the root `Cargo.toml`.
fn members(root: &Path) -> Vec<String> {
    let toml = fs::read_to_string(root.join("Cargo.toml")).expect("the workspace Cargo.toml");
    let list = toml
        .split("members")
        .nth(1)
        .and_then(|r| r.split(']').next())
        .expect("a members list in the workspace Cargo.toml");
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn sources_of(root: &Path, krate: &str) -> Vec<Source> {
    let src = root.join(krate).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(&src).expect("under src").to_path_buf();
            let module = module_of(&rel)?;
            let text = fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            Some(Source {
                module,
                label: format!("{krate}/src/{}", rel.display()),
                text,
            })
        })
        .collect()
}

/// Cycles still to break, each `(crate, its modules sorted)` and why it is
/// here. The test fails on a cycle missing from this list and on an entry that
/// is no longer a cycle, so the list can only shrink.
const KNOWN: &[(&str, &str)] = &[
    // Empty since issue 24 broke the last ones; a cycle that comes back fails
    // the test rather than being added here.
];

/// Issue 24: no workspace crate has an import cycle between its modules
/// beyond the shrinking list of `KNOWN` ones.
#[test]
fn no_workspace_crate_has_an_import_cycle() {
    let root = workspace();
    let crates = members(&root);
    assert!(crates.len() >= 5, "workspace members read: {crates:?}");
    let mut found = String::new();
    let mut seen = BTreeSet::new();
    for krate in &crates {
        let sources = sources_of(&root, krate);
        assert!(!sources.is_empty(), "{krate}: no modules found under src/");
        let graph = edges(&sources);
        for comp in cycles(&graph) {
            let key = (krate.clone(), comp.join(", "));
            if !KNOWN.iter().any(|(k, c)| *k == key.0 && *c == key.1) {
                found.push_str(&describe(krate, &comp, &graph));
            }
            seen.insert(key);
        }
    }
    assert!(found.is_empty(), "import cycles between modules:\n{found}");
    let gone: Vec<_> = KNOWN
        .iter()
        .filter(|(k, c)| !seen.contains(&(k.to_string(), c.to_string())))
        .collect();
    assert!(
        gone.is_empty(),
        "no longer cycles (or changed), remove or update them in KNOWN: {gone:?}"
    );
}

/// The checker itself, on small synthetic crates.
mod checker_tests;
