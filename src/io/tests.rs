//! The I/O pool's own tests: scans, reads beneath a directory, the
//! real filesystem's calls.

use super::*;

fn summary(scan: io::Result<DirScan>) -> String {
    match scan {
        Err(e) => format!("error {:?}", e.kind()),
        Ok(mut s) => {
            s.dirs.sort();
            let files: Vec<String> = s
                .files
                .iter()
                .map(|f| match f {
                    Ok(t) => format!("{t:?}"),
                    Err(e) => format!("{:?}", e.kind()),
                })
                .collect();
            let xattr = match &s.xattr {
                Ok(v) => format!("{v:?}"),
                Err(e) => format!("{:?}", e.kind()),
            };
            let owner = s.owner.map_err(|e| e.kind());
            format!(
                "dirs {:?} files {files:?} xattr {xattr} owner {owner:?}",
                s.dirs
            )
        }
    }
}

/// A directory with no subdirectory (link count 2) is not listed: its files
/// are read as ever, and a link to a directory there is not reported (cgroupfs
/// has no links); one beside a subdirectory is.
#[test]
fn scan_dir_does_not_list_a_directory_without_subdirectories() {
    let tmp = tempfile::tempdir().unwrap();
    let leaf = tmp.path().join("leaf");
    std::fs::create_dir_all(&leaf).unwrap();
    std::fs::write(leaf.join("cpuset.cpus"), "1\n").unwrap();
    std::os::unix::fs::symlink(tmp.path(), leaf.join("link")).unwrap();
    let scan = RealFs
        .scan_dir(&leaf, &["cpuset.cpus"], "user.x", None)
        .unwrap();
    assert!(scan.dirs.is_empty(), "{:?}", scan.dirs);
    assert_eq!(scan.files[0].as_deref().unwrap(), "1\n");
    std::fs::create_dir(leaf.join("child")).unwrap();
    let mut scan = RealFs.scan_dir(&leaf, &[], "user.x", None).unwrap();
    scan.dirs.sort();
    assert_eq!(scan.dirs, ["child", "link"]);
}

/// Nor is one that has just the subdirectories the caller knows of: one
/// more, or one fewer, and it is listed.
#[test]
fn scan_dir_does_not_list_a_directory_with_the_children_known() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pod");
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::create_dir_all(dir.join("b")).unwrap();
    let listed = |known| {
        let mut dirs = RealFs.scan_dir(&dir, &[], "user.x", known).unwrap().dirs;
        dirs.sort();
        dirs
    };
    assert!(listed(Some(2)).is_empty());
    assert_eq!(listed(Some(1)), ["a", "b"]);
    assert_eq!(listed(Some(3)), ["a", "b"]);
    assert_eq!(listed(None), ["a", "b"]);
    // The default lists whatever it is told.
    assert_eq!(
        Plain::default()
            .scan_dir(&dir, &[], "user.x", Some(2))
            .unwrap()
            .dirs
            .len(),
        2
    );
}

#[test]
fn scan_dir_relative_to_the_directory_matches_the_plain_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cg");
    std::fs::create_dir_all(dir.join("child-a")).unwrap();
    std::fs::create_dir_all(dir.join("child-b/deeper")).unwrap();
    std::fs::create_dir_all(tmp.path().join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("elsewhere"), dir.join("link")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("nowhere"), dir.join("dangling")).unwrap();
    std::fs::write(dir.join("cpuset.cpus"), "0-3\n").unwrap();
    // Longer than one read.
    std::fs::write(dir.join("big"), "x".repeat(5000)).unwrap();
    std::fs::write(dir.join("bad"), [0xff, 0xfe]).unwrap();
    let files = ["cpuset.cpus", "missing", "big", "bad"];
    let real = summary(RealFs.scan_dir(&dir, &files, "user.pinctl.cpus", None));
    assert_eq!(
        real,
        summary(Plain::default().scan_dir(&dir, &files, "user.pinctl.cpus", None))
    );
    assert!(
        real.starts_with(r#"dirs ["child-a", "child-b", "link"] files ["\"0-3\\n\"", "NotFound""#),
        "{real}"
    );
    assert!(real.contains("InvalidData"), "{real}");
    let gone = tmp.path().join("gone");
    assert_eq!(
        summary(RealFs.scan_dir(&gone, &files, "user.x", None)),
        "error NotFound"
    );
    assert_eq!(
        summary(Plain::default().scan_dir(&gone, &files, "user.x", None)),
        "error NotFound"
    );
}
