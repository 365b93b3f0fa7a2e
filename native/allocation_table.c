/* Which device owns an address: C's copy of the client's allocation map
 * (client/allocations.py), so that a cudaMemcpy can be made in C
 * (native/sync_fast_path.c) without asking Python where its pointers point.
 *
 * Python stays the authority: it adds and removes every allocation here as
 * it does in its own map (cudaMalloc, cudaFree, symbols, cudaDeviceReset,
 * a fork).  A pointer not found here goes to Python, which explains it.
 *
 * A sorted array under a read-write lock: copies look up far more often
 * than programs allocate.
 *
 * Included into the cffi module before sync_fast_path.c.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct device_range {
    uint64_t base, end; /* [base, end) */
    int device;
};

static struct {
    pthread_rwlock_t lock;
    struct device_range *ranges; /* sorted by base; they never overlap (Python checks) */
    size_t count, capacity;
} allocation_table = {PTHREAD_RWLOCK_INITIALIZER, NULL, 0, 0};

/* The index of the first range whose base is above `address`. */
static size_t ranges_above(uint64_t address)
{
    size_t low = 0, high = allocation_table.count;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        if (allocation_table.ranges[middle].base <= address)
            low = middle + 1;
        else
            high = middle;
    }
    return low;
}

static void rcuda_allocation_added(uint64_t base, uint64_t size, int device)
{
    pthread_rwlock_wrlock(&allocation_table.lock);
    if (allocation_table.count == allocation_table.capacity) {
        size_t capacity = allocation_table.capacity ? 2 * allocation_table.capacity : 64;
        struct device_range *grown = realloc(allocation_table.ranges, capacity * sizeof *grown);
        if (!grown) { /* not known here: Python makes this allocation's copies */
            pthread_rwlock_unlock(&allocation_table.lock);
            return;
        }
        allocation_table.ranges = grown;
        allocation_table.capacity = capacity;
    }
    size_t at = ranges_above(base);
    memmove(&allocation_table.ranges[at + 1], &allocation_table.ranges[at],
            (allocation_table.count - at) * sizeof *allocation_table.ranges);
    allocation_table.ranges[at] = (struct device_range){base, base + (size ? size : 1), device};
    allocation_table.count++;
    pthread_rwlock_unlock(&allocation_table.lock);
}

static void rcuda_allocation_removed(uint64_t base)
{
    pthread_rwlock_wrlock(&allocation_table.lock);
    size_t at = ranges_above(base);
    if (at > 0 && allocation_table.ranges[at - 1].base == base) {
        memmove(&allocation_table.ranges[at - 1], &allocation_table.ranges[at],
                (allocation_table.count - at) * sizeof *allocation_table.ranges);
        allocation_table.count--;
    }
    pthread_rwlock_unlock(&allocation_table.lock);
}

static void rcuda_allocations_cleared(void)
{
    pthread_rwlock_wrlock(&allocation_table.lock);
    allocation_table.count = 0;
    pthread_rwlock_unlock(&allocation_table.lock);
}

/* The device whose allocation holds [address, address + length), or -1. */
static int device_holding(uint64_t address, uint64_t length)
{
    int device = -1;
    pthread_rwlock_rdlock(&allocation_table.lock);
    size_t at = ranges_above(address);
    if (at > 0) {
        const struct device_range *range = &allocation_table.ranges[at - 1];
        if (address + (length ? length : 1) <= range->end && address + length >= address)
            device = range->device;
    }
    pthread_rwlock_unlock(&allocation_table.lock);
    return device;
}

/* In a forked child the lock may have been held by a thread that is gone. */
static void allocation_table_after_fork(void)
{
    pthread_rwlock_init(&allocation_table.lock, NULL);
    allocation_table.count = 0;
}
