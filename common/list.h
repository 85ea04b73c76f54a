/*
 * list.h - one intrusive doubly linked list (circular, with a head
 * sentinel), for every queue and age list of the daemon.
 *
 * A gr__list embedded in a struct is a node; a gr__list on its own is a
 * head.  An unlinked node points at itself, so gr__list_linked tells
 * whether it is in a list and removing it twice is harmless.
 *
 * Threads: none of its own.
 */
#ifndef GR_COMMON_LIST_H
#define GR_COMMON_LIST_H

#include <stddef.h>

typedef struct gr__list gr__list;
struct gr__list {
    gr__list *prev, *next;
};

/* An empty head, or an unlinked node. */
static inline void gr__list_init(gr__list *l)
{
    l->prev = l->next = l;
}

static inline int gr__list_empty(const gr__list *head)
{
    return head->next == head;
}

/* Whether node n is in a list. */
static inline int gr__list_linked(const gr__list *n)
{
    return n->next != n;
}

static inline void gr__list_insert_between(gr__list *n, gr__list *prev, gr__list *next)
{
    n->prev = prev;
    n->next = next;
    prev->next = n;
    next->prev = n;
}

/* Append n (unlinked) at the tail of head. */
static inline void gr__list_push_back(gr__list *head, gr__list *n)
{
    gr__list_insert_between(n, head->prev, head);
}

/* Put n (unlinked) at the front of head. */
static inline void gr__list_push_front(gr__list *head, gr__list *n)
{
    gr__list_insert_between(n, head, head->next);
}

/* Unlink n (no-op if it is not linked). */
static inline void gr__list_remove(gr__list *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}

/* The first / last node, or NULL if head is empty. */
static inline gr__list *gr__list_first(const gr__list *head)
{
    return head->next == head ? NULL : head->next;
}

static inline gr__list *gr__list_last(const gr__list *head)
{
    return head->prev == head ? NULL : head->prev;
}

/* The node after n in head, or NULL at the end. */
static inline gr__list *gr__list_next(const gr__list *head, const gr__list *n)
{
    return n->next == head ? NULL : n->next;
}

/* Unlink and return the first node, or NULL. */
static inline gr__list *gr__list_pop_front(gr__list *head)
{
    gr__list *n = gr__list_first(head);

    if (n)
        gr__list_remove(n);
    return n;
}

#define gr__list_entry(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* for (pos over head) where pos may be unlinked (and freed) in the body. */
#define gr__list_foreach_safe(pos, tmp, head) \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); (pos) = (tmp), (tmp) = (pos)->next)

#endif
