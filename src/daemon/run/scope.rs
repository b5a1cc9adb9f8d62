//! A run's cgroup: started as systemd's transient scope around the peer
//! (or made by the daemon when there is no systemd), marked with who asked
//! ([`XATTR_RUN`]), pinned by the one pipeline, checked through the kernel,
//! and the peer moved in. It must never move a pid but the peer's.

use std::path::Path;
use std::time::Duration;

use tracing::{info, warn};

use super::{Held, XATTR_RUN, holds, start_of};
use crate::cgroup::{self, Rel, Version, XATTR_CPUS};
use crate::daemon::Daemon;
use crate::io::chain;
use crate::run::{Ask, Peer, Refusal};
use crate::systemd::SystemdError;
use crate::watch::Change;

impl Daemon {
    /// Under systemd, starts the run's transient scope `unit` in `slice`
    /// around the peer. `Ok(true)`: systemd made the run's cgroup (v2; on v1
    /// its scope holds no cpuset, the daemon makes that). `Ok(false)`: no
    /// systemd (no bus, or nobody on it): the daemon makes the cgroup.
    pub(super) async fn start_scope(
        &mut self,
        peer: &Peer,
        ask: &Ask,
        slice: &str,
        unit: &str,
        pidfd: Option<&std::os::fd::OwnedFd>,
    ) -> Result<bool, Refusal> {
        let Some(bus) = self.door.bus.as_mut() else {
            return Ok(false);
        };
        let slice_unit = slice.rsplit('/').next().unwrap_or(slice);
        let mut description = format!("pinctl run: {}", ask.command.join(" "));
        if description.len() > 200 {
            let mut end = 200;
            while !description.is_char_boundary(end) {
                end -= 1;
            }
            description.truncate(end);
        }
        // v2: the scope starts on the shared pool, as any new cgroup.
        let v2 = self.hier.version == Version::V2;
        let shared = v2.then(|| self.engine.shared_pool());
        match bus
            .start_scope(
                unit,
                slice_unit,
                peer.pid,
                pidfd.map(std::os::fd::AsFd::as_fd),
                shared.as_ref(),
                &description,
            )
            .await
        {
            Ok(()) => Ok(v2),
            Err(SystemdError::Connect { bus, source }) => {
                info!(bus = %bus.display(), error = %source, "no systemd on the bus: the run's cgroup is the daemon's own");
                Ok(false)
            }
            Err(e) => Err(Refusal::Failed {
                why: format!("systemd: {}", chain(&e)),
            }),
        }
    }

    /// The run's cgroup `rel` made (unless systemd made it), marked, pinned
    /// by the one pipeline, checked through the kernel, and the peer in it.
    pub(super) async fn set_up(
        &mut self,
        peer: &Peer,
        ask: &Ask,
        rel: &Rel,
        by_systemd: bool,
    ) -> Result<crate::cpuset::CpuSet, Refusal> {
        let failed = |what: &str, e: crate::io::IoError| Refusal::Failed {
            why: format!("{what}: {}", chain(&e)),
        };
        let dir = self.hier.dir(rel);
        let slice = Rel::from(self.cfg.run.slice.as_str());
        if by_systemd {
            // systemd makes the scope's cgroup, then moves the process in.
            if !self.joined(&dir, peer.pid).await {
                return Err(Refusal::Failed {
                    why: format!("systemd did not move the asking process into {rel}"),
                });
            }
        } else {
            let slice_dir = self.hier.dir(&slice);
            if !matches!(self.pool.exists(&slice_dir).await, Ok(true)) {
                self.pool
                    .mkdir(&slice_dir)
                    .await
                    .map_err(|e| failed("cannot make the slice", e))?;
            }
        }
        // The slice's sets before the run's: v1 refuses a child a CPU or
        // memory node its parent lacks, and v2 enables the controller below
        // a managed root as it appears.
        if !self.engine.knows(&slice) {
            self.handle(vec![Change::Created(slice)]).await;
            self.drain().await;
        }
        if !by_systemd {
            self.pool
                .mkdir(&dir)
                .await
                .map_err(|e| failed("cannot make the run's cgroup", e))?;
        }
        // Whose it is first: a restarted daemon counts it against its user.
        let held = Held {
            uid: peer.uid,
            cpus: ask.cpus,
            command: ask.command.clone(),
        }
        .to_xattr();
        let mut count = ask.cpus.to_string();
        if !ask.numa.is_empty() {
            let nodes: crate::cpuset::CpuSet = ask.numa.iter().copied().collect();
            count = format!("{count}@{nodes}");
        }
        if ask.full_cores {
            count.push_str(crate::intent::FULL_CORES);
        }
        let mut marks = vec![(XATTR_RUN, held)];
        if !ask.near.is_empty() {
            marks.push((cgroup::XATTR_NEAR, ask.near.join(",")));
        }
        if let Some(a) = &ask.device_alignment {
            marks.push((cgroup::XATTR_DEVICE_ALIGNMENT, a.clone()));
        }
        marks.push((XATTR_CPUS, count));
        for (name, value) in marks {
            self.pool
                .set_xattr(&dir, name, value.as_bytes())
                .await
                .map_err(|e| failed("cannot mark the run's cgroup", e))?;
        }
        self.handle(vec![Change::Created(rel.clone())]).await;
        // Past the room check, a refusal is a failure, never a wait in line:
        // the run's cgroup exists already.
        let Some(cpus) = self.engine.cpus_of(rel).map(|(_, c)| c.clone()) else {
            return Err(Refusal::Failed {
                why: format!("{} CPUs were free, but none were given to {rel}", ask.cpus),
            });
        };
        // The nodes asked for are a preference to the allocator: the run
        // takes them alone, or nothing.
        if !ask.numa.is_empty() && !cpus.is_subset(&self.engine.numa_cpus(&ask.numa)) {
            return Err(Refusal::Failed {
                why: format!("the CPUs free for it ({cpus}) are not all on the NUMA nodes asked"),
            });
        }
        self.has_cpus(rel, &cpus).await?;
        if by_systemd {
            // systemd holds the pin too: a daemon-reload writes it, not "".
            let told = self.tell_scope(rel, &cpus).await;
            self.systemd
                .own(rel, &std::sync::Arc::new(cpus.clone()), told);
            if !holds(&self.pool, &dir.join(cgroup::file::PROCS), peer.pid).await {
                return Err(Refusal::Failed {
                    why: format!("the asking process is not in {rel}"),
                });
            }
        } else {
            // The pid is the peer's still (not reused by another process).
            if start_of(&self.pool, &self.cfg.proc_root, peer.pid).await != Some(peer.start) {
                return Err(Refusal::Failed {
                    why: "the asking process is gone".into(),
                });
            }
            let procs = dir.join(cgroup::file::PROCS);
            self.pool
                .write(&procs, &peer.pid.to_string())
                .await
                .map_err(|e| failed("cannot move the process into the run's cgroup", e))?;
        }
        Ok(cpus)
    }

    /// Tells systemd the run scope `rel`'s pin and memory nodes (what the
    /// kernel gives it) as its `AllowedCPUs=` and `AllowedMemoryNodes=`, so
    /// a daemon-reload writes those. Whether systemd took them.
    async fn tell_scope(&mut self, rel: &Rel, cpus: &crate::cpuset::CpuSet) -> bool {
        let mems_file = self.hier.dir(rel).join("cpuset.mems.effective");
        let mems = self.pool.read(&mems_file).await.ok();
        let mems = (mems.and_then(|t| t.trim().parse::<crate::cpuset::CpuSet>().ok()))
            .filter(|m| !m.is_empty());
        let (Some(bus), Some(unit)) = (self.door.bus.as_mut(), crate::systemd::scope_unit(rel))
        else {
            return false;
        };
        match bus.set_allowed(unit, cpus, mems.as_ref()).await {
            Ok(told) => told,
            Err(e) => {
                warn!(cgroup = %rel, error = %chain(&e), "cannot tell systemd a run's CPUs and memory nodes");
                false
            }
        }
    }

    /// Whether the cgroup `dir` (one systemd is making) holds process
    /// `pid` within the I/O timeout.
    async fn joined(&self, dir: &Path, pid: u32) -> bool {
        let deadline = tokio::time::Instant::now() + self.cfg.read_timeout;
        let procs = dir.join(cgroup::file::PROCS);
        loop {
            if holds(&self.pool, &procs, pid).await {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The kernel's word, not the engine's: the run's cgroup really has its
    /// CPUs (a write can fail; v2 falls back to the parent's set).
    async fn has_cpus(&self, rel: &Rel, cpus: &crate::cpuset::CpuSet) -> Result<(), Refusal> {
        let effective = self.hier.effective_file(rel);
        let has = match self.pool.read(&effective).await {
            // A v1 kernel before 4.17 enforces cpuset.cpus itself.
            Err(e) if e.is_not_found() && self.hier.version == Version::V1 => {
                self.pool.read(&self.hier.cpus_file(rel)).await
            }
            r => r,
        };
        let why = match has {
            Ok(t) if t.trim().parse::<crate::cpuset::CpuSet>().ok().as_ref() == Some(cpus) => {
                return Ok(());
            }
            Ok(t) => format!(
                "its cgroup {rel} has CPUs {:?} ({}), not its {cpus}",
                t.trim(),
                effective.display()
            ),
            Err(e) => format!("cannot check its cgroup's CPUs: {}", chain(&e)),
        };
        Err(Refusal::Failed { why })
    }
}
