//! The kernel command line that removes what cannot move off exclusive
//! CPUs at run time (placeholder; see issue #42).

use crate::cpuset::CpuSet;

/// The boot parameters for `exclusive` CPUs of `online`.
pub fn boot_params(exclusive: &CpuSet, online: &CpuSet) -> Option<String> {
    if exclusive.is_empty() {
        return None;
    }
    let h = online.difference(exclusive);
    Some(format!(
        "isolcpus=managed_irq,domain,{exclusive} nohz_full={exclusive} rcu_nocbs={exclusive} irqaffinity={h}"
    ))
}
