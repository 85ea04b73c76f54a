/*
 * idset.c - see idset.h.  Load factor at most 1/2.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "idset.h"

static const uint8_t zero[FILE_ID_LEN];

static size_t home(const idset *s, const uint8_t *id)
{
    uint64_t h;

    memcpy(&h, id, sizeof(h));
    return (size_t)h & (s->cap - 1);
}

static int is_empty(const uint8_t *slot)
{
    return memcmp(slot, zero, FILE_ID_LEN) == 0;
}

/* The slot holding id, or the empty slot where it would go. */
static size_t find(const idset *s, const uint8_t *id)
{
    size_t i = home(s, id);

    while (!is_empty(s->slots[i]) && memcmp(s->slots[i], id, FILE_ID_LEN) != 0)
        i = (i + 1) & (s->cap - 1);
    return i;
}

static int grow(idset *s)
{
    idset n = { NULL, s->cap ? s->cap * 2 : 64, 0 };

    n.slots = calloc(n.cap, FILE_ID_LEN);
    if (!n.slots)
        return -ENOMEM;
    for (size_t i = 0; i < s->cap; i++)
        if (!is_empty(s->slots[i]))
            memcpy(n.slots[find(&n, s->slots[i])], s->slots[i], FILE_ID_LEN);
    n.count = s->count;
    free(s->slots);
    *s = n;
    return 0;
}

int idset_add(idset *s, const uint8_t id[FILE_ID_LEN])
{
    size_t i;

    if (memcmp(id, zero, FILE_ID_LEN) == 0)
        return -EINVAL;
    if (2 * (s->count + 1) > s->cap && grow(s) < 0)
        return -ENOMEM;
    i = find(s, id);
    if (!is_empty(s->slots[i]))
        return 0;
    memcpy(s->slots[i], id, FILE_ID_LEN);
    s->count++;
    return 1;
}

int idset_del(idset *s, const uint8_t id[FILE_ID_LEN])
{
    size_t i, j;

    if (!s->cap)
        return 0;
    i = find(s, id);
    if (is_empty(s->slots[i]))
        return 0;
    /* Backward shift: move later members of the run into the hole when
     * their home is not between the hole and their slot. */
    for (j = (i + 1) & (s->cap - 1); !is_empty(s->slots[j]); j = (j + 1) & (s->cap - 1)) {
        size_t h = home(s, s->slots[j]);
        if ((j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j))) {
            memcpy(s->slots[i], s->slots[j], FILE_ID_LEN);
            i = j;
        }
    }
    memset(s->slots[i], 0, FILE_ID_LEN);
    s->count--;
    return 1;
}

int idset_has(const idset *s, const uint8_t *key)
{
    return s->count && !is_empty(s->slots[find(s, key)]);
}

void idset_clear(idset *s)
{
    free(s->slots);
    s->slots = NULL;
    s->cap = s->count = 0;
}
