/*
 * le.h - little-endian loads and stores without alignment assumptions: the
 * one copy for the wire codec (proto/), the manifests and the NVMe tier's
 * records, whose layouts are all little-endian.
 *
 * Threads: any (pure).
 */
#ifndef GR_COMMON_LE_H
#define GR_COMMON_LE_H

#include <stdint.h>

static inline void gr__le_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void gr__le_put32(uint8_t *p, uint32_t v)
{
    gr__le_put16(p, (uint16_t)v);
    gr__le_put16(p + 2, (uint16_t)(v >> 16));
}

static inline void gr__le_put64(uint8_t *p, uint64_t v)
{
    gr__le_put32(p, (uint32_t)v);
    gr__le_put32(p + 4, (uint32_t)(v >> 32));
}

static inline uint16_t gr__le_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t gr__le_get32(const uint8_t *p)
{
    return gr__le_get16(p) | (uint32_t)gr__le_get16(p + 2) << 16;
}

static inline uint64_t gr__le_get64(const uint8_t *p)
{
    return gr__le_get32(p) | (uint64_t)gr__le_get32(p + 4) << 32;
}

#endif
