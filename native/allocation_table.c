/* Where an address points: C's copies of the client's allocation map
 * (client/memory/allocations.py: which device owns a device address) and of its
 * pinned host memory (client/memory/host.py), so that a cudaMemcpy can be
 * made in C (native/sync_fast_path.c) and an asynchronous copy recorded
 * there (native/async_fast_path.c) without asking Python.
 *
 * Python stays the authority: it adds and removes every range here as it
 * does in its own maps (cudaMalloc, cudaFree, symbols, cudaDeviceReset,
 * cudaHostAlloc, cudaHostRegister, a fork).  A pointer not found here goes
 * to Python, which explains it.
 *
 * Each table is a sorted array under a read-write lock: calls look up far
 * more often than programs allocate.
 *
 * Included into the cffi module before sync_fast_path.c.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct range {
    uint64_t base, end; /* [base, end) */
    int owner;          /* the device (allocations); 0 (pinned memory) */
};

struct range_table {
    pthread_rwlock_t lock;
    struct range *ranges; /* sorted by base; they never overlap (Python checks) */
    size_t count, capacity;
};

static struct range_table allocation_table = {PTHREAD_RWLOCK_INITIALIZER, NULL, 0, 0};
static struct range_table pinned_table = {PTHREAD_RWLOCK_INITIALIZER, NULL, 0, 0};

/* The index of the first range whose base is above `address`. */
static size_t ranges_above(const struct range_table *t, uint64_t address)
{
    size_t low = 0, high = t->count;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        if (t->ranges[middle].base <= address)
            low = middle + 1;
        else
            high = middle;
    }
    return low;
}

static void range_add(struct range_table *t, uint64_t base, uint64_t size, int owner)
{
    pthread_rwlock_wrlock(&t->lock);
    if (t->count == t->capacity) {
        size_t capacity = t->capacity ? 2 * t->capacity : 64;
        struct range *grown = realloc(t->ranges, capacity * sizeof *grown);
        if (!grown) { /* unknown here: an allocation's calls go to Python, pinned memory counts as pageable */
            pthread_rwlock_unlock(&t->lock);
            return;
        }
        t->ranges = grown;
        t->capacity = capacity;
    }
    size_t at = ranges_above(t, base);
    memmove(&t->ranges[at + 1], &t->ranges[at], (t->count - at) * sizeof *t->ranges);
    t->ranges[at] = (struct range){base, base + (size ? size : 1), owner};
    t->count++;
    pthread_rwlock_unlock(&t->lock);
}

static void range_remove(struct range_table *t, uint64_t base)
{
    pthread_rwlock_wrlock(&t->lock);
    size_t at = ranges_above(t, base);
    if (at > 0 && t->ranges[at - 1].base == base) {
        memmove(&t->ranges[at - 1], &t->ranges[at], (t->count - at) * sizeof *t->ranges);
        t->count--;
    }
    pthread_rwlock_unlock(&t->lock);
}

/* The owner of the range holding [address, address + length), or -1. */
static int range_owner(struct range_table *t, uint64_t address, uint64_t length)
{
    int owner = -1;
    pthread_rwlock_rdlock(&t->lock);
    size_t at = ranges_above(t, address);
    if (at > 0) {
        const struct range *range = &t->ranges[at - 1];
        if (address + (length ? length : 1) <= range->end && address + length >= address)
            owner = range->owner;
    }
    pthread_rwlock_unlock(&t->lock);
    return owner;
}

/* ------------------------------------------------------------ Python's side */

static void rcuda_allocation_added(uint64_t base, uint64_t size, int device)
{
    range_add(&allocation_table, base, size, device);
}

static void rcuda_allocation_removed(uint64_t base)
{
    range_remove(&allocation_table, base);
}

static void rcuda_allocations_cleared(void)
{
    pthread_rwlock_wrlock(&allocation_table.lock);
    allocation_table.count = 0;
    pthread_rwlock_unlock(&allocation_table.lock);
}

static void rcuda_pinned_added(uint64_t base, uint64_t size)
{
    range_add(&pinned_table, base, size, 0);
}

static void rcuda_pinned_removed(uint64_t base)
{
    range_remove(&pinned_table, base);
}

/* Page-locked memory kernels can reach (client/memory/pinned.py): its
 * blocks, each owned by 1 + the device it is attached to, or 0.  A launch
 * whose parameters point into a block not attached to its device goes to
 * Python, which attaches it (launch_fast_path.c). */
static struct range_table pinned_block_table = {PTHREAD_RWLOCK_INITIALIZER, NULL, 0, 0};
static int pinned_blocks = 0; /* how many: none, and launches need not look */
static uint64_t pinned_low = 0, pinned_high = 0; /* [low, high) holds them all: a word outside is no block's */

static void rcuda_pinned_block(uint64_t base, uint64_t size, int device, int add)
{
    range_remove(&pinned_block_table, base);
    if (add)
        range_add(&pinned_block_table, base, size, device + 1);
    pthread_rwlock_rdlock(&pinned_block_table.lock);
    size_t count = pinned_block_table.count;
    __atomic_store_n(&pinned_low, count ? pinned_block_table.ranges[0].base : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&pinned_high, count ? pinned_block_table.ranges[count - 1].end : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&pinned_blocks, (int)count, __ATOMIC_RELEASE);
    pthread_rwlock_unlock(&pinned_block_table.lock);
}

/* Whether a launch on `device` whose parameter buffer is `params` (`size`
 * bytes) passes the address of a block not attached to that device. */
static int needs_pinned_attach(int device, const char *params, size_t size)
{
    if (!__atomic_load_n(&pinned_blocks, __ATOMIC_ACQUIRE))
        return 0;
    uint64_t low = __atomic_load_n(&pinned_low, __ATOMIC_RELAXED), high = __atomic_load_n(&pinned_high, __ATOMIC_RELAXED);
    for (size_t at = 0; at + 8 <= size; at += 8) { /* pointers are 8-byte aligned in a parameter buffer */
        uint64_t word;
        memcpy(&word, params + at, 8);
        if (word < low || word >= high)
            continue;
        int owner = range_owner(&pinned_block_table, word, 1);
        if (owner >= 0 && owner != device + 1)
            return 1;
    }
    return 0;
}

/* ------------------------------------------------------------ lookups */

/* The device whose allocation holds [address, address + length), or -1. */
static int device_holding(uint64_t address, uint64_t length)
{
    return range_owner(&allocation_table, address, length);
}

/* Whether [address, address + length) lies in memory the program pinned. */
static int pinned(uint64_t address, uint64_t length)
{
    return range_owner(&pinned_table, address, length) >= 0;
}

#include "copy_kind.h" /* generated from rcuda/copy_kinds.py: inferred_copy_kind */

/* A copy's kind: cudaMemcpyDefault made explicit by which sides are device
 * memory (the devices device_holding found for each side, or -1). */
static enum cudaMemcpyKind copy_kind(enum cudaMemcpyKind kind, int dst_device, int src_device)
{
    return inferred_copy_kind(kind, dst_device >= 0, src_device >= 0);
}

/* In a forked child a lock may have been held by a thread that is gone.  The
 * parent's allocations are not the child's; its pinned memory still is. */
static void allocation_table_after_fork(void)
{
    pthread_rwlock_init(&allocation_table.lock, NULL);
    allocation_table.count = 0;
    pthread_rwlock_init(&pinned_table.lock, NULL);
    pthread_rwlock_init(&pinned_block_table.lock, NULL);
    for (size_t i = 0; i < pinned_block_table.count; i++)
        pinned_block_table.ranges[i].owner = 0; /* the parent's devices are not the child's */
}
