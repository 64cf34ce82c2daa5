/* tests/unit/test_file.c — base/file.h: a write never follows a link planted
 * at a temporary's name, replaces only regular files, writes through a
 * link the caller named to the file it names, keeps the old file on
 * abort; reads refuse FIFOs and devices at once and bound the size; a
 * name of the tool's own is never written through a link; a set of a
 * run's files finds two names of one file, existing or not. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "tests/harness.h"

static char dir[256];

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static int holds(const char *path, const char *text) {
    size_t len;
    char err[512];
    unsigned char *b = base_file_read(path, 1 << 20, &len, err, sizeof err);
    int same = b && len == strlen(text) && !memcmp(b, text, len);
    free(b);
    return same;
}

static const char *at(const char *name) {
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

TEST(planted_links_are_not_followed) {
    char err[512];
    put(at("victim"), "precious");
    /* The old writers' names: PATH.tmp and PATH.tmp.PID.0..2. */
    CHECK(symlink(at("victim"), at("out.tmp")) == 0);
    char name[64];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "out.tmp.%ld.%d", (long)getpid(), i);
        CHECK(symlink(at("victim"), at(name)) == 0);
    }
    CHECK(base_file_write_all(at("out"), "new", 3, err, sizeof err) == 0);
    CHECK(holds(at("victim"), "precious"));
    CHECK(holds(at("out"), "new"));
    struct stat sb;
    CHECK(lstat(at("out"), &sb) == 0 && S_ISREG(sb.st_mode));
    CHECK(lstat(at("out.tmp"), &sb) == 0 && S_ISLNK(sb.st_mode)); /* left alone */
}

TEST(a_named_link_is_written_through) {
    char err[512];
    CHECK(mkdir(at("real"), 0777) == 0);
    put(at("real/target"), "old");
    chmod(at("real/target"), 0640);
    CHECK(symlink("real/target", at("link")) == 0);
    CHECK(base_file_write_all(at("link"), "through", 7, err, sizeof err) == 0);
    struct stat sb;
    CHECK(lstat(at("link"), &sb) == 0 && S_ISLNK(sb.st_mode)); /* still the link */
    CHECK(holds(at("real/target"), "through"));
    CHECK(stat(at("real/target"), &sb) == 0 && (sb.st_mode & 0777) == 0640); /* bits kept */
    /* No temporary left in either directory. */
    CHECK(access(at("link.tmp"), F_OK) != 0);
}

TEST(only_regular_files_are_replaced) {
    char err[512];
    CHECK(mkfifo(at("fifo"), 0666) == 0);
    CHECK(base_file_write_all(at("fifo"), "x", 1, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "not a regular file (a FIFO)") != NULL, "%s", err);
    struct stat sb;
    CHECK(lstat(at("fifo"), &sb) == 0 && S_ISFIFO(sb.st_mode));
    CHECK(base_file_write_all("/dev/null", "x", 1, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "a character device") != NULL, "%s", err);
    CHECK(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode));
    CHECK(mkdir(at("adir"), 0777) == 0);
    CHECK(base_file_write_all(at("adir"), "x", 1, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "a directory") != NULL, "%s", err);
    CHECK(base_file_check_writable(at("fifo"), "--metrics", err, sizeof err) == -1);
    CHECK_MSG(strncmp(err, "--metrics ", 10) == 0, "%s", err);
    CHECK(base_file_check_writable(at("no/such/x"), "--save-params", err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "cannot write in") != NULL, "%s", err);
    CHECK(base_file_check_writable(at("fresh"), "-o", err, sizeof err) == 0);
    CHECK(access(at("fresh"), F_OK) != 0); /* the check creates nothing */
}

TEST(abort_keeps_the_old_file) {
    char err[512];
    put(at("keep"), "before");
    base_file *f = base_file_open(at("keep"), err, sizeof err);
    CHECK(f != NULL);
    if (f) {
        base_file_write(f, "after", 5);
        CHECK(holds(at("keep"), "before")); /* not visible before commit */
        base_file_abort(f);
    }
    CHECK(holds(at("keep"), "before"));
}

TEST(reads_are_bounded) {
    char err[512];
    size_t len;
    /* O_NONBLOCK: a FIFO without a writer does not block the open. */
    CHECK(base_file_read(at("fifo"), 100, &len, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "not a regular file (a FIFO)") != NULL, "%s", err);
    CHECK(base_file_read("/dev/zero", 100, &len, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "a character device") != NULL, "%s", err);
    put(at("big"), "0123456789");
    CHECK(base_file_read(at("big"), 9, &len, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "10 bytes, more than the 9") != NULL, "%s", err);
    unsigned char *b = base_file_read(at("big"), 10, &len, err, sizeof err);
    CHECK(b && len == 10 && b[10] == 0);
    free(b);
}

TEST(names_of_our_own_never_follow_a_link) {
    char err[512];
    put(at("victim2"), "precious");
    CHECK(mkdir(at("kern"), 0777) == 0);
    /* A new folder and file under the user's folder. */
    CHECK(base_file_write_all_in(at("kern"), "train-c/steps.txt", "s", 1, err, sizeof err) == 0);
    CHECK(holds(at("kern/train-c/steps.txt"), "s"));
    CHECK(base_file_write_all_in(at("kern"), "train-c/steps.txt", "t", 1, err, sizeof err) == 0);
    CHECK(holds(at("kern/train-c/steps.txt"), "t"));
    /* A link at the file's name, or at a folder's, is refused. */
    CHECK(symlink(at("victim2"), at("kern/train-c/k0.c")) == 0);
    CHECK(base_file_write_all_in(at("kern"), "train-c/k0.c", "x", 1, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "k0.c: a symbolic link at a name dpc chose") != NULL, "%s", err);
    CHECK(mkdir(at("away"), 0777) == 0);
    CHECK(symlink(at("away"), at("kern/eval-c")) == 0);
    CHECK(base_file_write_all_in(at("kern"), "eval-c/steps.txt", "x", 1, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "kern/eval-c: a symbolic link at a name dpc chose") != NULL, "%s", err);
    CHECK(base_file_check_in(at("kern"), "train-c/k0.c", "--emit-kernels", err, sizeof err) == -1);
    CHECK(base_file_check_dir(at("kern"), "eval-c", "--sweep-dir", err, sizeof err) == -1);
    CHECK(holds(at("victim2"), "precious"));
    CHECK(access(at("away/steps.txt"), F_OK) != 0);
    /* The user's own link at the user's folder is followed. */
    CHECK(symlink(at("kern"), at("kern.link")) == 0);
    CHECK(base_file_write_all_in(at("kern.link"), "train-c/steps.txt", "u", 1, err, sizeof err) ==
          0);
    CHECK(holds(at("kern/train-c/steps.txt"), "u"));
}

TEST(a_set_compares_where_files_land) {
    char err[512];
    CHECK(mkdir(at("s"), 0777) == 0);
    CHECK(symlink(at("s"), at("s.alias")) == 0);
    base_file_set *s = base_file_set_new();
    CHECK(base_file_set_add(s, BASE_FILE_INPUT, "the plan", at("s/p.plan"), err, sizeof err) == 0);
    CHECK(base_file_set_add(s, BASE_FILE_INPUT, "a --data file", at("s.alias/p.plan"), err,
                            sizeof err) == 0);
    /* Not there yet, named two ways. */
    CHECK(base_file_set_add(s, BASE_FILE_OUTPUT, "--metrics", at("s/new/../m"), err, sizeof err) ==
          0);
    CHECK(base_file_set_add(s, BASE_FILE_OUTPUT, "--save-params", at("s.alias/m"), err,
                            sizeof err) == -1);
    CHECK_MSG(strstr(err, "--metrics ") == err && strstr(err, "name the same file"), "%s", err);
    CHECK(base_file_set_add(s, BASE_FILE_OUTPUT, "-o", at("s.alias/./p.plan"), err, sizeof err) ==
          -1);
    CHECK_MSG(strstr(err, "is the plan (") != NULL, "%s", err);
    /* A folder the run fills: nothing of the run may be in it. */
    CHECK(base_file_set_add(s, BASE_FILE_FOLDER, "--emit-kernels", at("s/k/train-c"), err,
                            sizeof err) == 0);
    CHECK(base_file_set_add(s, BASE_FILE_INPUT, "the model", at("s.alias/k/train-c/steps.txt"), err,
                            sizeof err) == -1);
    CHECK_MSG(strstr(err, "a folder --emit-kernels writes") != NULL, "%s", err);
    CHECK(base_file_set_add(s, BASE_FILE_OUTPUT, "-o", at("s/k/x.plan"), err, sizeof err) == 0);
    CHECK(base_file_set_check(s, "--dump-dir", at("s/k/x.plan"), err, sizeof err) == -1);
    CHECK(base_file_set_check(s, "--dump-dir", at("s/k/y.ir"), err, sizeof err) == 0);
    base_file_set_free(s);
}

TEST(a_join_never_doubles_a_slash) {
    char out[64];
    CHECK(base_path_join(out, sizeof out, "pets", "train") == 10 && !strcmp(out, "pets/train"));
    CHECK(base_path_join(out, sizeof out, "pets/", "train") == 10 && !strcmp(out, "pets/train"));
    CHECK(base_path_join(out, sizeof out, "pets//", "train/a") == 12 &&
          !strcmp(out, "pets/train/a"));
    CHECK(base_path_join(out, sizeof out, "/", "x") == 2 && !strcmp(out, "/x"));
    CHECK(base_path_join(out, sizeof out, "//", "x") == 2 && !strcmp(out, "/x"));
    CHECK(base_path_join(out, 4, "pets", "train") == 10); /* cut, as snprintf says */
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dpc-test-file-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    RUN(planted_links_are_not_followed);
    RUN(a_named_link_is_written_through);
    RUN(only_regular_files_are_replaced);
    RUN(abort_keeps_the_old_file);
    RUN(reads_are_bounded);
    RUN(names_of_our_own_never_follow_a_link);
    RUN(a_set_compares_where_files_land);
    RUN(a_join_never_doubles_a_slash);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) return 1;
    return harness_done();
}
