//! Slurm's job cores kept quiet (`[slurm] housekeeping`): the daemon reads
//! the jobs below the Slurm trees it knows every [`JOB_CHECK`], and gives
//! the engine their CPUs ([`crate::engine::Engine::set_job_cores`]).
//!
//! - The engine then keeps them out of the shared pool and out of every
//!   new assignment; the plan's writes move every confined cgroup off them,
//!   and the passes that follow a plan move interrupts (`irq_affinity`),
//!   the kernel's movable work and the power class.
//! - A job's cgroup made, written or removed (an inotify event in a tree
//!   the daemon watches) is followed at once; every [`JOB_CHECK`] the jobs
//!   are read again, for trees it does not watch and events it missed. No
//!   round of checks is waited for; a round reads every job again.
//! - A job is read once its CPUs are written ([`slurm::jobs_under`]): a
//!   look costs a directory listing per tree while no job starts or ends.

use std::time::Duration;

use tracing::{info, warn};

use super::Daemon;
use crate::cpuset::CpuSet;
use crate::slurm;

/// How often the jobs are looked at with `[slurm] housekeeping` on: a
/// job's cores are quiet, and back in the shared pool, this soon after it
/// starts or ends.
pub const JOB_CHECK: Duration = Duration::from_millis(500);

impl Daemon {
    /// Whether the loop should look at the jobs every [`JOB_CHECK`]: the
    /// switch is on and a Slurm tree is known, or job cores are still set
    /// (the switch went off, or the tree went away).
    /// Called before every turn of the loop: it builds no list of roots.
    pub(super) fn follows_jobs(&self) -> bool {
        (self.cfg.slurm.housekeeping && self.knows_slurm_tree())
            || !self.engine.job_cores().is_empty()
    }

    /// Whether any Slurm tree is known ([`Self::slurm_roots`] not empty).
    fn knows_slurm_tree(&self) -> bool {
        self.engine.slurm_roots().next().is_some() || !self.dog.slurm_roots.is_empty()
    }

    /// The roots of Slurm's trees: those the engine met in its subtrees
    /// and those the last round of checks found elsewhere.
    fn slurm_roots(&self) -> Vec<String> {
        let mut roots: Vec<String> = self.engine.slurm_roots().map(|r| r.to_string()).collect();
        roots.extend(self.dog.slurm_roots.iter().cloned());
        roots.sort();
        roots.dedup();
        roots
    }

    /// Whether cgroup `rel` is a job of Slurm's to follow: `[slurm]
    /// housekeeping` is on and its parent is the root of a Slurm tree.
    pub(super) fn is_slurm_job(&self, rel: &str) -> bool {
        self.cfg.slurm.housekeeping && crate::cgroup::parent(rel).is_some_and(slurm::is_root)
    }

    /// Reads the jobs below the known Slurm trees and plans when their
    /// cores changed.
    pub(super) async fn look_at_jobs(&mut self) {
        if self.read_jobs(false).await {
            self.apply().await;
        }
    }

    /// Reads the jobs below the known Slurm trees and gives the engine
    /// their cores: `true` when those changed (a plan is due). With
    /// `discover`, first looks for the trees wherever [`slurm::find`] looks
    /// (at the end of every full reconcile, before its plan: at start-up
    /// no workload is given a job core before the jobs are known, and v1's
    /// `slurm/` is found before the first round of checks).
    pub(super) async fn read_jobs(&mut self, discover: bool) -> bool {
        let roots = self.slurm_roots();
        if !self.cfg.slurm.housekeeping || (roots.is_empty() && !discover) {
            return self.take_jobs();
        }
        let h = self.hier.clone();
        let known = self.dog.slurm_jobs.clone();
        let read = self
            .pool
            .run_op("list", &self.hier.cpuset, move |fs| {
                if discover {
                    slurm::find(fs, &h, &roots)
                } else {
                    slurm::jobs_under(fs, &h, &roots, &known)
                        .map(|jobs| slurm::Found { roots, jobs })
                }
            })
            .await;
        match read {
            Ok(found) => {
                self.dog.slurm_roots = found.roots;
                self.dog.slurm_jobs = found.jobs;
                self.take_jobs()
            }
            Err(e) => {
                warn!(error = %e, "cannot list Slurm's jobs; trying again");
                false
            }
        }
    }

    /// Gives the engine the cores of the jobs last read (none with the
    /// switch off, or no tree known): `true` when they changed.
    pub(super) fn take_jobs(&mut self) -> bool {
        let on = self.cfg.slurm.housekeeping && self.knows_slurm_tree();
        let cores = if on {
            slurm::job_cores(&self.dog.slurm_jobs, self.engine.topology().online())
        } else {
            CpuSet::new()
        };
        let before = self.engine.job_cores();
        if !self.engine.set_job_cores(cores) {
            return false;
        }
        info!(
            cores = %self.engine.job_cores(),
            was = %before,
            jobs = self.dog.slurm_jobs.len(),
            "Slurm's job cores changed: the shared pool follows"
        );
        self.socket.dirty = true;
        true
    }
}
