//! The runtime's calls as an NRI plugin (`[nri]`, [`crate::nri`]),
//! decided by the same engine as every cgroup.
//!
//! - `CreateContainer`: what the container asks is decided from the call
//!   ([`container::decide`]). An exclusive one is announced to the engine
//!   ([`crate::engine::Engine::expect`]) and placed by a plan at once; the
//!   answer is its CPUs (and, with `align_memory`, their memory nodes), so
//!   the runtime makes its cgroup with them. Its cgroup, once read from the
//!   tree, joins the workload by key. A shared container is answered the
//!   shared pool.
//! - `StopContainer` and `RemoveContainer` withdraw an announcement; so
//!   does time ([`ANNOUNCED_FOR`]), for a container never made.
//! - The runtime's own copy of each container's CPUs is kept true
//!   ([`crate::nri::told`]): when the shared pool changes, the shared
//!   containers it made with CPUs are updated (`UpdateContainers`, a chunk
//!   at a time, once the plan's writes are made), so that runc's systemd
//!   driver tells systemd the new set itself; `UpdateContainer` (a resize)
//!   is answered the container's CPUs now. `Synchronize` names the
//!   containers that exist.
//! - The cgroup watcher stays the truth: it sees every container, with NRI
//!   or without, and pins what NRI did not.
//! - The loop answers within the session's budget or the fallback does
//!   ([`fallback`]): the runtime never waits past its own timeout.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::Daemon;
use crate::cgroup::{CpuLimit, Scope};
use crate::config::Config;
use crate::cpuset::CpuSet;
use crate::nri::container::{self, Decided};
use crate::nri::told::Told;
use crate::nri::{Answer, Asked, Call, Fallback, Link, Outgoing, Registration, Settings, api};

mod update;
pub(super) use update::Updated;

/// How long an announced container may take to make its cgroup; then the
/// announcement is withdrawn and its CPUs go back to the shared pool.
pub(super) const ANNOUNCED_FOR: Duration = Duration::from_secs(300);
/// How long the loop has to answer a call before the fallback does: well
/// within the runtime's default of 2 s.
const BUDGET: Duration = Duration::from_millis(1500);
/// How long the runtime has to answer pinctld's calls.
const CALL_WITHIN: Duration = Duration::from_secs(5);
/// Calls waiting for the loop; beyond, the fallback answers at once.
const QUEUE: usize = 256;

/// What the fallback answers by, kept current by the loop.
struct View {
    cfg: Arc<Config>,
    /// The subtrees the daemon manages now.
    scope: Scope,
    /// The shared pool, as a managed cgroup gets it.
    shared: CpuSet,
}

/// An exclusive container the runtime announced.
struct Announcement {
    key: String,
    /// Where its cgroup will be.
    rel: crate::cgroup::Rel,
    /// The CPUs it was answered.
    answered: CpuSet,
    /// Its cgroup's CPUs were read and compared with `answered`.
    checked: bool,
    until: Instant,
}

/// The most disagreements the status keeps, the latest.
const DISAGREEMENTS_KEPT: usize = 16;

/// The daemon's side of the NRI front end.
pub(super) struct Front {
    pub(super) rx: Option<mpsc::Receiver<Asked>>,
    pub(super) links: Option<mpsc::Receiver<Link>>,
    /// pinctld's own calls of the runtime (`UpdateContainers`).
    outgoing: Option<mpsc::Sender<Outgoing>>,
    /// Their answers.
    pub(super) updated: Option<mpsc::UnboundedReceiver<Updated>>,
    updated_tx: Option<mpsc::UnboundedSender<Updated>>,
    /// What the runtime holds of each container's CPUs.
    told: Told,
    task: Option<tokio::task::JoinHandle<()>>,
    /// The link as last told.
    pub(super) link: Option<Link>,
    /// The runtime's name and version, once configured.
    pub(super) runtime: Option<String>,
    /// Exclusive containers announced, by container id.
    announced: BTreeMap<String, Announcement>,
    /// Containers whose cgroup the runtime made with other CPUs than it
    /// was answered, the latest last.
    disagreements: Vec<crate::api::NriDisagreement>,
    /// Containers another NRI plugin set the CPUs of, by container id,
    /// with their cgroups: left to it ([`Scope::leaving`]).
    pub(super) yielded: BTreeMap<String, crate::cgroup::Rel>,
    view: Arc<RwLock<View>>,
}

impl Front {
    /// No front end: `[nri]` is off.
    pub(super) fn closed(cfg: Arc<Config>) -> Front {
        Front {
            rx: None,
            links: None,
            outgoing: None,
            updated: None,
            updated_tx: None,
            told: Told::default(),
            task: None,
            link: None,
            runtime: None,
            announced: BTreeMap::new(),
            disagreements: Vec::new(),
            yielded: BTreeMap::new(),
            view: Arc::new(RwLock::new(View {
                cfg,
                scope: Scope::default(),
                shared: CpuSet::new(),
            })),
        }
    }

    /// The containers left to another NRI plugin, as the state file keeps
    /// them.
    pub(super) fn saved(&self) -> BTreeMap<String, String> {
        self.yielded
            .iter()
            .map(|(id, rel)| (id.clone(), rel.to_string()))
            .collect()
    }

    /// Takes back what [`Self::saved`] kept: the runtime's next
    /// `Synchronize` drops the containers it no longer has.
    pub(super) fn restore(&mut self, saved: BTreeMap<String, String>) {
        if !saved.is_empty() {
            info!(
                containers = saved.len(),
                "NRI: containers left to another NRI plugin before the restart stay left to it"
            );
        }
        self.yielded = saved
            .into_iter()
            .map(|(id, rel)| (id, crate::cgroup::Rel::from(rel)))
            .collect();
    }

    /// Starts dialling the runtime's socket.
    pub(super) fn open(&mut self, cfg: &crate::config::Nri) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let (links_tx, links_rx) = mpsc::channel(8);
        let (out_tx, out_rx) = mpsc::channel(16);
        let view = self.view.clone();
        let fallback: Fallback = Arc::new(move |call: &Call| match view.read() {
            Ok(v) => fallback(&v, call),
            Err(_) => Answer::Done,
        });
        let settings = Settings {
            registration: Registration {
                name: cfg.plugin_name.clone(),
                index: cfg.plugin_index.clone(),
            },
            budget: BUDGET,
            call_within: CALL_WITHIN,
            fallback,
        };
        self.task = Some(tokio::spawn(crate::nri::keep_connected(
            cfg.socket.clone(),
            settings,
            tx,
            out_rx,
            links_tx,
        )));
        let (updated_tx, updated_rx) = mpsc::unbounded_channel();
        self.rx = Some(rx);
        self.links = Some(links_rx);
        self.outgoing = Some(out_tx);
        self.updated = Some(updated_rx);
        self.updated_tx = Some(updated_tx);
    }

    pub(super) fn close(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.rx = None;
        self.links = None;
        self.outgoing = None;
        self.updated = None;
        self.updated_tx = None;
        self.told.clear();
    }

    /// The announced containers: their workloads' keys and where their
    /// cgroups will be.
    pub(super) fn announced_cgroups(&self) -> impl Iterator<Item = (&str, &crate::cgroup::Rel)> {
        self.announced.values().map(|a| (a.key.as_str(), &a.rel))
    }

    /// When the first announcement runs out.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.announced.values().map(|a| a.until).min()
    }

    /// Keeps what the fallback answers by current; a change of the pool
    /// is one the runtime is told.
    fn follow(&mut self, cfg: &Arc<Config>, shared: CpuSet) {
        if let Ok(mut v) = self.view.write() {
            if !Arc::ptr_eq(&v.cfg, cfg) {
                v.cfg = cfg.clone();
            }
            if v.shared != shared {
                v.shared = shared;
                self.told.touch();
            }
        }
    }

    /// The daemon's scope changed (a reload, another CPU owner).
    pub(super) fn set_scope(&mut self, scope: &Scope) {
        if let Ok(mut v) = self.view.write() {
            v.scope = scope.clone();
        }
        self.told.touch();
    }
}

/// Where the answer to a `CreateContainer` goes, and the time it took.
struct Reply {
    tx: tokio::sync::oneshot::Sender<Answer>,
    started: Instant,
    seconds: prometheus_client::metrics::histogram::Histogram,
}

impl Reply {
    fn send(self, answer: Answer) {
        let _ = self.tx.send(answer);
        let took = self.started.elapsed();
        self.seconds.observe(took.as_secs_f64());
        debug!(
            elapsed_us = took.as_micros() as u64,
            "NRI CreateContainer answered"
        );
    }
}

/// The answer when the loop did not answer in time: the shared pool for a
/// container in a managed subtree (the watcher pins an exclusive one once
/// its cgroup is there), nothing for any other; with `required`, a
/// container that asks for exclusive CPUs is refused.
fn fallback(view: &View, call: &Call) -> Answer {
    let View { cfg, scope, shared } = view;
    let Call::Create(req) = call else {
        return Answer::Done;
    };
    let Some(c) = req.container.as_ref() else {
        return Answer::Done;
    };
    let Ok(decided) = container::decide(cfg, c, req.pod.as_ref()) else {
        return Answer::Done;
    };
    if decided.wants() && cfg.nri.required {
        return Answer::Refuse(format!(
            "pinctld could not place container {} ({}) in time; refused ([nri] required)",
            c.name, decided.key
        ));
    }
    if !scope.managed(&decided.rel) || shared.is_empty() {
        return Answer::Done;
    }
    create_answer(&shared.to_string(), "", None)
}

/// An answer to `CreateContainer` that sets the container's CPUs (and its
/// memory nodes, unless `mems` is empty). With `lifted`, the limit the
/// container asked for, its CFS quota is lifted (-1, as the kubelet asks
/// for it) and the limit kept in its spec's annotations
/// ([`crate::intent::ANNOTATION_QUOTA_LIFTED`]).
fn create_answer(cpus: &str, mems: &str, lifted: Option<CpuLimit>) -> Answer {
    let mut resources = api::cpuset_resources(cpus, mems);
    let mut annotations = std::collections::HashMap::new();
    if let (Some(limit), Some(cpu)) = (lifted, resources.cpu.as_mut()) {
        cpu.quota = Some(api::OptionalInt64 { value: -1 });
        annotations.insert(
            crate::intent::ANNOTATION_QUOTA_LIFTED.to_string(),
            limit.to_text(),
        );
    }
    Answer::Create(api::CreateContainerResponse {
        adjust: Some(api::ContainerAdjustment {
            annotations,
            linux: Some(api::LinuxContainerAdjustment {
                resources: Some(resources),
            }),
        }),
        ..Default::default()
    })
}

/// The CPUs container `c`'s spec holds, as the runtime says (`None`: none,
/// or none pinctld can read).
fn spec_cpus_of(c: &api::Container) -> Option<CpuSet> {
    let cpus = &c.linux.as_ref()?.resources.as_ref()?.cpu.as_ref()?.cpus;
    cpus.parse::<CpuSet>().ok().filter(|s| !s.is_empty())
}

impl Daemon {
    /// The CPUs a container's spec should hold, by its cgroup `rel`: the
    /// pin of an exclusive one, the shared pool (`pool`) for a shared one
    /// of a managed subtree; `None` for any other, or one the engine has
    /// not read yet (an announced container's, among them).
    fn spec_cpus(&self, rel: &str, pool: &CpuSet) -> Option<CpuSet> {
        if !self.scope().managed(rel) || !self.engine.knows(rel) {
            return None;
        }
        if self.engine.is_exclusive(rel) {
            return self.engine.cpus_of(rel).map(|(_, cpus)| cpus.clone());
        }
        self.engine.is_shared(rel).then(|| pool.clone())
    }

    /// Starts the front end when `[nri]` is on.
    pub(super) fn open_nri(&mut self) {
        if self.cfg.nri.enabled {
            info!(socket = %self.cfg.nri.socket.display(), "registering as an NRI plugin");
            let cfg = self.cfg.nri.clone();
            self.nri.open(&cfg);
            self.follow_nri();
        }
    }

    /// The front end in the status document (`None`: `[nri]` is off).
    pub(super) fn nri_status(&self) -> Option<crate::api::Nri> {
        self.cfg.nri.enabled.then(|| crate::api::Nri {
            socket: self.cfg.nri.socket.clone(),
            connected: self.nri.link == Some(Link::Up),
            runtime: self.nri.runtime.clone(),
            error: match &self.nri.link {
                Some(Link::Down(why)) => Some(why.clone()),
                _ => None,
            },
            announced: self
                .nri
                .announced
                .values()
                .filter(|a| self.unmade(a))
                .count(),
            disagreements: self.nri.disagreements.clone(),
        })
    }

    /// A change of the link to the runtime.
    pub(super) fn nri_link(&mut self, link: Link) {
        match &link {
            Link::Up => {
                info!(socket = %self.cfg.nri.socket.display(), "connected to the runtime's NRI socket")
            }
            Link::Down(why) => {
                warn!(
                    error = %why,
                    "no NRI link to the runtime: containers start on the shared pool and are pinned as they appear"
                );
                // The next session synchronizes again.
                self.nri.told.clear();
            }
        }
        self.nri.link = Some(link);
        self.socket.dirty = true;
    }

    /// Answers one call of the runtime, then yields once: the task that
    /// carries the answer runs on the loop's thread, and the runtime waits.
    pub(super) async fn nri_asked(&mut self, asked: Asked) {
        self.answer_call(asked).await;
        tokio::task::yield_now().await;
    }

    async fn answer_call(&mut self, asked: Asked) {
        let Asked { call, reply } = asked;
        let started = Instant::now();
        let answer = match call {
            Call::Configured { runtime, version } => {
                info!(runtime = %runtime, version = %version, "registered as an NRI plugin");
                self.nri.runtime = Some(format!("{runtime} {version}"));
                Answer::Done
            }
            Call::Synchronize(req) => {
                info!(
                    pods = req.pods.len(),
                    containers = req.containers.len(),
                    "NRI synchronized: the cgroup tree is read as at start-up"
                );
                self.nri.told.clear();
                for c in &req.containers {
                    self.learn(c, spec_cpus_of(c));
                }
                self.forget_yielded(&req.containers).await;
                Answer::Synchronize(Vec::new())
            }
            Call::Create(req) => {
                let reply = Reply {
                    tx: reply,
                    started,
                    seconds: self.socket.metrics.nri_create_seconds.clone(),
                };
                return self.nri_create(&req, reply).await;
            }
            Call::Update(req) => return self.nri_update(&req, reply).await,
            Call::Stop(req) => {
                if let Some(c) = &req.container {
                    self.container_gone(&c.id).await;
                }
                Answer::Done
            }
            Call::Event(ev) => {
                if ev.event == api::event::REMOVE_CONTAINER
                    && let Some(c) = &ev.container
                {
                    self.container_gone(&c.id).await;
                }
                Answer::Done
            }
        };
        let _ = reply.send(answer);
    }

    /// `CreateContainer`: the container's CPUs.
    async fn nri_create(&mut self, req: &api::CreateContainerRequest, reply: Reply) {
        let Some(c) = req.container.as_ref() else {
            return reply.send(Answer::Done);
        };
        let decided = match container::decide(&self.cfg, c, req.pod.as_ref()) {
            Ok(d) => d,
            Err(e) => {
                warn!(error = %e, "NRI CreateContainer: left to the cgroup watcher");
                return reply.send(Answer::Done);
            }
        };
        if let Some(problem) = &decided.problem {
            warn!(container = %c.name, cgroup = %decided.rel, problem = %problem, "NRI CreateContainer");
        }
        if !self.scope().managed(&decided.rel) {
            return reply.send(Answer::Done);
        }
        if !decided.wants() {
            let shared = self.engine.shared_for(&decided.rel);
            self.nri
                .told
                .learn(&c.id, &decided.rel, Some(shared.clone()));
            return reply.send(create_answer(&shared.to_string(), "", None));
        }
        self.announce(c, &decided, reply).await;
    }

    /// Announces an exclusive container to the engine and answers, once
    /// the plan is made and before its writes, with what it gives it.
    async fn announce(&mut self, c: &api::Container, d: &Decided, reply: Reply) {
        let Some(mut intent) = d.intent.clone() else {
            return reply.send(Answer::Done);
        };
        if !intent.near.is_empty() {
            intent.devices = self.locate(&intent.near).await;
        }
        self.engine.expect(&d.key, &intent);
        let mut refused = false;
        self.apply_planned(|me| {
            let answer = me.placed(c, d);
            refused = matches!(answer, Answer::Refuse(_));
            reply.send(answer);
        })
        .await;
        if refused {
            self.withdraw(&c.id).await;
        }
    }

    /// The answer for an announced container, from the plan just made.
    fn placed(&mut self, c: &api::Container, d: &Decided) -> Answer {
        let Some(w) = self.engine.workloads().get(&d.key) else {
            return Answer::Done;
        };
        self.nri.announced.insert(
            c.id.clone(),
            Announcement {
                key: d.key.clone(),
                rel: d.rel.clone(),
                answered: w.cpus.clone().unwrap_or_default(),
                checked: w.cpus.is_none(),
                until: Instant::now() + ANNOUNCED_FOR,
            },
        );
        if let Some(cpus) = &w.cpus {
            self.nri.told.learn(&c.id, &d.rel, Some(cpus.clone()));
            let mems = self
                .engine
                .mems_for(cpus)
                .map(|m| m.to_string())
                .unwrap_or_default();
            // Its quota can only throttle it now: lifted before it starts.
            let lifted = d.limit.filter(|l| l.quota.is_some() && self.lifts(w));
            info!(
                container = %c.name,
                workload = %d.key,
                cpus = %cpus,
                cgroup = %d.rel,
                quota_lifted = lifted.is_some(),
                "NRI CreateContainer: made on its exclusive CPUs"
            );
            return create_answer(&cpus.to_string(), &mems, lifted);
        }
        let why = w
            .pending
            .as_ref()
            .map(|p| p.reason.clone())
            .unwrap_or_else(|| "no CPUs free".to_string());
        let shared = self.engine.shared_for(&d.rel);
        let answer = self.refuse_or(&why, create_answer(&shared.to_string(), "", None));
        if !matches!(answer, Answer::Refuse(_)) {
            self.nri.told.learn(&c.id, &d.rel, Some(shared));
            info!(container = %c.name, workload = %d.key, reason = %why, "NRI CreateContainer: made on the shared pool, waits for CPUs");
        }
        answer
    }

    /// `UpdateContainer` (a resize through the runtime). The runtime
    /// writes the container's spec again, so it is answered the CPUs the
    /// container has, when its spec holds any. The new limit of a
    /// container pinned by the kubelet rule is its request from now: it is
    /// resized by a plan first, and answered its new CPUs.
    async fn nri_update(
        &mut self,
        req: &api::UpdateContainerRequest,
        reply: tokio::sync::oneshot::Sender<Answer>,
    ) {
        let Some(c) = req.container.as_ref() else {
            let _ = reply.send(Answer::Done);
            return;
        };
        let held = spec_cpus_of(c);
        let Some(rel) = self.learn(c, held.clone()) else {
            let _ = reply.send(Answer::Done);
            return;
        };
        if self.limit_now(c, &rel, req) {
            self.apply_planned(|me| {
                let _ = reply.send(me.update_answer(c, &rel, held));
            })
            .await;
        } else {
            let _ = reply.send(self.update_answer(c, &rel, held));
        }
    }

    /// The new limit an `UpdateContainer` gives container `c` at `rel`,
    /// decided as its create was, told to the engine
    /// ([`crate::engine::Engine::limit_now`]) when it is exclusive by the
    /// kubelet rule. Whether its request changed.
    fn limit_now(
        &mut self,
        c: &api::Container,
        rel: &str,
        req: &api::UpdateContainerRequest,
    ) -> bool {
        let Some(resources) = req.linux_resources.clone() else {
            return false;
        };
        if !self.engine.is_exclusive(rel) || !self.scope().managed(rel) {
            return false;
        }
        let mut now = c.clone();
        if let Some(linux) = now.linux.as_mut() {
            linux.resources = Some(resources);
        }
        let Ok(d) = container::decide(&self.cfg, &now, req.pod.as_ref()) else {
            return false;
        };
        let Some(intent) = d
            .intent
            .filter(|i| matches!(i.source, crate::intent::Source::Kubelet))
        else {
            return false;
        };
        let changed = self.engine.limit_now(rel, intent.cpus);
        if changed {
            info!(container = %c.name, cgroup = %rel, cpus = intent.cpus, "NRI UpdateContainer: resized to its new limit");
        }
        changed
    }

    /// The answer to an `UpdateContainer` of container `c` at `rel`, whose
    /// spec holds `held`: the CPUs it has now, if its spec holds any.
    fn update_answer(
        &mut self,
        c: &api::Container,
        rel: &crate::cgroup::Rel,
        held: Option<CpuSet>,
    ) -> Answer {
        let pool = self.engine.shared_for(rel);
        // A spec that holds no CPUs is left so.
        let Some(cpus) = held.and_then(|_| self.spec_cpus(rel, &pool)) else {
            return Answer::Done;
        };
        self.nri.told.learn(&c.id, rel, Some(cpus.clone()));
        let mems = match self.engine.is_exclusive(rel) {
            true => self.engine.mems_for(&cpus).map(|m| m.to_string()),
            false => None,
        };
        Answer::Update(api::UpdateContainerResponse {
            update: vec![api::ContainerUpdate {
                container_id: c.id.clone(),
                linux: Some(api::LinuxContainerUpdate {
                    resources: Some(api::cpuset_resources(
                        &cpus.to_string(),
                        &mems.unwrap_or_default(),
                    )),
                }),
                ignore_failure: false,
            }],
            evict: Vec::new(),
        })
    }

    /// Container `c`, whose spec holds `cpus`: known by its cgroup, which
    /// is returned (`None`: the runtime named none pinctld can read).
    fn learn(&mut self, c: &api::Container, cpus: Option<CpuSet>) -> Option<crate::cgroup::Rel> {
        let path = c.linux.as_ref().map(|l| l.cgroups_path.as_str())?;
        let rel = container::cgroup_of(path)?;
        self.nri.told.learn(&c.id, &rel, cpus);
        Some(rel)
    }

    /// `answer` for a container that asks for exclusive CPUs and waits, or
    /// with `[nri] required` a refusal saying `why`.
    fn refuse_or(&self, why: &str, answer: Answer) -> Answer {
        if self.cfg.nri.required {
            Answer::Refuse(format!(
                "pinctld cannot give the container its exclusive CPUs now ([nri] required): {why}"
            ))
        } else {
            answer
        }
    }

    /// Where the devices a container drives sit (sysfs, through the I/O
    /// threads); none when that cannot be read in time.
    async fn locate(&self, near: &[crate::devices::Device]) -> Vec<crate::devices::Located> {
        let (cfg, near) = (self.cfg.clone(), near.to_vec());
        self.pool
            .run(&self.cfg.sysfs_root, move |fs| {
                Ok(crate::devices::locate_all(fs, cfg.device_roots(), &near))
            })
            .await
            .unwrap_or_else(|e| {
                warn!(error = %crate::io::chain(&e), "cannot locate a new container's devices");
                Vec::new()
            })
    }

    /// A reading of cgroup `rel`'s CPUs, before the engine takes it: the
    /// first one of an announced container's cgroup that holds any is
    /// compared with what the runtime was answered. Another set there
    /// (another NRI plugin that sets cpusets after pinctld, a runtime that
    /// ignored the adjustment) is logged, counted and kept for the status
    /// and `pinctl verify`, and pinctld leaves that container to the other
    /// owner: its cgroup leaves the scope (never written), its
    /// announcement is withdrawn (its CPUs go back), until the runtime
    /// stops or removes it. Two owners that both wrote would undo each
    /// other for good.
    pub(super) fn nri_saw(&mut self, rel: &str, cpus: Option<&CpuSet>) {
        if self.nri.announced.is_empty() {
            return;
        }
        let Some(cpus) = cpus.filter(|c| !c.is_empty()) else {
            return;
        };
        let Some((id, a)) = self
            .nri
            .announced
            .iter_mut()
            .find(|(_, a)| !a.checked && &*a.rel == rel)
        else {
            return;
        };
        a.checked = true;
        if *cpus == a.answered {
            return;
        }
        warn!(
            container = %id,
            cgroup = %rel,
            answered = %a.answered,
            found = %cpus,
            "NRI: the runtime made the container's cgroup with other CPUs than pinctld answered (another NRI plugin after pinctld's?); pinctld leaves the container to it"
        );
        self.socket.metrics.nri_disagreements.inc();
        let kept = &mut self.nri.disagreements;
        if kept.len() == DISAGREEMENTS_KEPT {
            kept.remove(0);
        }
        kept.push(crate::api::NriDisagreement {
            container: id.clone(),
            cgroup: rel.to_string(),
            answered: a.answered.clone(),
            found: cpus.clone(),
        });
        let (id, rel) = (id.clone(), a.rel.clone());
        self.nri.yielded.insert(id.clone(), rel);
        self.save_due = true;
        self.drop_announcement(&id);
        self.rescope();
        self.socket.dirty = true;
    }

    /// Container `id` stopped or was removed: the runtime holds nothing
    /// of it, its announcement is withdrawn, and one left to another owner
    /// is the daemon's again (its cgroup, if any is left, is read again).
    async fn container_gone(&mut self, id: &str) {
        self.nri.told.forget(id);
        self.withdraw(id).await;
        if self.nri.yielded.remove(id).is_some() {
            info!(container = %id, "NRI: a container left to another owner is gone");
            self.taken_back().await;
        }
    }

    /// The runtime named every container it has (`Synchronize`): one
    /// left to another owner that is not among them is gone (stopped or
    /// removed while pinctld was not connected), and pinctld's again.
    async fn forget_yielded(&mut self, containers: &[api::Container]) {
        let before = self.nri.yielded.len();
        self.nri
            .yielded
            .retain(|id, _| containers.iter().any(|c| &c.id == id));
        if self.nri.yielded.len() != before {
            info!(
                containers = before - self.nri.yielded.len(),
                "NRI: containers left to another owner are gone"
            );
            self.taken_back().await;
        }
    }

    /// Containers left to another owner are the daemon's again: saved,
    /// the scope taken again, their cgroups (if any are left) read again.
    async fn taken_back(&mut self) {
        self.save_due = true;
        self.rescope();
        if self.ready {
            self.ask_sweep(true).await;
        }
    }

    /// Whether an announced container's cgroup has not been read yet.
    fn unmade(&self, a: &Announcement) -> bool {
        self.engine
            .workloads()
            .get(&a.key)
            .is_some_and(|w| w.expected)
    }

    /// Withdraws the announcement of container `id`, if any.
    async fn withdraw(&mut self, id: &str) {
        if self.drop_announcement(id) {
            self.apply().await;
        }
    }

    /// Takes the announcement of container `id` out of the engine; the
    /// next plan gives back what it held. Whether there was one.
    fn drop_announcement(&mut self, id: &str) -> bool {
        let Some(a) = self.nri.announced.remove(id) else {
            return false;
        };
        debug!(container = %id, workload = %a.key, "NRI: announcement withdrawn");
        self.engine.unexpect(&a.key);
        true
    }

    /// Withdraws the announcements that ran out, with one plan.
    pub(super) async fn announcements_due(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .nri
            .announced
            .iter()
            .filter(|(_, a)| a.until <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &due {
            if let Some(a) = self.nri.announced.get(id)
                && self.unmade(a)
            {
                warn!(container = %id, workload = %a.key, "NRI: the announced container made no cgroup in time; its CPUs go back");
            }
            self.drop_announcement(id);
        }
        if !due.is_empty() {
            self.apply().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::nri::container::tests::{ID, UID, container_at, pod};

    fn guaranteed() -> String {
        format!("/kubepods/pod{UID}/{ID}")
    }

    fn create(path: &str, quota: Option<i64>) -> Call {
        Call::Create(api::CreateContainerRequest {
            pod: Some(pod()),
            container: Some(container_at(path, &[], quota)),
        })
    }

    /// Unanswered in time: the shared pool for a container of a managed
    /// subtree, nothing for any other; with `required`, a container that
    /// asks for exclusive CPUs is refused.
    #[test]
    fn the_fallback_answers_the_shared_pool_or_refuses_when_required() {
        let cfg = Config::default();
        let view = |required: bool, shared: &str| {
            let mut cfg = cfg.clone();
            cfg.nri.required = required;
            View {
                scope: Scope::of(&cfg),
                cfg: Arc::new(cfg),
                shared: shared.parse().unwrap(),
            }
        };
        let cpus = |a: Answer| match a {
            Answer::Create(r) => r
                .adjust
                .and_then(|a| a.linux?.resources?.cpu)
                .map(|c| c.cpus),
            _ => None,
        };
        let exclusive = create(&guaranteed(), Some(400_000));
        let open = view(false, "0-3");
        assert_eq!(cpus(fallback(&open, &exclusive)), Some("0-3".into()));
        assert_eq!(fallback(&open, &create("/other/x", None)), Answer::Done);
        assert_eq!(fallback(&view(false, ""), &exclusive), Answer::Done);
        // The scope the daemon runs by, not the file's: the kubepods
        // subtrees left to another owner get nothing.
        let mut left = view(false, "0-3");
        left.scope = Scope::new(Vec::new(), vec!["system.slice".into()], Vec::new());
        assert_eq!(fallback(&left, &exclusive), Answer::Done);
        let required = view(true, "0-3");
        let Answer::Refuse(why) = fallback(&required, &exclusive) else {
            panic!("not refused");
        };
        assert!(
            why.contains("[nri] required") && why.contains("app"),
            "{why}"
        );
        let shared = create(&guaranteed(), None);
        assert_eq!(cpus(fallback(&required, &shared)), Some("0-3".into()));
    }
}
