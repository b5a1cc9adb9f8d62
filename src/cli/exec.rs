//! `pinctl run`: asks the daemon's run socket for CPUs, checks that the
//! kernel runs this process on them, sets the memory policy, then becomes
//! the command (exec). It never picks CPUs itself: the daemon does.

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

use super::{RunArgs, load_config};
use crate::cpuset::CpuSet;

/// This process's memory policy over NUMA nodes `nodes` (the command
/// inherits it through exec, and its children through fork), as
/// `numactl --membind` or `--preferred-many` sets it.
fn set_mempolicy(policy: crate::run::MemPolicy, nodes: &CpuSet) -> Result<()> {
    use crate::run::MemPolicy;
    const MPOL_PREFERRED: libc::c_long = 1;
    const MPOL_BIND: libc::c_long = 2;
    const MPOL_PREFERRED_MANY: libc::c_long = 5;
    if policy == MemPolicy::None || nodes.is_empty() {
        return Ok(());
    }
    let call = |mode: libc::c_long, nodes: &CpuSet| -> std::io::Result<()> {
        let bits = 64 * (nodes.iter().max().unwrap_or(0) as usize / 64 + 1);
        let mut mask = vec![0 as libc::c_ulong; bits / 64];
        for n in nodes.iter() {
            mask[n as usize / 64] |= 1 << (n % 64);
        }
        // SAFETY: set_mempolicy(2) reads `bits` bits from `mask`, which
        // holds that many, and keeps no pointer to it.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_set_mempolicy,
                mode,
                mask.as_ptr(),
                (bits + 1) as libc::c_ulong,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    match policy {
        MemPolicy::Bind => call(MPOL_BIND, nodes)?,
        MemPolicy::Prefer if nodes.len() == 1 => call(MPOL_PREFERRED, nodes)?,
        // Before Linux 5.15 there is no MPOL_PREFERRED_MANY: the first node.
        MemPolicy::Prefer => call(MPOL_PREFERRED_MANY, nodes).or_else(|_| {
            let first: CpuSet = nodes.iter().take(1).collect();
            call(MPOL_PREFERRED, &first)
        })?,
        MemPolicy::None => {}
    }
    Ok(())
}

/// OpenMP's environment for a run on `cpus` (`--omp`): a thread per CPU,
/// each bound to a place of its own.
fn omp_env(cpus: &CpuSet) -> [(&'static str, String); 3] {
    let places: Vec<String> = cpus.iter().map(|c| format!("{{{c}}}")).collect();
    [
        ("OMP_NUM_THREADS", cpus.len().to_string()),
        ("OMP_PLACES", places.join(",")),
        ("OMP_PROC_BIND", "close".to_string()),
    ]
}

/// `pinctl run`: the CPUs asked for, then the command in this process.
pub(super) fn run_cmd(args: &RunArgs) -> Result<()> {
    use std::os::unix::process::CommandExt as _;
    let socket = match &args.socket {
        Some(s) => s.clone(),
        None => load_config(args.config.as_deref())?.run.socket,
    };
    let ask = crate::run::Ask {
        cpus: args.cpus,
        name: args.name.clone(),
        command: args
            .command
            .iter()
            .take(crate::run::MAX_COMMAND_WORDS)
            .cloned()
            .collect(),
        wait: args.wait.map(|d| d.as_secs().max(1)),
        numa: args.numa_node.iter().flat_map(CpuSet::iter).collect(),
        mem: args.mem,
        full_cores: args.full_cores,
        near: crate::devices::parse_list(&args.near.join(","))
            .context("--near")?
            .iter()
            .map(ToString::to_string)
            .collect(),
        device_alignment: args.device_alignment.map(|a| a.as_str().to_string()),
    };
    let wait = args.wait.unwrap_or_default();
    let grant = crate::run::ask(&socket, &ask, wait + Duration::from_secs(90), |q| {
        eprintln!("pinctl run: {q}");
    })?;
    // The kernel's word, not the daemon's: this process runs on them now.
    let status = std::fs::read_to_string("/proc/self/status")
        .context("cannot read /proc/self/status to check this process's CPUs")?;
    let allowed: CpuSet = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .ok_or_else(|| anyhow!("no Cpus_allowed_list in /proc/self/status"))?
        .parse()?;
    if allowed != grant.cpus {
        bail!(
            "{} was given CPUs {}, but the kernel lets this process run on {allowed}",
            grant.key,
            grant.cpus
        );
    }
    set_mempolicy(grant.mem, &grant.nodes)
        .with_context(|| format!("cannot set the memory policy {}", grant.mem.as_str()))?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| anyhow!("no command to run"))?;
    let mut command = std::process::Command::new(program);
    command
        .args(rest)
        .env("PINCTL_CPUS", grant.cpus.to_string());
    if args.omp {
        command.envs(omp_env(&grant.cpus));
    }
    let e = command.exec();
    Err(anyhow!(e).context(format!("cannot run {program:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn omp_places_are_one_cpu_each() {
        let env = omp_env(&"2-3,8".parse().unwrap());
        assert_eq!(
            env.map(|(k, v)| format!("{k}={v}")),
            [
                "OMP_NUM_THREADS=3",
                "OMP_PLACES={2},{3},{8}",
                "OMP_PROC_BIND=close"
            ]
        );
    }
}
