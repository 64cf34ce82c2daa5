/* runtime/device/cache_dir.c — the module cache's directory (device.h):
 * which one (DPC_CACHE_DIR or ~/.cache/dpc), walked from "/" one name at a
 * time without following a link someone else owns, created 0700 where
 * missing, every directory on the way and the cache itself checked as
 * trusted; then kept open, so every later access is relative to it. */
#include "runtime/device/device.h"
#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/check.h"

/* The default directory: ~/.cache/dpc, HOME from the environment or, when
 * unset, the password database. Never a shared /tmp path another user
 * could have made first; /tmp/dpc-cache-UID only when the user has no home
 * at all, and then the ownership checks below still apply. */
static void default_dir(char *path, size_t n) {
    const char *home = getenv("HOME");
    if (!home || !*home) {
        struct passwd *pw = getpwuid(geteuid());
        home = pw && pw->pw_dir && *pw->pw_dir ? pw->pw_dir : NULL;
    }
    if (home)
        snprintf(path, n, "%s/.cache/dpc", home);
    else
        snprintf(path, n, "/tmp/dpc-cache-%ld", (long)geteuid());
}

static const char suffix[] = "set DPC_CACHE_DIR to a directory of your own";

/* What a refusal is about, named once: "kernel cache directory DIR: AT,
 * on its path," or, when AT is the directory itself, "kernel cache
 * directory DIR". */
#define SUBJECT_MAX (2 * PATH_MAX + 48)
static const char *subject(char *buf, size_t n, const char *dir, const char *at) {
    if (!strcmp(dir, at))
        snprintf(buf, n, "kernel cache directory %s", dir);
    else
        snprintf(buf, n, "kernel cache directory %s: %s, on its path,", dir, at);
    return buf;
}

/* A directory on the way to the cache: root or this user owns it (no one
 * else may rename what is in it), and no one else may write it unless it is
 * sticky, like /tmp (others may add names there, not rename or remove
 * ours). -1 + message naming the directory, its owner and mode. */
static int check_ancestor(const char *dir, const char *at, const struct stat *st, char *err,
                          size_t errlen) {
    uid_t me = geteuid();
    unsigned mode = (unsigned)(st->st_mode & 07777);
    char who[SUBJECT_MAX];
    if (st->st_uid != 0 && st->st_uid != me)
        return base_fail(err, errlen,
                         "%s belongs to uid %ld (mode %04o), not to root or this user (uid %ld); "
                         "refusing to load kernels through it (%s)",
                         subject(who, sizeof who, dir, at), (long)st->st_uid, mode, (long)me,
                         suffix);
    if ((mode & 022) && !(mode & S_ISVTX))
        return base_fail(err, errlen,
                         "%s is writable by %s and not sticky (mode %04o, owner uid %ld); "
                         "refusing to load kernels through it (%s)",
                         subject(who, sizeof who, dir, at), mode & 002 ? "everyone" : "its group",
                         mode, (long)st->st_uid, suffix);
    return 0;
}

/* The cache directory itself: this user's, and no one else may write it. */
static int check_final(const char *dir, const struct stat *st, char *err, size_t errlen) {
    uid_t me = geteuid();
    unsigned mode = (unsigned)(st->st_mode & 07777);
    if (st->st_uid != me)
        return base_fail(
            err, errlen,
            "kernel cache directory %s belongs to uid %ld (mode %04o), not to this user "
            "(uid %ld); refusing to load kernels from it (%s)",
            dir, (long)st->st_uid, mode, (long)me, suffix);
    if (mode & 022)
        return base_fail(
            err, errlen,
            "kernel cache directory %s is writable by %s (mode %04o); refusing to load "
            "kernels from it (chmod go-w it, or %s)",
            dir, mode & 002 ? "everyone" : "its group", mode, suffix);
    return 0;
}

/* at := at/name, or its parent for "..": the physical path walked so far,
 * for messages only. */
static void walked_step(char *at, size_t n, const char *name) {
    if (!strcmp(name, "..")) {
        char *slash = strrchr(at, '/');
        if (slash && slash != at)
            *slash = 0;
        else
            snprintf(at, n, "/");
        return;
    }
    size_t len = strlen(at);
    snprintf(at + len, n - len, "%s%s", len > 1 ? "/" : "", name);
}

void rt_cache_close(rt_cache *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

/* The walk of rt_cache_open: the path left to walk (todo, from p), the
 * directory reached (cur) and its physical path so far (at: messages). */
typedef struct {
    const char *dir; /* the cache directory as named: messages */
    char todo[2 * PATH_MAX];
    char *p;
    char at[PATH_MAX];
    int cur, links;
    char *err;
    size_t errlen;
} walk;

/* A system call's failure (errno) where the walk stands, the directory
 * named once when the walk stands on it; -1. */
static int sys_fail(walk *w) {
    if (!strcmp(w->dir, w->at))
        return base_fail(w->err, w->errlen, "kernel cache directory %s: %s", w->dir,
                         strerror(errno));
    return base_fail(w->err, w->errlen, "kernel cache directory %s: %s: %s", w->dir, w->at,
                     strerror(errno));
}

/* The directory named: DPC_CACHE_DIR, else the default, without trailing
 * slashes (c->path), and as an absolute path to walk (w->todo). */
static int name_dir(rt_cache *c, walk *w) {
    const char *env = getenv("DPC_CACHE_DIR");
    if (env && *env) {
        if (snprintf(c->path, sizeof c->path, "%s", env) >= (int)sizeof c->path)
            return base_fail(w->err, w->errlen, "DPC_CACHE_DIR is longer than %zu bytes",
                             sizeof c->path - 1);
    } else {
        default_dir(c->path, sizeof c->path);
    }
    for (size_t n = strlen(c->path); n > 1 && c->path[n - 1] == '/';) c->path[--n] = 0;
    const char *dir = c->path;
    char cwd[PATH_MAX];
    if (dir[0] == '/')
        snprintf(w->todo, sizeof w->todo, "%s", dir);
    else if (getcwd(cwd, sizeof cwd))
        snprintf(w->todo, sizeof w->todo, "%s/%s", cwd, dir);
    else
        return base_fail(w->err, w->errlen,
                         "kernel cache directory %s: cannot resolve it: getcwd: %s", dir,
                         strerror(errno));
    w->p = w->todo;
    return 0;
}

/* The start, or an absolute link: from the root again. */
static int walk_root(walk *w) {
    struct stat st;
    if (w->cur >= 0) close(w->cur);
    w->cur = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    snprintf(w->at, sizeof w->at, "/");
    if (w->cur < 0 || fstat(w->cur, &st)) return sys_fail(w);
    if (check_ancestor(w->dir, w->at, &st, w->err, w->errlen)) return -1;
    while (*w->p == '/') w->p++;
    return 0;
}

/* The next name of the path into name; p past it and its slashes. */
static int next_name(walk *w, char name[NAME_MAX + 1]) {
    size_t len = strcspn(w->p, "/");
    if (len > NAME_MAX) {
        errno = ENAMETOOLONG;
        return sys_fail(w);
    }
    memcpy(name, w->p, len);
    name[len] = 0;
    w->p += len;
    while (*w->p == '/') w->p++;
    return 0;
}

/* name, which openat refused as a directory (errno ELOOP or ENOTDIR): a
 * symbolic link owned by root or this user is followed, its target walked
 * in its place (a relative one from the link's directory), at most 40
 * links in all; anything else fails. */
static int follow_link(walk *w, const char *name) {
    int e = errno;
    struct stat ls;
    walked_step(w->at, sizeof w->at, name);
    if (fstatat(w->cur, name, &ls, AT_SYMLINK_NOFOLLOW) || !S_ISLNK(ls.st_mode)) {
        errno = e;
        return sys_fail(w);
    }
    char who[SUBJECT_MAX];
    if (ls.st_uid != 0 && ls.st_uid != geteuid())
        return base_fail(w->err, w->errlen,
                         "%s is a symbolic link owned by uid %ld, not by root or this user (uid "
                         "%ld); refusing to follow it (%s)",
                         subject(who, sizeof who, w->dir, w->at), (long)ls.st_uid, (long)geteuid(),
                         suffix);
    char target[PATH_MAX], next[sizeof w->todo];
    ssize_t n = ++w->links > 40 ? -1 : readlinkat(w->cur, name, target, sizeof target - 1);
    if (n <= 0) {
        errno = w->links > 40 ? ELOOP : n == 0 ? ENOENT : errno;
        return sys_fail(w);
    }
    target[n] = 0;
    if (snprintf(next, sizeof next, "%s/%s", target, w->p) >= (int)sizeof next) {
        errno = ENAMETOOLONG;
        return sys_fail(w);
    }
    memcpy(w->todo, next, strlen(next) + 1);
    w->p = w->todo;
    /* a relative target goes on from the link's directory */
    walked_step(w->at, sizeof w->at, "..");
    return 0;
}

/* fd, the directory just opened, becomes the one reached; it is checked as
 * an ancestor unless only "." names follow (then it is the cache itself,
 * which open_final checks). */
static int descend(walk *w, int fd) {
    struct stat st;
    close(w->cur);
    w->cur = fd;
    if (fstat(w->cur, &st)) return sys_fail(w);
    int last = 1;
    for (const char *q = w->p; *q && last; q += strcspn(q, "/"), q += strspn(q, "/"))
        last = q[0] == '.' && (q[1] == '/' || !q[1]);
    if (!last && check_ancestor(w->dir, w->at, &st, w->err, w->errlen)) return -1;
    return 0;
}

/* Every name of the path in turn: opened without following a link, made
 * 0700 when missing, a link followed as follow_link says. */
static int walk_path(walk *w) {
    for (;;) {
        if (*w->p == '/' && walk_root(w)) return -1;
        if (!*w->p) return 0;
        char name[NAME_MAX + 1];
        if (next_name(w, name)) return -1;
        if (!strcmp(name, ".")) continue;
        int fd = openat(w->cur, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT) {
            if (mkdirat(w->cur, name, 0700) && errno != EEXIST) {
                int e = errno;
                walked_step(w->at, sizeof w->at, name);
                errno = e;
                return sys_fail(w);
            }
            fd = openat(w->cur, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (fd < 0 && (errno == ELOOP || errno == ENOTDIR)) {
            if (follow_link(w, name)) return -1;
            continue;
        }
        walked_step(w->at, sizeof w->at, name);
        if (fd < 0) return sys_fail(w);
        if (descend(w, fd)) return -1;
    }
}

/* The directory reached, reopened readable: the compiler runs in it
 * (fchdir) and names are read in it; "." follows nothing. Then checked
 * as the cache itself. */
static int open_final(rt_cache *c, walk *w) {
    struct stat st;
    c->fd = openat(w->cur, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(w->cur);
    w->cur = -1;
    if (c->fd < 0 || fstat(c->fd, &st)) return sys_fail(w);
    return check_final(w->dir, &st, w->err, w->errlen);
}

/* Walks the path from "/" one name at a time with openat(O_NOFOLLOW), so
 * what is checked is what is opened, and keeps the last descriptor: every
 * later access is relative to it, and no rename or link along the path,
 * after the walk, changes which directory that is. A missing name is
 * created 0700. A symbolic link is followed only when root or this user
 * owns it (its directory passed the check, so no one else can replace it);
 * its target is walked the same way. Steps: name_dir, walk_path,
 * open_final. */
int rt_cache_open(rt_cache *c, char *err, size_t errlen) {
    c->fd = -1;
    walk w = {.dir = c->path, .cur = -1, .err = err, .errlen = errlen};
    if (name_dir(c, &w)) return -1;
    if (walk_path(&w) || open_final(c, &w)) {
        if (w.cur >= 0) close(w.cur);
        rt_cache_close(c);
        return -1;
    }
    return 0;
}

char *rt_cache_path(const rt_cache *c, const char *name) {
    size_t n = strlen(c->path) + strlen(name) + 2;
    char *out = malloc(n);
    RT_CHECK_ALLOC(out);
    snprintf(out, n, "%s/%s", c->path, name);
    return out;
}
