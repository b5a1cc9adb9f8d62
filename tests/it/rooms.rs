//! The size of the rooms kept in bounds: no source file under `src/` holds
//! more than [`MOST_LINES`] lines before its tests, so that a file stays one
//! idea a reader can hold (issue #48). Split a file that grows past it where
//! its code has seams, not by line count (`ARCHITECTURE.md`, "Layers").
//!
//! What it counts. A file's lines *before its tests* are the lines up to its
//! test module: a line `#[cfg(test)]` at the start of a line, followed (blank
//! lines aside) by `mod tests;` or `mod tests {`. A file without one counts
//! whole. Files that are themselves test modules, every file named `tests.rs`
//! and every file under a `tests/` directory, are not counted: tests beside
//! their code stay where they are.

use std::path::{Path, PathBuf};

/// The most lines a source file may hold before its tests.
const MOST_LINES: usize = 850;

/// Every `.rs` file under `dir`, in order, with its path from the repository.
fn sources(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(root, &path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            let rel = path.strip_prefix(root).expect("under the repository");
            out.push((rel.to_string_lossy().replace('\\', "/"), path));
        }
    }
}

/// Whether `rel` is itself a test module: `tests.rs`, or under `tests/`.
fn is_tests(rel: &str) -> bool {
    rel.ends_with("/tests.rs") || rel.split('/').any(|part| part == "tests")
}

/// The lines of `text` before its test module, or all of them.
fn lines_before_tests(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim_end() != "#[cfg(test)]" {
            continue;
        }
        let next = lines[i + 1..].iter().find(|l| !l.trim().is_empty());
        if next.is_some_and(|l| l.starts_with("mod tests;") || l.starts_with("mod tests {")) {
            return i;
        }
    }
    lines.len()
}

#[test]
fn no_source_file_is_over_850_lines_before_its_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(root, &root.join("src"), &mut files);
    assert!(
        files.len() > 50,
        "found only {} files under src/",
        files.len()
    );
    let mut problems = Vec::new();
    for (rel, path) in &files {
        if is_tests(rel) {
            continue;
        }
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let n = lines_before_tests(&text);
        if n > MOST_LINES {
            problems.push(format!(
                "{rel}: {n} lines before its tests, over {MOST_LINES}; split it where its code has seams"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_count_stops_at_the_test_module() {
    let code = "//! a\nfn f() {}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {}\n}\n";
    assert_eq!(lines_before_tests(code), 3);
    assert_eq!(
        lines_before_tests("//! a\n\n#[cfg(test)]\n\nmod tests;\n"),
        2
    );
    // A #[cfg(test)] item that is not the test module counts as code.
    assert_eq!(
        lines_before_tests("//! a\n#[cfg(test)]\nfn only_in_tests() {}\n"),
        3
    );
    assert!(is_tests("src/engine/tests/mod.rs"));
    assert!(is_tests("src/power/tests.rs"));
    assert!(!is_tests("src/engine/mod.rs"));
}
