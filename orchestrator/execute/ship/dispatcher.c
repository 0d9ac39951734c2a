/* The dispatcher: one x86_64 `bin/<binary>` that executes the best CPU level built beside it,
 * `<dir of its real path>/../libexec/<binary>/<binary>-x86-64-vN`, with argv and the
 * environment unchanged.
 *
 * Freestanding on purpose: no libc, no loader, no relocations. It runs before the program
 * on every start, so it must cost next to nothing, and it must run on any x86_64 Linux
 * whatever its libc (musl, an old glibc, none at all in a scratch container).
 *
 * The level is the highest whose instructions the CPU has AND whose register state the
 * kernel saves (XCR0 via xgetbv): a CPU with AVX-512 under a kernel or hypervisor that
 * does not enable ZMM state must not run the v4 binary.
 *
 * ORCHESTRATOR_LEVEL=v1|v2|v3|v4 forces a level; ORCHESTRATOR_LEVEL=show prints what it
 * would run and exits 0. Exit statuses of its own (the program's are passed through by exec):
 *   123  its own path could not be read (/proc not mounted)
 *   124  ORCHESTRATOR_LEVEL holds something else
 *   125  the forced level is one this CPU lacks
 *   126  the chosen binary exists but could not be executed
 *   127  no binary for this CPU's level (or the forced one) is present
 */

#define SYS_write 1
#define SYS_access 21
#define SYS_execve 59
#define SYS_exit_group 231
#define SYS_readlink 89
#define X_OK 1

#define PATH_CAP 4096

enum { STATUS_NO_SELF = 123, STATUS_BAD_LEVEL = 124, STATUS_CPU_LACKS = 125 };
enum { STATUS_EXEC_FAILED = 126, STATUS_MISSING = 127 };

/* Level i's file suffix; index 0 is "none": a CPU below x86-64 v1 does not exist, but a
 * CPU below a release's lowest level does. */
static const char *const level_names[] = {"", "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"};
#define TOP_LEVEL 4

__asm__(
    ".text\n"
    ".global _start\n"
    "_start:\n"
    "  xor %ebp, %ebp\n"
    "  mov %rsp, %rdi\n" /* argc, argv..., 0, envp..., 0 */
    "  and $-16, %rsp\n"
    "  call dispatch\n"
    "  hlt\n");

static long syscall3(long number, long a, long b, long c) {
    long result;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(number), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return result;
}

static unsigned long length(const char *text) {
    unsigned long n = 0;
    while (text[n]) n++;
    return n;
}

static void put(int fd, const char *text) { syscall3(SYS_write, fd, (long)text, (long)length(text)); }

__attribute__((noreturn)) static void leave(int status) {
    for (;;) syscall3(SYS_exit_group, status, 0, 0);
}

__attribute__((noreturn)) static void fail(int status, const char *a, const char *b, const char *c) {
    put(2, "orchestrator dispatcher: ");
    put(2, a);
    put(2, b);
    put(2, c);
    put(2, "\n");
    leave(status);
}

static int same(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

static void cpuid(unsigned leaf, unsigned sub, unsigned out[4]) {
    __asm__ volatile("cpuid" : "=a"(out[0]), "=b"(out[1]), "=c"(out[2]), "=d"(out[3]) : "a"(leaf), "c"(sub));
}

static int has(unsigned value, unsigned bits) { return (value & bits) == bits; }

/* The x86-64 psABI levels, as cumulative as the psABI defines them. */
static int cpu_level(void) {
    unsigned basic[4], leaf1[4], leaf7[4] = {0, 0, 0, 0}, extended[4], ext1[4] = {0, 0, 0, 0};
    cpuid(0, 0, basic);
    if (basic[0] < 1) return 1;
    cpuid(1, 0, leaf1);
    if (basic[0] >= 7) cpuid(7, 0, leaf7);
    cpuid(0x80000000u, 0, extended);
    if (extended[0] >= 0x80000001u) cpuid(0x80000001u, 0, ext1);
    unsigned ecx1 = leaf1[2], ebx7 = leaf7[1];
    /* SSE3, SSSE3, CX16, SSE4.1, SSE4.2, POPCNT; LAHF/SAHF in 64-bit mode */
    unsigned v2 = 1u << 0 | 1u << 9 | 1u << 13 | 1u << 19 | 1u << 20 | 1u << 23;
    if (!has(ecx1, v2) || !has(ext1[2], 1u << 0)) return 1;
    /* FMA, MOVBE, OSXSAVE, AVX, F16C; BMI1, AVX2, BMI2; LZCNT */
    unsigned v3_ecx = 1u << 12 | 1u << 22 | 1u << 27 | 1u << 28 | 1u << 29;
    unsigned v3_ebx7 = 1u << 3 | 1u << 5 | 1u << 8;
    if (!has(ecx1, v3_ecx) || !has(ebx7, v3_ebx7) || !has(ext1[2], 1u << 5)) return 2;
    unsigned low, high;
    __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0)); /* OSXSAVE checked above */
    (void)high;
    if (!has(low, 0x6)) return 2; /* the kernel saves XMM and YMM state */
    /* AVX512F, AVX512DQ, AVX512CD, AVX512BW, AVX512VL; opmask, ZMM_Hi256, Hi16_ZMM state */
    unsigned v4_ebx7 = 1u << 16 | 1u << 17 | 1u << 28 | 1u << 30 | 1u << 31;
    if (!has(ebx7, v4_ebx7) || !has(low, 0xe6)) return 3;
    return 4;
}

static char *append(char *at, const char *end, const char *text) {
    while (*text) {
        if (at >= end) fail(STATUS_MISSING, "path too long: ", text, "");
        *at++ = *text++;
    }
    *at = 0;
    return at;
}

/* `<prefix>/libexec/<name>/<name>-<level>` into path; prefix is the folder above bin/. */
static void level_path(char *path, const char *prefix, const char *name, int level) {
    char *end = path + PATH_CAP - 1, *at = append(path, end, prefix);
    at = append(at, end, "/libexec/");
    at = append(at, end, name);
    at = append(at, end, "/");
    at = append(at, end, name);
    at = append(at, end, "-");
    append(at, end, level_names[level]);
}

static int present(const char *path) { return syscall3(SYS_access, (long)path, X_OK, 0) == 0; }

__attribute__((noreturn, used)) void dispatch(long *stack) {
    long argc = stack[0];
    char **argv = (char **)(stack + 1), **envp = argv + argc + 1;
    const char *wanted = 0;
    for (char **e = envp; *e; e++) {
        const char *key = "ORCHESTRATOR_LEVEL=", *v = *e;
        while (*key && *key == *v) key++, v++;
        if (!*key) wanted = v;
    }
    int forced = 0, show = 0;
    if (wanted && *wanted) {
        if (same(wanted, "show")) show = 1;
        else if (wanted[0] == 'v' && wanted[1] >= '1' && wanted[1] <= '4' && !wanted[2])
            forced = wanted[1] - '0';
        else fail(STATUS_BAD_LEVEL, "ORCHESTRATOR_LEVEL=", wanted, " is none of v1, v2, v3, v4, show");
    }

    static char self[PATH_CAP], path[PATH_CAP];
    long got = syscall3(SYS_readlink, (long)"/proc/self/exe", (long)self, PATH_CAP - 1);
    if (got <= 0 || got >= PATH_CAP - 1) fail(STATUS_NO_SELF, "cannot read /proc/self/exe", "", "");
    self[got] = 0;
    /* self = <prefix>/bin/<name>: cut it into prefix and name (the real path: no links) */
    char *slash = self + got;
    while (slash > self && *slash != '/') slash--;
    const char *name = slash + 1;
    *slash = 0;
    while (slash > self && *slash != '/') slash--;
    *slash = 0;

    int cpu = cpu_level(), level = forced ? forced : cpu;
    if (forced > cpu) fail(STATUS_CPU_LACKS, "ORCHESTRATOR_LEVEL forces ", level_names[forced], ", which this CPU lacks");
    if (forced) {
        level_path(path, self, name, forced);
        if (!present(path)) fail(STATUS_MISSING, "ORCHESTRATOR_LEVEL forces a binary that is missing: ", path, "");
    } else {
        while (level > 0) {
            level_path(path, self, name, level);
            if (present(path)) break;
            level--;
        }
        if (level == 0) {
            level_path(path, self, name, cpu);
            fail(STATUS_MISSING, "no binary for this CPU's level or below: ", path, "");
        }
    }
    if (show) {
        put(1, "level=");
        put(1, level_names[level]);
        put(1, " cpu=");
        put(1, level_names[cpu]);
        put(1, " path=");
        put(1, path);
        put(1, "\n");
        leave(0);
    }
    long error = syscall3(SYS_execve, (long)path, (long)argv, (long)envp);
    fail(error == -2 ? STATUS_MISSING : STATUS_EXEC_FAILED, "cannot execute ", path, error == -2 ? ": no such file" : "");
}
