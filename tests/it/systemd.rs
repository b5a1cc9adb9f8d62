//! Telling systemd a scope's pin, against a stand-in systemd on a private
//! D-Bus ([`FakeSystemd`]): a scope systemd holds an `AllowedCPUs=` for has
//! it written back over the pin by each `daemon-reload` (systemd 252 on
//! cgroup v2, found in the VM test bed); after the first, the daemon tells
//! systemd the pin, and the next reload writes the pin. Never in a scope's
//! first moments (the runtime is setting it up), never a scope systemd holds
//! no `AllowedCPUs=` for. The VM test bed checks the same on real systemd.

use std::time::Duration;

use crate::support::fake_cgroup::{Driver, Qos, Spec, Version, container_id, set, uid};
use crate::support::fake_systemd::FakeSystemd;
use crate::support::pinctld::Launch;
use crate::support::world::{Options, RESERVED, SYSTEM, World};

/// How old a pin must be before a write over it is told (the test hook
/// `PINCTL_TEST_SYSTEMD_SETTLE_MS`; 10 s in production).
const SETTLE: Duration = Duration::from_millis(700);

/// A stand-in systemd on a private bus (its directory kept with it) and a
/// v2 world whose daemon, not started, speaks to it; `None`, said, without
/// `dbus-daemon`.
fn with_fake_systemd() -> Option<(tempfile::TempDir, FakeSystemd, World)> {
    let bus_dir = tempfile::tempdir().unwrap();
    let Some(systemd) = FakeSystemd::start(bus_dir.path()) else {
        eprintln!("skipped: no dbus-daemon (Debian's package dbus-daemon; .ci/run installs it)");
        return None;
    };
    let opts = Options {
        keys: vec![format!(
            "systemd_bus = {:?}",
            systemd.socket.display().to_string()
        )],
        ..Options::default()
    };
    let w = World::new("pinctld-systemd", Version::V2, Driver::Systemd, &opts);
    Some((bus_dir, systemd, w))
}

#[test]
fn a_scope_systemd_writes_back_is_told_its_pin() {
    let Some((_bus, systemd, mut w)) = with_fake_systemd() else {
        return;
    };
    w.spawn(&Launch {
        env: vec![(
            "PINCTL_TEST_SYSTEMD_SETTLE_MS".into(),
            SETTLE.as_millis().to_string(),
        )],
        ..Launch::default()
    });
    w.wait_ready();

    // A Guaranteed container whose runtime gave its scope AllowedCPUs=
    // (its spec's cpuset): systemd writes it as it makes the scope.
    let pod = w.k.pod(Qos::Guaranteed, &uid(1));
    w.tree.create(&pod, &Spec::default());
    let app = w.k.container(&pod, &container_id(1));
    let unit = format!("cri-containerd-{}.scope", container_id(1));
    w.tree.create(&app, &Spec::limit(2));
    systemd.add_scope(&unit, &w.tree.dir(&app), "0-31");
    let cpus = w.wait_pinned(&app, 2);
    // That first write over the pin, in the scope's first moments, is only
    // reverted: systemd is not asked anything.
    w.hold("the pin kept, systemd not asked", SETTLE, || {
        match (w.tree.cpus(&app), systemd.calls(&unit)) {
            (got, (0, 0)) if got == cpus => Ok(()),
            (got, calls) => Err(format!("cpus {got}, calls {calls:?}")),
        }
    });

    // A daemon-reload writes AllowedCPUs= back over the settled pin: the
    // daemon writes the pin again and tells systemd.
    systemd.daemon_reload();
    w.wait_for("systemd told the pin", || {
        match (systemd.allowed(&unit), w.tree.cpus(&app)) {
            (allowed, got) if allowed == cpus && got == cpus => Ok(()),
            (allowed, got) => Err(format!("AllowedCPUs={allowed}, cpuset.cpus {got}")),
        }
    });
    assert_eq!(
        systemd.calls(&unit),
        (1, 1),
        "asked whether it holds one, then told"
    );
    w.wait_log("told systemd the unit's AllowedCPUs=", 1);
    // The next daemon-reload writes the pin: nothing to fight, nothing asked.
    systemd.daemon_reload();
    w.hold("the pin kept across a reload", SETTLE, || {
        match (w.tree.cpus(&app), systemd.calls(&unit)) {
            (got, (1, 1)) if got == cpus => Ok(()),
            (got, calls) => Err(format!("cpus {got}, calls {calls:?}")),
        }
    });

    // Resized in place (issue #34): the new limit, written over the old in
    // one write as the kernel's file takes it. A scope told once is told
    // its grown set, so a daemon-reload keeps it.
    {
        use std::io::Write as _;
        std::fs::OpenOptions::new()
            .write(true)
            .open(w.tree.dir(&app).join("cpu.max"))
            .and_then(|mut f| f.write_all(b"300000 100000\n"))
            .unwrap();
    }
    let grown = w.wait_pinned(&app, 3);
    assert!(cpus.is_subset(&grown), "{cpus} -> {grown}");
    w.wait_for("systemd told the grown pin", || {
        match systemd.allowed(&unit) {
            allowed if allowed == grown => Ok(()),
            allowed => Err(format!("AllowedCPUs={allowed}")),
        }
    });
    systemd.daemon_reload();
    w.hold("the grown pin kept across a reload", SETTLE, || {
        match w.tree.cpus(&app) {
            got if got == grown => Ok(()),
            got => Err(format!("cpus {got}")),
        }
    });

    // A scope systemd holds no AllowedCPUs= for: a write over its pin (the
    // kubelet's, say) is reverted and systemd, asked, is left alone.
    let plain = w.k.container(&pod, &container_id(2));
    let plain_unit = format!("cri-containerd-{}.scope", container_id(2));
    w.tree.create(&plain, &Spec::limit(1));
    systemd.add_scope(&plain_unit, &w.tree.dir(&plain), "");
    let plain_cpus = w.wait_pinned(&plain, 1);
    std::thread::sleep(SETTLE);
    w.tree.write_cpus(&plain, "0-31\n");
    w.wait_for("the plain scope's pin back, systemd asked", || {
        match (w.tree.cpus(&plain), systemd.calls(&plain_unit)) {
            (got, (0, 1)) if got == plain_cpus => Ok(()),
            (got, calls) => Err(format!("cpus {got}, calls {calls:?}")),
        }
    });
    assert_eq!(systemd.allowed(&plain_unit), set(""));
    w.hold(
        "nothing more asked",
        Duration::from_millis(300),
        || match systemd.calls(&plain_unit) {
            (0, 1) => Ok(()),
            calls => Err(format!("calls {calls:?}")),
        },
    );

    // A scope whose AllowedCPUs= lies outside its pin (the reserved CPU):
    // the daemon widens the cpuset (old ∪ pin) before it narrows it to the
    // pin, and tells systemd only the pin.
    let narrow = w.k.container(&pod, &container_id(3));
    let narrow_unit = format!("cri-containerd-{}.scope", container_id(3));
    w.tree.create(&narrow, &Spec::limit(1));
    systemd.add_scope(&narrow_unit, &w.tree.dir(&narrow), "0");
    // (CPU 0, which systemd writes, is one CPU too: wait for the pin.)
    let narrow_cpus = w.wait_for("the narrow scope pinned", || match w.tree.cpus(&narrow) {
        got if got.len() == 1 && !got.contains(0) => Ok(got),
        got => Err(format!("it has {got}")),
    });
    std::thread::sleep(SETTLE);
    systemd.daemon_reload();
    w.wait_for("systemd told the narrow scope's pin", || {
        match (systemd.allowed(&narrow_unit), w.tree.cpus(&narrow)) {
            (allowed, got) if allowed == narrow_cpus && got == narrow_cpus => Ok(()),
            (allowed, got) => Err(format!("AllowedCPUs={allowed}, cpuset.cpus {got}")),
        }
    });
    assert_eq!(
        systemd.calls(&narrow_unit),
        (1, 1),
        "told once, the pin only"
    );

    // A scope systemd does not know (someone else made it): asked, it
    // answers NoSuchUnit, and that is no failure.
    let stranger = w.k.container(&pod, &container_id(4));
    let stranger_unit = format!("cri-containerd-{}.scope", container_id(4));
    w.tree.create(&stranger, &Spec::limit(1));
    let stranger_cpus = w.wait_pinned(&stranger, 1);
    std::thread::sleep(SETTLE);
    w.tree.write_cpus(&stranger, "0-31\n");
    w.wait_for("the stranger's pin back, systemd asked", || {
        match (w.tree.cpus(&stranger), systemd.calls(&stranger_unit)) {
            (got, (0, 1)) if got == stranger_cpus => Ok(()),
            (got, calls) => Err(format!("cpus {got}, calls {calls:?}")),
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !w.log().contains("cannot tell systemd"),
        "an unknown unit is no failure:\n{}",
        w.log()
    );
}

/// Found with containerd's CRI on systemd 252: a `daemon-reload` writes
/// `""` to the `cpuset.cpus` of every unit without `AllowedCPUs=`; an empty
/// slice (`user.slice`, an empty QoS slice) takes it and sits on every CPU,
/// the exclusive ones included, until the daemon writes it again (70-120
/// ms). The daemon tells systemd each slice's CPUs as it writes them, so a
/// daemon-reload writes those: no window at all.
#[test]
fn a_slice_is_told_its_cpus_so_a_daemon_reload_never_widens_it() {
    let Some((_bus, systemd, mut w)) = with_fake_systemd() else {
        return;
    };
    let slices = [
        SYSTEM.to_string(),
        w.k.qos_parent(Qos::Burstable),
        w.k.qos_parent(Qos::BestEffort),
    ];
    let unit = |rel: &str| rel.rsplit('/').next().unwrap().to_string();
    for rel in &slices {
        systemd.add_slice(&unit(rel), &w.tree.dir(rel));
    }
    w.spawn(&Launch::default());
    w.wait_ready();
    let pod = w.k.pod(Qos::Guaranteed, &uid(1));
    w.tree.create(&pod, &Spec::default());
    let app = w.k.container(&pod, &container_id(1));
    w.tree.create(&app, &Spec::limit(2));
    let cpus = w.wait_pinned(&app, 2);
    let pool = set("0-31").difference(&cpus);
    let told_the_pool = |w: &World, what: &str| {
        w.wait_for(what, || {
            for rel in &slices {
                let allowed = systemd.allowed(&unit(rel));
                if allowed != pool {
                    return Err(format!("{rel}: AllowedCPUs={allowed}"));
                }
            }
            Ok(())
        })
    };
    told_the_pool(&w, "systemd told every shared slice the shared pool");
    systemd.daemon_reload();
    for rel in &slices {
        let wrote = systemd.wrote(&unit(rel));
        assert_eq!(wrote, Some(pool.to_string()), "what systemd wrote to {rel}");
        assert_eq!(w.tree.effective(rel), pool, "{rel} after the reload");
    }
    // A daemon restarted where systemd holds none (an older daemon's
    // slices, or someone emptied them): the slices are right and not
    // written, yet told.
    w.stop();
    for rel in &slices {
        systemd.unset_allowed(&unit(rel));
    }
    w.start();
    told_the_pool(&w, "systemd told the slices again after a restart");
    // A release widens them, and systemd is told that too.
    w.tree.remove(&app);
    w.wait_for("systemd told the slices every CPU", || {
        match systemd.allowed(&unit(SYSTEM)) {
            got if got == set("0-31") => Ok(()),
            got => Err(format!("AllowedCPUs={got}")),
        }
    });
}

/// Found by the soak in the VM bed: a pin made while systemd reloads lost
/// its CPU. A release widened a pod slice and told systemd; systemd, busy
/// reloading, answered late, and first wrote back the set it held, which
/// lacked the CPU the new pin below was given. A pin waits until systemd
/// has answered for every slice above it, so what a reload writes back
/// always holds it.
#[test]
fn a_pin_made_during_a_daemon_reload_waits_for_systemd_and_keeps_its_cpu() {
    let Some((_bus, systemd, mut w)) = with_fake_systemd() else {
        return;
    };
    w.spawn(&Launch::default());
    w.wait_ready();
    // Every CPU but the reserved ones held by one container: the shared
    // pool is the reserved CPUs alone.
    let big = w.k.pod(Qos::Guaranteed, &uid(1));
    w.tree.create(&big, &Spec::default());
    let hog = w.k.container(&big, &container_id(1));
    w.tree.create(&hog, &Spec::limit(30));
    w.wait_pinned(&hog, 30);
    let pod = w.k.pod(Qos::Guaranteed, &uid(2));
    w.tree.create(&pod, &Spec::default());
    let unit = pod.rsplit('/').next().unwrap().to_string();
    systemd.add_slice(&unit, &w.tree.dir(&pod));
    let reserved = set(RESERVED);
    w.wait_for(
        "systemd holds the shared pool for the pod slice",
        || match (systemd.allowed(&unit), w.tree.cpus(&pod)) {
            (allowed, got) if allowed == reserved && got == reserved => Ok(()),
            (allowed, got) => Err(format!("AllowedCPUs={allowed}, cpuset.cpus {got}")),
        },
    );

    // systemd reloads; meanwhile the big container goes, the pool grows
    // (the pod slice with it: written, told, not answered), and a
    // container of the pod asks for a CPU the pool just got back.
    systemd.begin_reload();
    w.tree.remove(&hog);
    w.wait_for("the pod slice widened", || match w.tree.cpus(&pod) {
        got if got == set("0-31") => Ok(()),
        got => Err(format!("cpuset.cpus {got}")),
    });
    let app = w.k.container(&pod, &container_id(2));
    w.tree.create(&app, &Spec::limit(1));
    w.hold(
        "the pin waiting for systemd",
        Duration::from_millis(500),
        || match w.tree.cpus(&app) {
            got if got.len() == 1 => Err(format!("pinned to {got} while systemd reloads")),
            _ => Ok(()),
        },
    );
    // The reload writes back what systemd held, then serves the calls.
    systemd.end_reload();
    let cpus = w.wait_pinned(&app, 1);
    let waited: f64 = w
        .metrics()
        .lines()
        .find_map(|l| l.strip_prefix("pinctl_systemd_wait_seconds_sum "))
        .and_then(|v| v.trim().parse().ok())
        .expect("pinctl_systemd_wait_seconds in the metrics");
    assert!(
        waited >= 0.4,
        "the pin waited {waited} s in all, not the reload's 0.5 s"
    );
    assert!(
        cpus.is_subset(&systemd.allowed(&unit)),
        "systemd holds the pin's CPU for the pod slice"
    );
    systemd.daemon_reload();
    w.hold("the pin kept across the next reload", SETTLE, || {
        match (w.tree.cpus(&pod), w.tree.effective(&app)) {
            (slice, got) if cpus.is_subset(&slice) && got == cpus => Ok(()),
            (slice, got) => Err(format!("pod slice {slice}, the pin's effective {got}")),
        }
    });
}
