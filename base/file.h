/* base/file.h — the one way dpc and dprun write and bound-read files.
 *
 * Usage:
 *     base_file *f = base_file_open("out.safetensors", err, sizeof err);  // NULL + message
 *     if (!f) ...;
 *     base_file_write(f, bytes, n);        // buffered errors: checked at commit
 *     if (base_file_commit(f, err, sizeof err)) ...;  // or base_file_abort(f)
 *
 *     base_file_write_all("a.plan", buf, len, err, sizeof err);   // the same, at once
 *     base_file_write_all_in("kern", "train-c/steps.txt", buf, len, err, sizeof err);
 *     base_file_check_writable("m.json", "--metrics", err, sizeof err);  // before work
 *     base_file_check_dir("ck", NULL, "--checkpoint", err, sizeof err);   // the same, a folder
 *     unsigned char *b = base_file_read("x", max, &len, err, sizeof err);
 *
 *     base_file_set *s = base_file_set_new();  // the files of one run
 *     if (base_file_set_add(s, BASE_FILE_INPUT, "the plan", "a.plan", err, sizeof err) ||
 *         base_file_set_add(s, BASE_FILE_OUTPUT, "--metrics", "m.jsonl", err, sizeof err)) ...;
 *     base_file_set_free(s);
 *
 * A write makes a fresh temporary (O_CREAT|O_EXCL, an unpredictable name)
 * in the target's folder, so a link planted at any name is never opened;
 * the data is fsynced, renamed over the target (renameat, in the folder
 * opened at the start) and the folder fsynced, so the target is always the
 * old file or the complete new one. A target that exists and is not a
 * regular file (a device, FIFO, directory) is refused rather than replaced.
 * The replacement keeps the old file's permission bits (else 0666 less the
 * umask, as fopen).
 *
 * Links. A name the user gave (-o, --metrics, --checkpoint DIR) that is a
 * symbolic link is followed, to the file it names, only when the link and
 * the folder holding it both belong to the user running this (the euid):
 * the kernel's protected_symlinks rule made strict, since the writer, not
 * the kernel, follows it. Another user's link, or a link in another user's
 * folder, is refused with a message naming it and its owner. A name the
 * tool chose under such a folder (base_file_open_in: DIR/train-c/steps.txt,
 * DIR/run-1.log, DIR/checkpoint.safetensors) is never followed: each of its
 * folders is created when missing and opened O_NOFOLLOW, and a link at any
 * of its components is refused.
 *
 * Same files. base_file_set compares the files of one run by where they land
 * (the nearest existing folder's device and inode, and the rest of the
 * path; a link at the last component followed), so two names of one file
 * match whether or not it exists yet. An output may be neither an input
 * nor another output, and nothing of the run may lie in a folder the run
 * fills with names of its own (--emit-kernels DIR/train-c).
 *
 * Reading. Every reader of dpc and dprun opens through here
 * (base_file_open_read, base_file_read, base_file_read_at): opened
 * O_NONBLOCK, so a FIFO's open does not wait for a writer; then, by fstat
 * and fstatfs of what was opened, only a regular file on an ordinary file
 * system is read: a FIFO, socket, character or block device, directory, or
 * a file of the kernel's (/proc, /sys, debugfs, tracefs, cgroup ...: they
 * say they are regular, and /proc/kmsg blocks a read forever) is refused
 * at once with a message naming it. base_file_read reads at most max
 * bytes, the size checked before anything is allocated.
 */
#ifndef DPC_BASE_FILE_H
#define DPC_BASE_FILE_H

#include <stddef.h>

typedef struct base_file base_file;

/* Starts replacing path, a name the user gave. NULL + message (naming
 * path) on failure. */
base_file *base_file_open(const char *path, char *err, size_t errlen);
/* Starts replacing dir/rel: dir the user's folder (created when missing,
 * its parent must exist), rel names the tool chose ("train-c/steps.txt"):
 * its folders created when missing, a link at any of its components
 * refused. */
base_file *base_file_open_in(const char *dir, const char *rel, char *err, size_t errlen);
/* Appends n bytes; a failure is remembered and reported by commit. */
void base_file_write(base_file *f, const void *p, size_t n);
/* fsync, rename over the target, fsync the directory; frees f. 0 or -1. */
int base_file_commit(base_file *f, char *err, size_t errlen);
/* Removes the temporary, leaves the target as it was; frees f. */
void base_file_abort(base_file *f);
/* open + write + commit. */
int base_file_write_all(const char *path, const void *p, size_t n, char *err, size_t errlen);
/* base_file_open and base_file_write_all for name in the folder dfd, which the
 * file takes over (closed with it: pass a dup to keep one); shown names it
 * in messages. For folders dpc holds open (the kernel cache). */
base_file *base_file_open_at(int dfd, const char *name, const char *shown, char *err,
                             size_t errlen);
int base_file_write_all_at(int dfd, const char *name, const char *shown, const void *p, size_t n,
                           char *err, size_t errlen);
int base_file_write_all_in(const char *dir, const char *rel, const void *p, size_t n, char *err,
                           size_t errlen);

/* Checks now that path could be written later: an existing target is a
 * regular file (through a link the rule above allows), and a temporary
 * can be made in its folder (made and removed). what names the option in
 * the message ("--metrics"). 0 or -1 + message. */
int base_file_check_writable(const char *path, const char *what, char *err, size_t errlen);
/* The same for a folder the run will write files in: dir the user's
 * (--checkpoint, --sweep-dir), created when missing (its parent must
 * exist); sub NULL, or a folder the tool names under it (created, never a
 * link); then a temporary made in it and removed. */
int base_file_check_dir(const char *dir, const char *sub, const char *what, char *err,
                        size_t errlen);
/* That dir/rel (as base_file_open_in) is not a link and, when it exists, a
 * regular file; rel's folders are created. No temporary is made. */
int base_file_check_in(const char *dir, const char *rel, const char *what, char *err,
                       size_t errlen);

/* The files of one run (above). */
typedef struct base_file_set base_file_set;
enum {
    BASE_FILE_INPUT,  /* read by the run */
    BASE_FILE_OUTPUT, /* written by it */
    BASE_FILE_FOLDER  /* a folder it writes names of its own in: nothing else may be there */
};
base_file_set *base_file_set_new(void);
void base_file_set_free(base_file_set *s);
/* Adds path, of a kind above; what names it in messages ("-o", "the model
 * being compiled"). -1 + a message naming both when it clashes with one
 * added before. */
int base_file_set_add(base_file_set *s, int kind, const char *what, const char *path, char *err,
                      size_t errlen);
/* The clash check of an output without adding it: for the many names the
 * tool makes in one folder, which cannot clash with each other. */
int base_file_set_check(const base_file_set *s, const char *what, const char *path, char *err,
                        size_t errlen);

/* Opens path for reading only when it is a regular file (O_NONBLOCK, so
 * a FIFO does not block the open); its size in *size. fd or -1 + message. */
int base_file_open_read(const char *path, long long *size, char *err, size_t errlen);
/* Reads exactly n bytes from fd, retrying when a signal interrupts: 0; -1
 * on a read error (errno says why); 1 when the file ends first. */
int base_file_read_exact(int fd, void *p, size_t n);
/* The whole of a regular file of at most max bytes (NUL-terminated, the
 * terminator not counted in *len); NULL + message otherwise. */
unsigned char *base_file_read(const char *path, size_t max, size_t *len, char *err, size_t errlen);
/* The same, path named shown in messages (a name read from a folder,
 * escaped by the caller). */
unsigned char *base_file_read_as(const char *path, const char *shown, size_t max, size_t *len,
                                 char *err, size_t errlen);
/* The same for name in the folder dfd, never through a link at name; with
 * BASE_FILE_OURS only a file the euid owns. shown names it in messages. */
enum { BASE_FILE_OURS = 1 };
unsigned char *base_file_read_at(int dfd, const char *name, const char *shown, unsigned flags,
                                 size_t max, size_t *len, char *err, size_t errlen);

/* dir/name into out (n bytes), as snprintf (its return value too): dir's
 * trailing slashes are not doubled ("pets/" + "train" is "pets/train", "/"
 * + "x" is "/x"), so a folder the user wrote with a slash reads as usual
 * in messages. */
int base_path_join(char *out, size_t n, const char *dir, const char *name);

#endif
