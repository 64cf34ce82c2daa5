/* runtime/data/folder.c — the image-folder dataset: dir/train/CLASS/FILE
 * and dir/val/CLASS/FILE, decoded once at load into fixed-size records the
 * batcher crops, mirrors and normalises as it does CIFAR-10's.
 *
 * Every listing is sorted (strcmp), never readdir's order, so record i is
 * the same file on every machine, and the batcher's (seed, epoch, record)
 * draws give the same batches whatever the worker count.
 */
#include "runtime/data/data.h"
#include "base/bytes.h"
#include "base/err.h"
#include "base/file.h"
#include "base/hash.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/check.h"
#include "runtime/host.h"

/* A path for a message: the folders below the one the user named came
 * from listings, so it is escaped as any name read from a file. */
#define SHOWN(p) base_esc((char[1024]){0}, 1024, (p))

/* The names one folder may hold: past it a listing is refused rather than
 * grown without end. */
#define RT_FOLDER_MAX_ENTRIES (16 << 20)

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in folder `dir` that are folders (want_dir) or not, sorted,
 * hidden ones ('.' first) left out. NULL + message when dir cannot be read. */
static char **list(const char *dir, int want_dir, int *n, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) {
        base_fail(err, errlen, "%s: %s", SHOWN(dir), strerror(errno));
        return NULL;
    }
    int cap = 16;
    char **names = malloc(sizeof *names * (size_t)cap);
    RT_CHECK_ALLOC(names);
    *n = 0;
    struct dirent *e;
    char path[4400];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (*n == RT_FOLDER_MAX_ENTRIES) {
            closedir(d);
            rt_names_free(names, *n);
            base_fail(err, errlen, "%s: more than %d names in the folder; at most %d are read",
                      SHOWN(dir), RT_FOLDER_MAX_ENTRIES, RT_FOLDER_MAX_ENTRIES);
            return NULL;
        }
        base_path_join(path, sizeof path, dir, e->d_name);
        struct stat sb;
        int is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
        if (is_dir != want_dir) continue;
        if (*n == cap) {
            cap *= 2;
            names = realloc(names, sizeof *names * (size_t)cap);
            RT_CHECK_ALLOC(names);
        }
        names[*n] = strdup(e->d_name);
        RT_CHECK_ALLOC(names[*n]);
        (*n)++;
    }
    closedir(d);
    qsort(names, (size_t)*n, sizeof *names, by_name);
    return names;
}

/* dir/train's class folders: at least 1, at most RT_MAX_CLASSES. */
static char **folder_classes(const char *dir, int *n, char *err, size_t errlen) {
    char train[4200];
    base_path_join(train, sizeof train, dir, "train");
    char why[512];
    char **names = list(train, 1, n, why, sizeof why);
    if (!names) {
        base_fail(err, errlen, "%s (an image folder holds train/CLASS/* and val/CLASS/*)", why);
        return NULL;
    }
    if (*n == 0 || *n > RT_MAX_CLASSES) {
        base_fail(err, errlen, "%s: %d class folders; an image folder has 1 to %d", train, *n,
                  RT_MAX_CLASSES);
        rt_names_free(names, *n);
        return NULL;
    }
    return names;
}

/* A CIFAR-10 folder's names file, batches.meta.txt, in dir or in its
 * cifar-10-batches-bin (the folders --data takes): 1 and its path in out,
 * else 0. lstat: a link there is that file, read under the usual rules. */
static int cifar_meta(const char *dir, char *out, size_t n) {
    static const char *const rel[] = {"batches.meta.txt", "cifar-10-batches-bin/batches.meta.txt"};
    struct stat sb;
    for (int i = 0; i < 2; i++)
        if (base_path_join(out, n, dir, rel[i]) < (int)n && lstat(out, &sb) == 0) return 1;
    return 0;
}

char **rt_data_class_names(const char *path, int *n, char *err, size_t errlen) {
    struct stat sb;
    char meta[4200];
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (cifar_meta(path, meta, sizeof meta)) return rt_data_class_names(meta, n, err, errlen);
        char **names = folder_classes(path, n, err, errlen);
        size_t k = strlen(err);
        if (!names && k + 1 < errlen)
            snprintf(err + k, errlen - k, "; a CIFAR-10 folder holds batches.meta.txt");
        return names;
    }
    size_t len;
    char *text = (char *)base_file_read(path, 1 << 20, &len, err, errlen);
    if (!text) return NULL;
    /* Blank lines at the end name no class (CIFAR-10's file ends in one). */
    while (len && (text[len - 1] == '\n' || text[len - 1] == '\r')) len--;
    int cap = 16;
    char **names = malloc(sizeof *names * (size_t)cap);
    RT_CHECK_ALLOC(names);
    *n = 0;
    for (char *line = text, *next; line < text + len; line = next) {
        next = memchr(line, '\n', (size_t)(text + len - line));
        next = next ? next + 1 : text + len;
        size_t k = (size_t)(next - line);
        while (k && (line[k - 1] == '\n' || line[k - 1] == '\r')) k--;
        if (memchr(line, 0, k)) {
            base_fail(err, errlen, "%s: line %d holds a NUL byte; a class name is text", path,
                      *n + 1);
            rt_names_free(names, *n);
            free(text);
            return NULL;
        }
        if (*n == RT_MAX_CLASSES) {
            base_fail(err, errlen, "%s: more than %d class names", path, RT_MAX_CLASSES);
            rt_names_free(names, *n);
            free(text);
            return NULL;
        }
        if (*n == cap) {
            cap *= 2;
            names = realloc(names, sizeof *names * (size_t)cap);
            RT_CHECK_ALLOC(names);
        }
        names[*n] = strndup(line, k);
        RT_CHECK_ALLOC(names[*n]);
        (*n)++;
    }
    free(text);
    return names;
}

typedef struct {
    dev_t dev;
    ino_t ino; /* 0: an empty slot */
} folder_id;

typedef struct {
    char **paths;
    int n, cap;
    folder_id *seen; /* the folders walked, each once: a hash set, at most half full */
    size_t nseen, capseen;
} path_list;

static void push(path_list *l, const char *path) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->paths = realloc(l->paths, sizeof *l->paths * (size_t)l->cap);
        RT_CHECK_ALLOC(l->paths);
    }
    l->paths[l->n] = strdup(path);
    RT_CHECK_ALLOC(l->paths[l->n]);
    l->n++;
}

static size_t seen_hash(dev_t dev, ino_t ino) {
    uint64_t k[2] = {(uint64_t)dev, (uint64_t)ino};
    return (size_t)base_fnv1a(BASE_FNV1A_INIT, k, sizeof k);
}

/* 1 when the folder dir (a link to one followed) was walked before, else
 * records it: a folder holding links to itself or its parents is walked
 * once, and so is one reached by two links. */
static int seen_before(path_list *l, const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) != 0) return 0; /* list() names the error */
    /* A hash set, grown at half full: 30000 folders searched as a list
     * took seconds, and a million would take hours. */
    if (2 * (l->nseen + 1) > l->capseen) {
        size_t old = l->capseen;
        folder_id *was = l->seen;
        l->capseen = old ? 2 * old : 64;
        l->seen = calloc(l->capseen, sizeof *l->seen);
        RT_CHECK_ALLOC(l->seen);
        l->nseen = 0;
        for (size_t i = 0; i < old; i++)
            if (was[i].ino || was[i].dev) {
                size_t j = seen_hash(was[i].dev, was[i].ino) & (l->capseen - 1);
                while (l->seen[j].ino || l->seen[j].dev) j = (j + 1) & (l->capseen - 1);
                l->seen[j] = was[i], l->nseen++;
            }
        free(was);
    }
    size_t j = seen_hash(sb.st_dev, sb.st_ino) & (l->capseen - 1);
    for (; l->seen[j].ino || l->seen[j].dev; j = (j + 1) & (l->capseen - 1))
        if (l->seen[j].dev == sb.st_dev && l->seen[j].ino == sb.st_ino) return 1;
    l->seen[j].dev = sb.st_dev, l->seen[j].ino = sb.st_ino;
    l->nseen++;
    return 0;
}

/* dir's files, then each subfolder's, depth-first in name order; each
 * folder once (seen_before); at most RT_PREDICT_MAX_IMAGES files. */
static int walk(path_list *l, const char *dir, int depth, char *err, size_t errlen) {
    int nf, nd;
    char path[4600];
    if (seen_before(l, dir)) return 0;
    char **files = list(dir, 0, &nf, err, errlen);
    if (!files) return -1;
    if (nf > RT_PREDICT_MAX_IMAGES - l->n) {
        rt_names_free(files, nf);
        return base_fail(err, errlen,
                         "%s: more than %d files under the folder; dprun predict reads at most %d "
                         "at once",
                         SHOWN(dir), RT_PREDICT_MAX_IMAGES, RT_PREDICT_MAX_IMAGES);
    }
    for (int i = 0; i < nf; i++) {
        base_path_join(path, sizeof path, dir, files[i]);
        push(l, path);
    }
    rt_names_free(files, nf);
    if (depth == 8) return 0;
    char **dirs = list(dir, 1, &nd, err, errlen);
    if (!dirs) return -1;
    int rc = 0;
    for (int i = 0; i < nd && !rc; i++) {
        base_path_join(path, sizeof path, dir, dirs[i]);
        rc = walk(l, path, depth + 1, err, errlen);
    }
    rt_names_free(dirs, nd);
    return rc;
}

char **rt_data_image_files(const char *dir, int *n, char *err, size_t errlen) {
    path_list l = {NULL, 0, 0, NULL, 0, 0};
    int rc = walk(&l, dir, 0, err, errlen);
    free(l.seen);
    if (rc || (l.n == 0 && base_fail(err, errlen, "%s: no files in the folder", dir))) {
        rt_names_free(l.paths, l.n);
        return NULL;
    }
    *n = l.n;
    return l.paths;
}

/* ---- decoding on threads: image i into slot i, so the result is the same
 * whatever the thread count; of several bad files the first is named. */

typedef struct {
    const char *const *paths;
    int n, side, h, w;
    uint8_t *out;
    pthread_mutex_t mu;
    int next, bad; /* the next image to take; the first that failed (n: none) */
    int (*stop)(void);
    char err[1024];
} fit_job;

static void *fit_worker(void *arg) {
    fit_job *j = arg;
    size_t rec = (size_t)3 * (size_t)j->h * (size_t)j->w;
    char err[1024];
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int i = j->next < j->bad ? j->next++ : j->n; /* none past a failure */
        pthread_mutex_unlock(&j->mu);
        if (i >= j->n) return NULL;
        if (j->stop && j->stop()) { /* a signal: no more images are taken */
            pthread_mutex_lock(&j->mu);
            if (i < j->bad) j->bad = i, snprintf(j->err, sizeof j->err, "stopped by a signal");
            pthread_mutex_unlock(&j->mu);
            continue;
        }
        rt_image im;
        if (rt_image_load(j->paths[i], j->side, &im, err, sizeof err)) {
            pthread_mutex_lock(&j->mu);
            if (i < j->bad) j->bad = i, snprintf(j->err, sizeof j->err, "%s", err);
            pthread_mutex_unlock(&j->mu);
            continue;
        }
        rt_image_fit(&im, j->side, j->h, j->w, j->out + rec * (size_t)i);
        rt_image_free(&im);
    }
}

int rt_images_fit_all(const char *const *paths, int n, int side, int h, int w, int threads,
                      int (*stop)(void), uint8_t *out, char *err, size_t errlen) {
    fit_job j = {paths, n, side, h, w, out, PTHREAD_MUTEX_INITIALIZER, 0, n, stop, {0}};
    if (threads > n) threads = n;
    pthread_t tid[RT_PIPELINE_MAX_WORKERS];
    int started = 0;
    while (started < threads - 1 && started < RT_PIPELINE_MAX_WORKERS &&
           pthread_create(&tid[started], NULL, fit_worker, &j) == 0)
        started++;
    fit_worker(&j); /* this thread is one of them */
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
    pthread_mutex_destroy(&j.mu);
    return j.bad < n ? base_fail(err, errlen, "%s", j.err) : 0;
}

rt_dataset *rt_data_imagefolder(const char *dir, int train, int side, int h, int w, int threads,
                                int (*stop)(void), char *err, size_t errlen) {
    int nclass = 0, nsplit = 0;
    char **classes = folder_classes(dir, &nclass, err, errlen);
    if (!classes) return NULL;
    const char *split = train ? "train" : "val";
    char sdir[4200], cdir[4400], path[4600];
    base_path_join(sdir, sizeof sdir, dir, split);
    rt_dataset *ds = NULL;
    char **files = NULL;
    int nfiles = 0;
    if (!train) { /* val holds exactly train's classes */
        char **got = list(sdir, 1, &nsplit, err, errlen);
        if (!got) goto fail;
        int same = nsplit == nclass;
        for (int i = 0; same && i < nclass; i++) same = !strcmp(got[i], classes[i]);
        if (!same) {
            char *odd = NULL;
            for (int i = 0; i < nsplit && !odd; i++)
                if (!bsearch(&got[i], classes, (size_t)nclass, sizeof *classes, by_name))
                    odd = got[i];
            for (int i = 0; i < nclass && !odd; i++)
                if (!bsearch(&classes[i], got, (size_t)nsplit, sizeof *got, by_name))
                    odd = classes[i];
            base_fail(err, errlen,
                      "%s: %d class folders, train/ has %d; the class sets differ ('%s' is in "
                      "only one)",
                      sdir, nsplit, nclass, BASE_ESC(odd ? odd : "?"));
            rt_names_free(got, nsplit);
            goto fail;
        }
        rt_names_free(got, nsplit);
    }
    /* Every file with its label, listed once. */
    path_list l = {NULL, 0, 0, NULL, 0, 0};
    uint8_t *labels = NULL;
    int listed = 1;
    for (int k = 0; k < nclass && listed; k++) {
        base_path_join(cdir, sizeof cdir, sdir, classes[k]);
        files = list(cdir, 0, &nfiles, err, errlen);
        if (!(listed = files != NULL)) break;
        labels = realloc(labels, (size_t)(l.n + nfiles) + 1);
        RT_CHECK_ALLOC(labels);
        for (int i = 0; i < nfiles; i++) {
            base_path_join(path, sizeof path, cdir, files[i]);
            labels[l.n] = (uint8_t)k;
            push(&l, path);
        }
        rt_names_free(files, nfiles);
        files = NULL;
    }
    if (!listed ||
        (l.n == 0 && base_fail(err, errlen, "%s: no images in its class folders", sdir))) {
        rt_names_free(l.paths, l.n);
        free(labels);
        goto fail;
    }
    /* Decoded once, held in memory: refused up front when that cannot fit. */
    int64_t bytes = base_bytes_mul(base_bytes_mul(3 * (int64_t)h, w), l.n), host = rt_host_memory();
    if (host > 0 && bytes > host / 2) {
        char need[32], have[32];
        base_fail(err, errlen,
                  "%s: %d images of 3x%dx%d take %s decoded (they are held in memory), more than "
                  "half of this machine's %s: a smaller resize, or fewer images",
                  sdir, l.n, h, w, base_bytes_str(bytes, need, sizeof need),
                  base_bytes_str(host, have, sizeof have));
        rt_names_free(l.paths, l.n);
        free(labels);
        goto fail;
    }
    ds = calloc(1, sizeof *ds);
    RT_CHECK_ALLOC(ds);
    snprintf(ds->name, sizeof ds->name, "%.250s", dir);
    ds->c = 3, ds->h = h, ds->w = w, ds->classes = nclass;
    ds->labels = labels;
    ds->pixels = malloc((size_t)3 * (size_t)h * (size_t)w * (size_t)l.n + 1);
    RT_CHECK_ALLOC(ds->pixels);
    int rc = rt_images_fit_all((const char *const *)l.paths, l.n, side, h, w, threads, stop,
                               ds->pixels, err, errlen);
    rt_names_free(l.paths, l.n);
    if (rc) goto fail;
    ds->count = l.n;
    ds->class_names = classes;
    return ds;
fail:
    rt_names_free(files, nfiles);
    rt_names_free(classes, nclass);
    rt_dataset_free(ds);
    return NULL;
}
