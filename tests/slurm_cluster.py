"""A real one-node SLURM cluster on this machine: munged, slurmctld and slurmd on localhost.

Used by tests/workflow/test_slurm.py.  The daemons run in the foreground as children of the test
process, with every state, spool, log, socket and key file under one temporary folder, so they
touch nothing of the host's own SLURM or munge set-up; `stop()` ends exactly those children.
Client commands find the cluster through /etc/slurm/slurm.conf, a link to the temporary config
made by `start()` and removed by `stop()`: the executor plugin's job step drops SLURM_* variables
(SLURM_CONF with them) before it calls srun, so inside a job only the default path is read.  A
host with its own /etc/slurm/slurm.conf is left alone (the test skips).

`unavailable()` says why a session runs without the cluster; `snakemake_command()` is Snakemake
with workflow/profiles/slurm, sized for this one node.  The session's tiny pipeline
(tests/conftest.py) runs through it when the cluster is up; tests/workflow/test_slurm.py checks
that run and the cluster's failure paths.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "workflow" / "profiles" / "slurm"
OPT_IN = "DEAMOE_SLURM_TEST"
PACKAGES = ("slurm-wlm", "munge")
DAEMONS = ("munged", "slurmctld", "slurmd")
PARTITION = "debug"
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_installed() -> str | None:
    """None when the daemons and clients are on PATH (installing them with apt-get if not and if
    this is a root Debian-family machine); otherwise the reason they cannot be had."""
    needed = (*DAEMONS, "sbatch", "squeue", "sinfo", "srun", "scancel")
    if all(shutil.which(cmd) for cmd in needed):
        return None
    if not shutil.which("apt-get"):
        return "slurm-wlm/munge not installed and no apt-get to install them"
    if os.geteuid() != 0:
        return "slurm-wlm/munge not installed and not root to apt-get them"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0 and cmd[1] == "install":
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
            return f"apt-get install {' '.join(PACKAGES)} failed: {tail[0]}"
    missing = [cmd for cmd in needed if not shutil.which(cmd)]
    return f"after apt-get install, still missing: {', '.join(missing)}" if missing else None


def unavailable() -> str | None:
    """Why this session runs no SLURM cluster, or None: it is wanted (DEAMOE_SLURM_TEST=1), installed (apt-get here if need be) and this host's config path is free."""
    if os.environ.get(OPT_IN) != "1":
        return (f"the SLURM cluster test runs with {OPT_IN}=1, as .ci/run sets it (installs "
                "slurm-wlm + munge, starts a one-node cluster for the session's tiny pipeline)")
    return ensure_installed() or conf_in_use()


def conf_in_use() -> str | None:
    """The reason this host's SLURM configuration path is not free for this cluster, or None."""
    if SYSTEM_CONF.is_symlink() and not SYSTEM_CONF.exists():
        return None  # a dangling link: a killed earlier run's, replaced in start()
    if SYSTEM_CONF.exists():
        return f"this host has its own {SYSTEM_CONF}; not replacing it"
    return None


# The profile's per-rule threads and resources are for 8-GPU nodes: this node has a few CPUs
# (threads = cores a job asks SLURM for, which does not bind them here: a job uses what it finds;
# one each lets both servings and both evaluations run at once, as the last stage asks).
THREADS = ["train=1", "data=1", "eval=1", "serve=1", "microbench=1"]
# Memory: a little over each job's peak at this scale (vLLM's CPU server ~3 GB, the others under
# 1.2 GB), so that a machine of little memory still runs the jobs side by side.
RESOURCES = ["data:mem_mb=1500", "train:mem_mb=1500", "eval:mem_mb=1500", "serve:mem_mb=3500",
             "microbench:mem_mb=1000"]


def snakemake_command(workdir: Path, *args: str) -> list[str]:
    """Snakemake in `workdir` with the SLURM profile as a user runs it, changed on the command line
    only: `args` (the config files: the profile's are the paper's scale), this node's threads and
    memory, and the executor's job status queries (squeue: no accounting database for sacct here;
    the first 2 s after a submission instead of 40 s).  Partition from DEAMOE_SLURM_PARTITION."""
    return [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
            "--workflow-profile", str(PROFILE), "--set-threads", *THREADS,
            "--set-resources", *RESOURCES, "--slurm-init-seconds-before-status-checks", "2",
            "--slurm-status-command", "squeue", *args]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies, however it dies (Linux)."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


class LocalSlurm:
    """One node (this host and its memory), one partition, no accounting database.  `cpus`: the
    CPUs the node offers to jobs (default: this host's cores); more than the host has lets jobs
    overlap (slurmd is told to take the configured count as given)."""

    def __init__(self, root: Path, cpus: int | None = None):
        self.root = Path(root)
        self.node = socket.gethostname().split(".")[0]
        self.cpus = cpus or os.cpu_count() or 1
        self.procs: dict[str, subprocess.Popen] = {}
        self.linked = False  # whether SYSTEM_CONF is this cluster's link
        self.conf = self.root / "slurm.conf"
        self.socket = self.root / "munge" / "munge.socket.2"

    @property
    def env(self) -> dict[str, str]:
        """This environment without SLURM's variables (as on a login node, outside any job)."""
        return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}

    @property
    def submit_env(self) -> dict[str, str]:
        """`env` as a user of the profile sets it: this cluster's partition, no account (there is
        no accounting database to check one against)."""
        env = {**self.env, "PYTHONUNBUFFERED": "1", "DEAMOE_SLURM_PARTITION": PARTITION}
        env.pop("DEAMOE_SLURM_ACCOUNT", None)
        return env

    def _write_config(self) -> None:
        r = self.root
        for sub in ("munge", "state", "spool", "log"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        (r / "munge").chmod(0o700)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        # Real memory a little under the total, so a job's --mem fits what slurmd measures.
        mem = int(_memory_mb() * 0.9)
        self.conf.write_text(f"""\
ClusterName=deamoetest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.socket}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
# No cgroups inside a container: plain process tracking, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
# Finished jobs stay visible to squeue for an hour: the executor reads their end state there.
MinJobAge=3600
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
# The node's CPUs as configured here, even where that is more than the host's cores.
SlurmdParameters=config_overrides
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={mem} State=UNKNOWN
PartitionName={PARTITION} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
""")

    def _link_config(self) -> None:
        SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
        if SYSTEM_CONF.is_symlink() and not SYSTEM_CONF.exists():
            SYSTEM_CONF.unlink()
        SYSTEM_CONF.symlink_to(self.conf)
        self.linked = True

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "w")
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                            start_new_session=True, preexec_fn=_die_with_parent)
        log.close()

    def start(self, timeout: float = 90) -> None:
        self._write_config()
        self._link_config()
        m = self.root / "munge"
        self._spawn("munged", ["munged", "--foreground", "--force", f"--socket={self.socket}",
                               f"--key-file={m / 'munge.key'}", f"--pid-file={m / 'munged.pid'}",
                               f"--seed-file={m / 'munged.seed'}", f"--log-file={m / 'munged.log'}"])
        self._wait(lambda: self.socket.exists(), "munged socket", 20)
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._wait(lambda: self._run(["sinfo", "-h"]).returncode == 0, "slurmctld answering", 30)
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.node])
        self._wait(self._idle, f"node {self.node} idle in sinfo", timeout)

    def _run(self, cmd: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=30)

    def _idle(self) -> bool:
        out = self._run(["sinfo", "-h", "-N", "-o", "%N %t"]).stdout.split()
        return out[-1:] == ["idle"]

    def _wait(self, ready, what: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead[0]} exited ({self.procs[dead[0]].returncode}) while waiting for "
                                   f"{what}:\n{self.logs()}")
            if ready():
                return
            time.sleep(0.5)
        raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}:\n{self.logs()}")

    def logs(self, lines: int = 20) -> str:
        parts = []
        for log in sorted((self.root / "log").glob("*")) + [self.root / "munge" / "munged.log"]:
            if log.is_file():
                tail = log.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel this cluster's jobs, then end the daemons this object started (in reverse order),
        and nothing else."""
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            try:
                self._run(["scancel", "--full", f"--partition={PARTITION}"])
                self._wait(lambda: not self._run(["squeue", "-h", "-t", "R,CG,PD"]).stdout.strip(),
                           "jobs to end", 30)
            except (RuntimeError, subprocess.SubprocessError):
                pass  # daemons go down below regardless
        for name in reversed(list(self.procs)):
            proc = self.procs.pop(name)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        if self.linked and SYSTEM_CONF.is_symlink() and SYSTEM_CONF.resolve() == self.conf.resolve():
            SYSTEM_CONF.unlink()
        self.linked = False


if __name__ == "__main__":  # scripts/test.sh: install the packages while the venv is being set up
    print(f"slurm_cluster: {ensure_installed() or 'slurm-wlm and munge are installed'}")
