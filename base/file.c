/* base/file.c — atomic replacement of files, bounded reads, and the files of
 * one run (file.h). */
#include "base/file.h"
#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

/* The kernel's own file systems (linux/magic.h): their files say they are
 * regular, of size 0 or 4096, but a read may block until the kernel has
 * something to say (/proc/kmsg, tracing/trace_pipe) or never end. */
static const struct {
    long magic;
    const char *name;
} kernel_fs[] = {
    {PROC_SUPER_MAGIC, "proc"},
    {SYSFS_MAGIC, "sysfs"},
    {DEBUGFS_MAGIC, "debugfs"},
    {TRACEFS_MAGIC, "tracefs"},
    {SECURITYFS_MAGIC, "securityfs"},
    {CGROUP_SUPER_MAGIC, "cgroup"},
    {CGROUP2_SUPER_MAGIC, "cgroup2"},
    {PSTOREFS_MAGIC, "pstore"},
    {BPF_FS_MAGIC, "bpf"},
};

/* The kernel file system fd lies on, or NULL. */
static const char *kernel_fs_of(int fd) {
    struct statfs fs;
    if (fstatfs(fd, &fs) != 0) return NULL;
    for (size_t i = 0; i < sizeof kernel_fs / sizeof *kernel_fs; i++)
        if ((long)fs.f_type == kernel_fs[i].magic) return kernel_fs[i].name;
    return NULL;
}

struct base_file {
    int fd;        /* the temporary */
    int dfd;       /* the folder holding the temporary and the target */
    int failed;    /* errno of the first failed write, or 0 */
    char *name;    /* the target's name in dfd */
    char *tmp;     /* the temporary's name in dfd */
    char shown[1]; /* the path as the caller named it, for messages */
};

static const char *kind_of(mode_t m) {
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "of another type";
}

static char *dup_or_die(const char *s) {
    char *d = strdup(s);
    BASE_CHECK_ALLOC(d);
    return d;
}

/* path up to its last '/' ("." without one, "/" for "/x"). */
static char *dir_of(const char *path) {
    char *d = dup_or_die(path);
    char *slash = strrchr(d, '/');
    if (!slash) {
        free(d);
        return dup_or_die(".");
    }
    if (slash == d)
        slash[1] = 0;
    else
        *slash = 0;
    return d;
}

static const char *base_of(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* a + "/" + b (b alone when a is empty); frees a. */
static char *join(char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *j = malloc(la + lb + 2);
    BASE_CHECK_ALLOC(j);
    if (la)
        snprintf(j, la + lb + 2, "%s%s%s", a, lb ? "/" : "", b);
    else
        memcpy(j, b, lb + 1);
    free(a);
    return j;
}

/* What the link at path names, as a path (relative to path's folder when
 * the link is relative); NULL when it cannot be read. */
static char *link_target(const char *path) {
    char buf[PATH_MAX];
    ssize_t n = readlink(path, buf, sizeof buf - 1);
    if (n < 0) return NULL;
    buf[n] = 0;
    if (buf[0] == '/') return dup_or_die(buf);
    return join(dir_of(path), buf);
}

static const char *user_name(uid_t uid) {
    struct passwd *pw = getpwuid(uid);
    return pw ? pw->pw_name : "no such user";
}

/* The kernel's protected_symlinks rule, made strict: a link at a name the
 * user gave is followed only when it and the folder holding it belong to
 * the user running this; anyone else could point it, or swap it, at a file
 * of this user's. lsb: the link's lstat. 0, or -1 + message. */
static int link_ok(const char *path, const struct stat *lsb, char *err, size_t errlen) {
    uid_t me = geteuid();
    char *d = dir_of(path);
    struct stat ds;
    int rc = 0;
    if (stat(d, &ds) != 0)
        rc = base_fail(err, errlen, "%s: %s", d, strerror(errno));
    else if (lsb->st_uid != me || ds.st_uid != me)
        rc = base_fail(err, errlen,
                       "%s: a symbolic link owned by uid %u (%s) in a directory owned by uid %u "
                       "(%s); a link is followed only when both belong to the user running this "
                       "(uid %u): refusing to write through it",
                       path, (unsigned)lsb->st_uid, user_name(lsb->st_uid), (unsigned)ds.st_uid,
                       user_name(ds.st_uid), (unsigned)me);
    free(d);
    return rc;
}

static int refuse_ours(const char *shown, char *err, size_t errlen) {
    return base_fail(err, errlen,
                     "%s: a symbolic link at a name dpc chose (not one given on the command "
                     "line); refusing to write through it",
                     shown);
}

/* The file to write for path: path itself, or, through each symbolic link
 * at its last component that link_ok allows, the file it names. Heap
 * string or NULL + message. */
static char *resolve_target(const char *path, char *err, size_t errlen) {
    if (!*path) {
        base_fail(err, errlen, "an empty file name");
        return NULL;
    }
    char *t = dup_or_die(path);
    for (int hops = 0;; hops++) {
        struct stat sb;
        if (lstat(t, &sb) != 0) {
            if (errno == ENOENT && hops == 0) return t;
            base_fail(err, errlen, "%s: %s%s", path,
                      hops ? "a symbolic link that cannot be followed: " : "", strerror(errno));
            free(t);
            return NULL;
        }
        if (!S_ISLNK(sb.st_mode)) return t;
        char *next = NULL;
        if (!link_ok(t, &sb, err, errlen)) {
            next = hops < 40 ? link_target(t) : NULL;
            if (!next)
                base_fail(err, errlen, "%s: a symbolic link that cannot be followed: %s", path,
                          strerror(hops < 40 ? errno : ELOOP));
        }
        free(t);
        if (!next) return NULL;
        t = next;
    }
}

/* A fresh O_CREAT|O_EXCL temporary beside name in dfd: O_EXCL fails on any
 * existing name, a planted symlink included, and the name is random. */
static int make_temp(int dfd, const char *name, mode_t mode, char **tmp_out) {
    size_t len = strlen(name) + 32;
    char *tmp = malloc(len);
    if (!tmp) {
        errno = ENOMEM;
        return -1;
    }
    static unsigned long counter;
    uint64_t x = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)tmp;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    x ^= (uint64_t)ts.tv_nsec << 20 ^ (uint64_t)ts.tv_sec;
    int fd = -1;
    for (int i = 0; i < 100 && fd < 0; i++) {
        x += __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) * 0xD1B54A32D192ED03ull;
        x ^= x >> 29, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 32;
        snprintf(tmp, len, "%s.tmp.%012llx", name, (unsigned long long)(x & 0xffffffffffffull));
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        int e = errno;
        free(tmp);
        errno = e;
        return -1;
    }
    *tmp_out = tmp;
    return fd;
}

/* The user's folder dir: created when missing (its parent must exist); a
 * link there followed only as link_ok allows. fd or -1 + message. */
static int open_user_dir(const char *dir, char *err, size_t errlen) {
    struct stat sb;
    if (lstat(dir, &sb) != 0) {
        if (errno != ENOENT) return base_fail(err, errlen, "%s: %s", dir, strerror(errno));
        /* EEXIST: another process made it in between. */
        if ((mkdir(dir, 0777) != 0 && errno != EEXIST) || lstat(dir, &sb) != 0)
            return base_fail(err, errlen, "%s: cannot create the directory: %s", dir,
                             strerror(errno));
    }
    int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
    if (!S_ISLNK(sb.st_mode))
        flags |= O_NOFOLLOW;
    else if (link_ok(dir, &sb, err, errlen))
        return -1;
    int fd = open(dir, flags);
    if (fd < 0)
        return base_fail(err, errlen, "%s: %s", dir,
                         errno == ENOTDIR || errno == ELOOP ? "not a directory" : strerror(errno));
    return fd;
}

/* The folder holding rel under dir: dir as open_user_dir, then each folder
 * of rel (the tool's names) created when missing and opened O_NOFOLLOW, so a
 * link there is refused and none swapped in later is used. *base: rel's
 * last component. fd or -1 + message naming dir/rel's folders. */
static int walk(const char *dir, const char *rel, const char **base, char *err, size_t errlen) {
    int dfd = open_user_dir(dir, err, errlen);
    const char *at = rel;
    for (const char *slash; dfd >= 0 && (slash = strchr(at, '/'));) {
        char comp[NAME_MAX + 1];
        size_t n = (size_t)(slash - at);
        char shown[PATH_MAX];
        snprintf(shown, sizeof shown, "%s/%.*s", dir, (int)(slash - rel), rel);
        if (n == 0 || n > NAME_MAX) {
            close(dfd);
            return base_fail(err, errlen, "%s: not a folder name", shown);
        }
        memcpy(comp, at, n);
        comp[n] = 0;
        int sub = -1;
        if (mkdirat(dfd, comp, 0777) == 0 || errno == EEXIST)
            sub = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) {
            int e = errno;
            struct stat sb;
            if (fstatat(dfd, comp, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(sb.st_mode))
                refuse_ours(shown, err, errlen);
            else
                base_fail(err, errlen, "%s: %s", shown,
                          e == ENOTDIR ? "not a directory" : strerror(e));
        }
        close(dfd);
        dfd = sub;
        at = slash + 1;
    }
    *base = at;
    return dfd;
}

/* The target name in dfd: missing, or a regular file (*mode its bits); a
 * link there is never followed. 0: missing, 1: exists, -1 + message. */
static int check_name(int dfd, const char *name, const char *shown, mode_t *mode, char *err,
                      size_t errlen) {
    struct stat sb;
    if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
        return base_fail(err, errlen, "%s: not a file name", shown);
    if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return 0;
        return base_fail(err, errlen, "%s: %s", shown, strerror(errno));
    }
    if (S_ISLNK(sb.st_mode)) return refuse_ours(shown, err, errlen);
    if (!S_ISREG(sb.st_mode))
        return base_fail(err, errlen, "%s: not a regular file (%s); refusing to replace it", shown,
                         kind_of(sb.st_mode));
    *mode = sb.st_mode;
    return 1;
}

/* Starts replacing name in dfd (taken over: closed with the file). */
static base_file *open_at(int dfd, const char *name, const char *shown, const char *dir_shown,
                          char *err, size_t errlen) {
    mode_t mode = 0;
    int exists = check_name(dfd, name, shown, &mode, err, errlen);
    base_file *f = exists < 0 ? NULL : calloc(1, sizeof *f + strlen(shown));
    if (!f) {
        if (exists >= 0) base_fail(err, errlen, "%s: out of memory", shown);
        close(dfd);
        return NULL;
    }
    strcpy(f->shown, shown);
    f->dfd = dfd;
    f->name = dup_or_die(name);
    /* A replaced file keeps its permission bits; a new one gets 0666 less
     * the umask, as fopen would give it. */
    f->fd = make_temp(dfd, name, exists ? (mode & 0777) : 0666, &f->tmp);
    if (f->fd < 0) {
        base_fail(err, errlen, "%s: cannot write in %s: %s", shown, dir_shown, strerror(errno));
        close(dfd);
        free(f->name);
        free(f);
        return NULL;
    }
    /* The umask does not apply when the mode came from the old file. */
    if (exists) fchmod(f->fd, mode & 0777);
    return f;
}

base_file *base_file_open(const char *path, char *err, size_t errlen) {
    char *target = resolve_target(path, err, errlen);
    if (!target) return NULL;
    char *d = dir_of(target);
    base_file *f = NULL;
    int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        base_fail(err, errlen, "%s: cannot write in %s: %s", path, d, strerror(errno));
    else
        f = open_at(dfd, base_of(target), path, d, err, errlen);
    free(d);
    free(target);
    return f;
}

base_file *base_file_open_in(const char *dir, const char *rel, char *err, size_t errlen) {
    char shown[PATH_MAX];
    base_path_join(shown, sizeof shown, dir, rel);
    const char *name;
    int dfd = walk(dir, rel, &name, err, errlen);
    if (dfd < 0) return NULL;
    char *d = dir_of(shown);
    base_file *f = open_at(dfd, name, shown, d, err, errlen);
    free(d);
    return f;
}

void base_file_write(base_file *f, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n && !f->failed) {
        ssize_t w = write(f->fd, b, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            f->failed = errno;
            break;
        }
        b += w;
        n -= (size_t)w;
    }
}

static void file_free(base_file *f) {
    close(f->dfd);
    free(f->name);
    free(f->tmp);
    free(f);
}

void base_file_abort(base_file *f) {
    if (!f) return;
    close(f->fd);
    unlinkat(f->dfd, f->tmp, 0);
    file_free(f);
}

int base_file_commit(base_file *f, char *err, size_t errlen) {
    const char *step = NULL;
    int e = f->failed;
    if (e)
        step = "cannot write";
    else if (fsync(f->fd) != 0)
        step = "cannot write (fsync)", e = errno;
    if (close(f->fd) != 0 && !step) step = "cannot write", e = errno;
    /* renameat replaces whatever is at the name, a link included: it never
     * follows one. */
    if (!step && renameat(f->dfd, f->tmp, f->dfd, f->name) != 0)
        step = "cannot write (rename)", e = errno;
    if (step) {
        unlinkat(f->dfd, f->tmp, 0);
        base_fail(err, errlen, "%s: %s: %s", f->shown, step, strerror(e));
        file_free(f);
        return -1;
    }
    fsync(f->dfd); /* the rename made durable; best effort, as not every file system can */
    file_free(f);
    return 0;
}

static int write_all(base_file *f, const void *p, size_t n, char *err, size_t errlen) {
    if (!f) return -1;
    base_file_write(f, p, n);
    return base_file_commit(f, err, errlen);
}

base_file *base_file_open_at(int dfd, const char *name, const char *shown, char *err,
                             size_t errlen) {
    char *d = dir_of(shown);
    base_file *f = open_at(dfd, name, shown, d, err, errlen);
    free(d);
    return f;
}

int base_file_write_all_at(int dfd, const char *name, const char *shown, const void *p, size_t n,
                           char *err, size_t errlen) {
    return write_all(base_file_open_at(dfd, name, shown, err, errlen), p, n, err, errlen);
}

int base_file_write_all(const char *path, const void *p, size_t n, char *err, size_t errlen) {
    return write_all(base_file_open(path, err, errlen), p, n, err, errlen);
}

int base_file_write_all_in(const char *dir, const char *rel, const void *p, size_t n, char *err,
                           size_t errlen) {
    return write_all(base_file_open_in(dir, rel, err, errlen), p, n, err, errlen);
}

int base_file_check_writable(const char *path, const char *what, char *err, size_t errlen) {
    char why[1024];
    base_file *f = base_file_open(path, why, sizeof why);
    if (!f) return base_fail(err, errlen, "%s %s", what, why);
    base_file_abort(f);
    return 0;
}

int base_file_check_dir(const char *dir, const char *sub, const char *what, char *err,
                        size_t errlen) {
    char rel[PATH_MAX], why[1024];
    snprintf(rel, sizeof rel, "%s%s.dpc-probe", sub ? sub : "", sub ? "/" : "");
    const char *name;
    int dfd = walk(dir, rel, &name, why, sizeof why);
    if (dfd < 0) return base_fail(err, errlen, "%s %s", what, why);
    char *tmp;
    int fd = make_temp(dfd, name, 0600, &tmp);
    if (fd < 0) {
        base_fail(err, errlen, "%s %s%s%s: cannot write in the directory: %s", what, dir,
                  sub ? "/" : "", sub ? sub : "", strerror(errno));
        close(dfd);
        return -1;
    }
    close(fd);
    unlinkat(dfd, tmp, 0);
    free(tmp);
    close(dfd);
    return 0;
}

int base_file_check_in(const char *dir, const char *rel, const char *what, char *err,
                       size_t errlen) {
    char shown[PATH_MAX], why[1024];
    base_path_join(shown, sizeof shown, dir, rel);
    const char *name;
    mode_t mode;
    int dfd = walk(dir, rel, &name, why, sizeof why);
    int rc = dfd < 0 ? -1 : check_name(dfd, name, shown, &mode, why, sizeof why) < 0 ? -1 : 0;
    if (dfd >= 0) close(dfd);
    return rc ? base_fail(err, errlen, "%s %s", what, why) : 0;
}

/* ---- the files of one run --------------------------------------------------- */

/* Where a name lands: the nearest folder that exists (device, inode) and
 * the rest of the path below it, as written. Two names of one file, existing
 * or not, have one key; so do a folder and the folder part of a name in it. */
typedef struct {
    dev_t dev;
    ino_t ino;
    char *rest;
} path_key;

/* rest + one component of a path not made yet: "." is nothing, ".." the
 * folder above (the folders below the existing one will be made as
 * folders, not links). Frees rest. */
static char *join_part(char *rest, const char *part) {
    if (!strcmp(part, ".")) return rest;
    if (!strcmp(part, "..") && *rest) {
        char *slash = strrchr(rest, '/');
        if (slash)
            *slash = 0;
        else
            *rest = 0;
        return rest;
    }
    return join(rest, part);
}

static void dir_key(const char *d, path_key *k, int depth) {
    struct stat sb;
    if (stat(d, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        k->dev = sb.st_dev, k->ino = sb.st_ino, k->rest = dup_or_die("");
        return;
    }
    char *parent = dir_of(d);
    if (depth > 64 || !strcmp(parent, d)) { /* "." or "/" unreadable: the name as given */
        k->dev = 0, k->ino = 0, k->rest = dup_or_die(d);
    } else {
        dir_key(parent, k, depth + 1);
        k->rest = join_part(k->rest, base_of(d));
    }
    free(parent);
}

/* A file's key: a link at its last component followed, as reader and
 * writer follow it. */
static void file_key(const char *path, path_key *k) {
    char *p = dup_or_die(path);
    struct stat sb;
    for (int hops = 0; hops < 40 && lstat(p, &sb) == 0 && S_ISLNK(sb.st_mode); hops++) {
        char *t = link_target(p);
        if (!t) break;
        free(p);
        p = t;
    }
    const char *b = base_of(p);
    if (!*b || !strcmp(b, ".") || !strcmp(b, "..")) {
        char *r = realpath(p, NULL);
        if (r) free(p), p = r;
    }
    char *d = dir_of(p);
    dir_key(d, k, 0);
    k->rest = join(k->rest, base_of(p));
    free(d);
    free(p);
}

static int key_eq(const path_key *a, const path_key *b) {
    return a->dev == b->dev && a->ino == b->ino && !strcmp(a->rest, b->rest);
}

/* The file of key f lies directly in the folder of key d. */
static int key_in(const path_key *f, const path_key *d) {
    if (f->dev != d->dev || f->ino != d->ino) return 0;
    const char *slash = strrchr(f->rest, '/');
    size_t n = slash ? (size_t)(slash - f->rest) : 0;
    return strlen(d->rest) == n && !strncmp(f->rest, d->rest, n);
}

typedef struct {
    int kind; /* BASE_FILE_INPUT, _OUTPUT, _FOLDER */
    char *what, *path;
    path_key key;
} set_entry;

struct base_file_set {
    set_entry *e;
    int n, cap;
};

base_file_set *base_file_set_new(void) {
    base_file_set *s = calloc(1, sizeof *s);
    BASE_CHECK_ALLOC(s);
    return s;
}

void base_file_set_free(base_file_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) free(s->e[i].what), free(s->e[i].path), free(s->e[i].key.rest);
    free(s->e);
    free(s);
}

static void make_key(int kind, const char *path, path_key *k) {
    if (kind == BASE_FILE_FOLDER)
        dir_key(path, k, 0);
    else
        file_key(path, k);
}

/* x against y, one of them (or both) added before: 0, or -1 + message. */
static int clash(const set_entry *x, const set_entry *y, char *err, size_t errlen) {
    if (x->kind == BASE_FILE_FOLDER && y->kind == BASE_FILE_FOLDER) return 0;
    if (x->kind == BASE_FILE_FOLDER || y->kind == BASE_FILE_FOLDER) {
        const set_entry *d = x->kind == BASE_FILE_FOLDER ? x : y, *f = d == x ? y : x;
        if (!key_in(&f->key, &d->key)) return 0;
        return base_fail(err, errlen,
                         "%s %s is in %s, a folder %s writes files of its own naming in; %s",
                         f->what, f->path, d->path, d->what,
                         f->kind == BASE_FILE_INPUT ? "writing there could destroy it"
                                                    : "choose a name elsewhere");
    }
    if (!key_eq(&x->key, &y->key) || (x->kind == BASE_FILE_INPUT && y->kind == BASE_FILE_INPUT))
        return 0;
    if (x->kind == BASE_FILE_OUTPUT && y->kind == BASE_FILE_OUTPUT)
        return base_fail(err, errlen, "%s %s and %s %s name the same file", y->what, y->path,
                         x->what, x->path);
    const set_entry *out = x->kind == BASE_FILE_OUTPUT ? x : y, *in = out == x ? y : x;
    return base_fail(err, errlen, "%s %s is %s (%s); writing it would destroy it", out->what,
                     out->path, in->what, in->path);
}

static int set_check(const base_file_set *s, const set_entry *x, char *err, size_t errlen) {
    for (int i = 0; i < s->n; i++)
        if (clash(x, &s->e[i], err, errlen)) return -1;
    return 0;
}

int base_file_set_check(const base_file_set *s, const char *what, const char *path, char *err,
                        size_t errlen) {
    set_entry x = {BASE_FILE_OUTPUT, (char *)what, (char *)path, {0, 0, NULL}};
    make_key(BASE_FILE_OUTPUT, path, &x.key);
    int rc = set_check(s, &x, err, errlen);
    free(x.key.rest);
    return rc;
}

int base_file_set_add(base_file_set *s, int kind, const char *what, const char *path, char *err,
                      size_t errlen) {
    set_entry x = {kind, dup_or_die(what), dup_or_die(path), {0, 0, NULL}};
    make_key(kind, path, &x.key);
    if (set_check(s, &x, err, errlen)) {
        free(x.what), free(x.path), free(x.key.rest);
        return -1;
    }
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->e = realloc(s->e, (size_t)s->cap * sizeof *s->e);
        BASE_CHECK_ALLOC(s->e);
    }
    s->e[s->n++] = x;
    return 0;
}

/* ---- reading ---------------------------------------------------------------- */

/* fd (taken over) when it is a regular file, and ours with BASE_FILE_OURS;
 * its size in *size. fd or -1 + message. */
static int opened_regular(int fd, const char *shown, unsigned flags, long long *size, char *err,
                          size_t errlen) {
    if (fd < 0) return base_fail(err, errlen, "%s: cannot open: %s", shown, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return base_fail(err, errlen, "%s: cannot open: %s", shown, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return base_fail(err, errlen, "%s: not a regular file (%s); refusing to read it", shown,
                         kind_of(sb.st_mode));
    }
    const char *kfs = kernel_fs_of(fd);
    if (kfs) {
        close(fd);
        return base_fail(
            err, errlen,
            "%s: a file of the kernel's (on %s), not a regular file; refusing to read it", shown,
            kfs);
    }
    if ((flags & BASE_FILE_OURS) && sb.st_uid != geteuid()) {
        close(fd);
        return base_fail(err, errlen, "%s: owned by uid %ld, not by this user; refusing to read it",
                         shown, (long)sb.st_uid);
    }
    /* Regular files ignore O_NONBLOCK; cleared all the same. */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    *size = (long long)sb.st_size;
    return fd;
}

int base_file_open_read(const char *path, long long *size, char *err, size_t errlen) {
    return opened_regular(open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC), path, 0, size, err,
                          errlen);
}

int base_file_read_exact(int fd, void *p, size_t n) {
    unsigned char *at = p;
    while (n) {
        ssize_t r = read(fd, at, n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) return 1;
        at += r, n -= (size_t)r;
    }
    return 0;
}

/* The whole of fd (opened_regular's), of size bytes, at most max. */
static unsigned char *read_whole(int fd, long long size, const char *path, size_t max, size_t *len,
                                 char *err, size_t errlen) {
    if (fd < 0) return NULL;
    if ((unsigned long long)size > max) {
        close(fd);
        base_fail(err, errlen, "%s: %lld bytes, more than the %zu this file may have", path, size,
                  max);
        return NULL;
    }
    unsigned char *buf = malloc((size_t)size + 1);
    if (!buf) {
        close(fd);
        base_fail(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    /* Then one byte more than fstat said, to notice a file that grew. */
    unsigned char extra;
    int rc = base_file_read_exact(fd, buf, (size_t)size);
    if (rc == 0) {
        int more = base_file_read_exact(fd, &extra, 1);
        rc = more == 1 ? 0 : more == 0 ? 1 : -1;
    }
    int e = errno;
    close(fd);
    if (rc) {
        free(buf);
        if (rc < 0)
            base_fail(err, errlen, "%s: cannot read: %s", path, strerror(e));
        else
            base_fail(err, errlen, "%s: changed while being read", path);
        return NULL;
    }
    size_t got = (size_t)size;
    buf[got] = 0;
    *len = got;
    return buf;
}

unsigned char *base_file_read(const char *path, size_t max, size_t *len, char *err, size_t errlen) {
    return base_file_read_as(path, path, max, len, err, errlen);
}

unsigned char *base_file_read_as(const char *path, const char *shown, size_t max, size_t *len,
                                 char *err, size_t errlen) {
    long long size = 0;
    int fd =
        opened_regular(open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC), shown, 0, &size, err, errlen);
    return read_whole(fd, size, shown, max, len, err, errlen);
}

unsigned char *base_file_read_at(int dfd, const char *name, const char *shown, unsigned flags,
                                 size_t max, size_t *len, char *err, size_t errlen) {
    long long size = 0;
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    fd = opened_regular(fd, shown, flags, &size, err, errlen);
    return read_whole(fd, size, shown, max, len, err, errlen);
}

int base_path_join(char *out, size_t n, const char *dir, const char *name) {
    size_t k = strlen(dir);
    while (k > 1 && dir[k - 1] == '/') k--;
    if (k == 1 && dir[0] == '/') k = 0; /* the root: "/x", not "//x" */
    return snprintf(out, n, "%.*s/%s", (int)k, dir, name);
}
