//! The real `pinctld` as an NRI plugin (fake v2 tree), driven by the
//! stand-in runtime (`support::nri_runtime`) as containerd drives it: an
//! exclusive container is answered its CPUs before its cgroup exists, the
//! cgroup the runtime then makes with them joins the workload and is not
//! written again; a shared container gets the shared pool; an announcement
//! withdrawn gives its CPUs back; `required` refuses what cannot be placed;
//! the runtime's copy of a shared container's CPUs follows the pool
//! (`UpdateContainers`, and the answer to a resize).
//! The session's own behaviour is `nri.rs`'s; the decision's rules are the
//! unit tests of `nri::container`.

use pinctl::api::Status;
use pinctl::cpuset::CpuSet;
use pinctl::nri::api::{self, event};
use pinctl::nri::ttrpc::code;

use crate::support::fake_cgroup::{Driver, Qos, Spec, Version, container_id, set, uid};
use crate::support::nri_runtime::{Conn, Runtime, container, pod};
use crate::support::status_doc::status_lines;
use crate::support::world::{Options, SYSTEM, World};

struct Env {
    w: World,
    conn: Conn,
    /// The socket the daemon dials.
    runtime: Runtime,
    /// Dropped last: the connection and the socket are its.
    rt: tokio::runtime::Runtime,
}

env_of_world!(Env);

/// A started v2 world (systemd's naming) with `[nri]` on and the lines
/// `nri`, registered with a stand-in runtime that has configured it and
/// synchronized no containers.
fn env(nri: &str) -> Env {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut w = World::new(
        "pinctld-nri",
        Version::V2,
        Driver::Systemd,
        &Options::default(),
    );
    let runtime = rt.block_on(async { Runtime::bind(w.tmp.path()) });
    w.write_config(&Options {
        keys: vec![format!(
            "[nri]\nenabled = true\nsocket = {:?}\n{nri}",
            runtime.path.display().to_string()
        )],
        ..Options::default()
    });
    w.start();
    let conn = handshake(&rt, &runtime, Vec::new());
    Env {
        w,
        rt,
        conn,
        runtime,
    }
}

/// The plugin's next connection, registered, configured and synchronized
/// with `containers`.
fn handshake(
    rt: &tokio::runtime::Runtime,
    runtime: &Runtime,
    containers: Vec<api::Container>,
) -> Conn {
    rt.block_on(async {
        let mut conn = runtime.accept().await;
        conn.registration().await;
        let _: api::ConfigureResponse = conn
            .ask(
                "Configure",
                &api::ConfigureRequest {
                    config: String::new(),
                    runtime_name: "stand-in".into(),
                    runtime_version: "1".into(),
                },
            )
            .await;
        let _: api::SynchronizeResponse = conn
            .ask(
                "Synchronize",
                &api::SynchronizeRequest {
                    containers,
                    ..Default::default()
                },
            )
            .await;
        conn
    })
}

impl Env {
    /// The daemon killed and started again, and the runtime's handshake
    /// with it, naming `containers`.
    fn restart(&mut self, containers: Vec<api::Container>) {
        self.w.crash();
        self.w.start();
        self.conn = handshake(&self.rt, &self.runtime, containers);
    }

    /// The request the runtime sends for container `n` named `name` of the
    /// Guaranteed pod `pod_uid`, with a limit of `cpus` whole CPUs and the
    /// annotations `annotations`.
    fn request(
        &self,
        n: u32,
        pod_uid: &str,
        name: &str,
        cpus: Option<i64>,
        annotations: &[(&str, &str)],
    ) -> api::CreateContainerRequest {
        let pod_rel = self.k.pod(Qos::Guaranteed, pod_uid);
        let slice = pod_rel.rsplit('/').next().unwrap();
        let id = container_id(n);
        let mut c = container(&id, "sandbox", name, cpus.map(|c| (c * 100_000, 100_000)));
        c.linux.as_mut().unwrap().cgroups_path = format!("{slice}:cri-containerd:{id}");
        c.annotations = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        c.annotations
            .insert("io.kubernetes.cri.container-name".into(), name.into());
        c.annotations
            .insert("io.kubernetes.cri.sandbox-uid".into(), pod_uid.into());
        api::CreateContainerRequest {
            pod: Some(pod("sandbox", pod_uid)),
            container: Some(c),
        }
    }

    fn create(
        &mut self,
        req: &api::CreateContainerRequest,
    ) -> Result<api::CreateContainerResponse, (i32, String)> {
        let bytes = self.rt.block_on(self.conn.call("CreateContainer", req))?;
        Ok(pinctl::nri::ttrpc::decode("answer", &bytes).unwrap())
    }

    fn event(&mut self, kind: i32, req: &api::CreateContainerRequest) {
        let ev = api::StateChangeEvent {
            event: kind,
            pod: req.pod.clone(),
            container: req.container.clone(),
        };
        let _: api::Empty = self.rt.block_on(self.conn.ask("StateChange", &ev));
    }

    /// Waits until the kernel would let the tasks of every cgroup in `rels`
    /// use exactly `want`.
    fn wait_cpus(&self, rels: &[&str], want: &CpuSet) {
        self.wait_for(&format!("CPUs = {want} on {rels:?}"), || {
            for rel in rels {
                let got = self.tree.effective(rel);
                if &got != want {
                    return Err(format!("{rel} has {got:?}"));
                }
            }
            Ok(())
        });
    }

    /// The served status once `ok` holds of it.
    fn status_when(&self, what: &str, ok: impl Fn(&Status) -> bool) -> Status {
        self.wait_for(&format!("status: {what}"), || {
            let s = self.w.served()?;
            if ok(&s) { Ok(s) } else { Err(format!("{s:?}")) }
        })
    }

    /// Checks that `ok` holds of the served status for a second.
    fn hold_status(&self, what: &str, ok: impl Fn(&Status) -> bool) {
        self.hold(what, std::time::Duration::from_secs(1), || {
            let s = self.w.served()?;
            if ok(&s) {
                Ok(())
            } else {
                Err(format!("{s:?}"))
            }
        });
    }
}

/// The CPUs and memory nodes an answer sets.
fn sets(r: &api::CreateContainerResponse) -> (String, String) {
    let cpu = r
        .adjust
        .as_ref()
        .and_then(|a| a.linux.as_ref())
        .and_then(|l| l.resources.as_ref())
        .and_then(|r| r.cpu.as_ref())
        .cloned()
        .unwrap_or_default();
    (cpu.cpus, cpu.mems)
}

/// A Guaranteed container with a whole-number limit is made on its own
/// CPUs: the answer holds them before any cgroup exists, the shared pool
/// gives them up, and the cgroup the runtime makes with them joins the
/// workload without a write. Stopped and removed, they come back.
#[test]
fn an_exclusive_container_is_answered_its_cpus_and_its_cgroup_joins() {
    let mut env = env("");
    let online = env.tree.effective("");
    let u = uid(1);
    let req = env.request(2, &u, "app", Some(4), &[]);
    let (cpus, _) = sets(&env.create(&req).unwrap());
    let given = set(&cpus);
    assert_eq!(given.len(), 4, "answered {cpus:?}");
    let key = format!("pod:{u}/app");
    let s = env.status_when("the announced workload", |s| {
        s.workloads.iter().any(|w| w.key == key)
    });
    let w = s.workloads.iter().find(|w| w.key == key).unwrap();
    assert_eq!(w.cpus.as_ref(), Some(&given));
    assert!(w.cgroups.is_empty());
    assert_eq!(
        s.nri.as_ref().map(|n| (n.connected, n.announced)),
        Some((true, 1))
    );
    env.wait_cpus(&[SYSTEM], &online.difference(&given));

    // The runtime makes the cgroup with what it was answered.
    env.bundle(2, &u, "app", None);
    let pod_rel = env.k.pod(Qos::Guaranteed, &u);
    env.tree.create(&pod_rel, &env.existing());
    let rel = env.k.container(&pod_rel, &container_id(2));
    env.tree.create(&rel, &Spec::limit(4).cpuset(&cpus, "0"));
    env.status_when("the cgroup joins its workload", |s| {
        s.workloads
            .iter()
            .any(|w| w.key == key && w.cgroups == [rel.clone()] && w.cpus.as_ref() == Some(&given))
    });
    assert_eq!(env.tree.cpus(&rel), given);
    let mine = format!("{rel}/cpuset.cpus");
    let log = env.log();
    let shrunk = format!("{SYSTEM}/cpuset.cpus");
    assert!(
        log.lines()
            .any(|l| l.contains("written") && l.contains(&shrunk)),
        "the shared pool's writes are logged so:\n{log}"
    );
    assert!(
        !log.lines()
            .any(|l| l.contains("written") && l.contains(&mine)),
        "the daemon wrote the cpuset the runtime made:\n{log}"
    );
    env.status_when("no announcement left", |s| {
        s.nri.as_ref().is_some_and(|n| n.announced == 0)
    });

    // Stopped and removed: its CPUs come back.
    let _: api::StopContainerResponse = env.rt.block_on(env.conn.ask(
        "StopContainer",
        &api::StopContainerRequest {
            pod: req.pod.clone(),
            container: req.container.clone(),
        },
    ));
    env.tree.remove(&rel);
    env.event(event::REMOVE_CONTAINER, &req);
    env.wait_cpus(&[SYSTEM], &online);
}

/// The quota (the CPU limit's quota) of a Guaranteed container with its own
/// CPUs is lifted at create (`unthrottle_exclusive`, on by default for the
/// kubelet rule): the answer sets it unlimited and keeps the limit asked in
/// an annotation; its pod's quota is lifted before its cgroup exists. The
/// cgroup made with no quota is still decided by the limit asked: kept on
/// the cgroup by the daemon, and found in the bundle by a daemon that
/// restarts before it could keep it. Removed, the pod's quota comes back.
#[test]
fn a_guaranteed_containers_quota_is_lifted_at_create() {
    let mut env = env("");
    let online = env.tree.effective("");
    let u = uid(6);
    let pod_rel = env.k.pod(Qos::Guaranteed, &u);
    env.tree.create(&pod_rel, &Spec::limit(2));
    let pod_max = env.tree.dir(&pod_rel).join("cpu.max");
    let req = env.request(6, &u, "app", Some(2), &[]);
    let answer = env.create(&req).unwrap();
    let (cpus, _) = sets(&answer);
    let given = set(&cpus);
    assert_eq!(given.len(), 2, "answered {cpus:?}");
    let adjust = answer.adjust.as_ref().unwrap();
    let quota = adjust.linux.as_ref().unwrap().resources.as_ref().unwrap();
    let quota = quota.cpu.as_ref().unwrap().quota.as_ref().map(|q| q.value);
    assert_eq!(quota, Some(-1), "{adjust:?}");
    assert_eq!(
        adjust
            .annotations
            .get("pinctl.io/quota-lifted")
            .map(String::as_str),
        Some("200000 100000")
    );
    env.wait_for(
        "the pod's quota lifted before the container's cgroup",
        || match std::fs::read_to_string(&pod_max) {
            Ok(t) if t.starts_with("max") => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );

    // The runtime writes the bundle with the annotation, and makes the
    // cgroup with its CPUs and no quota.
    env.bundle_with(
        6,
        &u,
        Some("app"),
        &[("pinctl.io/quota-lifted", "200000 100000")],
    );
    let rel = env.k.container(&pod_rel, &container_id(6));
    env.tree.create(&rel, &Spec::default().cpuset(&cpus, "0"));
    let key = format!("pod:{u}/app");
    let joined = |s: &Status| {
        s.workloads
            .iter()
            .any(|w| w.key == key && w.cgroups == [rel.clone()] && w.cpus.as_ref() == Some(&given))
    };
    env.status_when("the cgroup joins its workload", joined);
    let dir = env.tree.dir(&rel);
    let kept = || {
        xattr::get(&dir, "user.pinctl.quota")
            .unwrap()
            .map(|v| String::from_utf8(v).unwrap())
    };
    env.wait_for("the limit asked kept on the cgroup", || match kept() {
        Some(k) if k == "200000 100000" => Ok(()),
        other => Err(format!("{other:?}")),
    });

    // A crash before it was kept, the state file lost: the bundle says it.
    env.crash();
    xattr::remove(&dir, "user.pinctl.quota").unwrap();
    std::fs::remove_file(&env.state).unwrap();
    env.start();
    env.status_when("still its workload's, on its CPUs", joined);
    env.wait_cpus(&[SYSTEM], &online.difference(&given));
    env.wait_for("the limit kept again", || match kept() {
        Some(k) if k == "200000 100000" => Ok(()),
        other => Err(format!("{other:?}")),
    });

    // Removed: the pod's quota comes back.
    env.tree.remove(&rel);
    env.wait_cpus(&[SYSTEM], &online);
    env.wait_for("the pod's quota back", || {
        match std::fs::read_to_string(&pod_max) {
            Ok(t) if t.starts_with("200000") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
}

/// An exclusive init container's CPUs go to its pod's app container when
/// it ends, where the allocator alone would choose others (those another
/// pod just gave back).
#[test]
fn an_init_containers_cpus_go_to_its_pods_app_container() {
    let mut env = env("");
    let made = |env: &mut Env, n: u32, pod: &str, name: &str| {
        let req = env.request(n, pod, name, Some(2), &[]);
        let given = set(&sets(&env.create(&req).unwrap()).0);
        assert_eq!(given.len(), 2);
        env.bundle(n, pod, name, None);
        let pod_rel = env.k.pod(Qos::Guaranteed, pod);
        if !env.tree.exists(&pod_rel) {
            env.tree.create(&pod_rel, &env.existing());
        }
        let rel = env.k.container(&pod_rel, &container_id(n));
        env.tree
            .create(&rel, &Spec::limit(2).cpuset(&given.to_string(), "0"));
        (req, rel, given)
    };
    let ended = |env: &mut Env, req: &api::CreateContainerRequest, rel: &str| {
        env.tree.remove(rel);
        env.event(event::REMOVE_CONTAINER, req);
    };
    let (a, b) = (uid(7), uid(8));
    let (other, other_rel, first) = made(&mut env, 7, &b, "first");
    let (init, init_rel, init_cpus) = made(&mut env, 8, &a, "init");
    assert_ne!(first, init_cpus);
    env.status_when("both pinned", |s| {
        s.workloads.iter().filter(|w| w.cgroups.len() == 1).count() == 2
    });
    ended(&mut env, &other, &other_rel);
    ended(&mut env, &init, &init_rel);
    env.status_when("both released", |s| s.workloads.is_empty());
    let (_, _, app) = made(&mut env, 9, &a, "app");
    assert_eq!(
        app, init_cpus,
        "the app container got {app}, not its init's {init_cpus}"
    );
}

/// An in-place resize through the runtime (`UpdateContainer` with the new
/// limit) follows the resize rules before the runtime writes anything: a
/// grow is answered the CPUs kept and the new ones, a shrink below the
/// CPUs first given keeps what it has, one back to them is answered them.
/// The runtime's own writes then change nothing.
#[test]
fn a_resize_through_the_runtime_is_answered_its_new_cpus() {
    let mut env = env("");
    let u = uid(11);
    let req = env.request(11, &u, "app", Some(2), &[]);
    let given = set(&sets(&env.create(&req).unwrap()).0);
    env.bundle_with(
        11,
        &u,
        Some("app"),
        &[("pinctl.io/quota-lifted", "200000 100000")],
    );
    let pod_rel = env.k.pod(Qos::Guaranteed, &u);
    env.tree.create(&pod_rel, &env.existing());
    let rel = env.k.container(&pod_rel, &container_id(11));
    env.tree
        .create(&rel, &Spec::default().cpuset(&given.to_string(), "0"));
    let key = format!("pod:{u}/app");
    let holds = |s: &Status, cpus: &CpuSet| {
        s.workloads
            .iter()
            .any(|w| w.key == key && w.cgroups == [rel.clone()] && w.cpus.as_ref() == Some(cpus))
    };
    env.status_when("pinned", |s| holds(s, &given));
    // The container as the runtime holds it, asked a new limit.
    let resize = |env: &mut Env, cpus: i64| {
        let mut c = req.container.clone().unwrap();
        let res = c.linux.as_mut().unwrap().resources.as_mut().unwrap();
        let cpu = res.cpu.as_mut().unwrap();
        cpu.cpus = given.to_string();
        cpu.quota = Some(api::OptionalInt64 { value: -1 });
        let ask = api::UpdateContainerRequest {
            pod: req.pod.clone(),
            container: Some(c),
            linux_resources: Some(api::LinuxResources {
                cpu: Some(api::LinuxCpu {
                    quota: Some(api::OptionalInt64 {
                        value: cpus * 100_000,
                    }),
                    period: Some(api::OptionalUInt64 { value: 100_000 }),
                    ..Default::default()
                }),
            }),
        };
        let answer: api::UpdateContainerResponse =
            env.rt.block_on(env.conn.ask("UpdateContainer", &ask));
        assert_eq!(answer.update.len(), 1, "{answer:?}");
        let got = set(&updated_cpus(&answer.update[0]));
        // What runc then writes.
        env.tree.write_cpus(&rel, &got.to_string());
        env.tree.write_quota(&rel, &(cpus * 100_000).to_string());
        got
    };
    let grown = resize(&mut env, 4);
    assert_eq!(grown.len(), 4, "{grown}");
    assert!(given.is_subset(&grown), "{grown} keeps {given}");
    env.status_when("grown", |s| holds(s, &grown));
    env.hold_status("the runtime's writes change nothing", |s| holds(s, &grown));
    let kept = resize(&mut env, 1);
    assert_eq!(kept, grown, "a shrink below the CPUs first given");
    let back = resize(&mut env, 2);
    assert_eq!(back, given);
    env.status_when("back to its first CPUs", |s| holds(s, &given));
}

/// A container that asks for nothing is answered the shared pool; an
/// annotated one its CPUs. One withdrawn before its cgroup came (removed)
/// gives them back at once.
#[test]
fn a_shared_container_gets_the_pool_and_a_withdrawn_one_gives_back() {
    let mut env = env("");
    let online = env.tree.effective("");
    let plain = env.request(3, &uid(3), "web", None, &[]);
    let (cpus, mems) = sets(&env.create(&plain).unwrap());
    assert_eq!(set(&cpus), env.status_when("", |_| true).shared_pool);
    assert_eq!(mems, "");
    let annotated = env.request(4, &uid(4), "db", None, &[("pinctl.io/cpus", "2")]);
    let (cpus, _) = sets(&env.create(&annotated).unwrap());
    let given = set(&cpus);
    assert_eq!(given.len(), 2);
    env.wait_cpus(&[SYSTEM], &online.difference(&given));
    env.event(event::REMOVE_CONTAINER, &annotated);
    env.wait_cpus(&[SYSTEM], &online);
    env.status_when("no workload", |s| s.workloads.is_empty());
}

/// With `required`, a container that asks for more CPUs than are free is
/// refused with the reason; without, it is made on the shared pool and
/// waits.
#[test]
fn required_refuses_what_cannot_be_placed_else_it_waits_on_the_pool() {
    let mut env = env("required = true");
    let too_many = env.request(5, &uid(5), "big", Some(64), &[]);
    let (c, why) = env.create(&too_many).unwrap_err();
    assert_eq!(c, code::FAILED_PRECONDITION);
    assert!(
        why.contains("[nri] required") && why.contains("64"),
        "{why}"
    );
    env.hold_status("a refused container holds nothing", |s| {
        s.workloads.is_empty()
    });

    let mut env = self::env("");
    let (cpus, _) = sets(&env.create(&too_many).unwrap());
    let s = env.status_when("the waiting workload", |s| !s.workloads.is_empty());
    assert_eq!(set(&cpus), s.shared_pool);
    let w = &s.workloads[0];
    assert!(w.cpus.is_none() && w.pending.is_some(), "{w:?}");
}

/// A cgroup the runtime makes with other CPUs than pinctld answered
/// (another NRI plugin after pinctld) is a disagreement: logged, in the
/// status, a problem for `pinctl verify`. pinctld leaves that container to
/// the other owner: never written, its answer's CPUs back in the pool, an
/// `Owner:` line; removed, it is pinctld's again.
#[test]
fn a_cgroup_made_with_other_cpus_than_answered_is_a_disagreement() {
    let mut env = env("");
    let online = env.tree.effective("");
    let u = uid(6);
    let req = env.request(6, &u, "app", Some(2), &[]);
    let (cpus, _) = sets(&env.create(&req).unwrap());
    let given = set(&cpus);
    let pool = env
        .status_when("the announced workload", |s| !s.workloads.is_empty())
        .shared_pool;
    let mut other: Vec<u32> = pool.iter().collect();
    let other: CpuSet = other.split_off(other.len() - 2).into_iter().collect();
    env.bundle(6, &u, "app", None);
    let pod_rel = env.k.pod(Qos::Guaranteed, &u);
    env.tree.create(&pod_rel, &env.existing());
    let rel = env.k.container(&pod_rel, &container_id(6));
    env.tree
        .create(&rel, &Spec::limit(2).cpuset(&other.to_string(), "0"));
    let s = env.status_when("a disagreement, left to the other owner", |s| {
        s.nri.as_ref().is_some_and(|n| !n.disagreements.is_empty()) && !s.other_owners.is_empty()
    });
    let d = &s.nri.as_ref().unwrap().disagreements[0];
    assert_eq!(
        (d.cgroup.as_str(), &d.answered, &d.found),
        (rel.as_str(), &given, &other)
    );
    assert_eq!(d.container, container_id(6));
    let o = &s.other_owners[0];
    assert!(o.what.contains("another NRI plugin"), "{}", o.what);
    assert_eq!(o.left, std::slice::from_ref(&rel));
    // Its CPUs go back; the container keeps what the other owner gave it.
    env.wait_cpus(&[SYSTEM], &online);
    env.hold(
        "pinctld leaves the container's CPUs",
        std::time::Duration::from_secs(1),
        || {
            let got = env.tree.cpus(&rel);
            if got == other {
                Ok(())
            } else {
                Err(format!("{got}"))
            }
        },
    );
    let s = env.status_when("no workload", |s| s.workloads.is_empty());
    let roots = pinctl::cli::verify::Roots {
        cgroup_root: env.tree.root().to_path_buf(),
        proc_root: env.proc_root.clone(),
        sysfs_root: env.sysfs.clone(),
    };
    let scope =
        pinctl::cgroup::Scope::new(vec!["kubepods.slice".into()], vec![SYSTEM.into()], vec![]);
    let block = status_lines(&s, "NRI");
    let line = block.lines().next().unwrap_or_default();
    assert!(
        line.contains("registered with stand-in 1") && line.contains("1 disagreement"),
        "{line}"
    );
    assert!(
        block.contains(&format!("{rel}: made on CPUs {other}, answered {given}")),
        "{block}"
    );
    let owner = status_lines(&s, "Owner");
    assert!(
        owner.contains("another NRI plugin") && owner.contains(&format!("leaves it {rel}")),
        "{owner}"
    );
    let report = pinctl::cli::verify::verify(&s, &roots, &scope).unwrap();
    let said: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    assert!(
        said.iter()
            .any(|p| p.contains("another CPU owner") && p.contains(&rel)),
        "{said:?}"
    );

    // Kept across a crash once saved: the runtime still has the container.
    let id = container_id(6);
    env.wait_for("the container left to the other owner saved", || {
        let text = std::fs::read_to_string(&env.state).map_err(|e| e.to_string())?;
        if text.contains(&id) {
            Ok(())
        } else {
            Err(text)
        }
    });
    env.restart(vec![req.container.clone().unwrap()]);
    env.status_when("the other owner named again", |s| {
        s.other_owners.iter().any(|o| o.left == [rel.clone()])
    });
    env.hold(
        "pinctld still leaves the container's CPUs after a restart",
        std::time::Duration::from_secs(1),
        || match env.tree.cpus(&rel) {
            got if got == other => Ok(()),
            got => Err(format!("{got}")),
        },
    );

    // A restart after it went: the runtime's Synchronize no longer names
    // it, and what is left of it is pinctld's again.
    env.restart(Vec::new());
    env.status_when("no other owner", |s| s.other_owners.is_empty());
    let s = env.status_when("its cgroup pinctld's workload", |s| {
        s.workloads
            .iter()
            .any(|w| w.cgroups == [rel.clone()] && w.cpus.is_some())
    });
    let w = s.workloads.iter().find(|w| w.cgroups == [rel.clone()]);
    let pinned = w.and_then(|w| w.cpus.clone()).unwrap();
    env.wait_cpus(&[&rel], &pinned);

    // Removed.
    env.tree.remove(&rel);
    env.event(event::REMOVE_CONTAINER, &req);
    env.wait_cpus(&[SYSTEM], &online);
}

/// The CPUs one container's update sets.
fn updated_cpus(u: &api::ContainerUpdate) -> String {
    u.linux
        .as_ref()
        .and_then(|l| l.resources.as_ref())
        .and_then(|r| r.cpu.as_ref())
        .map(|c| c.cpus.clone())
        .unwrap_or_default()
}

/// A shared container made on the pool is updated through the runtime when
/// the pool loses a pin's CPUs (so runc tells systemd the new set), once;
/// a resize of it is answered the pool of now; a container made before
/// `[nri]` (its spec holds no CPUs) is left alone; an update the runtime
/// fails is counted and tried again at the next change.
#[test]
fn the_runtimes_copy_of_a_shared_containers_cpus_follows_the_pool() {
    let mut env = env("");
    let online = env.tree.effective("");
    let known = env.status_when("", |_| true).counters.cgroups;
    // Two shared containers the runtime has: one made on the pool, one
    // made before [nri] was on.
    let mut cgroups = Vec::new();
    let mut reqs = Vec::new();
    for (n, held) in [(7, Some(online.to_string())), (8, None)] {
        let u = uid(n);
        let mut req = env.request(n, &u, "web", None, &[]);
        let c = req.container.as_mut().unwrap();
        c.linux.as_mut().unwrap().resources.as_mut().unwrap().cpu =
            held.map(|cpus| api::LinuxCpu {
                cpus,
                ..Default::default()
            });
        env.bundle(n, &u, "web", None);
        let pod_rel = env.k.pod(Qos::Guaranteed, &u);
        env.tree.create(&pod_rel, &env.existing());
        let rel = env.k.container(&pod_rel, &container_id(n));
        env.tree.create(&rel, &env.existing());
        cgroups.push(rel);
        reqs.push(req);
    }
    let sync = api::SynchronizeRequest {
        containers: reqs.iter().map(|r| r.container.clone().unwrap()).collect(),
        ..Default::default()
    };
    let _: api::SynchronizeResponse = env.rt.block_on(env.conn.ask("Synchronize", &sync));
    env.status_when("both pods read", |s| s.counters.cgroups >= known + 4);
    let cgroups: Vec<&str> = cgroups.iter().map(String::as_str).collect();

    // A pin: the pool loses its CPUs, in the tree and in the runtime.
    let pinned = env.request(9, &uid(9), "app", Some(2), &[]);
    let (cpus, _) = sets(&env.create(&pinned).unwrap());
    let pool = online.difference(&set(&cpus));
    env.wait_cpus(&cgroups, &pool);
    env.rt.block_on(env.conn.wait_updates(1));
    let update = &env.conn.updates[0].update;
    assert_eq!(update.len(), 1, "{update:?}");
    assert_eq!(update[0].container_id, container_id(7));
    assert_eq!(set(&updated_cpus(&update[0])), pool);

    // A resize through the runtime is answered the pool of now.
    let resize = api::UpdateContainerRequest {
        pod: reqs[0].pod.clone(),
        container: sync.containers.first().cloned(),
        linux_resources: None,
    };
    let answer: api::UpdateContainerResponse =
        env.rt.block_on(env.conn.ask("UpdateContainer", &resize));
    assert_eq!(answer.update.len(), 1, "{answer:?}");
    assert_eq!(set(&updated_cpus(&answer.update[0])), pool);
    // Not for the one whose spec holds none.
    let untouched = api::UpdateContainerRequest {
        pod: reqs[1].pod.clone(),
        container: sync.containers.get(1).cloned(),
        linux_resources: None,
    };
    let answer: api::UpdateContainerResponse =
        env.rt.block_on(env.conn.ask("UpdateContainer", &untouched));
    assert!(answer.update.is_empty(), "{answer:?}");

    // The pin goes, and the runtime fails the update: counted, and sent
    // again at the next change.
    env.conn.fail_updates.push(container_id(7));
    env.event(event::REMOVE_CONTAINER, &pinned);
    env.wait_cpus(&cgroups, &online);
    env.rt.block_on(env.conn.wait_updates(2));
    assert_eq!(set(&updated_cpus(&env.conn.updates[1].update[0])), online);
    env.wait_for("the failure counted", || {
        let m = env.w.metrics();
        if m.contains(r#"pinctl_nri_updates_total{result="failed"} 1"#) {
            Ok(())
        } else {
            Err(m)
        }
    });
    env.conn.fail_updates.clear();
    let again = env.request(10, &uid(10), "app", Some(1), &[]);
    let (cpus, _) = sets(&env.create(&again).unwrap());
    env.rt.block_on(env.conn.wait_updates(3));
    assert_eq!(
        set(&updated_cpus(&env.conn.updates[2].update[0])),
        online.difference(&set(&cpus))
    );
    assert!(
        env.conn
            .updates
            .iter()
            .all(|u| u.update.iter().all(|c| c.container_id == container_id(7))),
        "only the container made on the pool is updated: {:?}",
        env.conn.updates
    );
}
