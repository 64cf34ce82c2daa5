/* base/trust.c — the ownership rule and the walk that applies it. See
 * trust.h. */
#include "base/trust.h"
#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* -1 with errno EPERM: a refusal by the rule (its message already in err). */
static int refused(void) {
    errno = EPERM;
    return -1;
}

/* What a message is about: "WHAT: AT, on its path," for a name on the
 * way, or "WHAT" alone when AT is the path itself (how->path), so a path
 * is named once. */
static const char *about(char *buf, size_t n, const base_trust_how *how, const char *at) {
    if (how->path && !strcmp(how->path, at))
        snprintf(buf, n, "%s", how->what);
    else
        snprintf(buf, n, "%s: %s, on its path,", how->what, at);
    return buf;
}

int base_trust_check_dir(const base_trust_how *how, const char *at, const struct stat *st,
                         char *err, size_t errlen) {
    uid_t me = geteuid();
    unsigned mode = (unsigned)(st->st_mode & 07777);
    const char *hint = how->hint ? how->hint : "";
    char who[2 * PATH_MAX + 64];
    if (st->st_uid != 0 && st->st_uid != me) {
        base_fail(err, errlen,
                  "%s belongs to uid %ld (mode %04o), not to root or this user (uid %ld); %s%s",
                  about(who, sizeof who, how, at), (long)st->st_uid, mode, (long)me, how->through,
                  hint);
        return refused();
    }
    if ((mode & 022) && !(mode & S_ISVTX)) {
        base_fail(err, errlen,
                  "%s is writable by %s and not sticky (mode %04o, owner uid %ld); %s%s",
                  about(who, sizeof who, how, at), mode & 002 ? "everyone" : "its group", mode,
                  (long)st->st_uid, how->through, hint);
        return refused();
    }
    return 0;
}

/* at := at/name, or its parent for "..": the physical path walked so far. */
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

/* One walk: the path left to walk (todo, from p), the directory reached
 * (cur) and its physical path (at); file: the last name is a file, left in
 * name once reached. */
typedef struct {
    const base_trust_how *how;
    char todo[2 * PATH_MAX];
    char *p;
    char at[PATH_MAX];
    int cur, links, file;
    char name[NAME_MAX + 1];
    char *err;
    size_t errlen;
} walk;

/* A system call's failure (errno, kept) where the walk stands; -1. */
static int sys_fail(walk *w) {
    int e = errno;
    if (w->how->path && !strcmp(w->how->path, w->at))
        base_fail(w->err, w->errlen, "%s: %s", w->how->what, strerror(e));
    else
        base_fail(w->err, w->errlen, "%s: %s: %s", w->how->what, w->at, strerror(e));
    errno = e;
    return -1;
}

/* path as an absolute path to walk (w->todo). */
static int start(walk *w, const char *path) {
    char cwd[PATH_MAX];
    int n;
    if (path[0] == '/')
        n = snprintf(w->todo, sizeof w->todo, "%s", path);
    else if (getcwd(cwd, sizeof cwd))
        n = snprintf(w->todo, sizeof w->todo, "%s/%s", cwd, path);
    else
        return base_fail(w->err, w->errlen, "%s: cannot resolve it: getcwd: %s", w->how->what,
                         strerror(errno));
    if (n < 0 || (size_t)n >= sizeof w->todo) {
        errno = ENAMETOOLONG;
        return sys_fail(w);
    }
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
    if (base_trust_check_dir(w->how, w->at, &st, w->err, w->errlen)) return -1;
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

/* name, not opened as a directory (errno ELOOP or ENOTDIR) or a link at
 * the end: a symbolic link owned by root or this user is followed, its
 * target walked in its place (a relative one from the link's directory),
 * at most 40 links in all; anything else fails. */
static int follow_link(walk *w, const char *name) {
    int e = errno;
    struct stat ls;
    walked_step(w->at, sizeof w->at, name);
    if (fstatat(w->cur, name, &ls, AT_SYMLINK_NOFOLLOW) || !S_ISLNK(ls.st_mode)) {
        errno = e;
        return sys_fail(w);
    }
    if (ls.st_uid != 0 && ls.st_uid != geteuid()) {
        char who[2 * PATH_MAX + 64];
        base_fail(w->err, w->errlen,
                  "%s is a symbolic link owned by uid %ld, not by root or this user (uid %ld); "
                  "refusing to follow it%s",
                  about(who, sizeof who, w->how, w->at), (long)ls.st_uid, (long)geteuid(),
                  w->how->hint ? w->how->hint : "");
        return refused();
    }
    char target[PATH_MAX], next[sizeof w->todo];
    ssize_t n = ++w->links > 40 ? -1 : readlinkat(w->cur, name, target, sizeof target - 1);
    if (n <= 0) {
        errno = w->links > 40 ? ELOOP : n == 0 ? ENOENT : errno;
        return sys_fail(w);
    }
    target[n] = 0;
    if (snprintf(next, sizeof next, "%s%s%s", target, *w->p ? "/" : "", w->p) >= (int)sizeof next) {
        errno = ENAMETOOLONG;
        return sys_fail(w);
    }
    memcpy(w->todo, next, strlen(next) + 1);
    w->p = w->todo;
    /* a relative target goes on from the link's directory */
    walked_step(w->at, sizeof w->at, "..");
    return 0;
}

/* fd, the directory just opened, becomes the one reached; it is checked
 * unless only "." names follow and the caller checks the last itself. */
static int descend(walk *w, int fd) {
    struct stat st;
    close(w->cur);
    w->cur = fd;
    if (fstat(w->cur, &st)) return sys_fail(w);
    int last = 1;
    for (const char *q = w->p; *q && last; q += strcspn(q, "/"), q += strspn(q, "/"))
        last = q[0] == '.' && (q[1] == '/' || !q[1]);
    if ((w->how->check_last || !last) &&
        base_trust_check_dir(w->how, w->at, &st, w->err, w->errlen))
        return -1;
    return 0;
}

/* The last name of a file walk: a link is followed (1: walk on), anything
 * else is the file, its name kept (0). */
static int reach_file(walk *w, const char *name) {
    struct stat st;
    if (fstatat(w->cur, name, &st, AT_SYMLINK_NOFOLLOW)) {
        walked_step(w->at, sizeof w->at, name);
        return sys_fail(w);
    }
    if (S_ISLNK(st.st_mode)) return follow_link(w, name) ? -1 : 1;
    memcpy(w->name, name, strlen(name) + 1);
    return 0;
}

/* Every name of the path in turn: opened without following a link, made
 * 0700 when missing (how->create), a link followed as follow_link says. */
static int walk_path(walk *w) {
    for (;;) {
        if (*w->p == '/' && walk_root(w)) return -1;
        if (!*w->p) return w->file ? (errno = EISDIR, sys_fail(w)) : 0;
        char name[NAME_MAX + 1];
        if (next_name(w, name)) return -1;
        if (!strcmp(name, ".")) continue;
        if (w->file && !*w->p && strcmp(name, "..")) {
            int r = reach_file(w, name);
            if (r <= 0) return r;
            continue;
        }
        int fd = openat(w->cur, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT && w->how->create) {
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

int base_trust_walk_path(int *dir, char *at, size_t atlen, const char *path,
                         const base_trust_how *how, char *err, size_t errlen) {
    walk w = {.how = how, .cur = -1, .err = err, .errlen = errlen};
    *dir = -1;
    if (start(&w, path) || walk_path(&w)) {
        int e = errno;
        if (w.cur >= 0) close(w.cur);
        errno = e;
        return -1;
    }
    *dir = w.cur;
    if (at) snprintf(at, atlen, "%s", w.at);
    return 0;
}

void base_trust_file_close(base_trust_file *f) {
    if (f->fd >= 0) close(f->fd);
    if (f->dir >= 0) close(f->dir);
    f->fd = f->dir = -1;
}

/* The file itself: a regular file that root or this user owns and no one
 * else may write. */
static int check_file(const char *path, const struct stat *st, const char *through, char *err,
                      size_t errlen) {
    uid_t me = geteuid();
    unsigned mode = (unsigned)(st->st_mode & 07777);
    if (!S_ISREG(st->st_mode))
        return base_fail(err, errlen, "%s is not a regular file; %s", path, through);
    if (st->st_uid != 0 && st->st_uid != me)
        return base_fail(err, errlen,
                         "%s belongs to uid %ld (mode %04o), not to root or this user (uid %ld); "
                         "%s",
                         path, (long)st->st_uid, mode, (long)me, through);
    if (mode & 022)
        return base_fail(err, errlen, "%s is writable by %s (mode %04o); %s", path,
                         mode & 002 ? "everyone" : "its group", mode, through);
    return 0;
}

int base_trust_open_file(base_trust_file *f, const char *path, const char *through, char *err,
                         size_t errlen) {
    /* .path: a refusal of the path itself (a link at its name) names it once */
    base_trust_how how = {.what = path, .through = through, .path = path, .check_last = 1};
    walk w = {.how = &how, .cur = -1, .file = 1, .err = err, .errlen = errlen};
    f->dir = f->fd = -1;
    f->name[0] = f->real[0] = 0;
    if (start(&w, path) || walk_path(&w)) {
        int e = errno;
        if (w.cur >= 0) close(w.cur);
        errno = e;
        return -1;
    }
    f->dir = w.cur;
    memcpy(f->name, w.name, sizeof f->name);
    snprintf(f->real, sizeof f->real, "%s%s%s", w.at, strcmp(w.at, "/") ? "/" : "", w.name);
    /* nothing but a regular file is opened (a device's open may act) */
    if (!fstatat(f->dir, f->name, &f->st, AT_SYMLINK_NOFOLLOW) && !S_ISREG(f->st.st_mode)) {
        check_file(path, &f->st, through, err, errlen);
        base_trust_file_close(f);
        errno = EPERM;
        return -1;
    }
    f->fd = openat(f->dir, f->name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (f->fd < 0 || fstat(f->fd, &f->st)) {
        int e = errno;
        base_fail(err, errlen, "%s: %s: %s", path, f->real, strerror(e));
        base_trust_file_close(f);
        errno = e;
        return -1;
    }
    if (check_file(path, &f->st, through, err, errlen)) {
        base_trust_file_close(f);
        errno = EPERM;
        return -1;
    }
    return 0;
}
