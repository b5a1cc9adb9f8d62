//! What the engine does with a reading that failed: a request it could not
//! read unpins nothing; a failed read shows until a whole reading clears it.

use super::*;

/// A reading that could not read part of what decides the request (the
/// directory, the xattr, the owner, the CPU limit: EMFILE, EIO) asks for
/// nothing as read; it does not unpin the workload, and its sets that were
/// not read stay as known. A whole reading that asks for nothing does.
#[test]
fn a_reading_that_could_not_read_the_request_does_not_unpin() {
    let mut e = engine();
    let pinned = pin_guaranteed(&mut e);
    let key = format!("cgroup:{GUARANTEED}");

    // The directory could not be opened: nothing read at all.
    let failed = Observed {
        rel: GUARANTEED.into(),
        error: Some(format!("{GUARANTEED}: Too many open files")),
        unsure: true,
        ..Observed::default()
    };
    reading(&mut e, failed, None, "");
    assert!(apply(&mut e).is_empty(), "nothing is written");
    assert_eq!(e.workloads()[&key].cpus.as_ref(), Some(&pinned));
    assert_eq!(e.cgroups[GUARANTEED].cpus.as_deref(), Some(&pinned));
    assert!(
        e.cgroups[GUARANTEED].failure.is_some(),
        "the error is shown"
    );

    // The sets read, the limit not: the request stands, the sets are taken.
    let partial = Observed {
        rel: GUARANTEED.into(),
        cpus: Some(pinned.clone()),
        mems: Some(set("0-1")),
        unsure: true,
        ..Observed::default()
    };
    reading(&mut e, partial, None, "");
    assert!(apply(&mut e).is_empty());
    assert_eq!(e.workloads()[&key].cpus.as_ref(), Some(&pinned));

    // Read whole, asking for nothing: released.
    add(&mut e, GUARANTEED, &pinned.to_string(), None);
    apply(&mut e);
    assert!(e.workloads().is_empty());
}

/// A failed read shows in the status until a reading reads the cgroup
/// whole; a failed write stays until a write succeeds.
#[test]
fn a_failed_read_is_cleared_by_a_whole_reading_a_failed_write_is_not() {
    let mut e = engine();
    kube_tree(&mut e);
    apply(&mut e);
    let rel = "kubepods/burstable/pod11111111-2222-3333-4444-555555555555/aaaa";
    let cpus = target(&e, rel);
    let failed = Observed {
        rel: rel.into(),
        cpus: Some(cpus.clone()),
        error: Some(format!("{rel}/cpuset.mems: Input/output error")),
        ..Observed::default()
    };
    reading(&mut e, failed, None, "");
    assert_eq!(e.failing_count(), 1, "the error is shown");
    add(&mut e, rel, &cpus.to_string(), None);
    assert_eq!(e.failing_count(), 0, "read whole: the error passed");

    let write = Write {
        rel: rel.into(),
        file: File::Cpus,
        set: Arc::new(cpus.clone()),
        plan: 0,
    };
    let failure = Failure {
        message: "EBUSY".into(),
        errno: Some(libc::EBUSY),
        read: false,
    };
    e.written(&write, Err(failure));
    let failed_again = Observed {
        rel: rel.into(),
        cpus: Some(cpus.clone()),
        error: Some(format!("{rel}: Too many open files")),
        unsure: true,
        ..Observed::default()
    };
    reading(&mut e, failed_again, None, "");
    add(&mut e, rel, &cpus.to_string(), None);
    assert_eq!(
        e.failing().first().map(|f| f.error.as_str()),
        Some("EBUSY"),
        "a failed write stands, whatever a reading says"
    );
    e.written(&write, Ok(()));
    assert_eq!(e.failing_count(), 0);
}
