/*
 * htab.c - see htab.h.
 *
 * While growing, bucket i of b[0] is in b[0] if i >= moved, else its nodes
 * have been moved to b[1].  Each operation moves up to HTAB_STEP non-empty
 * buckets (skipping at most HTAB_STEP * 8 empty ones), so a table of n
 * nodes finishes growing within n / HTAB_STEP operations while no single
 * operation does more than a constant amount of extra work.
 *
 * Invariants (gr__htab_sane in the tests' build): every node is in exactly
 * one bucket, the one its hash selects in the array that holds it; count is
 * the number of nodes.
 */
#include <errno.h>
#include <stdlib.h>

#include "htab.h"

#define HTAB_MIN   16
#define HTAB_STEP  4

int gr__htab_init(gr__htab *h, size_t hint)
{
    size_t n = HTAB_MIN;

    while (n < hint && n < ((size_t)1 << 40))
        n <<= 1;
    h->b[0] = calloc(n, sizeof(*h->b[0]));
    h->b[1] = NULL;
    h->nb[0] = h->b[0] ? n : 0;
    h->nb[1] = 0;
    h->moved = 0;
    h->count = 0;
    return h->b[0] ? 0 : -ENOMEM;
}

void gr__htab_fini(gr__htab *h)
{
    free(h->b[0]);
    free(h->b[1]);
    h->b[0] = h->b[1] = NULL;
    h->nb[0] = h->nb[1] = 0;
    h->moved = 0;
    h->count = 0;
}

/* The bucket that holds (or would hold) hash now. */
static gr__hnode **bucket(gr__htab *h, uint64_t hash)
{
    size_t i = (size_t)hash & (h->nb[0] - 1);

    if (h->b[1] && i < h->moved)
        return &h->b[1][(size_t)hash & (h->nb[1] - 1)];
    return &h->b[0][i];
}

/* Move a few buckets of b[0] to b[1]; finish when all are. */
static void step(gr__htab *h)
{
    size_t done = 0, empty = 0;

    if (!h->b[1])
        return;
    while (h->moved < h->nb[0] && done < HTAB_STEP && empty < HTAB_STEP * 8) {
        gr__hnode *n = h->b[0][h->moved];
        if (!n)
            empty++;
        while (n) {
            gr__hnode *next = n->next;
            gr__hnode **to = &h->b[1][(size_t)n->hash & (h->nb[1] - 1)];
            n->next = *to;
            *to = n;
            n = next;
        }
        if (h->b[0][h->moved])
            done++;
        h->b[0][h->moved] = NULL;
        h->moved++;
    }
    if (h->moved == h->nb[0]) {
        free(h->b[0]);
        h->b[0] = h->b[1];
        h->nb[0] = h->nb[1];
        h->b[1] = NULL;
        h->nb[1] = 0;
        h->moved = 0;
    }
}

/* Start growing when the load passes 1. */
static void maybe_grow(gr__htab *h)
{
    if (h->b[1] || h->count <= h->nb[0] || h->nb[0] >= ((size_t)1 << 40))
        return;
    h->b[1] = calloc(h->nb[0] * 2, sizeof(*h->b[1]));
    if (!h->b[1])
        return;                 /* longer chains; we try again at the next insert */
    h->nb[1] = h->nb[0] * 2;
    h->moved = 0;
}

void gr__htab_insert(gr__htab *h, gr__hnode *n, uint64_t hash)
{
    gr__hnode **b;

    if (!h->b[0] && gr__htab_init(h, HTAB_MIN) < 0)
        abort();                /* a table that was never initialised and cannot be */
    step(h);
    n->hash = hash;
    b = bucket(h, hash);
    n->next = *b;
    *b = n;
    h->count++;
    maybe_grow(h);
}

gr__hnode *gr__htab_find(gr__htab *h, uint64_t hash, gr__htab_eq eq, const void *key)
{
    if (!h->b[0])
        return NULL;
    step(h);
    for (gr__hnode *n = *bucket(h, hash); n; n = n->next)
        if (n->hash == hash && eq(n, key))
            return n;
    return NULL;
}

int gr__htab_remove(gr__htab *h, gr__hnode *n)
{
    gr__hnode **pp;

    /* No step() here: gr__htab_walk callbacks remove nodes, and a move
     * under a walk would show it nodes twice or free the array it reads. */
    if (!h->b[0])
        return -ENOENT;
    for (pp = bucket(h, n->hash); *pp; pp = &(*pp)->next)
        if (*pp == n) {
            *pp = n->next;
            n->next = NULL;
            h->count--;
            return 0;
        }
    return -ENOENT;
}

int gr__htab_walk(gr__htab *h, int (*cb)(void *arg, gr__hnode *n), void *arg)
{
    for (int t = 0; t < 2; t++) {
        if (!h->b[t])
            continue;
        for (size_t i = t == 0 && h->b[1] ? h->moved : 0; i < h->nb[t]; i++) {
            gr__hnode *n = h->b[t][i];
            while (n) {
                gr__hnode *next = n->next;      /* cb may unlink and free n */
                int rc = cb(arg, n);
                if (rc)
                    return rc;
                n = next;
            }
        }
    }
    return 0;
}

/* The first node at or after bucket (it->t, it->i), or NULL at the end. */
static gr__hnode *iter_scan(gr__htab_iter *it)
{
    gr__htab *h = it->h;

    for (; it->t < 2; it->t++, it->i = 0) {
        if (!h->b[it->t])
            continue;
        if (it->t == 0 && h->b[1] && it->i < h->moved)
            it->i = h->moved;
        for (; it->i < h->nb[it->t]; it->i++) {
            gr__hnode *n = h->b[it->t][it->i];
            if (n) {
                it->next = n->next;
                it->i++;
                return n;
            }
        }
    }
    return NULL;
}

gr__hnode *gr__htab_first(gr__htab *h, gr__htab_iter *it)
{
    it->h = h;
    it->t = 0;
    it->i = 0;
    it->next = NULL;
    return iter_scan(it);
}

gr__hnode *gr__htab_next(gr__htab_iter *it)
{
    gr__hnode *n = it->next;

    if (n) {
        it->next = n->next;
        return n;
    }
    return iter_scan(it);
}
