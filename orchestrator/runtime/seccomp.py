"""Our own seccomp profile for the profiling container: Docker's default, plus perf.

Docker's default profile allows `perf_event_open` only to a container holding
CAP_SYS_ADMIN (Engine 20.10) or CAP_PERFMON (newer engines). CAP_SYS_ADMIN also switches
on the profile's block for `unshare`, `mount`, `setns`, `bpf` and namespace-creating
`clone`, so a workload could make a user namespace and be root with every capability in
it. This profile is the default's allow list with `perf_event_open` added and nothing
else: no capability-conditional block at all (the container drops every capability, so
none of them could apply), namespace flags filtered out of `clone` as the default does
for a container without CAP_SYS_ADMIN.

The lists are facts about moby's `profiles/seccomp/default.json` (Engine 25 and later,
which also dropped `io_uring_*`: rings run syscalls that seccomp never sees), written
down here as data. The JSON goes to the Engine as the `seccomp=<profile JSON>` security
option, which is what `docker run --security-opt seccomp=<file>` sends after reading the
file. An engine that does not know a syscall name skips it (runc resolves names on the
host), so one profile serves 20.10 and current engines alike.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PERF_PROFILE = "orchestrator-perf"
# The one thing perf needs that Docker's default denies. Which events it may then open is
# still the kernel's call (perf_event_paranoid): without capabilities, only counting
# its own processes' user space (cpu-clock:u), never the kernel or other processes.
PERF_SYSCALLS = ("perf_event_open",)

# Docker's default: allowed for everyone, whatever the capabilities.
DOCKER_DEFAULT_ALLOWED = (
    "accept", "accept4", "access", "adjtimex", "alarm", "bind", "brk", "capget", "capset",
    "chdir", "chmod", "chown", "chown32", "clock_adjtime", "clock_adjtime64",
    "clock_getres", "clock_getres_time64", "clock_gettime", "clock_gettime64",
    "clock_nanosleep", "clock_nanosleep_time64", "close", "close_range", "connect",
    "copy_file_range", "creat", "dup", "dup2", "dup3", "epoll_create", "epoll_create1",
    "epoll_ctl", "epoll_ctl_old", "epoll_pwait", "epoll_pwait2", "epoll_wait",
    "epoll_wait_old", "eventfd", "eventfd2", "execve", "execveat", "exit", "exit_group",
    "faccessat", "faccessat2", "fadvise64", "fadvise64_64", "fallocate", "fanotify_mark",
    "fchdir", "fchmod", "fchmodat", "fchown", "fchown32", "fchownat", "fcntl", "fcntl64",
    "fdatasync", "fgetxattr", "flistxattr", "flock", "fork", "fremovexattr", "fsetxattr",
    "fstat", "fstat64", "fstatat64", "fstatfs", "fstatfs64", "fsync", "ftruncate",
    "ftruncate64", "futex", "futex_time64", "futex_waitv", "futimesat", "getcpu",
    "getcwd", "getdents", "getdents64", "getegid", "getegid32", "geteuid", "geteuid32",
    "getgid", "getgid32", "getgroups", "getgroups32", "getitimer", "getpeername",
    "getpgid", "getpgrp", "getpid", "getppid", "getpriority", "getrandom", "getresgid",
    "getresgid32", "getresuid", "getresuid32", "getrlimit", "get_robust_list",
    "getrusage", "getsid", "getsockname", "getsockopt", "get_thread_area", "gettid",
    "gettimeofday", "getuid", "getuid32", "getxattr", "inotify_add_watch",
    "inotify_init", "inotify_init1", "inotify_rm_watch", "io_cancel", "ioctl",
    "io_destroy", "io_getevents", "io_pgetevents", "io_pgetevents_time64", "ioprio_get",
    "ioprio_set", "io_setup", "io_submit", "ipc", "kill", "landlock_add_rule",
    "landlock_create_ruleset", "landlock_restrict_self", "lchown", "lchown32",
    "lgetxattr", "link", "linkat", "listen", "listxattr", "llistxattr", "_llseek",
    "lremovexattr", "lseek", "lsetxattr", "lstat", "lstat64", "madvise", "membarrier",
    "memfd_create", "memfd_secret", "mincore", "mkdir", "mkdirat", "mknod", "mknodat",
    "mlock", "mlock2", "mlockall", "mmap", "mmap2", "mprotect", "mq_getsetattr",
    "mq_notify", "mq_open", "mq_timedreceive", "mq_timedreceive_time64", "mq_timedsend",
    "mq_timedsend_time64", "mq_unlink", "mremap", "msgctl", "msgget", "msgrcv", "msgsnd",
    "msync", "munlock", "munlockall", "munmap", "name_to_handle_at", "nanosleep",
    "newfstatat", "_newselect", "open", "openat", "openat2", "pause", "pidfd_open",
    "pidfd_send_signal", "pipe", "pipe2", "pkey_alloc", "pkey_free", "pkey_mprotect",
    "poll", "ppoll", "ppoll_time64", "prctl", "pread64", "preadv", "preadv2",
    "prlimit64", "process_mrelease", "pselect6", "pselect6_time64", "pwrite64",
    "pwritev", "pwritev2", "read", "readahead", "readlink", "readlinkat", "readv", "recv",
    "recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg", "remap_file_pages",
    "removexattr", "rename", "renameat", "renameat2", "restart_syscall", "rmdir", "rseq",
    "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo",
    "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_sigtimedwait_time64",
    "rt_tgsigqueueinfo", "sched_getaffinity", "sched_getattr", "sched_getparam",
    "sched_get_priority_max", "sched_get_priority_min", "sched_getscheduler",
    "sched_rr_get_interval", "sched_rr_get_interval_time64", "sched_setaffinity",
    "sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield", "seccomp",
    "select", "semctl", "semget", "semop", "semtimedop", "semtimedop_time64", "send",
    "sendfile", "sendfile64", "sendmmsg", "sendmsg", "sendto", "setfsgid", "setfsgid32",
    "setfsuid", "setfsuid32", "setgid", "setgid32", "setgroups", "setgroups32",
    "setitimer", "setpgid", "setpriority", "setregid", "setregid32", "setresgid",
    "setresgid32", "setresuid", "setresuid32", "setreuid", "setreuid32", "setrlimit",
    "set_robust_list", "setsid", "setsockopt", "set_thread_area", "set_tid_address",
    "setuid", "setuid32", "setxattr", "shmat", "shmctl", "shmdt", "shmget", "shutdown",
    "sigaltstack", "signalfd", "signalfd4", "sigprocmask", "sigreturn", "socketcall",
    "socketpair", "splice", "stat", "stat64", "statfs", "statfs64", "statx", "symlink",
    "symlinkat", "sync", "sync_file_range", "syncfs", "sysinfo", "tee", "tgkill", "time",
    "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
    "timer_gettime64", "timer_settime", "timer_settime64", "timerfd_create",
    "timerfd_gettime", "timerfd_gettime64", "timerfd_settime", "timerfd_settime64",
    "times", "tkill", "truncate", "truncate64", "ugetrlimit", "umask", "uname", "unlink",
    "unlinkat", "utime", "utimensat", "utimensat_time64", "utimes", "vfork", "vmsplice",
    "wait4", "waitid", "waitpid", "write", "writev",
)  # fmt: skip

# Docker's default allows these only on some architectures (Docker's names for them).
DOCKER_DEFAULT_BY_ARCH = (
    (("sync_file_range2", "swapcontext"), ("ppc64le",)),
    (
        (
            "arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2", "breakpoint",
            "cacheflush", "set_tls",
        ),
        ("arm", "arm64"),
    ),
    (("arch_prctl",), ("amd64", "x32")),
    (("modify_ldt",), ("amd64", "x32", "x86")),
    (("s390_pci_mmio_read", "s390_pci_mmio_write", "s390_runtime_instr"), ("s390", "s390x")),
    (("riscv_flush_icache",), ("riscv64",)),
)  # fmt: skip

# Each native architecture and the compat ones a process on it may switch to.
ARCH_MAP = (
    ("SCMP_ARCH_X86_64", ("SCMP_ARCH_X86", "SCMP_ARCH_X32")),
    ("SCMP_ARCH_AARCH64", ("SCMP_ARCH_ARM",)),
    ("SCMP_ARCH_MIPS64", ("SCMP_ARCH_MIPS", "SCMP_ARCH_MIPS64N32")),
    ("SCMP_ARCH_MIPS64N32", ("SCMP_ARCH_MIPS", "SCMP_ARCH_MIPS64")),
    ("SCMP_ARCH_MIPSEL64", ("SCMP_ARCH_MIPSEL", "SCMP_ARCH_MIPSEL64N32")),
    ("SCMP_ARCH_MIPSEL64N32", ("SCMP_ARCH_MIPSEL", "SCMP_ARCH_MIPSEL64")),
    ("SCMP_ARCH_S390X", ("SCMP_ARCH_S390",)),
    ("SCMP_ARCH_RISCV64", ()),
)

# CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET: `clone` is allowed only with
# none of them set, as Docker's default does for a container without CAP_SYS_ADMIN.
CLONE_NAMESPACE_FLAGS = 0x7E020000
AF_VSOCK = 40  # the one socket family Docker's default refuses
ENOSYS = 38  # clone3 says "not implemented": libc falls back to the filtered clone
EPERM = 1
# The personas Docker's default lets `personality` set (Linux, PER_LINUX32, and their
# UNAME26 variants; 0xffffffff only queries).
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)

# Never allowed here, whatever Docker's default does with capabilities: new namespaces,
# mounts, joining namespaces, eBPF, kernel keyrings, modules, io_uring (it runs syscalls
# that seccomp never sees). A unit test holds the profile to this.
NEVER_ALLOWED = (
    "unshare", "setns", "mount", "umount", "umount2", "mount_setattr", "move_mount",
    "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "pivot_root", "chroot", "bpf",
    "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module",
    "kexec_load", "kexec_file_load", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "open_by_handle_at", "userfaultfd", "kcmp", "pidfd_getfd",
    "swapon", "swapoff", "reboot", "acct", "lookup_dcookie", "quotactl", "sethostname",
    "setdomainname", "syslog", "iopl", "ioperm", "settimeofday", "clock_settime", "clone3",
)  # fmt: skip


def _allow(names: Sequence[str], **rule: object) -> dict[str, object]:
    return {"names": sorted(names), "action": "SCMP_ACT_ALLOW", **rule}


def _arg(index: int, op: str, value: int) -> list[dict[str, object]]:
    return [{"index": index, "value": value, "valueTwo": 0, "op": op}]


def perf_profile() -> dict[str, object]:
    """What Docker's default profile gives a container with no capabilities, plus
    `perf_event_open`: nothing else added, nothing taken away."""
    by_arch = [_allow(names, includes={"arches": list(a)}) for names, a in DOCKER_DEFAULT_BY_ARCH]
    syscalls: list[dict[str, object]] = [
        _allow([*DOCKER_DEFAULT_ALLOWED, *PERF_SYSCALLS]),
        # Tracing one's own processes, as the default allows from kernel 4.8 on (where
        # ptrace can no longer be used to slip past seccomp).
        _allow(["process_vm_readv", "process_vm_writev", "ptrace"], includes={"minKernel": "4.8"}),
        _allow(["socket"], args=_arg(0, "SCMP_CMP_NE", AF_VSOCK)),
        *(_allow(["personality"], args=_arg(0, "SCMP_CMP_EQ", p)) for p in PERSONALITIES),
        *by_arch,
        # No namespace flag in clone's flags (s390 swaps its first two arguments).
        _allow(
            ["clone"],
            args=_arg(0, "SCMP_CMP_MASKED_EQ", CLONE_NAMESPACE_FLAGS),
            excludes={"arches": ["s390", "s390x"]},
        ),
        _allow(
            ["clone"],
            args=_arg(1, "SCMP_CMP_MASKED_EQ", CLONE_NAMESPACE_FLAGS),
            includes={"arches": ["s390", "s390x"]},
        ),
        # Its flags live in memory seccomp cannot read: refuse it as unimplemented, and
        # libc falls back to the filtered clone.
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS},
    ]
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": EPERM,
        "archMap": [
            {"architecture": arch, "subArchitectures": list(subs)} for arch, subs in ARCH_MAP
        ],
        "syscalls": syscalls,
    }


def profile_json(name: str) -> str:
    """The profile as the Engine takes it (`seccomp=<this>`): compact, stable bytes."""
    if name != PERF_PROFILE:
        raise ValueError(f"unknown seccomp profile {name!r}")
    return json.dumps(perf_profile(), sort_keys=True, separators=(",", ":"))


@contextmanager
def profile_file(name: str | None, *, inline: bool) -> Iterator[str | None]:
    """Where an engine that reads `seccomp=` as a path (Podman) finds profile `name`: a
    file in a folder of this process's own, there while the container is made (the
    engine reads it then). None where the option takes the JSON itself (`inline`), or
    where no profile is asked for."""
    if name is None or inline:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="orchestrator-seccomp-") as folder:
        path = Path(folder) / f"{name}.json"
        path.write_text(profile_json(name))
        path.chmod(0o644)  # a rootful service reads it as root; rootless as this user
        yield str(path)


def added_syscalls(name: str) -> tuple[str, ...]:
    """What profile `name` allows beyond Docker's default for a capability-less container."""
    if name != PERF_PROFILE:
        raise ValueError(f"unknown seccomp profile {name!r}")
    return PERF_SYSCALLS


def profile_sha256(name: str) -> str:
    return hashlib.sha256(profile_json(name).encode()).hexdigest()


def allowed_syscalls(profile: Mapping[str, Any]) -> set[str]:
    """Every syscall some rule of `profile` allows, under any condition."""
    return {
        str(name)
        for rule in profile["syscalls"]
        if rule["action"] == "SCMP_ACT_ALLOW"
        for name in rule["names"]
    }
