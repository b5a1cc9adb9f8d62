//! The layers kept true: the top-level modules of `src/` use one another only
//! downward, as the map at the head of `ARCHITECTURE.md` says, and never in a
//! circle.
//!
//! What it reads. A *module* is a file or a directory directly under `src/`
//! (`config` is `src/config.rs` or `src/config/**`); `src/bin/` is the module
//! `bin`; `src/lib.rs`, the crate root, is none. An *edge* from module A to
//! module B is a path in A's non-test code that reaches B:
//! - `crate::B`, in a `use` or anywhere else (a type, an expression, a
//!   `pub(in ..)`), and each head of a group, `use crate::{B, C::x}`;
//! - `super::..::B` whose `super`s climb to the crate root (a `super` path
//!   that stays inside A is A's own business);
//! - in `src/bin/`, `pinctl::B`;
//! - `crate::Name` (or `pinctl::Name`) where `src/lib.rs` says
//!   `pub use B::Name;`.
//!
//! Non-test code is what is left of a file after dropping comments (doc
//! comments too: an intra-doc link is no edge), string, byte and char
//! literals (raw ones too), every item marked `#[cfg(test)]` (up to its `;`,
//! its `,` or its closing brace), every file named `tests.rs` and every file
//! under a `tests/` directory. An out-of-line test module (`#[cfg(test)] mod
//! x;`) must be named `tests`, so that its file is one of those; another name
//! fails the check rather than being read as code. A `#![cfg(test)]` drops
//! the rest of its file or block. Other `cfg`s (`cfg(any(test, ..))`) are
//! read as code. A glob of the root (`use crate::*`) fails the check: it
//! hides which modules it uses. This is a lexer, not a parser: a macro's body
//! is read as code; a path spelled inside a string
//! (`#[serde(with = "crate::x")]`) is not seen.
//!
//! The map is the first markdown table of `ARCHITECTURE.md` whose header
//! starts `| layer | modules |` (other columns are for people): one row per
//! layer, the top layer first; the modules are the backticked names in the
//! second column. It must end within the file's first 60 lines, one screen.
//! A module may use the modules of its own layer and of the layers below it;
//! all edges together must still make no circle.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Where a path was spelled: a file relative to the repository, and a line.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Site {
    file: String,
    line: usize,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

// --- The lexer --------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    /// A literal: a string, a char, a number. Its text does not matter.
    Lit,
    Sym(char),
}

/// The tokens of a Rust source text, each with its line; comments and the
/// text of literals are gone.
fn lex(text: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    // Skips a quoted literal whose opening quote is at `i`; escapes count.
    let quoted = |i: &mut usize, line: &mut usize, quote: char| {
        *i += 1;
        while *i < c.len() && c[*i] != quote {
            if c[*i] == '\\' {
                *i += 1;
            }
            if *i < c.len() && c[*i] == '\n' {
                *line += 1;
            }
            *i += 1;
        }
        *i += 1;
    };
    while i < c.len() {
        let ch = c[i];
        let at = line;
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            // Block comments nest.
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            quoted(&mut i, &mut line, '"');
            out.push((Tok::Lit, at));
        } else if ch == '\'' {
            // A char literal ('a', '\n', '{') or a lifetime or label ('a).
            if c.get(i + 1) == Some(&'\\') || c.get(i + 2) == Some(&'\'') {
                quoted(&mut i, &mut line, '\'');
                out.push((Tok::Lit, at));
            } else {
                i += 1;
                out.push((Tok::Sym('\''), at));
            }
        } else if ch.is_ascii_digit() {
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push((Tok::Lit, at));
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let next = c.get(i).copied();
            let raw = matches!(word.as_str(), "r" | "br" | "cr");
            if raw && matches!(next, Some('"' | '#')) {
                // A raw string r#"..."#, or a raw identifier r#name.
                let mut hashes = 0;
                while c.get(i + hashes) == Some(&'#') {
                    hashes += 1;
                }
                if c.get(i + hashes) == Some(&'"') {
                    i += hashes + 1;
                    loop {
                        if i >= c.len() {
                            break;
                        }
                        if c[i] == '"' && (0..hashes).all(|h| c.get(i + 1 + h) == Some(&'#')) {
                            i += 1 + hashes;
                            break;
                        }
                        if c[i] == '\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                    out.push((Tok::Lit, at));
                } else {
                    i += 1;
                    let start = i;
                    while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                        i += 1;
                    }
                    out.push((Tok::Ident(c[start..i].iter().collect()), at));
                }
            } else if matches!(word.as_str(), "b" | "c") && next == Some('"') {
                quoted(&mut i, &mut line, '"');
                out.push((Tok::Lit, at));
            } else if word == "b" && next == Some('\'') {
                quoted(&mut i, &mut line, '\'');
                out.push((Tok::Lit, at));
            } else {
                out.push((Tok::Ident(word), at));
            }
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            i += 2;
            out.push((Tok::PathSep, at));
        } else {
            i += 1;
            out.push((Tok::Sym(ch), at));
        }
    }
    out
}

// --- The scan ---------------------------------------------------------------

/// What a file says of other modules: the first name of each path that
/// leaves its module, where it is spelled; and what could not be read.
#[derive(Default, Debug)]
struct Scan {
    paths: Vec<(String, usize)>,
    /// Each with its line.
    problems: Vec<(usize, String)>,
}

/// The index just past the bracket that closes the one at `open` (`{` or
/// `[`), or the end when none does.
fn past_close(toks: &[(Tok, usize)], open: usize) -> usize {
    let Tok::Sym(opening) = toks[open].0 else {
        unreachable!("past_close starts at a bracket");
    };
    let closing = if opening == '[' { ']' } else { '}' };
    let mut depth = 0;
    for (i, (tok, _)) in toks.iter().enumerate().skip(open) {
        match tok {
            Tok::Sym(c) if *c == opening => depth += 1,
            Tok::Sym(c) if *c == closing => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    toks.len()
}

/// The index just past the attribute whose `[` is at `open`, and whether it
/// is exactly `#[cfg(test)]`.
fn attribute(toks: &[(Tok, usize)], open: usize) -> (usize, bool) {
    let end = past_close(toks, open);
    let inner: Vec<&Tok> = toks[open + 1..end.saturating_sub(1).max(open + 1)]
        .iter()
        .map(|t| &t.0)
        .collect();
    let cfg_test = inner
        == [
            &Tok::Ident("cfg".into()),
            &Tok::Sym('('),
            &Tok::Ident("test".into()),
            &Tok::Sym(')'),
        ];
    (end, cfg_test)
}

/// The index just past the item that starts at `i`: past its `;` (or its
/// `,`, for a field), or past the brace that closes its first `{` outside
/// parentheses and brackets; or at the brace that closes the block it is in.
fn past_item(toks: &[(Tok, usize)], mut i: usize) -> usize {
    let mut nest = 0i32;
    while i < toks.len() {
        match toks[i].0 {
            Tok::Sym('(' | '[') => nest += 1,
            Tok::Sym(')' | ']') => nest -= 1,
            Tok::Sym(';' | ',') if nest == 0 => return i + 1,
            Tok::Sym('}') if nest == 0 => return i,
            Tok::Sym('{') if nest == 0 => return past_close(toks, i),
            _ => {}
        }
        i += 1;
    }
    i
}

/// The heads of a use group whose `{` is at `open`: `{a, b::c, d::{e}}`
/// gives `a`, `b`, `d`.
fn group_heads(toks: &[(Tok, usize)], open: usize) -> Vec<(String, usize)> {
    let mut heads = Vec::new();
    // How deep inside the group: 0 is its own level.
    let mut depth = 0;
    let mut head = true;
    for (tok, line) in &toks[open + 1..] {
        match tok {
            Tok::Sym('{') => depth += 1,
            Tok::Sym('}') if depth == 0 => break,
            Tok::Sym('}') => depth -= 1,
            Tok::Sym(',') if depth == 0 => {
                head = true;
                continue;
            }
            Tok::Ident(name) if depth == 0 && head && name != "self" => {
                heads.push((name.clone(), *line));
            }
            _ => {}
        }
        head = false;
    }
    heads
}

/// The paths that leave a module, in one file's text. `depth` is how deep
/// the file's module is below the crate root (1 for `src/config.rs` and
/// `src/config/mod.rs`, 2 for `src/config/raw.rs`); `root` is the name by
/// which this file reaches the library's root (`crate`, or `pinctl` in a
/// binary, whose `crate` is its own).
fn scan(text: &str, depth: usize, root: &str) -> Scan {
    let toks = lex(text);
    let mut scan = Scan::default();
    // Each open brace: whether it opened an inline module.
    let mut braces: Vec<bool> = Vec::new();
    let ident =
        |i: usize, word: &str| matches!(&toks.get(i), Some((Tok::Ident(w), _)) if w == word);
    let sym = |i: usize, s: char| matches!(&toks.get(i), Some((Tok::Sym(x), _)) if *x == s);
    let sep = |i: usize| matches!(&toks.get(i), Some((Tok::PathSep, _)));
    let mut i = 0;
    while i < toks.len() {
        let line = toks[i].1;
        if sym(i, '#') && sym(i + 1, '!') && sym(i + 2, '[') {
            let (next, cfg_test) = attribute(&toks, i + 2);
            if !cfg_test {
                // Read what the attribute holds as code.
                i += 3;
                continue;
            }
            // The rest of the enclosing block (or file) is test code.
            let mut open = 0;
            let mut j = next;
            while j < toks.len() {
                match toks[j].0 {
                    Tok::Sym('{') => open += 1,
                    Tok::Sym('}') if open == 0 => break,
                    Tok::Sym('}') => open -= 1,
                    _ => {}
                }
                j += 1;
            }
            i = j;
            continue;
        }
        if sym(i, '#') && sym(i + 1, '[') {
            let (mut next, cfg_test) = attribute(&toks, i + 1);
            if !cfg_test {
                i += 2;
                continue;
            }
            while sym(next, '#') && sym(next + 1, '[') {
                next = attribute(&toks, next + 1).0;
            }
            let end = past_item(&toks, next);
            // An out-of-line module: its file must be one the scan skips.
            if sym(end - 1, ';')
                && end >= 3
                && ident(end - 3, "mod")
                && let Some((Tok::Ident(name), _)) = toks.get(end - 2)
                && name != "tests"
            {
                scan.problems.push((
                    line,
                    format!(
                        "`#[cfg(test)] mod {name};`: name a test module's file `tests`, \
                         so that the layer check skips it"
                    ),
                ));
            }
            i = end;
            continue;
        }
        match &toks[i].0 {
            Tok::Sym('{') => {
                let module = i >= 2 && ident(i - 2, "mod");
                braces.push(module);
                i += 1;
                continue;
            }
            Tok::Sym('}') => {
                braces.pop();
                i += 1;
                continue;
            }
            _ => {}
        }
        // A path's start: not the tail of another path.
        let starts = i == 0 || !sep(i - 1) || (i >= 2 && !matches!(toks[i - 2].0, Tok::Ident(_)));
        let mut climbs = None;
        if starts && ident(i, root) && sep(i + 1) {
            climbs = Some(i + 2);
        } else if starts && root == "crate" && ident(i, "super") && sep(i + 1) {
            let here = depth + braces.iter().filter(|m| **m).count();
            let mut supers = 0;
            let mut j = i;
            while ident(j, "super") && sep(j + 1) {
                supers += 1;
                j += 2;
            }
            if supers == here {
                climbs = Some(j);
            } else {
                if supers > here {
                    scan.problems.push((
                        line,
                        format!("{supers} `super`s climb above the crate root"),
                    ));
                }
                // A path inside this module; what follows it (a group's
                // brace too) is read as any other token.
                i = j;
                continue;
            }
        }
        if let Some(j) = climbs {
            match toks.get(j) {
                Some((Tok::Ident(name), at)) => scan.paths.push((name.clone(), *at)),
                Some((Tok::Sym('{'), _)) => scan.paths.extend(group_heads(&toks, j)),
                Some((Tok::Sym('*'), _)) => scan.problems.push((
                    line,
                    "a glob of the crate root hides which modules it uses".to_string(),
                )),
                _ => scan
                    .problems
                    .push((line, "a path from the root that names nothing".to_string())),
            }
            i = j;
            continue;
        }
        i += 1;
    }
    scan
}

// --- The graph --------------------------------------------------------------

/// The top-level modules and the edges between them, each with every site
/// that makes it, in file and line order.
struct Graph {
    modules: BTreeSet<String>,
    edges: BTreeMap<(String, String), Vec<Site>>,
    problems: Vec<String>,
}

impl Graph {
    fn of_src() -> Graph {
        let src = repo("src");
        let mut modules = BTreeSet::new();
        for entry in std::fs::read_dir(&src).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            if path.is_dir() {
                modules.insert(name);
            } else if let Some(stem) = name.strip_suffix(".rs")
                && stem != "lib"
            {
                modules.insert(stem.to_string());
            }
        }
        // lib.rs's `pub use module::Name;`: what `crate::Name` reaches.
        let mut reexports = BTreeMap::new();
        for line in read(&src.join("lib.rs")).lines() {
            if let Some(rest) = line.trim().strip_prefix("pub use ")
                && let Some((module, name)) = rest.trim_end_matches(';').split_once("::")
            {
                reexports.insert(name.to_string(), module.to_string());
            }
        }
        let mut files = Vec::new();
        walk(&src, &mut files);
        files.sort();
        let mut edges: BTreeMap<(String, String), Vec<Site>> = BTreeMap::new();
        let mut problems = Vec::new();
        for file in files {
            let rel = file.strip_prefix(&src).unwrap();
            let parts: Vec<&str> = rel.iter().map(|p| p.to_str().unwrap()).collect();
            let last = *parts.last().unwrap();
            if parts == ["lib.rs"]
                || last == "tests.rs"
                || parts[..parts.len() - 1].contains(&"tests")
            {
                continue;
            }
            let module = parts[0].trim_end_matches(".rs").to_string();
            let (depth, root) = if module == "bin" {
                (0, "pinctl")
            } else {
                (parts.len() - usize::from(last == "mod.rs"), "crate")
            };
            let shown = format!("src/{}", parts.join("/"));
            let scan = scan(&read(&file), depth, root);
            for (line, problem) in scan.problems {
                problems.push(format!("{shown}:{line}: {problem}"));
            }
            for (name, line) in scan.paths {
                let Some(to) = (if modules.contains(&name) && name != "bin" {
                    Some(name.clone())
                } else {
                    reexports.get(&name).cloned()
                }) else {
                    problems.push(format!(
                        "{shown}:{line}: `{root}::{name}` names no module \
                         and no re-export of src/lib.rs"
                    ));
                    continue;
                };
                if to != module {
                    edges.entry((module.clone(), to)).or_default().push(Site {
                        file: shown.clone(),
                        line,
                    });
                }
            }
        }
        Graph {
            modules,
            edges,
            problems,
        }
    }

    fn uses(&self, from: &str) -> impl Iterator<Item = &str> {
        self.edges
            .keys()
            .filter(move |(a, _)| a == from)
            .map(|(_, b)| b.as_str())
    }

    /// An edge with its first site, and how many more there are.
    fn edge(&self, from: &str, to: &str) -> String {
        let sites = &self.edges[&(from.to_string(), to.to_string())];
        let more = match sites.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        format!("{from} → {to}: {}{more}", sites[0])
    }

    /// The strongly connected components of more than one module (Tarjan),
    /// each sorted.
    fn knots(&self) -> Vec<Vec<String>> {
        struct Tarjan<'g> {
            graph: &'g Graph,
            index: BTreeMap<&'g str, usize>,
            low: BTreeMap<&'g str, usize>,
            stack: Vec<&'g str>,
            knots: Vec<Vec<String>>,
        }
        impl<'g> Tarjan<'g> {
            fn visit(&mut self, v: &'g str) {
                let n = self.index.len();
                self.index.insert(v, n);
                self.low.insert(v, n);
                self.stack.push(v);
                for w in self.graph.uses(v) {
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        let low = self.low[v].min(self.low[w]);
                        self.low.insert(v, low);
                    } else if self.stack.contains(&w) {
                        let low = self.low[v].min(self.index[w]);
                        self.low.insert(v, low);
                    }
                }
                if self.low[v] == self.index[v] {
                    let mut knot = Vec::new();
                    loop {
                        let w = self.stack.pop().unwrap();
                        knot.push(w.to_string());
                        if w == v {
                            break;
                        }
                    }
                    if knot.len() > 1 {
                        knot.sort();
                        self.knots.push(knot);
                    }
                }
            }
        }
        let mut t = Tarjan {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            knots: Vec::new(),
        };
        for v in &self.modules {
            if !t.index.contains_key(v.as_str()) {
                t.visit(v);
            }
        }
        t.knots.sort();
        t.knots
    }

    /// The shortest circle through a knot's first module, as its modules.
    fn circle(&self, knot: &[String]) -> Vec<String> {
        let start = knot[0].as_str();
        let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(v) = queue.pop_front() {
            for w in self.uses(v) {
                if !knot.iter().any(|k| k == w) {
                    continue;
                }
                if w == start {
                    let mut circle = vec![v.to_string()];
                    let mut at = v;
                    while at != start {
                        at = came_from[at];
                        circle.push(at.to_string());
                    }
                    circle.reverse();
                    circle.push(start.to_string());
                    return circle;
                }
                if !came_from.contains_key(w) {
                    came_from.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        unreachable!("a knot has a circle through each of its modules")
    }
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

// --- The map ----------------------------------------------------------------

/// The layer map: each layer's name and modules, the top layer first, and
/// the number of the table's last line.
struct Map {
    layers: Vec<(String, Vec<String>)>,
    ends_at: usize,
}

impl Map {
    fn of_architecture() -> Map {
        let text = read(&repo("ARCHITECTURE.md"));
        let lines: Vec<&str> = text.lines().collect();
        let cells = |line: &str| -> Vec<String> {
            let line = line.trim();
            let line = line.strip_prefix('|').unwrap_or(line);
            let line = line.strip_suffix('|').unwrap_or(line);
            line.split('|').map(|c| c.trim().to_string()).collect()
        };
        let header = ["layer".to_string(), "modules".to_string()];
        let header = lines
            .iter()
            .position(|l| l.trim_start().starts_with('|') && cells(l).starts_with(&header))
            .expect("ARCHITECTURE.md has no table headed `| layer | modules |`");
        let mut layers = Vec::new();
        let mut at = header + 2;
        while at < lines.len() && lines[at].trim_start().starts_with('|') {
            let row = cells(lines[at]);
            assert!(
                row.len() >= 2,
                "ARCHITECTURE.md:{}: a layer row names its layer, then its modules",
                at + 1
            );
            let modules = row[1]
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect();
            layers.push((row[0].clone(), modules));
            at += 1;
        }
        Map {
            layers,
            ends_at: at,
        }
    }

    /// Each module's layer: 0 is the top.
    fn layer_of(&self) -> BTreeMap<&str, usize> {
        let mut of = BTreeMap::new();
        for (n, (_, modules)) in self.layers.iter().enumerate() {
            for m in modules {
                of.insert(m.as_str(), n);
            }
        }
        of
    }
}

// --- The tests --------------------------------------------------------------

#[test]
fn no_circle_between_top_level_modules() {
    let graph = Graph::of_src();
    assert!(graph.problems.is_empty(), "{}", graph.problems.join("\n"));
    let mut report = String::new();
    for knot in graph.knots() {
        let circle = graph.circle(&knot);
        report += &format!(
            "\nthese modules use one another in a circle: {}\n  a circle: {}\n",
            knot.join(", "),
            circle.join(" → ")
        );
        for pair in circle.windows(2) {
            report += &format!("    {}\n", graph.edge(&pair[0], &pair[1]));
        }
        report += "  every edge inside it:\n";
        for (a, b) in graph.edges.keys() {
            if knot.contains(a) && knot.contains(b) {
                report += &format!("    {}\n", graph.edge(a, b));
            }
        }
    }
    assert!(
        report.is_empty(),
        "move what both sides need down to the module that owns it:{report}"
    );
}

#[test]
fn the_layer_map_names_every_module_once_on_the_first_screen() {
    let graph = Graph::of_src();
    let map = Map::of_architecture();
    assert!(
        map.ends_at <= 60,
        "ARCHITECTURE.md: the layer map ends on line {}: keep it on the first screen",
        map.ends_at
    );
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (layer, modules) in &map.layers {
        if modules.is_empty() {
            problems.push(format!("layer {layer:?} names no module"));
        }
        for m in modules {
            if !seen.insert(m.as_str()) {
                problems.push(format!("`{m}` is in more than one layer"));
            }
            if !graph.modules.contains(m) {
                problems.push(format!(
                    "`{m}` (layer {layer:?}) is no file or directory under src/"
                ));
            }
        }
    }
    for m in &graph.modules {
        if !seen.contains(m.as_str()) {
            problems.push(format!("src/{m} is in no layer"));
        }
    }
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md's layer map:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_edge_goes_down_the_layer_map() {
    let graph = Graph::of_src();
    let map = Map::of_architecture();
    let layer_of = map.layer_of();
    let mut upward = Vec::new();
    for (a, b) in graph.edges.keys() {
        if let (Some(&la), Some(&lb)) = (layer_of.get(a.as_str()), layer_of.get(b.as_str()))
            && lb < la
        {
            upward.push(format!(
                "{} (layer {:?} uses layer {:?}, above it)",
                graph.edge(a, b),
                map.layers[la].0,
                map.layers[lb].0
            ));
        }
    }
    assert!(
        upward.is_empty(),
        "a module may use only its own layer and those below it (ARCHITECTURE.md):\n{}",
        upward.join("\n")
    );
}

/// The scan on small texts: what it must see, and what it must not.
#[test]
fn the_scan_reads_paths_not_comments_strings_or_tests() {
    let text = r####"
//! Docs: [`crate::doc_link`]
use crate::one::Thing;
use crate::{two, three::{x, y}, self};
/* crate::block /* nested crate::inner */ crate::still */
fn f() -> crate::four::T {
    let s = "crate::string \" crate::escaped";
    let r = r#"crate::raw "quoted" crate::raw2"#;
    let c = '"'; let d = '{'; let l: &'static str = "";
    let b = b"crate::bytes"; let e = b'\'';
    super::super::five::g();
    super::local();
    'label: loop { break 'label; }
    crate::six::h()
}
#[cfg(test)]
mod tests {
    use crate::test_only;
}
#[cfg(test)]
use crate::test_import;
#[cfg(test)]
thread_local! { static N: crate::test_macro = 0; }
mod inner {
    use super::{not_out, nor_this};
    mod deeper {
        use super::super::super::super::eight;
    }
    use super::super::super::seven;
}
pub(crate) fn g() {}
"####;
    let read = scan(text, 2, "crate");
    let names: Vec<&str> = read.paths.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "one", "two", "three", "four", "five", "six", "eight", "seven"
        ],
        "{read:?}"
    );
    assert_eq!(read.paths[3], ("four".to_string(), 6));
    assert!(read.problems.is_empty(), "{:?}", read.problems);

    let odd = scan("#[cfg(test)]\nmod fixtures;\n", 1, "crate");
    assert_eq!(odd.problems.len(), 1, "{odd:?}");
    let glob = scan("use crate::*;\n", 1, "crate");
    assert_eq!(glob.problems.len(), 1, "{glob:?}");
    let whole = scan("#![cfg(test)]\nuse crate::a;\n", 1, "crate");
    assert!(whole.paths.is_empty(), "{whole:?}");
    let bin = scan("use pinctl::cli::Cli;\nuse crate::own;\n", 0, "pinctl");
    assert_eq!(bin.paths, [("cli".to_string(), 1)]);
}
