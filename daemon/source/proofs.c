/*
 * proofs.c - see proofs.h: a hash set of (uid, file id) with an age list.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "htab.h"
#include "list.h"
#include "proofs.h"

typedef struct proof_key {
    uid_t uid;
    uint8_t id[FILE_ID_LEN];
} proof_key;

typedef struct proof {
    gr__hnode hn;
    gr__list age;
    proof_key k;
} proof;

struct proofs {
    gr__htab set;
    gr__list age;               /* oldest first */
    size_t max;
};

int proofs_new(size_t max, proofs **out)
{
    proofs *p = calloc(1, sizeof(*p));

    if (!p || gr__htab_init(&p->set, 1024) < 0) {
        free(p);
        return -ENOMEM;
    }
    gr__list_init(&p->age);
    p->max = max ? max : 1;
    *out = p;
    return 0;
}

void proofs_free(proofs **pp)
{
    proofs *p = *pp;

    if (!p)
        return;
    for (gr__list *l; (l = gr__list_pop_front(&p->age));)
        free(gr__list_entry(l, proof, age));
    gr__htab_fini(&p->set);
    free(p);
    *pp = NULL;
}

static uint64_t key_hash(const proof_key *k)
{
    return XXH3_64bits_withSeed(k->id, FILE_ID_LEN, k->uid);
}

static int key_eq(const gr__hnode *n, const void *key)
{
    const proof_key *a = &gr__container_of(n, proof, hn)->k, *b = key;

    return a->uid == b->uid && memcmp(a->id, b->id, FILE_ID_LEN) == 0;
}

static proof *find(proofs *p, const proof_key *k)
{
    gr__hnode *n = gr__htab_find(&p->set, key_hash(k), key_eq, k);

    return n ? gr__container_of(n, proof, hn) : NULL;
}

void proofs_add(proofs *p, uid_t uid, const uint8_t id[FILE_ID_LEN])
{
    proof_key k = { .uid = uid };
    proof *e;

    memcpy(k.id, id, FILE_ID_LEN);
    e = find(p, &k);
    if (e) {
        gr__list_remove(&e->age);
        gr__list_push_back(&p->age, &e->age);
        return;
    }
    e = malloc(sizeof(*e));
    if (!e)
        return;                 /* a proof not remembered costs a copy later, nothing else */
    e->k = k;
    gr__htab_insert(&p->set, &e->hn, key_hash(&k));
    gr__list_push_back(&p->age, &e->age);
    while (gr__htab_count(&p->set) > p->max) {
        proof *old = gr__list_entry(gr__list_pop_front(&p->age), proof, age);
        gr__htab_remove(&p->set, &old->hn);
        free(old);
    }
}

int proofs_has(proofs *p, uid_t uid, const uint8_t id[FILE_ID_LEN])
{
    proof_key k = { .uid = uid };

    memcpy(k.id, id, FILE_ID_LEN);
    return find(p, &k) != NULL;
}

size_t proofs_count(const proofs *p)
{
    return gr__htab_count(&p->set);
}
