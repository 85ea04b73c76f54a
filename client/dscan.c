/*
 * dscan.c - directory scans for the look-ahead opens (dscan.h).
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "clock.h"
#include "dscan.h"
#include "names.h"

void gr__ds_list_free(gr__dlist *l)
{
    free(l->names);
    free(l->off);
    free(l->loff);
    free(l->lpos);
    memset(l, 0, sizeof(*l));
}

void gr__ds_init(gr__dscan *s)
{
    memset(s, 0, sizeof(*s));
    for (int o = 0; o < GR_DS_ORDERS; o++)
        s->pos[o] = -1;
}

static void drop_listing(gr__dscan *s)
{
    s->listed = 0;
    gr__ds_list_free(&s->ls);
}

void gr__ds_fini(gr__dscan *s)
{
    drop_listing(s);
    free(s->dir);
    gr__ds_init(s);
}

/* Both orders counted afresh from the next open. */
static void forget_orders(gr__dscan *s)
{
    for (int o = 0; o < GR_DS_ORDERS; o++) {
        s->pos[o] = -1;
        s->stride[o] = 0;
    }
}

/* Off: the order counted again from the next open. */
static void scan_off(gr__dscan *s, int *off)
{
    if (s->on)
        *off = 1;
    s->on = 0;
    s->run = 0;
    forget_orders(s);
}

void gr__ds_reset(gr__dscan *s)
{
    int off = 0;

    scan_off(s, &off);
}

int gr__ds_list(gr_client *c, const char *dir, gr__dlist *l)
{
    gr_dir *d = gr_opendir(c, dir);
    size_t len = 0, cap = 0, ocap = 0;
    const gr_dirent *e;
    int rc = 0;

    memset(l, 0, sizeof(*l));
    if (!d)
        return -1;
    while ((e = gr_readdir(d))) {
        unsigned char type = e->type;
        if (type == DT_REG || (e->has_stat && S_ISREG(e->st.st_mode)))
            type = DT_REG;
        size_t nl = strlen(e->name) + 1;
        if (type != DT_REG && type != DT_LNK && type != DT_UNKNOWN)
            continue;
        if (l->n == GR_DS_MAX_NAMES || len + 1 + nl > GR_DS_MAX_BYTES) {
            rc = -1;
            break;
        }
        if (len + 1 + nl > cap) {
            size_t nc = cap ? cap * 2 : 16384;
            char *nn = realloc(l->names, nc);
            if (!nn) {
                rc = -1;
                break;
            }
            l->names = nn;
            cap = nc;
        }
        if (l->n == ocap) {
            size_t nc = ocap ? ocap * 2 : 1024;
            uint32_t *no = realloc(l->off, nc * sizeof(*no));
            if (!no) {
                rc = -1;
                break;
            }
            l->off = no;
            ocap = nc;
        }
        l->names[len] = (char)type;             /* the type, then the name */
        memcpy(l->names + len + 1, e->name, nl);
        l->off[l->n++] = (uint32_t)(len + 1);
        len += 1 + nl;
    }
    if (!e && errno != 0)
        rc = -1;                        /* (a listing cut short) */
    gr_closedir(d);
    if (rc == 0 && l->n > 0) {
        l->loff = malloc(l->n * sizeof(*l->loff));
        l->lpos = malloc(l->n * sizeof(*l->lpos));
        if (!l->loff || !l->lpos)
            rc = -1;
    }
    if (rc < 0) {
        gr__ds_list_free(l);
        return -1;
    }
    if (l->n > 0)
        memcpy(l->loff, l->off, l->n * sizeof(*l->loff));
    gr__names_sort(l->names, l->off, l->n);
    /* loff ascends (the names were appended in listing order): where each
     * name of the sorted order stands in the listing. */
    for (size_t i = 0; i < l->n; i++) {
        size_t lo = 0, hi = l->n;
        while (hi - lo > 1) {
            size_t mid = lo + (hi - lo) / 2;
            if (l->loff[mid] <= l->off[i])
                lo = mid;
            else
                hi = mid;
        }
        l->lpos[i] = (uint32_t)lo;
    }
    return 0;
}

void gr__ds_listed(gr__dscan *s, const char *dir, int rc, gr__dlist *l)
{
    if (!s->want_list || !s->dir || strcmp(s->dir, dir) != 0) {
        gr__ds_list_free(l);
        return;
    }
    s->want_list = 0;
    if (rc < 0) {
        s->unlisted = 1;
        gr__ds_list_free(l);
        return;
    }
    drop_listing(s);
    s->ls = *l;
    memset(l, 0, sizeof(*l));
    s->listed = 1;
    s->listed_ms = gr__now_ms();
    s->listings++;
    forget_orders(s);           /* (positions from the next open, in this listing) */
}

/* The position of name in the listing, or -1. */
static long find(const gr__dscan *s, const char *name)
{
    return gr__names_find(s->ls.names, s->ls.off, s->ls.n, name);
}

/* Name the files of the stride up to GR_DS_AHEAD past position p of the
 * order that is on: regular files, and links or entries of unknown type
 * that stat(2) says are. */
static size_t name_ahead(gr__dscan *s, size_t p, char **out, size_t cap)
{
    size_t stride = (size_t)s->stride[s->order];
    size_t dlen = strlen(s->dir), end = p + stride * GR_DS_AHEAD, k = 0;
    const uint32_t *at = s->order == GR_DS_BY_NAME ? s->ls.off : s->ls.loff;

    if (s->next <= p)
        s->next = p + stride;
    for (; k < cap && s->next <= end && s->next < s->ls.n; s->next += stride) {
        const char *name = s->ls.names + at[s->next];
        size_t nl = strlen(name);
        char *path = malloc(dlen + nl + 2);
        struct stat st;
        if (!path)
            break;
        memcpy(path, s->dir, dlen);
        path[dlen] = '/';
        memcpy(path + dlen + 1, name, nl + 1);
        if ((uint8_t)name[-1] != DT_REG && (stat(path, &st) < 0 || !S_ISREG(st.st_mode))) {
            free(path);
            continue;
        }
        out[k++] = path;
    }
    return k;
}

/*
 * One open at position q of order o, o not on: a step of 1 to
 * GR_DS_MAX_STRIDE is a candidate stride, the same again turns o on.
 * Returns whether it would.
 */
static int order_step(gr__dscan *s, int o, long q)
{
    long st = q - s->pos[o];
    int turn = 0;

    if (s->pos[o] >= 0) {
        if (st < 1 || st > GR_DS_MAX_STRIDE)
            s->stride[o] = 0;
        else if (st == s->stride[o])
            turn = 1;
        else
            s->stride[o] = st;
    }
    s->pos[o] = q;
    return turn;
}

size_t gr__ds_opened(gr__dscan *s, const char *path, char **out, size_t cap, int *off)
{
    const char *slash = strrchr(path, '/');
    const char *name;
    size_t dlen;
    long p, q[GR_DS_ORDERS];

    *off = 0;
    if (!slash || slash == path || strlen(slash + 1) >= sizeof(s->last))
        return 0;
    name = slash + 1;
    dlen = (size_t)(slash - path);
    if (!s->dir || strlen(s->dir) != dlen || memcmp(s->dir, path, dlen) != 0) {
        scan_off(s, off);
        drop_listing(s);
        free(s->dir);
        s->dir = strndup(path, dlen);   /* (NULL: out of memory; the next open tries again) */
        s->unlisted = s->want_list = 0;
        strcpy(s->last, name);
        return 0;
    }
    if (strcmp(name, s->last) == 0) {
        scan_off(s, off);               /* the same file again: no step of a scan */
        return 0;
    }
    strcpy(s->last, name);
    s->run++;
    if (s->unlisted)
        return 0;
    if (!s->listed) {
        if (s->run >= 2)
            s->want_list = 1;           /* (the caller lists it, unlocked) */
        return 0;
    }
    if ((p = find(s, name)) < 0)
        return 0;
    q[GR_DS_BY_NAME] = p;
    q[GR_DS_BY_LISTING] = s->ls.lpos[p];
    if (s->on) {
        long st = q[s->order] - s->pos[s->order];
        if (st == s->stride[s->order]) {
            for (int o = 0; o < GR_DS_ORDERS; o++)
                s->pos[o] = q[o];
            return name_ahead(s, (size_t)q[s->order], out, cap);
        }
        /* Out of the order: counted afresh, from this open if it stepped
         * forward (its step a candidate), from the next if back. */
        scan_off(s, off);
        s->run = 1;
        for (int o = 0; o < GR_DS_ORDERS; o++)
            s->pos[o] = st > 0 ? q[o] : -1;
        if (st > 0 && st <= GR_DS_MAX_STRIDE)
            s->stride[s->order] = st;
        return 0;
    }
    for (int o = 0; o < GR_DS_ORDERS; o++) {
        if (!order_step(s, o, q[o]) || s->on)
            continue;
        /* A listing starts scans for GR_DS_TTL_MS (what one that is on
         * names, the daemon judges at each open, or the process's own
         * open(2) proves); an older one judged this open, a fresh one
         * starts the scan. */
        if (gr__now_ms() - s->listed_ms > GR_DS_TTL_MS) {
            s->want_list = 1;
            return 0;
        }
        s->on = 1;
        s->order = o;
        s->next = 0;
    }
    return s->on ? name_ahead(s, (size_t)q[s->order], out, cap) : 0;
}
