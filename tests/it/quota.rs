//! `unthrottle_exclusive`: the CFS quota of an exclusive workload is lifted
//! while it holds its CPUs (`cpu.max` = `max` on v2, `cpu.cfs_quota_us` =
//! -1 on v1), its pod's too, and put back when it stops holding them. The
//! kubelet rule decides by the quota it had, kept on the cgroup (the xattr
//! `user.pinctl.quota`), so lifting never unpins, not even across a restart
//! with the state file lost; a quota written back is lifted again; a reload
//! that turns the switch off puts everything back.
//! The VM bed's kernel probe checks on real kernels that an unlimited quota
//! is accepted, reads back and stops the throttling.

use std::time::Duration;

use crate::support::fake_cgroup::{Driver, Qos, Spec, Version, container_id, uid};
use crate::support::world::{Options, World};

struct Env {
    w: World,
}

env_of_world!(Env);

impl Env {
    /// A started daemon, and a Guaranteed pod of `pod_cpus` with one
    /// container of `app_cpus`: (the world, the pod, the container).
    fn guaranteed(
        name: &str,
        version: Version,
        pod_cpus: u32,
        app_cpus: u32,
    ) -> (Env, String, String) {
        let w = World::new(name, version, Driver::Systemd, &Options::default());
        let mut env = Env { w };
        env.start();
        let pod = env.k.pod(Qos::Guaranteed, &uid(1));
        env.tree.create(&pod, &Spec::limit(pod_cpus));
        let app = env.k.container(&pod, &container_id(1));
        env.tree.create(&app, &Spec::limit(app_cpus));
        (env, pod, app)
    }

    /// The quota file's text of `rel`, trimmed.
    fn quota(&self, rel: &str) -> String {
        let path = match self.tree.version() {
            Version::V2 => self.tree.dir(rel).join("cpu.max"),
            Version::V1 => self.tree.cpu_dir(rel).join("cpu.cfs_quota_us"),
        };
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
            .trim()
            .to_string()
    }

    /// What the daemon kept of `rel`'s limit (`user.pinctl.quota`).
    fn kept(&self, rel: &str) -> Option<String> {
        xattr::get(self.tree.dir(rel), "user.pinctl.quota")
            .unwrap()
            .map(|v| String::from_utf8(v).unwrap())
    }

    /// Writes a quota of `cpus` over the file in one write, never
    /// truncating it: a fake tree's truncated file would be read empty
    /// for a moment (no limit: the workload released), which the kernel's
    /// never is. Padded with blanks to the old text's length.
    fn set_quota(&self, rel: &str, cpus: u32) {
        self.set_quota_text(rel, &(u64::from(cpus) * 100_000).to_string());
    }

    /// [`Self::set_quota`] of a quota in µs per 100 ms period.
    fn set_quota_text(&self, rel: &str, quota: &str) {
        self.tree.write_quota(rel, quota);
    }

    /// A quota of `quota` µs per 100 ms period (any value, not only whole
    /// CPUs), written as [`Self::set_quota_text`] writes it.
    fn set_raw_quota(&self, rel: &str, quota: u64) {
        self.set_quota_text(rel, &quota.to_string());
    }

    fn wait_quota(&self, rel: &str, want: &str) {
        self.wait_for(&format!("quota {want} on {rel}"), || {
            match self.quota(rel) {
                got if got == want => Ok(()),
                got => Err(format!("it reads {got}")),
            }
        });
    }
}

fn unlimited(version: Version) -> &'static str {
    match version {
        Version::V2 => "max",
        Version::V1 => "-1",
    }
}

fn limit(version: Version, cpus: u32) -> String {
    quota_text(version, u64::from(cpus) * 100_000)
}

/// How the quota file of `version` reads a quota of `quota` µs per 100 ms.
fn quota_text(version: Version, quota: u64) -> String {
    match version {
        Version::V2 => format!("{quota} 100000"),
        Version::V1 => quota.to_string(),
    }
}

on_both_versions!(lifted_while_exclusive => lifted_while_exclusive());

fn lifted_while_exclusive(version: Version) {
    let (mut env, pod, app) = Env::guaranteed("pinctld-quota", version, 3, 2);
    let cpus = env.wait_pinned(&app, 2);
    env.wait_quota(&app, unlimited(version));
    env.wait_quota(&pod, unlimited(version));
    // The status lists both.
    env.wait_for("the status's lifted quotas", || {
        let mut lifted = env.served()?.quotas_lifted;
        lifted.sort();
        let mut want = vec![app.clone(), pod.clone()];
        want.sort();
        if lifted == want {
            Ok(())
        } else {
            Err(format!("{lifted:?}"))
        }
    });
    let page = env.described(&app);
    assert!(
        page.contains(&format!("Quota:      CFS quota lifted on {pod}, {app}")),
        "{page}"
    );
    // The kubelet rule decides by the quota it had: still pinned, after a
    // full reconcile too.
    env.reload();
    env.hold(
        "still pinned, quota lifted",
        Duration::from_millis(300),
        || match (env.tree.effective(&app), env.quota(&app)) {
            (got, q) if got == cpus && q == unlimited(version) => Ok(()),
            (got, q) => Err(format!("cpus {got}, quota {q}")),
        },
    );

    // The cgroup keeps the limit it had; a restarted daemon, its state file
    // gone, finds it there.
    assert_eq!(env.kept(&app).as_deref(), Some("200000 100000"));
    assert_eq!(env.kept(&pod).as_deref(), Some("300000 100000"));
    env.stop();
    std::fs::remove_file(&env.state).unwrap();
    env.start();
    env.hold(
        "pinned across a restart",
        Duration::from_millis(300),
        || match (env.tree.effective(&app), env.quota(&app)) {
            (got, q) if got == cpus && q == unlimited(version) => Ok(()),
            (got, q) => Err(format!("cpus {got}, quota {q}")),
        },
    );

    // Someone writes a quota back (a runtime's update): the new value is
    // lifted again, and still decides the request (3 CPUs now).
    env.set_quota(&app, 3);
    let cpus = env.wait_pinned(&app, 3);
    env.wait_quota(&app, unlimited(version));

    // The container goes: the pod's quota is put back, its memory emptied.
    env.tree.remove(&app);
    env.wait_quota(&pod, &limit(version, 3));
    env.wait_for("the pod's kept limit emptied", || {
        match env.kept(&pod).as_deref() {
            Some("") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });

    // A reload that turns the switch off puts a lifted quota back, and the
    // workload stays pinned.
    let app2 = env.k.container(&pod, &container_id(2));
    env.tree.create(&app2, &Spec::limit(1));
    let cpus2 = env.wait_pinned(&app2, 1);
    env.wait_quota(&app2, unlimited(version));
    env.write_config(&Options {
        keys: vec!["unthrottle_exclusive = \"none\"".into()],
        ..Options::default()
    });
    env.reload();
    env.wait_quota(&app2, &limit(version, 1));
    env.wait_quota(&pod, &limit(version, 3));
    assert_eq!(env.tree.effective(&app2), cpus2);
    let _ = cpus;
}

on_both_versions!(a_resize_keeps_its_baseline_with_the_state_file_lost => resized_and_restarted());

/// A Guaranteed container resized in place (issue #34), the limits written
/// in the kubelet's order: the lifted quota follows each new limit, and the
/// CPUs first given (the baseline) are kept on the cgroup
/// (`user.pinctl.baseline`), so a restart with the state file lost still
/// shrinks around them.
fn resized_and_restarted(version: Version) {
    let (mut env, pod, app) = Env::guaranteed("pinctld-resize", version, 2, 2);
    let base = env.wait_pinned(&app, 2);
    env.wait_quota(&app, unlimited(version));
    let baseline = |env: &Env| {
        xattr::get(env.tree.dir(&app), "user.pinctl.baseline")
            .unwrap()
            .map(|v| String::from_utf8(v).unwrap())
    };
    env.wait_for("the baseline kept on the cgroup", || match baseline(&env) {
        Some(b) if b == base.to_string() => Ok(()),
        other => Err(format!("{other:?}")),
    });

    // An upsize: the pod's limit first, then the container's.
    env.set_quota(&pod, 4);
    env.set_quota(&app, 4);
    let four = env.wait_pinned(&app, 4);
    assert!(base.is_subset(&four), "{base} -> {four}");
    env.wait_quota(&app, unlimited(version));
    assert_eq!(env.kept(&app).as_deref(), Some("400000 100000"));
    env.wait_for("the baseline kept on the cgroup", || match baseline(&env) {
        Some(b) if b == base.to_string() => Ok(()),
        other => Err(format!("{other:?}")),
    });
    env.wait_for("the resize in the audit trail", || {
        let told = env.served_events()?.into_iter().any(|e| {
            matches!(e.what, pinctl::api::EventKind::Resize { requested: 4, ref old, ref new, pending: None, .. }
                if *old == base && *new == four)
        });
        told.then_some(()).ok_or_else(|| "not yet".to_string())
    });

    // The state file lost: the live set and the kept baseline decide.
    env.stop();
    std::fs::remove_file(&env.state).unwrap();
    env.start();
    env.hold(
        "pinned across a restart",
        Duration::from_millis(300),
        || match env.tree.effective(&app) {
            got if got == four => Ok(()),
            got => Err(format!("cpus {got}")),
        },
    );

    // A downsize: the container's limit first, then the pod's. Below the
    // baseline it is refused and the CPUs stay; to 3, it keeps the baseline.
    env.set_quota(&app, 1);
    env.wait_for("a resize below the baseline pending", || {
        match env
            .served()?
            .workloads
            .iter()
            .find_map(|w| w.resize.clone())
        {
            Some(r) if r.requested == 1 => Ok(r),
            other => Err(format!("{other:?}")),
        }
    });
    assert_eq!(env.tree.effective(&app), four, "kept its CPUs");
    // (The lift of that limit done first: a write between the daemon's read
    // and its lift would be lost, as it would on a real kernel.)
    env.wait_quota(&app, unlimited(version));
    env.set_quota(&app, 3);
    env.set_quota(&pod, 3);
    let three = env.wait_pinned(&app, 3);
    assert!(
        base.is_subset(&three) && three.is_subset(&four),
        "{four} -> {three}, baseline {base}"
    );
    env.wait_quota(&app, unlimited(version));
    assert_eq!(env.kept(&app).as_deref(), Some("300000 100000"));
    env.wait_quota(&pod, unlimited(version));
    // Asking for no whole CPU (1.5): released, the baseline emptied, and
    // the quota written stays as written.
    env.set_quota_text(&app, "150000");
    env.wait_for("the baseline emptied on release", || {
        match baseline(&env).as_deref() {
            Some("") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let written = quota_text(version, 150_000);
    env.hold(
        "the quota as written",
        Duration::from_millis(300),
        || match env.quota(&app) {
            q if q == written => Ok(()),
            q => Err(format!("it reads {q}")),
        },
    );
}

on_both_versions!(resized_to_a_fraction_keeps_the_new_quota => resized_to_a_fraction_keeps_the_new_quota());

/// The kubelet resizes a pinned Guaranteed container in place to a limit
/// that is no whole number of CPUs (2 → 2.5): the kubelet rule lets it go,
/// and the quota the kubelet just wrote, on the pod and on the container,
/// must stay. Putting back the limit kept when the quota was lifted (2
/// CPUs) would undo the resize (found writing the VM bed's resize
/// scenario, issue #34).
fn resized_to_a_fraction_keeps_the_new_quota(version: Version) {
    let w = World::new(
        "pinctld-quota-fraction",
        version,
        Driver::Cgroupfs,
        &Options::default(),
    );
    let mut env = Env { w };
    env.start();
    let pod = env.k.pod(Qos::Guaranteed, &uid(1));
    env.tree.create(&pod, &Spec::limit(2));
    let app = env.k.container(&pod, &container_id(1));
    env.tree.create(&app, &Spec::limit(2));
    env.wait_pinned(&app, 2);
    env.wait_quota(&app, unlimited(version));
    env.wait_quota(&pod, unlimited(version));

    // The kubelet's order for a grow: the pod's limit, then the container's.
    env.set_raw_quota(&pod, 250_000);
    env.set_raw_quota(&app, 250_000);
    env.wait_for("the container let go, its kept limit emptied", || {
        let status = env.served()?;
        match (status.workloads.len(), env.kept(&app).as_deref()) {
            (0, Some("") | None) => Ok(()),
            (n, kept) => Err(format!("{n} workload(s), kept {kept:?}")),
        }
    });
    env.wait_for("the pod's kept limit emptied", || {
        match env.kept(&pod).as_deref() {
            Some("") | None => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let want = quota_text(version, 250_000);
    env.hold(
        "the kubelet's quota stays",
        Duration::from_millis(300),
        || match (env.quota(&app), env.quota(&pod)) {
            (a, p) if a == want && p == want => Ok(()),
            (a, p) => Err(format!("container {a}, pod {p}")),
        },
    );
}
