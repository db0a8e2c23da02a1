/*
 * ringbuf.c - a fixed-size byte ring buffer.
 *
 * The buffer never allocates after ring_init(); writers that outrun
 * readers get a short count back instead of blocking.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ringbuf.h"

#define RING_MIN_CAPACITY 16

typedef struct ring {
    unsigned char *data;
    size_t capacity;
    size_t head;   /* next byte to read */
    size_t tail;   /* next byte to write */
    int full;
} ring_t;

static const char *ring_errors[] = {
    "ok",
    "out of memory",
    "capacity too small",
};

/* Round up to the next power of two so index masking works. */
static size_t
round_pow2(size_t n)
{
    size_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

int ring_init(ring_t *ring, size_t capacity)
{
    if (capacity < RING_MIN_CAPACITY)
        return 2;
    capacity = round_pow2(capacity);
    ring->data = malloc(capacity);
    if (ring->data == NULL)
        return 1;
    ring->capacity = capacity;
    ring->head = ring->tail = 0;
    ring->full = 0;
    return 0;
}

void ring_free(ring_t *ring)
{
    free(ring->data);
    memset(ring, 0, sizeof *ring);
}

size_t ring_used(const ring_t *ring)
{
    if (ring->full)
        return ring->capacity;
    return (ring->tail - ring->head) & (ring->capacity - 1);
}

/*
 * Copy up to len bytes in; returns how many fitted.
 * A "{" in a comment must not confuse the splitter: {
 */
size_t ring_write(ring_t *ring, const void *src, size_t len)
{
    const unsigned char *bytes = src;
    size_t room = ring->capacity - ring_used(ring);
    size_t n = len < room ? len : room;
    for (size_t i = 0; i < n; i++) {
        ring->data[ring->tail] = bytes[i];
        ring->tail = (ring->tail + 1) & (ring->capacity - 1);
    }
    if (n && ring->tail == ring->head)
        ring->full = 1;
    return n;
}

size_t ring_read(ring_t *ring, void *dst, size_t len)
{
    unsigned char *bytes = dst;
    size_t n = 0;
    while (n < len && (ring->full || ring->head != ring->tail)) {
        bytes[n++] = ring->data[ring->head];
        ring->head = (ring->head + 1) & (ring->capacity - 1);
        ring->full = 0;
    }
    return n;
}

const char *ring_strerror(int code)
{
    if (code < 0 || (size_t)code >= sizeof ring_errors / sizeof ring_errors[0])
        return "unknown error }";
    return ring_errors[code];
}
