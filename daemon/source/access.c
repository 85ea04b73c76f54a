/*
 * access.c - see access.h.  The algorithm is the kernel's: generic
 * permission checks on the mode (fs/namei.c, acl_permission_check) and
 * posix_acl_permission (fs/posix_acl.c), for an fsuid, fsgid and groups.
 */
#include <errno.h>
#include <string.h>

#include "access.h"

#define ACL_XATTR_VERSION 2
#define ACL_HDR   4
#define ACL_ENTRY 8

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

int access_acl_decode(access_obj *o, const void *blob, size_t len)
{
    const uint8_t *b = blob;
    size_t n;
    int have_user_obj = 0, have_group_obj = 0, have_other = 0, have_mask = 0, named = 0;
    uint16_t last = 0;

    o->nacl = 0;
    if (len == 0)
        return 0;
    o->nacl = -1;
    if (len < ACL_HDR || (len - ACL_HDR) % ACL_ENTRY || le32(b) != ACL_XATTR_VERSION)
        return -EINVAL;
    n = (len - ACL_HDR) / ACL_ENTRY;
    if (n > ACCESS_MAX_ACL)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *e = b + ACL_HDR + i * ACL_ENTRY;
        access_ace *a = &o->acl[i];

        a->tag = le16(e);
        a->perm = le16(e + 2);
        a->id = le32(e + 4);
        /* The kernel keeps entries sorted by tag; refuse anything else. */
        if (a->tag < last || (a->perm & ~7u))
            return -EINVAL;
        last = a->tag;
        switch (a->tag) {
        case ACCESS_ACL_USER_OBJ: have_user_obj++; break;
        case ACCESS_ACL_GROUP_OBJ: have_group_obj++; break;
        case ACCESS_ACL_OTHER: have_other++; break;
        case ACCESS_ACL_MASK: have_mask++; break;
        case ACCESS_ACL_USER:
        case ACCESS_ACL_GROUP: named++; break;
        default: return -EINVAL;
        }
    }
    if (have_user_obj != 1 || have_group_obj != 1 || have_other != 1 || have_mask > 1 ||
        (named && !have_mask))
        return -EINVAL;
    o->nacl = (int)n;
    return 0;
}

int access_in_group(const access_cred *cred, gid_t gid)
{
    if (cred->gid == gid)
        return 1;
    if (cred->ngroups < 0)
        return -1;
    for (int i = 0; i < cred->ngroups; i++)
        if (cred->groups[i] == gid)
            return 1;
    return 0;
}

/* posix_acl_permission over o->acl (nacl > 0): 1 allowed, 0 not. */
static int acl_may(const access_cred *cred, const access_obj *o, unsigned want)
{
    const access_ace *pa = NULL, *end = o->acl + o->nacl;
    int found = 0;

    for (const access_ace *a = o->acl; a < end; a++) {
        int in;

        switch (a->tag) {
        case ACCESS_ACL_USER_OBJ:
            if (cred->uid == o->uid)
                return (a->perm & want) == want;        /* no mask for the owner */
            break;
        case ACCESS_ACL_USER:
            if (cred->uid == a->id) {
                pa = a;
                goto mask;
            }
            break;
        case ACCESS_ACL_GROUP_OBJ:
        case ACCESS_ACL_GROUP:
            in = access_in_group(cred, a->tag == ACCESS_ACL_GROUP_OBJ ? o->gid : a->id);
            if (in < 0)
                return 0;               /* groups unknown: fail closed */
            if (in) {
                found = 1;
                if ((a->perm & want) == want) {
                    pa = a;
                    goto mask;
                }
            }
            break;
        case ACCESS_ACL_MASK:
            break;
        case ACCESS_ACL_OTHER:
            if (found)
                return 0;
            return (a->perm & want) == want;
        }
    }
    return 0;                           /* no OTHER entry: decode refuses such an ACL */
mask:
    for (const access_ace *m = pa + 1; m < end; m++)
        if (m->tag == ACCESS_ACL_MASK)
            return (pa->perm & m->perm & want) == want;
    return (pa->perm & want) == want;
}

int access_may(const access_cred *cred, const access_obj *o, int want)
{
    unsigned w = (unsigned)want & 7u, bits;
    int in;

    if (cred->uid == 0)
        return 1;                       /* read and search: CAP_DAC_{OVERRIDE,READ_SEARCH} */
    if (o->nacl < 0)
        return 0;
    if (o->nacl > 0)
        return acl_may(cred, o, w);
    if (cred->uid == o->uid) {
        bits = (o->mode >> 6) & 7u;
    } else {
        in = access_in_group(cred, o->gid);
        if (in < 0)
            return 0;
        bits = in ? (o->mode >> 3) & 7u : o->mode & 7u;
    }
    return (bits & w) == w;
}
