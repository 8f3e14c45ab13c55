//! The house rules, checked over every crate's sources: no import circle between modules, no
//! source file over 500 lines without its tests, no logic function over 60 lines (a view
//! component up to 120). What breaks a rule today is listed in `docs/house-baseline.txt`
//! with its size: it may shrink or go, never grow, and nothing new may join it (a ratchet,
//! so the house gets better in steps with CI green at each). Run with `cargo test -p
//! parlor-domain --test house`; `HOUSE_REPORT=1` prints the numbers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 500;
const MAX_FN_LINES: usize = 60;
const MAX_VIEW_LINES: usize = 120;
const CRATES: [&str; 5] = ["domain", "app", "server", "frontend", "testing/fake-llm"];
const BASELINE: &str = "docs/house-baseline.txt";
/// The server's folders, from the top (what a request meets first) down. An arrow (one
/// folder using another) may only run down: one running up is a finding.
const SERVER_LAYERS: [&str; 16] = [
    "cli",
    "routes",
    "gate",
    "mcp",
    "turn",
    "conversation",
    "state",
    "settings",
    "accounts",
    "llm",
    "ops",
    "store",
    "tools",
    "context_providers",
    "config",
    "table",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The source with comments, strings and character literals blanked (newlines kept), so
/// braces and paths can be read from it.
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let ident_before = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if (c == 'r' || (c == 'b' && next == Some('r')))
            && !ident_before
            && raw_string_start(&chars, i).is_some()
        {
            let (hashes, body) = raw_string_start(&chars, i).unwrap();
            for _ in i..body {
                out.push(' ');
            }
            i = body;
            while i < chars.len() {
                if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                    for _ in 0..=hashes {
                        out.push(' ');
                    }
                    i += hashes + 1;
                    break;
                }
                out.push(blank(chars[i]));
                i += 1;
            }
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal.
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                out.push(' ');
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            out.push_str("   ");
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// At `i`, `r"`, `r#"`, `br##"`…: the number of hashes and where the body starts.
fn raw_string_start(chars: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i + if chars[i] == 'b' { 2 } else { 1 };
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (chars.get(j) == Some(&'"')).then_some((hashes, j + 1))
}

/// The line (0-based) where the block opened at byte `open` closes.
fn block_end(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (at, &b) in code.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return line_of(code, at);
                }
            }
            _ => {}
        }
    }
    line_of(code, code.len().saturating_sub(1))
}

fn line_of(code: &[u8], at: usize) -> usize {
    code[..at].iter().filter(|&&b| b == b'\n').count()
}

/// A source file, read: its code, and which lines belong to test modules.
struct Source {
    path: String,
    lines: Vec<String>,
    in_tests: Vec<bool>,
}

impl Source {
    fn read(path: &Path, relative: String) -> Source {
        let text = std::fs::read_to_string(path).unwrap();
        let code = code_only(&text);
        let lines: Vec<String> = code.lines().map(str::to_owned).collect();
        let mut in_tests = vec![false; lines.len()];
        let bytes = code.as_bytes();
        let offsets: Vec<usize> = std::iter::once(0)
            .chain(code.match_indices('\n').map(|(at, _)| at + 1))
            .collect();
        let mut i = 0;
        while i < lines.len() {
            let attribute = lines[i].trim();
            if attribute.starts_with("#[cfg(test)]") {
                // The item after it: a test module (or function) is skipped whole.
                let mut j = i;
                while j < lines.len() && !lines[j].contains('{') && !lines[j].ends_with(';') {
                    j += 1;
                }
                if j < lines.len() && lines[j].contains('{') {
                    let open = offsets[j] + lines[j].find('{').unwrap();
                    let end = block_end(bytes, open);
                    for flag in &mut in_tests[i..=end.min(lines.len() - 1)] {
                        *flag = true;
                    }
                    i = end + 1;
                    continue;
                }
            }
            i += 1;
        }
        Source {
            path: relative,
            lines,
            in_tests,
        }
    }

    /// Lines outside test modules (blank and comment lines included, as an editor shows
    /// the file).
    fn logic_lines(&self) -> usize {
        self.in_tests.iter().filter(|test| !**test).count()
    }

    /// Every function outside test modules: its name, its length in lines and whether it
    /// is a view component.
    fn functions(&self) -> Vec<(String, usize, bool)> {
        let code = self.lines.join("\n");
        let bytes = code.as_bytes();
        let offsets: Vec<usize> = std::iter::once(0)
            .chain(code.match_indices('\n').map(|(at, _)| at + 1))
            .collect();
        let mut found = Vec::new();
        for (n, line) in self.lines.iter().enumerate() {
            if self.in_tests[n] {
                continue;
            }
            let Some(name) = fn_name(line) else { continue };
            // The signature may run over several lines: the body opens at the first `{`
            // before any `;` (a declaration without a body has none).
            let start = offsets[n] + line.find("fn ").unwrap();
            let rest = &code[start..];
            let (Some(open), semicolon) = (rest.find('{'), rest.find(';')) else {
                continue;
            };
            if semicolon.is_some_and(|s| s < open) {
                continue;
            }
            let end = block_end(bytes, start + open);
            let view = self.lines[n.saturating_sub(3)..n]
                .iter()
                .any(|l| l.contains("#[component]") || l.contains("#[island]"));
            found.push((name, end - n + 1, view));
        }
        found
    }
}

/// The name of the function a line declares, if it declares one.
fn fn_name(line: &str) -> Option<String> {
    let mut words = line.split_whitespace();
    while let Some(word) = words.next() {
        match word {
            "pub" | "async" | "const" | "unsafe" | "default" | "extern" => continue,
            w if w.starts_with("pub(") => continue,
            "fn" => {
                let name: String = words
                    .next()?
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                return (!name.is_empty()).then_some(name);
            }
            _ => return None,
        }
    }
    None
}

/// A crate's modules (by path, `""` for the root) and the modules each one uses.
fn module_graph(sources: &[(String, Source)]) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<String> = sources.iter().map(|(m, _)| m.clone()).collect();
    let mut graph = BTreeMap::new();
    for (module, source) in sources {
        let code: String = source
            .lines
            .iter()
            .zip(&source.in_tests)
            .filter(|(_, test)| !**test)
            .map(|(line, _)| line.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let mut uses = BTreeSet::new();
        for path in paths_in(&code) {
            let absolute = resolve(module, &path, &modules);
            if let Some(target) = absolute.and_then(|p| longest_module(&p, &modules)) {
                // A module using its own ancestors' items is how Rust nests modules: only
                // uses of other modules make circles.
                let is_ancestor = target.is_empty()
                    || module == &target
                    || module.starts_with(&format!("{target}::"));
                if !is_ancestor {
                    uses.insert(target);
                }
            }
        }
        graph.insert(module.clone(), uses);
    }
    graph
}

/// Every path written in the code (`a::b::c`, with `use` groups expanded).
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let tokens = tokenize(code);
    let mut paths = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let starts = is_ident(&tokens[i])
            && tokens.get(i + 1).map(String::as_str) == Some("::")
            && (i == 0 || tokens[i - 1] != "::");
        if starts {
            let (mut found, next) = path_at(&tokens, i);
            paths.append(&mut found);
            i = next;
        } else {
            i += 1;
        }
    }
    paths
}

/// The path(s) starting at token `i` (a group `{a, b::c}` gives several), and where they end.
fn path_at(tokens: &[String], mut i: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    while i < tokens.len() {
        if is_ident(&tokens[i]) {
            prefix.push(tokens[i].clone());
            i += 1;
            if tokens.get(i).map(String::as_str) == Some("::") {
                i += 1;
                continue;
            }
            return (vec![prefix], i);
        }
        if tokens[i] == "{" {
            let mut all = Vec::new();
            i += 1;
            while i < tokens.len() && tokens[i] != "}" {
                if tokens[i] == "," {
                    i += 1;
                    continue;
                }
                let (found, next) = path_at(tokens, i);
                for tail in found {
                    all.push(prefix.iter().cloned().chain(tail).collect());
                }
                i = next.max(i + 1);
            }
            return (all, i + 1);
        }
        break;
    }
    (vec![prefix], i)
}

fn is_ident(token: &str) -> bool {
    token
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

fn tokenize(code: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push("::".into());
            i += 2;
        } else {
            if !c.is_whitespace() {
                tokens.push(c.to_string());
            }
            i += 1;
        }
    }
    tokens
}

/// A path written in `module`, as a path from the crate's root (`None` when it names
/// something outside the crate).
fn resolve(module: &str, path: &[String], modules: &BTreeSet<String>) -> Option<Vec<String>> {
    let mut here: Vec<String> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").map(str::to_owned).collect()
    };
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            here.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                here.pop();
                rest = &rest[1..];
            }
        }
        Some(first) => {
            // A child module of this one, named without `self::`.
            let child = here
                .iter()
                .cloned()
                .chain(std::iter::once(first.to_owned()))
                .collect::<Vec<_>>()
                .join("::");
            if !modules.contains(&child) {
                return None;
            }
        }
        None => return None,
    }
    Some(here.into_iter().chain(rest.iter().cloned()).collect())
}

fn longest_module(path: &[String], modules: &BTreeSet<String>) -> Option<String> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|candidate| modules.contains(candidate))
}

/// The circles of a graph: its strongly connected parts with more than one module.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan's algorithm, recursive (graphs here are small).
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a str) {
            self.index.insert(node, self.next);
            self.low.insert(node, self.next);
            self.next += 1;
            self.stack.push(node);
            self.on_stack.insert(node);
            for target in self.graph.get(node).into_iter().flatten() {
                let target = target.as_str();
                if !self.graph.contains_key(target) {
                    continue;
                }
                if !self.index.contains_key(target) {
                    self.visit(target);
                    let low = self.low[target].min(self.low[node]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(target) {
                    let low = self.index[target].min(self.low[node]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut part = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    part.push(top.to_owned());
                    if top == node {
                        break;
                    }
                }
                if part.len() > 1 {
                    part.sort();
                    self.found.push(part);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found.sort();
    walk.found
}

/// A crate's source files, by module path.
fn crate_sources(krate: &str) -> Vec<(String, Source)> {
    let src = root().join(krate).join("src");
    let mut files = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let relative = path.strip_prefix(&src).unwrap();
            let mut parts: Vec<String> = relative
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            // A file under `<module>/tests.rs` or `bin/` is not a module of the library.
            if parts.first().map(String::as_str) == Some("bin") {
                return None;
            }
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            let module = parts.join("::");
            let shown = format!("{krate}/src/{}", relative.display());
            Some((module, Source::read(&path, shown)))
        })
        .collect()
}

/// Every way the house breaks its rules now, one line each: `file <path> <lines>`,
/// `fn <path> <name> <lines>`, `circle <crate> <module> <module>…`.
fn findings() -> Vec<String> {
    let mut found = Vec::new();
    for krate in CRATES {
        let sources = crate_sources(krate);
        for (_, source) in &sources {
            let lines = source.logic_lines();
            if lines > MAX_FILE_LINES {
                found.push(format!("file {} {lines}", source.path));
            }
            for (name, length, view) in source.functions() {
                let limit = if view { MAX_VIEW_LINES } else { MAX_FN_LINES };
                if length > limit {
                    found.push(format!("fn {} {name} {length}", source.path));
                }
            }
        }
        let graph = module_graph(&sources);
        for circle in circles(&graph) {
            found.push(format!("circle {krate} {}", circle.join(" ")));
        }
        if krate == "server" {
            for (from, to) in up_arrows(&graph, &SERVER_LAYERS) {
                found.push(format!("up {krate} {from} {to}"));
            }
            // A new folder takes its place in the layers, or its arrows would go unjudged.
            let folders: BTreeSet<&str> = graph
                .keys()
                .filter_map(|module| module.split("::").next())
                .collect();
            for folder in folders {
                if !folder.is_empty() && !SERVER_LAYERS.contains(&folder) {
                    found.push(format!("unplaced {krate} {folder}"));
                }
            }
        }
    }
    found.sort();
    found
}

/// The arrows between top-level folders that run up `layers` (listed from the top): a
/// folder using one listed above it. The crate's root and folders not listed are left out.
fn up_arrows(
    graph: &BTreeMap<String, BTreeSet<String>>,
    layers: &[&str],
) -> BTreeSet<(String, String)> {
    let layer = |module: &str| {
        let folder = module.split("::").next().unwrap_or_default();
        layers
            .iter()
            .position(|l| *l == folder)
            .map(|at| (folder.to_owned(), at))
    };
    let mut up = BTreeSet::new();
    for (from, uses) in graph {
        let Some((from_folder, from_at)) = layer(from) else {
            continue;
        };
        for to in uses {
            if let Some((to_folder, to_at)) = layer(to) {
                if to_at < from_at {
                    up.insert((from_folder.clone(), to_folder));
                }
            }
        }
    }
    up
}

/// What a finding is about, and its size (circles and arrows have none).
fn key_and_size(line: &str) -> (String, Option<usize>) {
    let sized = ["circle ", "up ", "unplaced "]
        .iter()
        .all(|kind| !line.starts_with(kind));
    match line.rsplit_once(' ') {
        Some((key, size)) if sized => (key.to_owned(), size.parse().ok()),
        _ => (line.to_owned(), None),
    }
}

#[test]
fn the_house_rules_hold_or_are_getting_better() {
    let found = findings();
    if std::env::var_os("HOUSE_REPORT").is_some() {
        println!("{}", found.join("\n"));
    }
    let baseline_text = std::fs::read_to_string(root().join(BASELINE)).unwrap_or_default();
    let baseline: BTreeMap<String, Option<usize>> = baseline_text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(key_and_size)
        .collect();
    let current: BTreeMap<String, Option<usize>> = found.iter().map(|l| key_and_size(l)).collect();
    let mut problems = Vec::new();
    for (key, size) in &current {
        let shown = size.map(|s| s.to_string()).unwrap_or_default();
        match baseline.get(key) {
            None => problems.push(format!("new: {key} {shown}")),
            Some(Some(allowed)) if size.is_some_and(|s| s > *allowed) => {
                problems.push(format!("grew: {key} {shown} (was {allowed})"))
            }
            _ => {}
        }
    }
    for (key, size) in &baseline {
        match current.get(key) {
            None => problems.push(format!("fixed (remove it from {BASELINE}): {key}")),
            Some(Some(now)) if size.is_some_and(|s| *now < s) => {
                problems.push(format!("shrank (lower it in {BASELINE}): {key} {now}"))
            }
            _ => {}
        }
    }
    assert!(
        problems.is_empty(),
        "the house rules (files over {MAX_FILE_LINES} lines, functions over {MAX_FN_LINES} \
         (views {MAX_VIEW_LINES}), import circles, the server's arrows that run up):\n{}\n\nwhat is found now:\n{}",
        problems.join("\n"),
        found.join("\n")
    );
}

#[test]
fn the_checks_read_rust_as_the_compiler_does() {
    let code = code_only(
        "let s = \"{ not a brace }\"; // } nor this\nlet c = '{'; let l: &'a str = r#\"}\"#;\n",
    );
    assert!(!code.contains('}'), "{code}");
    assert_eq!(code.lines().count(), 2);
    assert_eq!(
        fn_name("    pub(crate) async fn plan_it(x: u8) -> u8 {"),
        Some("plan_it".into())
    );
    assert_eq!(fn_name("let fn_x = 3;"), None);
    let paths = paths_in("use crate::{a::B, c, d::{e, f::G}}; x::y(); ::z::w;");
    let shown: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert!(shown.contains(&"crate::a::B".to_owned()), "{shown:?}");
    assert!(shown.contains(&"crate::d::f::G".to_owned()), "{shown:?}");
    assert!(shown.contains(&"x::y".to_owned()), "{shown:?}");
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(circles(&graph), [vec!["a", "b", "c"]]);
    let layered: BTreeMap<String, BTreeSet<String>> = [
        ("top::x", vec!["low::y"]),
        ("low::y", vec!["top", "mid"]),
        ("mid", vec!["low"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    let up: Vec<(String, String)> = up_arrows(&layered, &["top", "mid", "low"])
        .into_iter()
        .collect();
    assert_eq!(
        up,
        [
            ("low".to_owned(), "mid".to_owned()),
            ("low".to_owned(), "top".to_owned())
        ]
    );
}
