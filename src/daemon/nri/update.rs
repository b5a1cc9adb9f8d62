//! The runtime's copy of each container's CPUs kept true: when the shared
//! pool changes, the shared containers the runtime made with CPUs are
//! updated (`UpdateContainers`, [`UPDATES_AT_ONCE`] at a time, once the
//! plan's writes are made), and the answers are counted. It never updates
//! an exclusive container, and never writes a cgroup: the runtime does.

use tracing::{debug, warn};

use super::{BUDGET, CALL_WITHIN};
use crate::daemon::Daemon;
use crate::nri::told::Update;
use crate::nri::{Link, Outgoing, api};

/// The most containers one `UpdateContainers` updates: the runtime
/// updates them one by one (a `runc update` each) under the lock its
/// `CreateContainer` takes too.
const UPDATES_AT_ONCE: usize = 16;

/// The runtime's answer to an `UpdateContainers`.
#[derive(Debug)]
pub(in crate::daemon) struct Updated {
    sent: Vec<Update>,
    /// The containers it could not update, or why the call failed.
    result: Result<Vec<String>, String>,
}

impl Daemon {
    /// Keeps what the front end's fallback answers by current: after every
    /// turn of the loop.
    pub(in crate::daemon) fn follow_nri(&mut self) {
        if self.nri.rx.is_some() {
            let pool = self.engine.managed_pool();
            self.nri.follow(&self.cfg, pool);
            self.tell_runtime();
        }
    }

    /// Sends the runtime the next chunk of updates of the shared
    /// containers' CPUs, once the plan's writes are made (the pool is then
    /// in the tree, parents first) and the last chunk was answered. An
    /// exclusive container is not updated: the runtime would write its
    /// whole spec again, the CFS quota lifted for the pin included.
    fn tell_runtime(&mut self) {
        if !self.nri.told.due()
            || !self.ready
            || self.nri.link != Some(Link::Up)
            || self.rest.due().is_some()
        {
            return;
        }
        let (Some(out), Some(back)) = (self.nri.outgoing.clone(), self.nri.updated_tx.clone())
        else {
            return;
        };
        let pool = self.engine.managed_pool();
        // An announced container's cgroup is either not read yet or part
        // of its exclusive workload: neither is updated.
        let mut told = std::mem::take(&mut self.nri.told);
        let sent = told.next(UPDATES_AT_ONCE, |rel| {
            (!self.engine.is_exclusive(rel))
                .then(|| self.spec_cpus(rel, &pool))
                .flatten()
        });
        self.nri.told = told;
        if sent.is_empty() {
            return;
        }
        debug!(containers = sent.len(), cpus = %pool, "NRI: updating the shared containers' CPUs in the runtime");
        let request = api::UpdateContainersRequest {
            update: sent
                .iter()
                .map(|u| api::ContainerUpdate {
                    container_id: u.id.clone(),
                    linux: Some(api::LinuxContainerUpdate {
                        resources: Some(api::cpuset_resources(&u.cpus.to_string(), "")),
                    }),
                    ignore_failure: false,
                })
                .collect(),
            evict: Vec::new(),
        };
        tokio::spawn(async move {
            let (reply, answer) = tokio::sync::oneshot::channel();
            // The session sends the call with CALL_WITHIN as its timeout;
            // a runtime that never answers is not waited on past it.
            let result = match out.send(Outgoing { request, reply }).await {
                Err(_) => Err("the session with the runtime ended".to_string()),
                Ok(()) => match tokio::time::timeout(CALL_WITHIN + BUDGET, answer).await {
                    Ok(Ok(Ok(r))) => Ok(r.failed.into_iter().map(|f| f.container_id).collect()),
                    Ok(Ok(Err(why))) => Err(why),
                    Ok(Err(_)) => Err("the session with the runtime ended".to_string()),
                    Err(_) => Err(format!("no answer within {:?}", CALL_WITHIN + BUDGET)),
                },
            };
            let _ = back.send(Updated { sent, result });
        });
    }

    /// The runtime answered an `UpdateContainers`.
    pub(in crate::daemon) fn nri_updated(&mut self, updated: Updated) {
        let Updated { sent, result } = updated;
        let failed = match result {
            Ok(failed) => failed,
            Err(why) => {
                warn!(containers = sent.len(), error = %why, "NRI: the runtime did not update the shared containers' CPUs; tried again at the next change (the cgroups hold them already)");
                sent.iter().map(|u| u.id.clone()).collect()
            }
        };
        let mut not_made = 0;
        for u in sent.iter().filter(|u| failed.contains(&u.id)) {
            debug!(container = %u.id, cpus = %u.cpus, "NRI: the runtime could not update the container's CPUs");
            not_made += 1;
        }
        let metric = &self.socket.metrics.nri_updates;
        for (result, n) in [("ok", sent.len() - not_made), ("failed", not_made)] {
            metric
                .get_or_create(&crate::metrics::ResultLabel {
                    result: result.into(),
                })
                .inc_by(n as u64);
        }
        // The next chunk goes at the next turn; a failed one waits for the
        // next change.
        self.nri.told.answered(&sent, &failed);
    }
}
