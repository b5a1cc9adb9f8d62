//! Cgroup paths: one type for them, [`Rel`], and the few operations on them.
//!
//! A cgroup is named by its path relative to the hierarchy
//! (`kubepods.slice/...`), never by an absolute path, so that the same name
//! addresses it in the cpuset and cpu controllers of cgroup v1 and in the one
//! tree of v2. `""` is the hierarchy's root. Names that are not UTF-8 are kept
//! in the encoding of [`crate::io::name`]; nothing here needs to know.

use std::collections::BTreeMap;
use std::sync::Arc;

/// A cgroup's path relative to the hierarchy (`kubepods.slice/...`), shared:
/// the engine, the watchers and the plans hold the same string.
pub type Rel = Arc<str>;

/// The path of child `name` of cgroup `rel`.
pub fn child(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

/// The parent of a relative cgroup path (`""` for a top-level cgroup).
pub fn parent(rel: &str) -> Option<&str> {
    if rel.is_empty() {
        return None;
    }
    // Bytes, not a char pattern: the planner asks for thousands of parents.
    Some(
        rel.as_bytes()
            .iter()
            .rposition(|&b| b == b'/')
            .map_or("", |at| &rel[..at]),
    )
}

/// Whether cgroup `rel` is `root` or lies below it. `""`, the hierarchy's root,
/// holds everything.
pub fn is_within(rel: &str, root: &str) -> bool {
    root.is_empty()
        || rel
            .strip_prefix(root)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The keys of `map` at or below cgroup `rel`, in path order: a range walk
/// over the keys that start with `rel`, not a scan of the whole map.
pub fn subtree<'a, V>(
    map: &'a BTreeMap<Rel, V>,
    rel: &'a str,
) -> impl Iterator<Item = &'a Rel> + 'a {
    map.range::<str, _>((std::ops::Bound::Included(rel), std::ops::Bound::Unbounded))
        .map(|(k, _)| k)
        .take_while(move |k| k.starts_with(rel))
        .filter(move |k| is_within(k, rel))
}

/// The number of components of a relative cgroup path (`""` is 0).
pub fn depth(rel: &str) -> usize {
    if rel.is_empty() {
        0
    } else {
        rel.bytes().filter(|&b| b == b'/').count() + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_means_the_root_itself_or_below_it() {
        assert!(is_within("kubepods", "kubepods"));
        assert!(is_within("kubepods/pod1", "kubepods"));
        assert!(
            !is_within("kubepods-burstable.slice", "kubepods"),
            "a sibling with the same prefix"
        );
        assert!(!is_within("kubepods", "kubepods/pod1"));
        assert!(
            is_within("anything/at/all", ""),
            "the hierarchy's root holds everything"
        );
        assert!(!is_within("", "kubepods"));
        assert_eq!(parent("a/b/c"), Some("a/b"));
        assert_eq!(parent("a"), Some(""));
        assert_eq!(parent(""), None);
        assert_eq!((depth(""), depth("a"), depth("a/b")), (0, 1, 2));
    }
}
