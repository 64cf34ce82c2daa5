/* runtime/device/cache.c — run the host compiler on generated C, cache the
 * result by content hash, load exactly the bytes that were checked. See
 * device.h (the module cache); cache_dir.c finds, checks and opens the
 * directory. */
#include "runtime/device/device.h"
#include "base/file.h"
#include "base/hash.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/check.h"
#include "runtime/clock.h"
#include "base/sha256.h"
#include "runtime/log.h"

extern char **environ;

/* ---- files in it ------------------------------------------------------------------ */

/* A name no other thread or process uses at the same time. */
static void temp_name(char *out, size_t n, const char *base, const char *ext) {
    static unsigned counter;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    unsigned c = counter++;
    pthread_mutex_unlock(&mu);
    if (snprintf(out, n, "%s.tmp%ld.%u%s", base, (long)getpid(), c, ext) >= (int)n)
        out[0] = 0; /* an empty name fails to open: no other file is touched */
}

/* "DIR/name" for messages (a longer one is cut, harmlessly). */
#define SHOWN_MAX (PATH_MAX + NAME_MAX + 2)
static void shown_name(const rt_cache *c, const char *name, char *out, size_t n) {
    base_path_join(out, n, c->path, name);
}

unsigned char *rt_cache_read_max(const rt_cache *c, const char *name, size_t max, size_t *len,
                                 char *why, size_t whylen) {
    char shown[SHOWN_MAX];
    shown_name(c, name, shown, sizeof shown);
    return base_file_read_at(c->fd, name, shown, BASE_FILE_OURS, max, len, why, whylen);
}

unsigned char *rt_cache_read(const rt_cache *c, const char *name, size_t *len) {
    char why[256];
    /* Any failure is a miss: the caller recompiles. */
    return rt_cache_read_max(c, name, (size_t)1 << 30, len, why, sizeof why);
}

int rt_cache_write(const rt_cache *c, const char *name, const void *p, size_t n, char *err,
                   size_t errlen) {
    char shown[SHOWN_MAX];
    shown_name(c, name, shown, sizeof shown);
    int dfd = dup(c->fd); /* the file takes its folder's fd over */
    if (dfd < 0) return base_fail(err, errlen, "%s: %s", shown, strerror(errno));
    return base_file_write_all_at(dfd, name, shown, p, n, err, errlen);
}

int rt_cache_record(const rt_cache *c, const char *obj, const void *data, size_t n) {
    unsigned char d[32];
    char hex[66], name[NAME_MAX + 1], why[256];
    base_sha256(data, n, d);
    base_sha256_hex(d, hex);
    strcat(hex, "\n");
    snprintf(name, sizeof name, "%s.sha256", obj);
    return rt_cache_write(c, name, hex, 65, why, sizeof why);
}

int rt_cache_matches(const rt_cache *c, const char *obj, const void *data, size_t n) {
    char name[NAME_MAX + 1];
    snprintf(name, sizeof name, "%s.sha256", obj);
    size_t got = 0;
    unsigned char *want = rt_cache_read(c, name, &got);
    if (!want) return 0;
    unsigned char d[32];
    char hex[65];
    base_sha256(data, n, d);
    base_sha256_hex(d, hex);
    int match = got == 65 && !memcmp(want, hex, 64) && want[64] == '\n';
    free(want);
    return match ? 1 : -1;
}

void rt_cache_rebuild_notice(const rt_cache *c, const char *obj, int match) {
    rt_log(RT_LOG_INFO, "kernel cache: %s/%s %s; compiling it again", c->path, obj,
           match == -2 ? "is not a whole shared object (a segment runs past its end)"
           : match < 0 ? "does not match the checksum recorded when it was compiled (truncated "
                         "or corrupted)"
                       : "has no recorded checksum (not written by this dpc)");
}

void rt_cache_name(char *name, size_t n, const char *kind, uint64_t h, const char *source) {
    size_t srclen = strlen(source);
    h = base_fnv1a(h, source, srclen);
    /* A second, differently seeded hash makes a collision astronomically
     * unlikely without a cryptographic hash. */
    uint64_t h2 = base_fnv1a(h ^ 0x9e3779b97f4a7c15ull, source, srclen);
    snprintf(name, n, "dpc2-%s%016" PRIx64 "%08" PRIx32, kind, h, (uint32_t)h2);
}

/* ---- compiling and loading C ---------------------------------------------------- */

static const char *compiler(void) {
    const char *cc = getenv("CC");
    return cc && *cc ? cc : "cc";
}

/* The CPU model line: a module built with -march=native on one machine may
 * not run on another that shares the cache directory. */
uint64_t rt_cache_cpu_hash(uint64_t h) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return h;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) || !strncmp(line, "flags", 5)) {
            h = base_fnv1a(h, line, strlen(line));
            if (line[0] == 'f') break;
        }
    fclose(f);
    return h;
}

/* Appends s to the command in single quotes (shell-safe). */
static void quote(char *cmd, size_t n, const char *s) {
    size_t len = strlen(cmd);
    if (len + 1 < n) cmd[len++] = '\'';
    for (; *s && len + 5 < n; s++) {
        if (*s == '\'') {
            memcpy(cmd + len, "'\\''", 4);
            len += 4;
        } else {
            cmd[len++] = *s;
        }
    }
    if (len + 1 < n) cmd[len++] = '\'';
    cmd[len] = 0;
}

/* Runs cmd with the checked directory as its working directory (fchdir
 * to the descriptor), so the compiler reads and writes names in it, not a
 * path that could lead elsewhere. */
static int run_shell(const rt_cache *c, const char *cmd) {
    pid_t pid;
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    int rc = posix_spawn_file_actions_addfchdir_np(&fa, c->fd);
    if (!rc) rc = posix_spawn(&pid, "/bin/sh", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc) {
        errno = rc;
        RT_SYS_FAIL("posix_spawn /bin/sh");
        return -1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            RT_SYS_FAIL("waitpid");
            return -1;
        }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Would the loader map only bytes that are there? A prefix of an object
 * whose record was rewritten to match it passes the hash, and a segment
 * that runs past the end of the file faults (SIGBUS) inside dlopen, from a
 * memfd as from a file. */
static int elf_whole(const unsigned char *d, size_t n) {
    ElfW(Ehdr) eh;
    if (n < sizeof eh) return 0;
    memcpy(&eh, d, sizeof eh);
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
        eh.e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
        eh.e_type != ET_DYN || eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum == 0 ||
        eh.e_phoff > n || eh.e_phnum > (n - eh.e_phoff) / sizeof(ElfW(Phdr)))
        return 0;
    for (size_t i = 0; i < eh.e_phnum; i++) {
        ElfW(Phdr) ph;
        memcpy(&ph, d + eh.e_phoff + i * sizeof ph, sizeof ph);
        if (ph.p_filesz && (ph.p_offset > n || ph.p_filesz > n - ph.p_offset)) return 0;
    }
    return 1;
}

/* The loaded objects' memfds, by SHA-256. dlopen knows an object by the
 * name it was opened by, /proc/self/fd/N: a closed N reused for another
 * object would be taken for the first one. So each stays open for the
 * process's life (modules are RTLD_NODELETE, mapped that long anyway), and
 * the same bytes loaded again reuse it and get the same handle, as one path
 * did before. */
static struct loaded {
    unsigned char sha[32];
    int fd;
} * loaded;
static size_t nloaded, caploaded;
static pthread_mutex_t loaded_mu = PTHREAD_MUTEX_INITIALIZER;

/* dlopen of exactly data[0..n), through a sealed memfd: nothing can change
 * between the hash and the load. */
static void *load_bytes(const unsigned char *data, size_t n, int flags, const char *shown,
                        char *err, size_t errlen) {
    unsigned char sha[32];
    base_sha256(data, n, sha);
    pthread_mutex_lock(&loaded_mu);
    int fd = -1;
    for (size_t i = 0; i < nloaded && fd < 0; i++)
        if (!memcmp(loaded[i].sha, sha, 32)) fd = loaded[i].fd;
    const char *why = NULL;
    int fresh = fd < 0;
    if (fresh) {
        fd = memfd_create("dpc-module", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        const unsigned char *at = data;
        size_t left = n;
        while (fd >= 0 && left) {
            ssize_t w = write(fd, at, left);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break;
            at += w, left -= (size_t)w;
        }
        if (fd < 0 || left ||
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)) {
            why = strerror(errno);
            if (fd >= 0) close(fd);
            fd = -1;
        }
    }
    void *h = NULL;
    if (fd >= 0) {
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        h = dlopen(proc, flags);
        if (!h) why = dlerror();
        if (h && fresh) {
            if (nloaded == caploaded) {
                caploaded = caploaded ? 2 * caploaded : 8;
                loaded = realloc(loaded, caploaded * sizeof *loaded);
                RT_CHECK_ALLOC(loaded);
            }
            memcpy(loaded[nloaded].sha, sha, 32);
            loaded[nloaded++].fd = fd;
        } else if (!h && fresh) {
            close(fd);
        }
    }
    pthread_mutex_unlock(&loaded_mu);
    if (!h) base_fail(err, errlen, "dlopen %s (from memory): %s", shown, why ? why : "failed");
    return h;
}

void *rt_cache_load_c(const rt_cache *c, const char *source, int flags, int *hit, char **path,
                      char *err, size_t errlen) {
    if (hit) *hit = 0;
    *path = NULL;
    const char *cc = compiler();
    uint64_t h = base_fnv1a_str(BASE_FNV1A_INIT, cc);
    h = base_fnv1a(h, RT_CC_FLAGS, sizeof RT_CC_FLAGS);
    h = rt_cache_cpu_hash(h);
    char base[64], so[80], c_name[80];
    rt_cache_name(base, sizeof base, "", h, source);
    snprintf(so, sizeof so, "%s.so", base);
    snprintf(c_name, sizeof c_name, "%s.c", base);
    char *shown = rt_cache_path(c, so);
    /* A cached object is used only when it is, byte for byte, what was
     * compiled for it, and whole; those bytes, read once through the
     * checked directory, are what is loaded. */
    size_t have_len = 0;
    unsigned char *have = rt_cache_read(c, so, &have_len);
    if (have) {
        int match = rt_cache_matches(c, so, have, have_len);
        if (match == 1 && !elf_whole(have, have_len)) match = -2;
        if (match == 1) {
            void *hd = load_bytes(have, have_len, flags, shown, err, errlen);
            free(have);
            if (!hd) {
                free(shown);
                return NULL;
            }
            if (hit) *hit = 1;
            *path = shown;
            return hd;
        }
        free(have);
        rt_cache_rebuild_notice(c, so, match);
    }
    char tmp_so[NAME_MAX + 1], tmp_log[NAME_MAX + 1], why[1024];
    temp_name(tmp_so, sizeof tmp_so, base, ".so");
    temp_name(tmp_log, sizeof tmp_log, base, ".log");
    if (rt_cache_write(c, c_name, source, strlen(source), why, sizeof why)) {
        base_fail(err, errlen, "cannot write kernel source: %s", why);
        free(shown);
        return NULL;
    }
    /* Names relative to the directory the compiler runs in (run_shell). */
    char cmd[16384] = "";
    snprintf(cmd, sizeof cmd, "%s %s -o ", cc, RT_CC_FLAGS);
    quote(cmd, sizeof cmd, tmp_so);
    strncat(cmd, " ", sizeof cmd - strlen(cmd) - 1);
    quote(cmd, sizeof cmd, c_name);
    strncat(cmd, " 2>", sizeof cmd - strlen(cmd) - 1);
    quote(cmd, sizeof cmd, tmp_log);
    double t0 = rt_now();
    int rc = run_shell(c, cmd);
    double seconds = rt_now() - t0;
    size_t log_len = 0;
    unsigned char *log = rt_cache_read(c, tmp_log, &log_len);
    unlinkat(c->fd, tmp_log, 0);
    if (rc != 0) {
        base_fail(err, errlen, "compiling %s/%s failed (%s %s):\n%.4000s", c->path, c_name, cc,
                  RT_CC_FLAGS, log && *log ? (char *)log : "(no compiler output)");
        free(log);
        unlinkat(c->fd, tmp_so, 0);
        free(shown);
        return NULL;
    }
    free(log);
    /* Read back once through the directory; these bytes are recorded,
     * published and loaded. The checksum first, then the object: a reader
     * that finds the object finds its checksum. */
    size_t built_len = 0;
    unsigned char *built = rt_cache_read(c, tmp_so, &built_len);
    if (!built || !elf_whole(built, built_len)) {
        base_fail(err, errlen, "%s %s wrote no whole shared object at %s/%s", cc, RT_CC_FLAGS,
                  c->path, tmp_so);
    } else if (rt_cache_record(c, so, built, built_len)) {
        base_fail(err, errlen, "cannot record the checksum of %s: %s", shown, strerror(errno));
    } else if (renameat(c->fd, tmp_so, c->fd, so)) {
        base_fail(err, errlen, "cannot move %s/%s into place: %s", c->path, tmp_so,
                  strerror(errno));
    } else {
        if (rt_debug_level() >= 1)
            rt_log(RT_LOG_INFO, "cpu: compiled %s in %.2f s", shown, seconds);
        void *hd = load_bytes(built, built_len, flags, shown, err, errlen);
        free(built);
        if (!hd) {
            free(shown);
            return NULL;
        }
        *path = shown;
        return hd;
    }
    free(built);
    unlinkat(c->fd, tmp_so, 0);
    free(shown);
    return NULL;
}
