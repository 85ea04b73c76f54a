/*
 * metabench.c - one epoch of a data loader's metadata and small reads over a
 * directory tree, directly on the file system or through granaryd, for
 * bench/meta.sh (issue 15).
 *
 *   metabench direct ROOT          walk (opendir/readdir, stat of each
 *                                  entry), then open, read and close every file
 *   metabench granary SOCK ROOT    the same through libgranary: gr_opendir/
 *                                  gr_readdir, gr_stat, gr_open/gr_pread/gr_close
 *   metabench stat-direct ROOT     list once (untimed), then stat every file
 *   metabench stat-granary SOCK ROOT   the same with gr_stat (after gr_readdir)
 *
 * Prints one line: "files N bytes B seconds S per_s R".
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "granary.h"
#include "util.h"

typedef struct list {
    char **p;
    size_t n, cap;
} list;

static void add(list *l, const char *path)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 1024;
        l->p = realloc(l->p, l->cap * sizeof(*l->p));
        if (!l->p)
            exit(2);
    }
    l->p[l->n++] = strdup(path);
}

/* Walk root: files into out; stat each entry when do_stat. */
static void walk_direct(const char *root, list *out, int do_stat)
{
    list dirs = { 0 };

    add(&dirs, root);
    for (size_t i = 0; i < dirs.n; i++) {
        DIR *d = opendir(dirs.p[i]);
        struct dirent *e;
        if (!d) {
            perror(dirs.p[i]);
            exit(1);
        }
        while ((e = readdir(d))) {
            char p[PATH_MAX];
            struct stat st;
            int isdir;
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            snprintf(p, sizeof(p), "%s/%s", dirs.p[i], e->d_name);
            if (do_stat) {
                if (stat(p, &st) < 0) {
                    perror(p);
                    exit(1);
                }
                isdir = S_ISDIR(st.st_mode);
            } else {
                isdir = e->d_type == DT_DIR;
            }
            add(isdir ? &dirs : out, p);
        }
        closedir(d);
    }
}

static void walk_granary(gr_client *c, const char *root, list *out, int do_stat)
{
    list dirs = { 0 };

    add(&dirs, root);
    for (size_t i = 0; i < dirs.n; i++) {
        gr_dir *d = gr_opendir(c, dirs.p[i]);
        const gr_dirent *e;
        if (!d) {
            fprintf(stderr, "gr_opendir %s: %s\n", dirs.p[i], gr_strerror_last(c));
            exit(1);
        }
        while ((e = gr_readdir(d))) {
            char p[PATH_MAX];
            struct stat st;
            int isdir = e->type == DT_DIR;
            snprintf(p, sizeof(p), "%s/%s", dirs.p[i], e->name);
            if (do_stat) {
                if (gr_stat(c, p, &st) < 0) {
                    fprintf(stderr, "gr_stat %s: %s\n", p, gr_strerror_last(c));
                    exit(1);
                }
                isdir = S_ISDIR(st.st_mode);
            }
            add(isdir ? &dirs : out, p);
        }
        gr_closedir(d);
    }
}

int main(int argc, char **argv)
{
    static char buf[1 << 20];
    int gr = argc > 1 && (!strcmp(argv[1], "granary") || !strcmp(argv[1], "stat-granary"));
    int stat_only = argc > 1 && !strncmp(argv[1], "stat-", 5);
    const char *root = argv[gr ? 3 : 2];
    gr_client *c = NULL;
    uint64_t bytes = 0, t0;
    list files = { 0 };
    double s;

    if (argc != (gr ? 4 : 3)) {
        fprintf(stderr, "usage: metabench direct|stat-direct ROOT | granary|stat-granary SOCK ROOT\n");
        return 2;
    }
    if (gr && !(c = gr_connect(argv[2]))) {
        fprintf(stderr, "metabench: %s\n", gr_strerror_last(NULL));
        return 1;
    }
    if (stat_only) {
        struct stat st;
        if (gr)
            walk_granary(c, root, &files, 0);
        else
            walk_direct(root, &files, 0);
        t0 = now_ns();
        for (size_t i = 0; i < files.n; i++)
            if ((gr ? gr_stat(c, files.p[i], &st) : stat(files.p[i], &st)) < 0) {
                perror(files.p[i]);
                return 1;
            }
    } else {
        t0 = now_ns();
        if (gr)
            walk_granary(c, root, &files, 1);
        else
            walk_direct(root, &files, 1);
        for (size_t i = 0; i < files.n; i++) {
            ssize_t n;
            if (gr) {
                gr_file *f = gr_open(c, files.p[i]);
                if (!f) {
                    fprintf(stderr, "gr_open %s: %s\n", files.p[i], gr_strerror_last(c));
                    return 1;
                }
                off_t off = 0;
                while ((n = gr_pread(f, buf, sizeof(buf), off)) > 0) {
                    bytes += (uint64_t)n;
                    off += n;
                }
                gr_close(f);
            } else {
                int fd = open(files.p[i], O_RDONLY);
                if (fd < 0) {
                    perror(files.p[i]);
                    return 1;
                }
                while ((n = read(fd, buf, sizeof(buf))) > 0)
                    bytes += (uint64_t)n;
                close(fd);
            }
        }
    }
    s = (double)(now_ns() - t0) / 1e9;
    printf("files %zu bytes %" PRIu64 " seconds %.3f per_s %.0f\n", files.n, bytes, s,
           (double)files.n / s);
    if (c)
        gr_disconnect(c);
    return 0;
}
