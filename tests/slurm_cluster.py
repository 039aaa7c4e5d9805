"""A real one-node SLURM cluster for the tests, started in a temporary folder and stopped by process id.

tests/conftest.py imports the session fixtures `slurm` and `slurm_accounting` (one cluster of each kind for
the whole session, started by the first test that asks for it), so any test module uses them:

    def test_something(slurm, tmp_path):
        job = slurm.sbatch("--array=0-3%2", "--output", str(tmp_path / "%A_%a.log"), script)
        slurm.wait_done(job)
        subprocess.run(["squeue"], env=slurm.env)  # every SLURM command honours SLURM_CONF in slurm.env

`slurm` has no accounting (`sacct` answers "Slurm accounting storage is disabled"); `slurm_accounting` keeps
accounting in slurmdbd backed by its own MariaDB server. Both can be alive at once (own folders, own ports).

What runs, all under one folder in /tmp (`cluster.root`, removed at the end unless DRIVEKIT_SLURM_KEEP=1):
  munged     as the munge user, its own key and socket (`AuthInfo=socket=...`), so a system munged, if any,
             is neither needed nor touched;
  mariadbd   as the mysql user, own datadir, socket and TCP port (accounting only);
  slurmdbd   -D, own port (accounting only); the cluster is registered with `sacctmgr -i add cluster`;
  slurmctld  -D and slurmd -D, SlurmUser=root, free ports found by binding.
The node declares `cpus` CPUs (default max(nproc, 8)) and `memory_mb` of memory whatever the machine has
(`SlurmdParameters=config_overrides`): proctrack/linuxproc and task/none bind nothing, so this only sets how
many tasks run at once; with DefMemPerCPU=256 a 1-CPU task takes 256 MB and the node runs `cpus` tasks at once.

Root is needed (slurmd runs jobs, munged/mariadbd run as their users). Without root or without the Debian
packages (`make test` installs them: slurm-wlm munge slurmdbd mariadb-server) the fixtures skip with the
reason; DRIVEKIT_REQUIRE_SLURM=1 (`make test` sets it as root with apt-get, as in CI) makes that a failure.

SLURM facts this cluster shows (slurm-wlm 22.05.8; tests/test_slurm_cluster.py checks them):
- A job starts within about a second of sbatch; throttled array tasks start as others end.
- Time limits are whole minutes (`--time=1` is the least); slurmctld checks limits and `--signal` times every
  ~30 s: a 1-minute job ends TIMEOUT 60-90 s after it starts, `--signal=B:USR1@50` arrives 10-40 s in.
  OverTimeLimit=0, KillWait=2 (SIGTERM to every process of the job, SIGKILL 2 s later).
- `scontrol requeue $SLURM_JOB_ID` from inside a job: it goes PENDING (Reason=BeginTime) and runs again with
  SLURM_RESTART_COUNT=1 after cred_expire+1 s: 11 s here (AuthInfo cred_expire=10), 121 s on a default cluster.
- MaxArraySize is read when slurmctld starts: `set_max_array_size(n)` / `max_array_size_set(n)` restart it
  (jobs live on). `--array` indices must be below it ("Invalid job array specification").
- sacct lags slurmctld by up to ~5 s: slurmctld sends job records to slurmdbd in batches, so a job that just
  started or ended may be missing from sacct or show an old state for a few seconds.
- Without accounting, ended jobs stay in `scontrol show job` / `squeue -t all` for MinJobAge (300 s).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

#: Commands the plain cluster needs, then the accounting one.
BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "sacct",
            "scancel")
ACCOUNTING_BINARIES = ("slurmdbd", "sacctmgr", "mariadbd", "mariadb-install-db", "mariadb")
#: Debian packages that hold them (what `make test` installs).
PACKAGES = "slurm-wlm munge slurmdbd mariadb-server"
#: Environment variables of an enclosing SLURM job or of the user that would change what a command does.
_SLURM_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SACCT_", "SINFO_", "SCANCEL_",
                       "SCONTROL_")
#: Every process the cluster starts (and every job it runs, through sbatch's exported environment) carries
#: MARKER=<cluster root>: that is how stop() finds what is left.
MARKER = "DRIVEKIT_SLURM_CLUSTER"
SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SlurmClusterError(RuntimeError):
    pass


def missing() -> list[str]:
    """Why a cluster cannot start here ([] when it can): not root, or commands not installed."""
    reasons = []
    if os.geteuid() != 0:
        reasons.append("the test SLURM cluster needs root (slurmd runs the jobs; munged and mariadbd run as "
                       "their own users)")
    path = f"{os.environ.get('PATH', '')}:{SBIN_PATH}"
    absent = [b for b in BINARIES + ACCOUNTING_BINARIES if shutil.which(b, path=path) is None]
    if absent:
        reasons.append(f"not installed: {' '.join(absent)} (Debian: apt-get install -y --no-install-recommends "
                       f"{PACKAGES}; `make test` does it as root)")
    for user in ("munge", "mysql"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            reasons.append(f"no '{user}' user (made by the Debian packages {PACKAGES})")
    return reasons


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """preexec_fn: the daemon gets SIGTERM when the test process dies (even by SIGKILL), so no test run can
    leave a cluster behind. Runs after Popen's setuid, so it survives the change of user."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"({path}: {e})"
    return "\n".join(text[-lines:])


def _memory_mb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 4096


def _process_id(pid: int) -> str:
    """pid and start time: names a process even after its pid is reused ("" once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f"{pid} {f.read().rsplit(')', 1)[1].split()[19]}"
    except (OSError, IndexError):
        return ""


def _sweep_stale(base_dir: str | Path | None) -> None:
    """Remove the folders of clusters whose test process died without stop() (SIGKILL): their daemons died
    with it (PR_SET_PDEATHSIG), their folders stayed. A live owner's folder is never touched."""
    for d in Path(base_dir or tempfile.gettempdir()).glob("drivekit-slurm-*"):
        try:
            owner = (d / "owner").read_text().split()
        except OSError:
            continue
        if len(owner) == 2 and owner[0].isdigit() and _process_id(int(owner[0])) != " ".join(owner):
            shutil.rmtree(d, ignore_errors=True)


class SlurmCluster:
    """One slurmctld + one slurmd (+ slurmdbd and MariaDB with accounting) under a fresh folder.

    `env`: the environment for every SLURM command and job (this process's environment without SLURM_*/
    SBATCH_* variables, plus SLURM_CONF, PATH with the sbin folders, and the cluster marker).
    """

    def __init__(self, accounting: bool = False, *, max_array_size: int = 1001, cpus: int | None = None,
                 memory_mb: int | None = None, def_mem_per_cpu: int = 256, name: str | None = None,
                 partitions: tuple[str, ...] = ("debug", "second"), base_dir: str | Path | None = None,
                 keep: bool | None = None, start_timeout: float = 120):
        self.accounting = accounting
        self.max_array_size = max_array_size
        self.cpus = cpus or max(os.cpu_count() or 1, 8)
        self.memory_mb = memory_mb or max(_memory_mb() * 9 // 10, self.cpus * def_mem_per_cpu)
        self.def_mem_per_cpu = def_mem_per_cpu
        self.partitions = partitions
        self.name = name or ("acct" if accounting else "plain")
        self.base_dir = base_dir
        self.keep = bool(int(os.environ.get("DRIVEKIT_SLURM_KEEP", "0") or "0")) if keep is None else keep
        self.start_timeout = start_timeout
        self.hostname = socket.gethostname().split(".")[0]
        self.root: Path | None = None
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}
        self.timings: dict[str, float] = {}
        self.env: dict[str, str] = {}
        self._db_password = os.urandom(12).hex()
        self._extra: dict[str, str] = {}
        self.kept: Path | None = None  # the folder stop() left in place (keep=True, or a failed start)

    # ---- paths
    @property
    def conf(self) -> Path:
        assert self.root is not None, "cluster not started"
        return self.root / "etc" / "slurm.conf"

    @property
    def partition(self) -> str:
        """The default partition."""
        return self.partitions[0]

    @property
    def munge_socket(self) -> Path:
        assert self.root is not None
        return self.root / "munge" / "munge.socket"

    # ---- life cycle
    def start(self) -> SlurmCluster:
        reasons = missing()
        if reasons:
            raise SlurmClusterError("; ".join(reasons))
        t0 = time.monotonic()
        _sweep_stale(self.base_dir)
        self.root = Path(tempfile.mkdtemp(prefix=f"drivekit-slurm-{self.name}-", dir=self.base_dir))
        self.root.chmod(0o755)  # munge and mysql must reach their folders
        (self.root / "owner").write_text(_process_id(os.getpid()))
        for sub in ("etc", "log", "state", "spool", "run"):
            (self.root / sub).mkdir()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(_SLURM_ENV_PREFIXES)}
        self.env.update(SLURM_CONF=str(self.conf), PATH=f"{SBIN_PATH}:{os.environ.get('PATH', '')}",
                        **{MARKER: str(self.root)})
        try:
            self._start_munge()
            self.timings["munged"] = time.monotonic() - t0
            if self.accounting:
                self._start_mariadb()
                self.timings["mariadb"] = time.monotonic() - t0
            self.ports["slurmctld"] = free_port()
            self.ports["slurmd"] = free_port()
            if self.accounting:
                self.ports["slurmdbd"] = free_port()
            self._write_conf()
            if self.accounting:
                self._start_slurmdbd()
                self.timings["slurmdbd"] = time.monotonic() - t0
            self._start_slurmctld()
            self.timings["slurmctld"] = time.monotonic() - t0
            self._spawn("slurmd", ["slurmd", "-D", "-N", self.hostname, "-f", str(self.conf)])
            self._wait("the node is idle", self._node_idle, "slurmd")
            self.timings["total"] = time.monotonic() - t0
        except Exception as e:
            logs = self.logs()
            self.stop(keep=True)
            raise SlurmClusterError(f"the test SLURM cluster did not start: {e}\n(files kept in {self.kept})\n"
                                    f"{logs}") from e
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, keep: bool | None = None) -> list[str]:
        """Cancel every job, stop every process this cluster started (by pid: slurmd, slurmctld, slurmdbd,
        mariadbd, munged) and any job process left, then remove the folder. Returns what had to be killed
        by force (empty when all stopped cleanly). Idempotent."""
        if self.root is None:
            return []
        forced: list[str] = []
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            self.run("scancel", "--full", "--user", "root", check=False, timeout=15)
            with contextlib.suppress(SlurmClusterError):
                self._wait_for(lambda: not self.run("squeue", "-h", "-o", "%i", check=False).stdout.strip(), 15,
                               "the jobs to end")
        for name in ("slurmd", "slurmctld", "slurmdbd", "mariadb", "munged"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
                forced.append(f"{name} (pid {proc.pid})")
        forced += self._kill_leftovers()
        self.procs.clear()
        root, self.root = self.root, None
        if not (self.keep if keep is None else keep):
            shutil.rmtree(root, ignore_errors=True)
        else:
            self.kept = root
        return forced

    def leftovers(self) -> list[int]:
        """Pids of live processes that carry this cluster's marker (daemons, slurmstepd, job processes)."""
        if self.root is None:
            return []
        mine = {os.getpid(), os.getppid()}
        needle = f"{MARKER}={self.root}\0".encode()
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in mine:
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    environ = f.read() + b"\0"
                with open(f"/proc/{entry}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if needle in environ and state != "Z":
                pids.append(int(entry))
        return pids

    def _kill_leftovers(self) -> list[str]:
        forced = []
        for _ in range(3):
            pids = self.leftovers()
            if not pids:
                break
            for pid in pids:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                    os.kill(pid, signal.SIGKILL)
                    forced.append(f"{cmd} (pid {pid})")
                except OSError:
                    pass
            time.sleep(0.2)
        return forced

    # ---- commands
    def run(self, *args: str | Path, check: bool = True, timeout: float = 60,
            env: dict | None = None) -> subprocess.CompletedProcess:
        """A command with the cluster's environment (`env` on top); text output."""
        proc = subprocess.run([str(a) for a in args], env={**self.env, **(env or {})}, capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise SlurmClusterError(f"{' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stdout}"
                                    f"{proc.stderr}")
        return proc

    def sbatch(self, *args: str | Path, env: dict | None = None) -> str:
        """sbatch --parsable ARGS: the job id."""
        return self.run("sbatch", "--parsable", *args, env=env).stdout.strip().split(";")[0]

    def active(self, job: str) -> list[str]:
        """Lines "JOBID STATE" of the job's tasks that have not ended (pending, running, completing...)."""
        out = self.run("squeue", "-h", "-r", "-j", job, "-o", "%i %T", check=False)
        if out.returncode != 0:
            if "Invalid job id" in out.stderr:
                return []
            raise SlurmClusterError(f"squeue -j {job}: {out.stderr}")
        return out.stdout.split("\n")[:-1] if out.stdout else []

    def wait_done(self, job: str, timeout: float = 120) -> None:
        """Until no task of `job` is pending or running (or the job is gone)."""
        self._wait_for(lambda: not self.active(job), timeout, f"job {job} to end")

    def show_job(self, job: str) -> list[dict[str, str]]:
        """`scontrol show job -o JOB` as one dict per record (array tasks each have one)."""
        out = self.run("scontrol", "-o", "show", "job", job).stdout
        return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in out.splitlines() if line.strip()]

    def config(self) -> dict[str, str]:
        """`scontrol show config` as a dict."""
        out = self.run("scontrol", "show", "config").stdout
        return {m[1]: m[2].strip() for m in re.finditer(r"^(\w+)\s+=\s?(.*)$", out, re.M)}

    def reconfigure(self, *, restart: bool = False, **settings) -> None:
        """Change slurm.conf settings (`KillWait=5`; `None` removes one added earlier), then `scontrol
        reconfigure`, or restart slurmctld when `restart` (some settings, MaxArraySize among them, are read
        only when slurmctld starts; jobs live on through the restart)."""
        for key, value in settings.items():
            if value is None:
                self._extra.pop(key, None)
            else:
                self._extra[key] = str(value)
        self._write_conf()
        if restart:
            self.restart_controller()
        else:
            self.run("scontrol", "reconfigure")
            self._wait("the node is up after reconfigure", lambda: self._node_idle(busy_ok=True), "slurmctld")

    def set_max_array_size(self, size: int) -> None:
        """MaxArraySize=size (array indices 0..size-1; slurmctld restarts to read it)."""
        self.max_array_size = int(size)
        self._write_conf()
        self.restart_controller()

    @contextlib.contextmanager
    def max_array_size_set(self, size: int):
        """`with cluster.max_array_size_set(5):` MaxArraySize=5 inside, the old value restored after."""
        old = self.max_array_size
        self.set_max_array_size(size)
        try:
            yield self
        finally:
            self.set_max_array_size(old)

    def restart_controller(self) -> None:
        """Stop slurmctld (SIGTERM, it saves its state) and start it again on the current slurm.conf; queued
        and running jobs carry on."""
        self.stop_controller()
        self.start_controller()

    def stop_controller(self) -> None:
        """Stop slurmctld by its pid (SIGTERM: it saves its state). Until start_controller, every SLURM command
        but sacct with accounting fails ("Unable to contact slurm controller") after MessageTimeout; slurmd
        goes on running the jobs it has."""
        proc = self.procs["slurmctld"]
        proc.terminate()
        proc.wait(timeout=30)

    def start_controller(self) -> None:
        """Start slurmctld again (after stop_controller); its saved jobs carry on."""
        self._start_slurmctld()
        # slurmd rereads slurm.conf and registers now (else the node stays UNKNOWN for ~4 s, jobs waiting).
        self.run("scontrol", "reconfigure")
        self._wait("the node back after the restart", lambda: self._node_idle(busy_ok=True), "slurmctld", "slurmd")

    def _start_slurmctld(self) -> None:
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._wait("slurmctld answers", lambda: "is UP" in self.run("scontrol", "ping", check=False).stdout,
                   "slurmctld")
        if self.accounting:
            self._wait("slurmctld registered with slurmdbd", self._registered, "slurmctld", "slurmdbd")

    def logs(self, lines: int = 25) -> str:
        """The tail of every daemon log: for a failure message."""
        if self.root is None:
            return ""
        parts = []
        for path in sorted([*(self.root / "log").glob("*"), *(self.root / "mariadb").glob("*.log")]):
            parts.append(f"--- {path.name}\n{_tail(path, lines)}")
        return "\n".join(parts)

    # ---- internals
    def _spawn(self, name: str, args: list[str], user: str | None = None, cwd: Path | None = None) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")  # noqa: SIM115 (the child keeps it)
        try:
            self.procs[name] = subprocess.Popen(
                args, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                user=user, group=pwd.getpwnam(user).pw_gid if user else None, extra_groups=[] if user else None,
                start_new_session=True, preexec_fn=_die_with_parent, cwd=cwd or self.root)
        finally:
            log.close()

    def _wait(self, what: str, ready, *daemons: str) -> None:
        def check():
            for d in daemons:
                proc = self.procs.get(d)
                if proc is not None and proc.poll() is not None:
                    raise SlurmClusterError(f"{d} exited with {proc.returncode} while waiting for {what}")
            return ready()
        self._wait_for(check, self.start_timeout, what)

    @staticmethod
    def _wait_for(predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            if predicate():
                return
            if time.monotonic() > deadline:
                raise SlurmClusterError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def _node_idle(self, busy_ok: bool = False) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%T", check=False).stdout.split()
        states = ("idle", "mixed", "allocated", "completing") if busy_ok else ("idle",)
        return bool(out) and all(s in states for s in out)

    def _registered(self) -> bool:
        out = self.run("sacctmgr", "-n", "-P", "show", "cluster", self.name, "format=controlport", check=False)
        return out.stdout.strip() == str(self.ports["slurmctld"])

    def _start_munge(self) -> None:
        d = self.root / "munge"
        d.mkdir()
        shutil.chown(d, "munge", "munge")
        d.chmod(0o755)
        key = d / "munge.key"
        subprocess.run(["mungekey", "--create", "--keyfile", str(key)], check=True, capture_output=True,
                       user="munge", group=pwd.getpwnam("munge").pw_gid, extra_groups=[], env=self.env)
        self._spawn("munged", ["munged", "--foreground", f"--socket={self.munge_socket}", f"--key-file={key}",
                               f"--log-file={d / 'munged.log'}", f"--pid-file={d / 'munged.pid'}",
                               f"--seed-file={d / 'munged.seed'}", "--num-threads=4"], user="munge", cwd=d)

        def ready() -> bool:
            if not self.munge_socket.exists():
                return False
            enc = subprocess.run(["munge", "-n", "-S", str(self.munge_socket)], capture_output=True, env=self.env)
            if enc.returncode != 0:
                return False
            dec = subprocess.run(["unmunge", "-S", str(self.munge_socket)], input=enc.stdout, capture_output=True,
                                 env=self.env)
            return dec.returncode == 0
        self._wait("munged answers", ready, "munged")

    def _start_mariadb(self) -> None:
        d = self.root / "mariadb"
        data = d / "data"
        data.mkdir(parents=True)
        shutil.chown(d, "mysql", "mysql")
        shutil.chown(data, "mysql", "mysql")
        self.ports["mariadb"] = free_port()
        common = ["--no-defaults", f"--datadir={data}", "--user=mysql"]
        proc = subprocess.run(["mariadb-install-db", *common, "--auth-root-authentication-method=socket",
                               "--skip-test-db", "--skip-name-resolve", "--innodb-log-file-size=8M",
                               "--innodb-buffer-pool-size=32M"],
                              capture_output=True, text=True, env=self.env, cwd=d, timeout=180)
        if proc.returncode != 0:
            raise SlurmClusterError(f"mariadb-install-db exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
        sock = d / "mysqld.sock"
        self._mariadb_socket = sock
        self._spawn("mariadb", [shutil.which("mariadbd", path=self.env["PATH"]) or "mariadbd", *common,
                                f"--socket={sock}", f"--port={self.ports['mariadb']}", "--bind-address=127.0.0.1",
                                f"--pid-file={d / 'mariadbd.pid'}", f"--log-error={d / 'mariadb.log'}",
                                "--skip-name-resolve", "--skip-log-bin", "--innodb-buffer-pool-size=128M",
                                "--innodb-log-file-size=64M", "--innodb-flush-log-at-trx-commit=0",
                                "--innodb-doublewrite=0", "--innodb-lock-wait-timeout=900",
                                "--innodb-use-native-aio=0",  # io_uring/libaio may be refused in containers
                                "--max-connections=100"], user="mysql", cwd=d)

        def sql(statement: str) -> subprocess.CompletedProcess:
            return subprocess.run(["mariadb", "--no-defaults", f"--socket={sock}", "-u", "root", "-e", statement],
                                  capture_output=True, text=True, env=self.env, timeout=30)
        self._wait("mariadbd answers", lambda: sock.exists() and sql("SELECT 1").returncode == 0, "mariadb")
        out = sql(f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{self._db_password}'; "
                  "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;")
        if out.returncode != 0:
            raise SlurmClusterError(f"creating the slurm database user failed:\n{out.stderr}")

    def _start_slurmdbd(self) -> None:
        conf = self.conf.parent / "slurmdbd.conf"  # slurmdbd reads it beside $SLURM_CONF
        conf.write_text("\n".join([
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "DbdHost=localhost",
            "DbdAddr=127.0.0.1",
            f"DbdPort={self.ports['slurmdbd']}",
            "SlurmUser=root",
            "DebugLevel=info",
            f"LogFile={self.root / 'log' / 'slurmdbd.log'}",
            f"PidFile={self.root / 'run' / 'slurmdbd.pid'}",
            "StorageType=accounting_storage/mysql",
            "StorageHost=127.0.0.1",
            f"StoragePort={self.ports['mariadb']}",
            "StorageUser=slurm",
            f"StoragePass={self._db_password}",
            "StorageLoc=slurm_acct_db",
            "",
        ]))
        conf.chmod(0o600)
        self._spawn("slurmdbd", ["slurmdbd", "-D"])

        def ready() -> bool:
            out = self.run("sacctmgr", "-n", "-P", "show", "cluster", "format=cluster", check=False, timeout=30)
            return out.returncode == 0
        self._wait("slurmdbd answers", ready, "slurmdbd")
        self.run("sacctmgr", "-i", "add", "cluster", self.name, timeout=60)
        # Not enforced (no AccountingStorageEnforce), but users and scripts that pass --account find one.
        self.run("sacctmgr", "-i", "add", "account", "drivekit", f"cluster={self.name}",
                 "description=drivekit tests", "organization=drivekit", timeout=60)
        self.run("sacctmgr", "-i", "add", "user", "root", "account=drivekit", f"cluster={self.name}",
                 "defaultaccount=drivekit", timeout=60, check=False)

    def _write_conf(self) -> None:
        r = self.root
        lines = [
            f"ClusterName={self.name}",
            f"SlurmctldHost={self.hostname}(127.0.0.1)",
            f"SlurmctldPort={self.ports['slurmctld']}",
            f"SlurmdPort={self.ports['slurmd']}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # cred_expire: a requeued job may start again cred_expire+1 s after the requeue (default 120).
            f"AuthInfo=socket={self.munge_socket},cred_expire=10",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool' / 'slurmd-%n'}",
            f"SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'run' / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SwitchType=switch/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            f"DefMemPerCPU={self.def_mem_per_cpu}",
            "SlurmdParameters=config_overrides",
            f"MaxArraySize={self.max_array_size}",
            f"MaxJobCount={max(10000, self.max_array_size * 4)}",
            "SchedulerType=sched/backfill",
            # sched_interval: the main loop also starts jobs whose BeginTime passed (a requeued job), else 60 s.
            "SchedulerParameters=bf_interval=1,sched_interval=1,sched_min_interval=0,batch_sched_delay=0",
            "PriorityType=priority/basic",
            "ReturnToService=2",
            "JobRequeue=1",
            "KillWait=2",
            "OverTimeLimit=0",
            "MinJobAge=300",
            "InactiveLimit=0",
            "MessageTimeout=10",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            "UnkillableStepTimeout=30",
            "MailProg=/bin/true",
            "JobCompType=jobcomp/none",
        ]
        if self.accounting:
            lines += [
                "AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=localhost",
                f"AccountingStoragePort={self.ports['slurmdbd']}",
                # With munge, the "password" is the munge socket for talking to slurmdbd (else the default one).
                f"AccountingStoragePass={self.munge_socket}",
                "JobAcctGatherType=jobacct_gather/linux",
                "JobAcctGatherFrequency=30",
            ]
        else:
            lines += ["AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none"]
        lines = [line for line in lines if line.split("=", 1)[0] not in self._extra]
        lines += [f"{k}={v}" for k, v in self._extra.items()]
        lines.append(f"NodeName={self.hostname} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.memory_mb} "
                     "State=UNKNOWN")
        for i, part in enumerate(self.partitions):
            lines.append(f"PartitionName={part} Nodes=ALL Default={'YES' if i == 0 else 'NO'} MaxTime=INFINITE "
                         "State=UP")
        tmp = self.conf.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(self.conf)


def path_without_slurm(folder: Path) -> str:
    """A PATH holding what the bin/ wrappers need and no SLURM command (for the "no sbatch" cases)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("bash", "env", "dirname", "realpath", "sed"):
        (folder / name).symlink_to(shutil.which(name))
    return str(folder)


# ---- pytest fixtures: one cluster of each kind per test session, however many modules import them.
_shared: dict[str, SlurmCluster] = {}


def _session_cluster(accounting: bool) -> SlurmCluster:
    key = "accounting" if accounting else "plain"
    cluster = _shared.get(key)
    if cluster is not None and cluster.root is not None:
        return cluster
    reasons = missing()
    if reasons:
        message = "; ".join(reasons)
        if os.environ.get("DRIVEKIT_REQUIRE_SLURM") == "1":
            pytest.fail(f"DRIVEKIT_REQUIRE_SLURM=1 but {message}", pytrace=False)
        pytest.skip(message)
    cluster = SlurmCluster(accounting=accounting).start()
    _shared[key] = cluster
    return cluster


def _stop_shared(key: str) -> None:
    cluster = _shared.pop(key, None)
    if cluster is not None:
        forced = cluster.stop()
        if forced:
            print(f"slurm_cluster: had to kill {forced}")


@pytest.fixture(scope="session")
def slurm():
    """A running one-node SLURM cluster without accounting (a SlurmCluster)."""
    yield _session_cluster(accounting=False)
    _stop_shared("plain")


@pytest.fixture(scope="session")
def slurm_accounting():
    """A running one-node SLURM cluster with accounting: slurmdbd and MariaDB (a SlurmCluster)."""
    yield _session_cluster(accounting=True)
    _stop_shared("accounting")
