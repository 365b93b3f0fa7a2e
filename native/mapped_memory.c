/* Mapped (zero-copy) host memory: a mirror per mapped range.
 *
 * A kernel on a remote GPU cannot load from this host's memory, so each
 * mapped range (cudaHostAlloc with cudaHostAllocMapped, cudaHostRegister
 * with cudaHostRegisterMapped) is two copies kept in step: the host bytes H
 * the program reads and writes, and a device allocation D its kernels use
 * (client/memory/mapped.py makes both).  Here:
 *
 *   Host writes are tracked by page protection.  A mirror's clean pages are
 *   read-only; the program's first write to one faults, and the SIGSEGV
 *   handler below marks the page dirty and makes it writable.  Faults
 *   outside every mirror go to the handler the program had (or the default
 *   action).  The handler is async-signal-safe: it reads a fixed table
 *   with atomics, takes no lock and allocates nothing.
 *
 *   Dirty pages go to the device before anything else does: whatever C
 *   writes to a device's link (native/link.c: the direct path, the queue,
 *   the service thread's batches) is preceded by `mirror_htod` messages
 *   carrying the device's dirty pages, in runs (several to a message), and
 *   the pages are read-only again.  The server writes them at once,
 *   outside every stream, so a kernel on any stream sees the host's writes
 *   made before its launch.  (The ZeroMQ link takes them from
 *   rcuda_mirror_take.)
 *
 *   After a synchronisation the host sees the device's writes: when a
 *   synchronising call's reply arrives (sync_fast_path.c's c_call, or
 *   Python's requests: rcuda_mirror_refresh) and the device may have
 *   written since the last refresh, each of its mirrors is downloaded into
 *   H (`mirror_dtoh`; managed memory's at its first touch, below) without
 *   making its pages writable for the program:
 *   through a second mapping of cudaHostAlloc's pages (its alias), else
 *   through /proc/self/mem, while a thread that writes them meanwhile waits
 *   in the handler until the bytes are there.  Launches and the
 *   device-side writes Python makes into mirrors count as writes
 *   (mirror_note_write); which synchronisations cover them is kept per
 *   device (the stream all writes since the last refresh went to, if one).
 *
 * Managed memory (cudaMallocManaged's mirrors, `guarded`) is more: CUDA
 * on a device without concurrent managed access keeps it from the host
 * while the device may use it, and so does this file; on touch
 * (RCUDA_MANAGED_ON_TOUCH) it moves only what the host touches:
 *
 *   Once work that may write a guarded mirror goes to its device, every
 *   guarded mirror of the device is made inaccessible (PROT_NONE, the
 *   device `busy`) until a synchronisation covers that work, which
 *   downloads them.  On touch it does not: they are `stale`, and stay
 *   inaccessible until the host touches one, whose part there is then
 *   refreshed (its changed chunks, server/mirror_views.py) and read-only
 *   again.
 *
 *   A host access to an inaccessible page faults, and the handler hands it
 *   to the settler thread: if the device is busy, the settler waits for its
 *   work (`mirror_wait`); then it refreshes the touched part if stale, and
 *   the access goes on with the device's writes in the host copy.  So a
 *   host thread that updates managed memory while a kernel runs updates
 *   what the kernel left, not a stale copy that would later overwrite it.
 *
 *   The settler is a thread of its own because the handler may run on a
 *   small signal stack.  It never calls Python, and it does not wait for
 *   the device where that could need the faulting thread (the link's queue
 *   holds something back: a host function's gate, or a message for Python's
 *   service thread); then, and when the link has failed, the access goes on
 *   as for mapped memory, after the refresh.  A fork refreshes every stale
 *   mirror first, for the child's copy.  Flushes send guarded mirrors' bytes
 *   from the alias, which stays readable, so dirty pages can be
 *   inaccessible too.
 *
 * Ordering between the handler and a flush needs no lock: the handler makes
 * the page writable and then sets its dirty bit; a flush clears the bit and
 * then makes the page read-only, then sends the bytes.  Whatever the
 * interleaving, a page ends either read-only or with its bit set.
 *
 * A page a registered range shares with other data (its first and last,
 * when cudaHostRegister's range is not page-aligned) is never protected:
 * the program, its libraries and the kernel (a read(2) into a neighbouring
 * buffer) write there freely.  Such an edge's bytes are compared with a
 * copy of what was last sent instead, and sent when they differ.
 *
 * Included into the cffi module after sync_fast_path.c (native/mapped_memory.h
 * declares what the files before it call).
 */
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define MIRROR_SLOTS 1024
/* Runs of dirty pages written with one writev. */
#define MIRROR_RUNS_PER_WRITE 32
/* Bytes of runs one message carries at most (but for a larger run alone,
 * which the server reads straight into the device copy). */
#define MIRROR_MESSAGE_BYTES (8u << 20)
/* What the host's first touch of stale managed memory brings: a round trip
 * at most per MiB it reads at random, and a scan's parts grow from here. */
#define MIRROR_FIRST_PART (4 * WIRE_MIRROR_CHUNK)

enum { MIRROR_FREE = 0, MIRROR_ACTIVE = 1, MIRROR_RETIRING = 2 };

/* Bytes of a mirror on a page it shares with other data: compared, not protected. */
struct mirror_edge {
    uint64_t address, size;
    char *sent; /* the bytes as last sent to (or received from) the device */
    char *base; /* `sent` when the running refresh's download was sent: the device had these */
    int unsent; /* sent at the next flush whatever they are (registered memory's first) */
};

struct mirror {
    int state;               /* MIRROR_*; the fields below are fixed while it is not FREE */
    int users;               /* the handler, a flush or a refresh looking at it right now */
    int device;              /* the program's device ordinal */
    int no_refresh;          /* the device only reads it (cudaHostRegisterReadOnly) */
    int guarded;             /* managed memory: inaccessible while its device is busy or it is stale (the top) */
    int stale;               /* guarded: some page is stale */
    uint64_t *stale_bits;    /* one bit per protected page: older than the device's copy since a synchronisation */
    uint64_t stale_since;    /* how many times it went stale (a refresh that began before the last is not enough) */
    uint64_t next_part, part; /* the settler's last refresh of a part: where it ended, its length (read-ahead) */
    uint64_t prefetch_lo, prefetch_hi; /* prefetched to the host: refreshed at the next synchronisation */
    uint64_t host, size;     /* the mapped range [host, host + size) */
    uint64_t device_ptr;     /* the device address of host's first byte */
    uint64_t page_lo, page_hi; /* the protected pages, [page_lo, page_hi) (maybe none) */
    uint64_t *dirty;         /* one bit per protected page: written since it was last sent */
    uint64_t *fresh;         /* one bit per protected page: sent after the running refresh's download */
    size_t words;
    pthread_mutex_t edge_lock; /* the edges' `sent` (never the handler's) */
    pthread_mutex_t refresh_lock; /* one download into the host copy at a time */
    uint64_t alias;          /* a second, writable mapping of the host copy's pages (cudaHostAlloc's); 0: none */
    uint64_t writing;        /* protected pages [lo, hi) a refresh writes now, (lo << 32) | hi; 0: none */
    int edge_count;
    struct mirror_edge edges[2];
};

struct mirror_device {
    pthread_mutex_t lock; /* written, covered, stream, mixed (never the handler's) */
    int mirrors;          /* active mirrors of the device */
    int maybe_dirty;      /* the handler marked a page of one of them */
    int edges;            /* active mirrors with edges (compared at every flush) */
    uint64_t written;     /* device-side writes noted while it had mirrors */
    uint64_t covered;     /* those whose results are in the host copies */
    uint64_t stream;      /* the stream every write since `covered` went to, unless mixed */
    int mixed;
    int guarded;          /* active guarded mirrors */
    int busy;             /* their pages are inaccessible: writes since `covered` may change them */
    uint64_t settle_address; /* a faulting thread's, for the settler (0: none asked) */
    uint32_t refused_round;  /* the last round in which the settler could not wait for the device */
    uint32_t settled;        /* the settler's rounds done: the word faulting threads wait on (a futex) */
};

static struct mirror mirrors[MIRROR_SLOTS];
static int mirrors_high;   /* slots [0, mirrors_high) may be in use */
static int mirrors_active; /* how many are active, in all */
static pthread_mutex_t mirrors_lock = PTHREAD_MUTEX_INITIALIZER; /* adding and removing */
static struct mirror_device mirror_devices[FAST_MAX_DEVICES] = {
    [0 ... FAST_MAX_DEVICES - 1] = {.lock = PTHREAD_MUTEX_INITIALIZER}};
static uint64_t mirror_page;
static struct sigaction previous_segv; /* the program's handler, for faults outside mirrors */

/* ------------------------------------------------------------ the handler */

static void mirror_segv(int sig, siginfo_t *info, void *context);

/* Whether a refresh writes protected page `index` of `m` now. */
static int mirror_writing(struct mirror *m, uint64_t index)
{
    uint64_t range = __atomic_load_n(&m->writing, __ATOMIC_SEQ_CST);
    return range && index >= (range >> 32) && index < (range & 0xffffffffu);
}

/* Bits [first, end) of a page bitmap set (async-signal-safe). */
static void mirror_set_bits(uint64_t *bits, uint64_t first, uint64_t end)
{
    for (uint64_t page = first; page < end;) {
        uint64_t bit = page % 64, take = 64 - bit < end - page ? 64 - bit : end - page;
        uint64_t mask = take == 64 ? ~0ull : ((1ull << take) - 1) << bit;
        __atomic_or_fetch(&bits[page / 64], mask, __ATOMIC_SEQ_CST);
        page += take;
    }
}

/* Protected pages [first, end) (indexes) of `m` marked dirty (async-signal-safe). */
static void mirror_mark_pages(struct mirror *m, uint64_t first, uint64_t end)
{
    mirror_set_bits(m->dirty, first, end);
    __atomic_store_n(&mirror_devices[m->device].maybe_dirty, 1, __ATOMIC_SEQ_CST);
}

/* Whether protected page `index` of `m` is stale (async-signal-safe). */
static int mirror_page_stale(struct mirror *m, uint64_t index)
{
    return (__atomic_load_n(&m->stale_bits[index / 64], __ATOMIC_SEQ_CST) >> (index % 64)) & 1;
}

/* Whether page `index` of `m` is to be inaccessible to the host now (see the top). */
static int mirror_kept_from_host(struct mirror *m, uint64_t index)
{
    return m->guarded && (__atomic_load_n(&mirror_devices[m->device].busy, __ATOMIC_SEQ_CST) ||
                          (__atomic_load_n(&m->stale, __ATOMIC_SEQ_CST) && mirror_page_stale(m, index)));
}

/* Protected pages [first, end) of `m` read-only again (inaccessible while
 * its device is busy), clean; where the process cannot have one more
 * mapping (vm.max_map_count), they stay writable and dirty (sent again
 * next time). */
static void mirror_protect_pages(struct mirror *m, uint64_t first, uint64_t end)
{
    if (end <= first)
        return;
    void *at = (void *)(m->page_lo + first * mirror_page);
    size_t size = (end - first) * mirror_page;
    /* Where some page of `m` is stale, all of these are kept: the handler
     * makes one that is not accessible again. */
    int kept = mirror_kept_from_host(m, first) || (m->guarded && __atomic_load_n(&m->stale, __ATOMIC_SEQ_CST));
    if (mprotect(at, size, kept ? PROT_NONE : PROT_READ))
        mirror_mark_pages(m, first, end);
    else if (!kept && mirror_kept_from_host(m, first)) /* busy meanwhile: its sweep may have come before this */
        mprotect(at, size, PROT_NONE);
}

/* Have the settler (below) make `address`, in a guarded mirror of
 * `device`, accessible: one of its rounds, begun after this asked, waits for
 * the device if it is busy and refreshes the mirror if it is stale.  1 once
 * such a round is done, or -1 if it could not wait (the access then goes on
 * as for mapped memory); 0: no settler.  Atomics, a semaphore's post and a
 * futex wait: fit for the handler. */
static sem_t settler_wake;
static pid_t settler_pid; /* the process whose settler runs (a forked child starts its own) */

static int mirror_settle_wait(int device, uint64_t address)
{
    struct mirror_device *md = &mirror_devices[device];
    if (__atomic_load_n(&settler_pid, __ATOMIC_ACQUIRE) != getpid())
        return 0;
    uint32_t seen = __atomic_load_n(&md->settled, __ATOMIC_SEQ_CST), now;
    uint64_t none = 0;
    /* Another thread's request waiting: the round that takes it is waited for, then this access tried again. */
    if (__atomic_compare_exchange_n(&md->settle_address, &none, address, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        sem_post(&settler_wake);
    struct timespec slice = {0, 50 * 1000000L};
    while ((now = __atomic_load_n(&md->settled, __ATOMIC_SEQ_CST)) == seen)
        syscall(SYS_futex, &md->settled, FUTEX_WAIT_PRIVATE, seen, &slice, NULL, 0);
    return (int32_t)(__atomic_load_n(&md->refused_round, __ATOMIC_SEQ_CST) - seen) > 0 ? -1 : 1;
}

/* Whether a mirror protects the page at `address`: then it is made writable
 * and marked dirty (in a retiring mirror: writable only); but while a
 * guarded mirror is kept from the host, the settler makes it accessible
 * first (`may_settle`) and the access is tried again.  A stale mirror's
 * pages are never made writable here: its bytes are not the device's. */
static int mirror_fault(uint64_t address, int may_settle)
{
    uint64_t page = address & ~(mirror_page - 1);
    int high = __atomic_load_n(&mirrors_high, __ATOMIC_ACQUIRE), found = 0, settle = -1;
    for (int i = 0; i < high && !found; i++) {
        struct mirror *m = &mirrors[i];
        if (__atomic_load_n(&m->state, __ATOMIC_ACQUIRE) == MIRROR_FREE)
            continue;
        __atomic_add_fetch(&m->users, 1, __ATOMIC_SEQ_CST);
        int state = __atomic_load_n(&m->state, __ATOMIC_SEQ_CST);
        if (state == MIRROR_ACTIVE && may_settle && page >= m->page_lo && page < m->page_hi &&
            mirror_kept_from_host(m, (page - m->page_lo) / mirror_page)) {
            found = 1;
            settle = m->device; /* waited for once the mirror is let go: cudaFree may be retiring it */
        } else if (state == MIRROR_ACTIVE && m->guarded && page >= m->page_lo && page < m->page_hi &&
                   mirror_page_stale(m, (page - m->page_lo) / mirror_page)) {
            found = 1; /* stale again since the settler's round: tried again, and settled again */
        } else if (state != MIRROR_FREE && page >= m->page_lo && page < m->page_hi) {
            found = 1;
            int whole = mprotect((void *)page, mirror_page, PROT_READ | PROT_WRITE) != 0;
            if (whole) /* the process has as many mappings as it may (vm.max_map_count): fewer, then */
                mprotect((void *)m->page_lo, m->page_hi - m->page_lo, PROT_READ | PROT_WRITE);
            if (state == MIRROR_ACTIVE) { /* writable first, then dirty: see the top */
                uint64_t index = (page - m->page_lo) / mirror_page;
                if (whole)
                    mirror_mark_pages(m, 0, (m->page_hi - m->page_lo) / mirror_page);
                else
                    __atomic_or_fetch(&m->dirty[index / 64], 1ull << (index % 64), __ATOMIC_SEQ_CST);
                __atomic_store_n(&mirror_devices[m->device].maybe_dirty, 1, __ATOMIC_SEQ_CST);
                /* Dirty first, then this: a refresh marks what it writes first, then
                 * skips dirty pages.  Either it saw the bit, or the write waits for it. */
                while (mirror_writing(m, index))
                    sched_yield();
            }
        }
        __atomic_sub_fetch(&m->users, 1, __ATOMIC_SEQ_CST);
    }
    if (settle >= 0 && mirror_settle_wait(settle, address) <= 0)
        return mirror_fault(address, 0);
    return found;
}

/* A fault that is not ours: the program's handler, or the default action
 * (the fault happens again once we return, or the signal is raised again
 * when it was sent rather than caused). */
static void mirror_chain(int sig, siginfo_t *info, void *context)
{
    struct sigaction *p = &previous_segv;
    if ((p->sa_flags & SA_SIGINFO) && p->sa_sigaction != NULL && p->sa_sigaction != mirror_segv) {
        p->sa_sigaction(sig, info, context);
        return;
    }
    if (!(p->sa_flags & SA_SIGINFO) && p->sa_handler != SIG_DFL && p->sa_handler != SIG_IGN) {
        p->sa_handler(sig);
        return;
    }
    struct sigaction fallback;
    memset(&fallback, 0, sizeof fallback);
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(sig, &fallback, NULL);
    if (info == NULL || info->si_code <= 0)
        raise(sig); /* blocked until we return, then the default action */
}

static void mirror_segv(int sig, siginfo_t *info, void *context)
{
    int saved = errno;
    int ours = info != NULL && info->si_code == SEGV_ACCERR && mirror_fault((uintptr_t)info->si_addr, 1);
    errno = saved;
    if (!ours)
        mirror_chain(sig, info, context);
}

/* Ours in front of whatever handles SIGSEGV now (again, if the program
 * installed another since). */
static void mirror_install_handler(void)
{
    struct sigaction current;
    if (sigaction(SIGSEGV, NULL, &current) == 0 && (current.sa_flags & SA_SIGINFO) &&
        current.sa_sigaction == mirror_segv)
        return;
    struct sigaction mine;
    memset(&mine, 0, sizeof mine);
    mine.sa_sigaction = mirror_segv;
    mine.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&mine.sa_mask);
    sigaction(SIGSEGV, &mine, &previous_segv);
}

/* ------------------------------------------------------------ the table */

/* Take a look at slot `m` (0: it is not active). */
static int mirror_enter(struct mirror *m)
{
    __atomic_add_fetch(&m->users, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&m->state, __ATOMIC_SEQ_CST) == MIRROR_ACTIVE)
        return 1;
    __atomic_sub_fetch(&m->users, 1, __ATOMIC_SEQ_CST);
    return 0;
}

static void mirror_leave(struct mirror *m)
{
    __atomic_sub_fetch(&m->users, 1, __ATOMIC_SEQ_CST);
}

/* 1 when [address, address + size) overlaps a mirror's host bytes or its
 * device range (such copies and memsets are Python's: it keeps both sides). */
static int mirror_overlaps(uint64_t address, uint64_t size)
{
    if (!__atomic_load_n(&mirrors_active, __ATOMIC_ACQUIRE))
        return 0;
    uint64_t end = address + (size ? size : 1);
    int high = __atomic_load_n(&mirrors_high, __ATOMIC_ACQUIRE), overlaps = 0;
    for (int i = 0; i < high && !overlaps; i++) {
        struct mirror *m = &mirrors[i];
        if (!mirror_enter(m))
            continue;
        overlaps = (address < m->host + m->size && m->host < end) ||
                   (address < m->device_ptr + m->size && m->device_ptr < end);
        mirror_leave(m);
    }
    return overlaps;
}

/* ------------------------------------------------------------ device-side writes */

/* `device`'s mirror bookkeeping; NULL for a device out of range. */
static struct mirror_device *mirror_device_at(int device)
{
    return device >= 0 && device < FAST_MAX_DEVICES ? &mirror_devices[device] : NULL;
}

/* Pages [first, end) of `m` read-only where they are not stale. */
static void mirror_open_fresh(struct mirror *m, uint64_t first, uint64_t end)
{
    if (!__atomic_load_n(&m->stale, __ATOMIC_SEQ_CST)) {
        if (end > first)
            mprotect((void *)(m->page_lo + first * mirror_page), (end - first) * mirror_page, PROT_READ);
        return;
    }
    for (uint64_t page = first; page < end;) {
        if (mirror_page_stale(m, page)) {
            page++;
            continue;
        }
        uint64_t fresh = page;
        while (fresh < end && !mirror_page_stale(m, fresh))
            fresh++;
        mprotect((void *)(m->page_lo + page * mirror_page), (fresh - page) * mirror_page, PROT_READ);
        page = fresh;
    }
}

/* With md->lock held: every guarded mirror of `device` inaccessible (as
 * the device becomes busy), or read-only where it is not stale (once it is
 * not busy). */
static void mirror_guard_sweep(int device, int busy)
{
    int high = __atomic_load_n(&mirrors_high, __ATOMIC_ACQUIRE);
    for (int i = 0; i < high; i++) {
        struct mirror *m = &mirrors[i];
        if (m->device != device || !m->guarded || !mirror_enter(m))
            continue;
        if (m->device == device && m->guarded && m->page_hi > m->page_lo) {
            if (busy)
                mprotect((void *)m->page_lo, m->page_hi - m->page_lo, PROT_NONE);
            else
                mirror_open_fresh(m, 0, (m->page_hi - m->page_lo) / mirror_page);
        }
        mirror_leave(m);
    }
}

/* Work that may write a mirror's device copy went to `device`, in `stream`:
 * its guarded mirrors are kept from the host until a synchronisation covers
 * it, where the settler can wait for it (the device has a link in C). */
static void mirror_note_write(int device, uint64_t stream)
{
    struct mirror_device *md = mirror_device_at(device);
    if (!md || !__atomic_load_n(&md->mirrors, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&md->lock);
    if (md->written == md->covered) {
        md->stream = stream;
        md->mixed = 0;
    } else if (md->stream != stream) {
        md->mixed = 1;
    }
    md->written++;
    if (md->guarded && !md->busy && __atomic_load_n(&devices[device].link, __ATOMIC_ACQUIRE) >= 0) {
        __atomic_store_n(&md->busy, 1, __ATOMIC_SEQ_CST); /* first: a flush protecting pages now looks at it */
        mirror_guard_sweep(device, 1);
    }
    pthread_mutex_unlock(&md->lock);
}

/* With md->lock held: the device is not busy any more (every write is
 * covered, or it has no guarded mirror left). */
static void mirror_unbusy(int device)
{
    struct mirror_device *md = &mirror_devices[device];
    if (!md->busy)
        return;
    mirror_guard_sweep(device, 0);
    __atomic_store_n(&md->busy, 0, __ATOMIC_SEQ_CST);
}

/* Before a synchronising request goes out: what its reply will mean. */
static void mirror_before_sync(int device, int scope, uint64_t stream, struct mirror_sync *token)
{
    memset(token, 0, sizeof *token);
    struct mirror_device *md = mirror_device_at(device);
    if (!md || !__atomic_load_n(&md->mirrors, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&md->lock);
    token->written = md->written;
    token->pending = md->written != md->covered;
    token->covers = scope == MIRROR_SYNC_DEVICE ||
                    (scope == MIRROR_SYNC_STREAM && !md->mixed && md->stream == stream);
    pthread_mutex_unlock(&md->lock);
}

/* The host copies now hold what the writes `token` covers did. */
static void mirror_covered(int device, const struct mirror_sync *token)
{
    struct mirror_device *md = mirror_device_at(device);
    if (!md || !token->covers)
        return;
    pthread_mutex_lock(&md->lock);
    if (token->written > md->covered)
        md->covered = token->written;
    if (md->covered == md->written)
        mirror_unbusy(device);
    pthread_mutex_unlock(&md->lock);
}

/* ------------------------------------------------------------ flushing */

struct mirror_run {
    uint64_t dst;       /* device address */
    const char *data;   /* the bytes */
    uint64_t size;
};

/* Where runs go: written to a lane, or copied for Python.  0, or a failure. */
typedef int (*mirror_emit)(void *context, struct mirror_run *runs, int count);

struct mirror_runs {
    struct mirror_run runs[MIRROR_RUNS_PER_WRITE];
    int count;
    mirror_emit emit;
    void *context;
};

static int mirror_add_run(struct mirror_runs *r, uint64_t dst, const char *data, uint64_t size)
{
    r->runs[r->count++] = (struct mirror_run){dst, data, size};
    if (r->count < MIRROR_RUNS_PER_WRITE)
        return 0;
    int failure = r->emit(r->context, r->runs, r->count);
    r->count = 0;
    return failure;
}

/* Protected pages [first, end) (indexes) of `m` were dirty: read-only again
 * (a later write faults again), then their bytes of the mirror are a run,
 * read through the alias where there is one (it stays readable while the
 * program's pages may not be). */
static int mirror_close_run(struct mirror *m, uint64_t first, uint64_t end, struct mirror_runs *r)
{
    uint64_t lo = m->page_lo + first * mirror_page, hi = m->page_lo + end * mirror_page;
    mirror_protect_pages(m, first, end);
    if (lo < m->host)
        lo = m->host;
    if (hi > m->host + m->size)
        hi = m->host + m->size;
    uint64_t bytes = m->alias ? m->alias + (lo - m->page_lo) : lo;
    return hi > lo ? mirror_add_run(r, m->device_ptr + (lo - m->host), (const char *)(uintptr_t)bytes, hi - lo) : 0;
}

/* `m`'s dirty pages (bits cleared, then the pages read-only) and changed
 * edges, as runs. */
static int mirror_collect(struct mirror *m, struct mirror_runs *r)
{
    uint64_t pages = (m->page_hi - m->page_lo) / mirror_page, start = UINT64_MAX;
    int failure = 0;
    for (size_t w = 0; w < m->words && !failure; w++) {
        uint64_t bits = __atomic_load_n(&m->dirty[w], __ATOMIC_SEQ_CST);
        if (bits) {
            /* Fresh (newer than a download already on its way) before clean:
             * a refresh looking at the page meanwhile always finds one. */
            __atomic_or_fetch(&m->fresh[w], bits, __ATOMIC_SEQ_CST);
            bits = __atomic_exchange_n(&m->dirty[w], 0, __ATOMIC_SEQ_CST);
            __atomic_or_fetch(&m->fresh[w], bits, __ATOMIC_SEQ_CST);
        }
        if (!bits && start == UINT64_MAX)
            continue; /* a clean word */
        for (uint64_t b = 0; b < 64 && !failure; b++) {
            uint64_t page = w * 64 + b;
            if (page >= pages)
                break;
            if (bits & (1ull << b)) {
                if (start == UINT64_MAX)
                    start = page;
            } else if (start != UINT64_MAX) {
                failure = mirror_close_run(m, start, page, r);
                start = UINT64_MAX;
            }
        }
    }
    if (!failure && start != UINT64_MAX)
        failure = mirror_close_run(m, start, pages, r);
    /* The edges: their bytes if they differ from what the device has. */
    if (m->edge_count) {
        pthread_mutex_lock(&m->edge_lock);
        for (int i = 0; i < m->edge_count && !failure; i++) {
            struct mirror_edge *e = &m->edges[i];
            const char *now = (const char *)(uintptr_t)e->address;
            if (!e->unsent && memcmp(e->sent, now, e->size) == 0)
                continue;
            memcpy(e->sent, now, e->size);
            e->unsent = 0;
            failure = mirror_add_run(r, m->device_ptr + (e->address - m->host), e->sent, e->size);
        }
        pthread_mutex_unlock(&m->edge_lock);
    }
    return failure;
}

/* The dirty pages and changed edges of `device`'s mirrors, `emit`ted in
 * groups while each mirror is held (its bytes cannot go away meanwhile). */
static int mirror_flush_device(int device, mirror_emit emit, void *context)
{
    struct mirror_device *md = mirror_device_at(device);
    if (!md)
        return 0;
    int edges = __atomic_load_n(&md->edges, __ATOMIC_ACQUIRE);
    if (!edges && (!__atomic_load_n(&md->maybe_dirty, __ATOMIC_ACQUIRE) ||
                   !__atomic_exchange_n(&md->maybe_dirty, 0, __ATOMIC_SEQ_CST)))
        return 0;
    if (edges)
        __atomic_store_n(&md->maybe_dirty, 0, __ATOMIC_SEQ_CST);
    struct mirror_runs r = {.count = 0, .emit = emit, .context = context};
    int high = __atomic_load_n(&mirrors_high, __ATOMIC_ACQUIRE), failure = 0;
    for (int i = 0; i < high && !failure; i++) {
        struct mirror *m = &mirrors[i];
        if (m->device != device || !mirror_enter(m))
            continue;
        if (m->device == device) {
            failure = mirror_collect(m, &r);
            if (!failure && r.count)
                failure = emit(context, r.runs, r.count);
            r.count = 0;
        }
        mirror_leave(m);
    }
    return failure;
}

/* On a lane: the runs as `mirror_htod` messages (a frame per run, as many
 * runs to a message as MIRROR_MESSAGE_BYTES allows, a larger run alone),
 * written now. */
static int mirror_emit_on_link(void *context, struct mirror_run *runs, int count)
{
    struct link *l = context;
    unsigned char heads[MIRROR_RUNS_PER_WRITE][32 + 18 * MIRROR_RUNS_PER_WRITE];
    struct framing framings[MIRROR_RUNS_PER_WRITE];
    struct iovec parts[3 * MIRROR_RUNS_PER_WRITE], message[1 + MIRROR_RUNS_PER_WRITE];
    int n = 0, messages = 0;
    for (int first = 0, end; first < count; first = end) {
        uint64_t bytes = runs[first].size;
        for (end = first + 1; end < count && bytes + runs[end].size <= MIRROR_MESSAGE_BYTES; end++)
            bytes += runs[end].size;
        unsigned char *head = heads[messages];
        struct mp_writer w = {head, head + sizeof heads[messages]};
        mp_map(&w, 3);
        mp_str(&w, "op");
        mp_str(&w, "mirror_htod");
        mp_str(&w, "seq");
        mp_uint(&w, __atomic_fetch_add(&next_c_seq, 1, __ATOMIC_RELAXED));
        mp_str(&w, "runs");
        mp_array(&w, 2 * (unsigned)(end - first));
        for (int i = first; i < end; i++) {
            mp_uint(&w, runs[i].dst);
            mp_uint(&w, runs[i].size);
        }
        message[0] = (struct iovec){head, (size_t)(w.at - head)};
        for (int i = first; i < end; i++)
            message[1 + i - first] = (struct iovec){(void *)runs[i].data, runs[i].size};
        frame(&framings[messages], message, 1 + end - first);
        parts[n++] = (struct iovec){framings[messages].bytes, framings[messages].size};
        memcpy(parts + n, message, (1 + end - first) * sizeof *parts);
        n += 1 + end - first;
        messages++;
    }
    int error_number = 0;
    int failure = write_all(l, parts, n, &error_number);
    if (failure) {
        pthread_mutex_lock(&l->lock);
        link_fail(l, failure, error_number);
        pthread_mutex_unlock(&l->lock);
    }
    return failure;
}

/* native/link.c, with `send` held and `lock` not: the device's dirty pages
 * go out before whatever is written next.  0, or the link's failure. */
static int mirror_flush(struct link *l)
{
    if (l->failure)
        return 0;
    return mirror_flush_device(l->device, mirror_emit_on_link, l);
}

/* ------------------------------------------------------------ refreshing */

/* A refresh's download of `m` takes its place in the link's order (with
 * `send` held): what flushes send from now on is newer than what it brings
 * (mirror_store_span keeps it). */
static void mirror_download_sent(void *context)
{
    struct mirror *m = context;
    for (size_t w = 0; w < m->words; w++)
        __atomic_store_n(&m->fresh[w], 0, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&m->edge_lock);
    for (int i = 0; i < m->edge_count; i++)
        memcpy(m->edges[i].base, m->edges[i].sent, m->edges[i].size);
    pthread_mutex_unlock(&m->edge_lock);
}

/* A `mirror_dtoh` of [offset, offset + size) of `m` into `into`, jumping
 * the link's queue (it may wait behind a host function's gate, which waits
 * for this).  0 (all of it landed in `into`), 1 (only the pages that
 * changed came: *runs of them in reply->payload, for mirror_store_runs;
 * free it with rcuda_link_free), a link failure, or -1: the reply in
 * *reply is not plain success. */
static int mirror_download(struct link *l, struct mirror *m, uint64_t offset, uint64_t size, void *into,
                           struct link_reply *reply, uint64_t *runs)
{
    uint64_t seq = __atomic_fetch_add(&next_c_seq, 1, __ATOMIC_RELAXED);
    int part = size != m->size;
    unsigned char head[128];
    struct mp_writer w = {head, head + sizeof head};
    mp_map(&w, part ? 6 : 4);
    mp_str(&w, "op");
    mp_str(&w, "mirror_dtoh");
    mp_str(&w, "seq");
    mp_uint(&w, seq);
    mp_str(&w, "src");
    mp_uint(&w, m->device_ptr);
    mp_str(&w, "size");
    mp_uint(&w, m->size);
    if (part) {
        mp_str(&w, "offset");
        mp_uint(&w, offset);
        mp_str(&w, "length");
        mp_uint(&w, size);
    }
    struct iovec parts[1] = {{head, (size_t)(w.at - head)}};
    static const unsigned char kinds[1] = {PART_COPY};
    struct waiter waiter;
    memset(&waiter, 0, sizeof waiter);
    waiter.reply.seq = seq;
    waiter.into = into;
    waiter.into_size = size;
    waiter.on_send = mirror_download_sent;
    waiter.on_send_context = m;
    int failure = link_send(l, parts, kinds, 1, &waiter, LINK_SEND_BYPASS);
    if (failure && !waiter.done) {
        memset(reply, 0, sizeof *reply);
        reply->failure = failure;
        reply->error_number = l->error_number;
        return failure;
    }
    await_reply(l, &waiter, "mirror_dtoh");
    *reply = waiter.reply;
    if (reply->failure)
        return reply->failure;
    struct c_call fields = {.op = "mirror_dtoh", .runs = UINT64_MAX};
    if (!plain_success(reply->header, reply->header_size, &fields))
        return -1;
    if (fields.runs != UINT64_MAX) {
        *runs = fields.runs;
        return 1;
    }
    if (size && !reply->landed)
        return -1;
    rcuda_link_free(reply);
    return 0;
}

/* Whether a protected page of `m` holds host bytes newer than a download:
 * dirty, or sent after the download was. */
static int mirror_page_dirty(struct mirror *m, uint64_t page)
{
    return ((__atomic_load_n(&m->dirty[page / 64], __ATOMIC_SEQ_CST) |
             __atomic_load_n(&m->fresh[page / 64], __ATOMIC_SEQ_CST)) >> (page % 64)) & 1;
}

/* Whether the host wrote `m` (its protected pages [first, end)) since it
 * was last flushed. */
static int mirror_host_wrote(struct mirror *m, uint64_t first, uint64_t end)
{
    for (uint64_t page = first; page < end; page++)
        if ((__atomic_load_n(&m->dirty[page / 64], __ATOMIC_SEQ_CST) >> (page % 64)) & 1)
            return 1;
    int changed = 0;
    pthread_mutex_lock(&m->edge_lock);
    for (int i = 0; i < m->edge_count && !changed; i++)
        changed = m->edges[i].unsent ||
                  memcmp(m->edges[i].sent, (const void *)(uintptr_t)m->edges[i].address, m->edges[i].size);
    pthread_mutex_unlock(&m->edge_lock);
    return changed;
}

/* /proc/self/mem, which writes a read-only page of this process without
 * making it writable for the program meanwhile; -1: not opened yet, -2:
 * refused (a kernel that forbids it). */
static int mirror_self_mem = -1;

/* Write `size` bytes at `address`, inside protected pages of `m` that the
 * program does not see writable meanwhile: through the alias, else
 * /proc/self/mem; where neither can, the pages are writable for that long
 * (a thread writing them then may lose its write). */
static void mirror_write_protected(struct mirror *m, uint64_t address, const char *data, uint64_t size)
{
    if (m->alias) {
        memcpy((void *)(uintptr_t)(m->alias + (address - m->page_lo)), data, size);
        return;
    }
    int fd = __atomic_load_n(&mirror_self_mem, __ATOMIC_ACQUIRE);
    if (fd == -1) {
        int opened = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
        fd = opened >= 0 ? opened : -2;
        int expected = -1;
        if (!__atomic_compare_exchange_n(&mirror_self_mem, &expected, fd, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            if (opened >= 0)
                close(opened);
            fd = expected;
        }
    }
    while (fd >= 0 && size) {
        ssize_t done = pwrite(fd, data, size, (off_t)address);
        if (done <= 0) {
            if (done < 0 && errno == EINTR)
                continue;
            __atomic_store_n(&mirror_self_mem, -2, __ATOMIC_RELEASE); /* refused: the fallback from now on */
            break;
        }
        address += (uint64_t)done;
        data += done;
        size -= (uint64_t)done;
    }
    if (size) {
        uint64_t lo = address & ~(mirror_page - 1), hi = (address + size + mirror_page - 1) & ~(mirror_page - 1);
        mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE);
        memcpy((void *)(uintptr_t)address, data, size);
        mprotect((void *)lo, hi - lo, PROT_READ); /* (only clean pages come here: they were read-only) */
    }
}

/* The device copy's bytes of [offset, offset + size) of `m` (downloaded to
 * `bytes`) into its host copy, but where the host wrote since the
 * synchronisation began: its bytes win (another thread's; they reach the
 * device at the next flush).  A protected run is marked as being written
 * before its pages are looked at: a thread writing one then waits in the
 * handler until the bytes are there (see mirror_fault), so no write is lost
 * or goes untracked. */
static void mirror_store_span(struct mirror *m, uint64_t offset, uint64_t size, const char *bytes)
{
    uint64_t a = m->host + offset, b = a + size; /* the host range the bytes are for */
    uint64_t lo_address = a > m->page_lo ? a : m->page_lo, hi_address = b < m->page_hi ? b : m->page_hi;
    uint64_t pages = hi_address > lo_address ? (hi_address - m->page_lo + mirror_page - 1) / mirror_page : 0;
    for (uint64_t first = pages ? (lo_address - m->page_lo) / mirror_page : 0; first < pages;) {
        uint64_t end = first + 256 < pages ? first + 256 : pages; /* 1 MiB at a time: short waits */
        __atomic_store_n(&m->writing, (first << 32) | end, __ATOMIC_SEQ_CST);
        for (uint64_t page = first; page < end;) {
            if (mirror_page_dirty(m, page)) {
                page++;
                continue;
            }
            uint64_t clean = page;
            while (clean < end && !mirror_page_dirty(m, clean))
                clean++;
            uint64_t lo = m->page_lo + page * mirror_page, hi = m->page_lo + clean * mirror_page;
            uint64_t from = lo > a ? lo : a, to = hi < b ? hi : b;
            if (to > from)
                mirror_write_protected(m, from, bytes + (from - a), to - from);
            page = clean;
        }
        __atomic_store_n(&m->writing, 0, __ATOMIC_SEQ_CST);
        first = end;
    }
    /* The edges are never protected, so a thread may write them while this
     * runs: only the bytes the device changed (they differ from what it had
     * when the download was sent) are written, the host's own changes stay
     * (they differ from `sent`, so the next flush sends them). */
    pthread_mutex_lock(&m->edge_lock);
    for (int i = 0; i < m->edge_count; i++) {
        struct mirror_edge *e = &m->edges[i];
        if (e->unsent)
            continue; /* the device has not had them yet */
        uint64_t from = e->address > a ? e->address : a;
        uint64_t to = e->address + e->size < b ? e->address + e->size : b;
        for (uint64_t at = from - e->address; from < to && at < to - e->address;) {
            const char *device = bytes + (e->address + at - a);
            if (*device == e->base[at]) {
                at++;
                continue;
            }
            uint64_t stop = at;
            while (stop < to - e->address && bytes[e->address + stop - a] != e->base[stop])
                stop++;
            memcpy((char *)(uintptr_t)(e->address + at), device, stop - at);
            memcpy(e->sent + at, device, stop - at);
            at = stop;
        }
    }
    pthread_mutex_unlock(&m->edge_lock);
}

/* A download's changed pages (mirror_download's runs: `count` (offset,
 * length) pairs, then their bytes back to back, `size` bytes in all) into
 * the host copy of `m`.  0, or -1 if the runs do not fit the mirror. */
static int mirror_store_runs(struct mirror *m, const char *payload, uint64_t size, uint64_t count)
{
    if (count > size / 16)
        return -1;
    const char *data = payload + 16 * count;
    uint64_t at = 16 * count;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t run[2];
        memcpy(run, payload + 16 * i, sizeof run); /* little-endian, as every host rcuda runs on */
        if (run[0] > m->size || run[1] > m->size - run[0] || run[1] > size - at)
            return -1;
        mirror_store_span(m, run[0], run[1], data);
        data += run[1];
        at += run[1];
    }
    return at == size ? 0 : -1;
}

/* mirror_download's changed pages into the host copy: 0, or -1 (the
 * reply, kept in *reply, does not describe them). */
static int mirror_store_changed(struct mirror *m, struct link_reply *reply, uint64_t runs)
{
    if (mirror_store_runs(m, reply->payload, reply->payload_size, runs))
        return -1;
    rcuda_link_free(reply);
    return 0;
}

/* Download [offset, offset + size) of one mirror into its host copy (the
 * caller has entered it). */
static int mirror_refresh_part(struct link *l, struct mirror *m, uint64_t offset, uint64_t size,
                               struct link_reply *reply)
{
    int result = -2;
    pthread_mutex_lock(&m->refresh_lock);
    if (m->alias && m->page_hi > m->page_lo) {
        /* Straight into the alias, the part's pages marked as being written
         * first: a thread writing them meanwhile waits (in the handler)
         * until the bytes are there.  Unless the host wrote them already.
         * (An alias's mirror starts on a page: host == page_lo.) */
        uint64_t first = offset / mirror_page, end = (offset + size + mirror_page - 1) / mirror_page;
        __atomic_store_n(&m->writing, (first << 32) | end, __ATOMIC_SEQ_CST);
        uint64_t runs = 0;
        if (!mirror_host_wrote(m, first, end))
            result = mirror_download(l, m, offset, size, (void *)(uintptr_t)(m->alias + offset), reply, &runs);
        __atomic_store_n(&m->writing, 0, __ATOMIC_SEQ_CST);
        if (result == 1) /* only what changed came: page by page, as the host may write meanwhile now */
            result = mirror_store_changed(m, reply, runs);
    }
    if (result == -2) { /* through a staging buffer, page by page */
        char *staging = malloc(size ? size : 1);
        uint64_t runs = 0;
        if (!staging) {
            memset(reply, 0, sizeof *reply);
            result = reply->failure = LINK_NO_MEMORY;
        } else {
            result = mirror_download(l, m, offset, size, staging, reply, &runs);
            if (result == 0)
                mirror_store_span(m, offset, size, staging);
            else if (result == 1)
                result = mirror_store_changed(m, reply, runs);
            free(staging);
        }
    }
    pthread_mutex_unlock(&m->refresh_lock);
    return result;
}

static int mirror_refresh_one(struct link *l, struct mirror *m, struct link_reply *reply)
{
    return mirror_refresh_part(l, m, 0, m->size, reply);
}

/* `m` (guarded) may be older than its device copy: inaccessible until the
 * host touches it, then refreshed where it does (mirror_freshen). */
static void mirror_go_stale(struct mirror *m)
{
    struct mirror_device *md = &mirror_devices[m->device];
    uint64_t pages = (m->page_hi - m->page_lo) / mirror_page;
    pthread_mutex_lock(&md->lock);
    __atomic_add_fetch(&m->stale_since, 1, __ATOMIC_SEQ_CST);
    mirror_set_bits(m->stale_bits, 0, pages);
    __atomic_store_n(&m->stale, 1, __ATOMIC_SEQ_CST);
    m->next_part = UINT64_MAX;
    if (pages)
        mprotect((void *)m->page_lo, m->page_hi - m->page_lo, PROT_NONE);
    pthread_mutex_unlock(&md->lock);
}

static void mirror_freshen_prefetched(struct mirror *m, struct link *l); /* the settler's, below */

/* Managed memory comes back where the host touches it (RCUDA_MANAGED_ON_TOUCH),
 * else at each synchronisation as mapped memory does.  Off by default: a
 * system call given stale managed memory (write(2) of a result straight from
 * it, before any load of the program's touched it) fails with EFAULT, where
 * CUDA's call succeeds. */
static int mirror_on_touch = 0;

static void rcuda_mirror_on_touch(int on)
{
    __atomic_store_n(&mirror_on_touch, on, __ATOMIC_SEQ_CST);
}

/* After a synchronising reply on `device`'s link: its mirrors' host copies
 * get what the device wrote, if it may have: downloaded now, or (managed
 * memory) when the host first touches them.  0, a link failure, or -1
 * (*reply holds the refusal). */
static int mirror_after_sync(int device, struct link *l, const struct mirror_sync *token, struct link_reply *reply)
{
    memset(reply, 0, sizeof *reply);
    if (!token->pending)
        return 0;
    int high = __atomic_load_n(&mirrors_high, __ATOMIC_ACQUIRE), result = 0;
    for (int i = 0; i < high && !result; i++) {
        struct mirror *m = &mirrors[i];
        if (m->device != device || !mirror_enter(m))
            continue;
        if (m->device == device && !m->no_refresh && m->guarded && __atomic_load_n(&mirror_on_touch, __ATOMIC_SEQ_CST)) {
            mirror_go_stale(m);
            mirror_freshen_prefetched(m, l);
        } else if (m->device == device && !m->no_refresh) {
            result = mirror_refresh_one(l, m, reply);
        }
        mirror_leave(m);
    }
    if (!result)
        mirror_covered(device, token);
    return result;
}

/* ------------------------------------------------------------ the settler */

/* Whether the link holds something back in its queue: a host function's
 * gate, or a message its service thread (a Python thread, which may need
 * the faulting thread's GIL) is to send. */
static int link_holds_back(struct link *l)
{
    pthread_mutex_lock(&l->lock);
    int held = l->queue != NULL;
    pthread_mutex_unlock(&l->lock);
    return held;
}

/* Wait for all of `device`'s work (`mirror_wait`, which leaves an error and
 * device output to the program's next call); its mirrors then go stale or
 * are refreshed, as after any synchronisation.  1 when done. */
static int mirror_wait_for_device(int device, struct link *l)
{
    struct mirror_sync token;
    mirror_before_sync(device, MIRROR_SYNC_DEVICE, 0, &token);
    uint64_t seq = __atomic_fetch_add(&next_c_seq, 1, __ATOMIC_RELAXED);
    unsigned char head[48];
    struct mp_writer w = {head, head + sizeof head};
    mp_map(&w, 2);
    mp_str(&w, "op");
    mp_str(&w, "mirror_wait");
    mp_str(&w, "seq");
    mp_uint(&w, seq);
    struct iovec parts[1] = {{head, (size_t)(w.at - head)}};
    static const unsigned char kinds[1] = {PART_COPY};
    struct link_reply reply;
    struct c_call fields = {.op = "mirror_wait"};
    int failure = link_call(l, seq, "mirror_wait", parts, kinds, 1, NULL, 0, &reply);
    int done = !failure && plain_success(reply.header, reply.header_size, &fields);
    rcuda_link_free(&reply);
    if (done && token.pending) {
        done = mirror_after_sync(device, l, &token, &reply) == 0;
        rcuda_link_free(&reply);
    }
    return done;
}

/* [offset, offset + length) of a stale `m` refreshed (through the link,
 * jumping its queue as every refresh does), and accessible again: read-only,
 * or not at all while its device is busy.  Unless it went stale again
 * meanwhile.  Where the link has failed the part is given up as it is: the
 * program's next call says why. */
static void mirror_freshen_part(struct mirror *m, struct link *l, uint64_t offset, uint64_t length)
{
    struct mirror_device *md = &mirror_devices[m->device];
    uint64_t since = __atomic_load_n(&m->stale_since, __ATOMIC_SEQ_CST);
    struct link_reply reply;
    memset(&reply, 0, sizeof reply);
    if (l)
        mirror_refresh_part(l, m, offset, length, &reply);
    rcuda_link_free(&reply);
    uint64_t first = offset / mirror_page, end = (offset + length + mirror_page - 1) / mirror_page;
    pthread_mutex_lock(&md->lock);
    if (__atomic_load_n(&m->stale_since, __ATOMIC_SEQ_CST) == since) {
        for (uint64_t page = first; page < end; page++)
            __atomic_and_fetch(&m->stale_bits[page / 64], ~(1ull << (page % 64)), __ATOMIC_SEQ_CST);
        int stale = 0;
        for (size_t w = 0; w < m->words && !stale; w++)
            stale = __atomic_load_n(&m->stale_bits[w], __ATOMIC_SEQ_CST) != 0;
        __atomic_store_n(&m->stale, stale, __ATOMIC_SEQ_CST);
        if (!md->busy)
            mprotect((void *)(m->page_lo + first * mirror_page), (end - first) * mirror_page, PROT_READ);
    }
    pthread_mutex_unlock(&md->lock);
}

/* The part of a stale `m` around `address`, which the host touched,
 * refreshed.  It starts on a chunk (wire.h's MIRROR_CHUNK) and is
 * MIRROR_FIRST_PART long, four times the last part when it follows it (a
 * scan: 64 MiB in four round trips), and at most the rest of `m`. */
static void mirror_freshen(struct mirror *m, struct link *l, uint64_t address)
{
    uint64_t offset = (address - m->host) / WIRE_MIRROR_CHUNK * WIRE_MIRROR_CHUNK;
    uint64_t length = offset == m->next_part ? 4 * m->part : MIRROR_FIRST_PART;
    if (length > m->size - offset)
        length = m->size - offset;
    m->next_part = offset + length;
    m->part = length;
    mirror_freshen_part(m, l, offset, length);
}

/* What the program prefetched to the host of a stale `m` (since the last
 * synchronisation), refreshed now: in one part, not at its touches. */
static void mirror_freshen_prefetched(struct mirror *m, struct link *l)
{
    struct mirror_device *md = &mirror_devices[m->device];
    pthread_mutex_lock(&md->lock);
    uint64_t lo = m->prefetch_lo, hi = m->prefetch_hi;
    m->prefetch_lo = m->prefetch_hi = 0;
    pthread_mutex_unlock(&md->lock);
    if (hi <= lo)
        return;
    lo = lo / WIRE_MIRROR_CHUNK * WIRE_MIRROR_CHUNK;
    hi = (hi + WIRE_MIRROR_CHUNK - 1) / WIRE_MIRROR_CHUNK * WIRE_MIRROR_CHUNK;
    mirror_freshen_part(m, l, lo, (hi < m->size ? hi : m->size) - lo);
}

/* All of a stale `m` refreshed (before a fork, or as it stops being kept
 * from the host). */
static void mirror_freshen_all(struct mirror *m, struct link *l)
{
    uint64_t pages = (m->page_hi - m->page_lo) / mirror_page;
    for (int tries = 0; tries < 64 && __atomic_load_n(&m->stale, __ATOMIC_SEQ_CST); tries++) {
        uint64_t page = 0;
        while (page < pages && !mirror_page_stale(m, page))
            page++;
        if (page == pages)
            break;
        uint64_t offset = page * mirror_page / WIRE_MIRROR_CHUNK * WIRE_MIRROR_CHUNK;
        mirror_freshen_part(m, l, offset, m->size - offset);
    }
}

/* One round for a thread that touched `address` on `device`: wait for the
 * device's work if it is busy (0 when it could not), then refresh the
 * mirror there if it is stale. */
static int mirror_settle(int device, uint64_t address)
{
    struct mirror_device *md = &mirror_devices[device];
    struct link *l = link_at(__atomic_load_n(&devices[device].link, __ATOMIC_ACQUIRE));
    int waited = 1;
    if (__atomic_load_n(&md->busy, __ATOMIC_SEQ_CST))
        waited = l && !link_holds_back(l) && mirror_wait_for_device(device, l);
    int high = __atomic_load_n(&mirrors_high, __ATOMIC_ACQUIRE);
    for (int i = 0; i < high; i++) {
        struct mirror *m = &mirrors[i];
        if (m->device != device || !mirror_enter(m))
            continue;
        if (m->device == device && m->guarded && address >= m->page_lo && address < m->page_hi &&
            __atomic_load_n(&m->stale, __ATOMIC_SEQ_CST) && mirror_page_stale(m, (address - m->page_lo) / mirror_page))
            mirror_freshen(m, l, address);
        mirror_leave(m);
    }
    return waited;
}

static void *mirror_settler(void *unused)
{
    (void)unused;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* the program's signals are for its own threads */
    for (;;) {
        while (sem_wait(&settler_wake) != 0 && errno == EINTR)
            ;
        for (int device = 0; device < FAST_MAX_DEVICES; device++) {
            struct mirror_device *md = &mirror_devices[device];
            uint64_t address = __atomic_exchange_n(&md->settle_address, 0, __ATOMIC_SEQ_CST);
            if (!address)
                continue;
            uint32_t round = __atomic_load_n(&md->settled, __ATOMIC_SEQ_CST) + 1;
            if (!mirror_settle(device, address))
                __atomic_store_n(&md->refused_round, round, __ATOMIC_SEQ_CST);
            __atomic_store_n(&md->settled, round, __ATOMIC_SEQ_CST);
            syscall(SYS_futex, &md->settled, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
        }
    }
    return NULL;
}

/* Before fork(): stale mirrors refreshed, so that a child (which has no
 * session of its own yet) finds the device's writes in its copy. */
static void mirror_before_fork(void)
{
    int high = __atomic_load_n(&mirrors_high, __ATOMIC_ACQUIRE);
    for (int i = 0; i < high; i++) {
        struct mirror *m = &mirrors[i];
        if (!mirror_enter(m))
            continue;
        if (__atomic_load_n(&m->stale, __ATOMIC_SEQ_CST))
            mirror_freshen_all(m, link_at(__atomic_load_n(&devices[m->device].link, __ATOMIC_ACQUIRE)));
        mirror_leave(m);
    }
}

/* With mirrors_lock held: this process's settler runs (1), or cannot (0). */
static int mirror_start_settler(void)
{
    if (settler_pid == getpid())
        return 1;
    pthread_t thread;
    pthread_attr_t attributes;
    if (sem_init(&settler_wake, 0, 0) != 0 || pthread_attr_init(&attributes) != 0)
        return 0;
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    int started = pthread_create(&thread, &attributes, mirror_settler, NULL) == 0;
    pthread_attr_destroy(&attributes);
    if (started)
        __atomic_store_n(&settler_pid, getpid(), __ATOMIC_RELEASE);
    return started;
}

/* ------------------------------------------------------------ Python's side */

/* A mirror of [host, host + size) at device address `device_ptr` on
 * `device`.  `alias` (cudaHostAlloc's): the address of a second, writable
 * mapping of the host copy's pages, which are all the mirror's; without
 * one (registered memory) a first or last page shared with other data is
 * an edge.  `dirty`: every byte is to be sent (registered memory,
 * whose bytes the device does not have yet); otherwise both copies hold
 * the same bytes and the pages become read-only now.  `guarded` (managed
 * memory with an alias): kept from the host while the device is busy.
 * Returns its slot, or
 * -1 (no room, or the range is not mapped memory of this process). */
static int rcuda_mirror_add(uint64_t host, uint64_t size, uint64_t device_ptr, int device, uint64_t alias, int dirty,
                            int no_refresh, int guarded)
{
    int owned = alias != 0;
    if (!size || device < 0 || device >= FAST_MAX_DEVICES)
        return -1;
    pthread_mutex_lock(&mirrors_lock);
    if (!mirror_page)
        mirror_page = (uint64_t)sysconf(_SC_PAGESIZE);
    int slot = -1;
    for (int i = 0; i < MIRROR_SLOTS && slot < 0; i++)
        if (__atomic_load_n(&mirrors[i].state, __ATOMIC_ACQUIRE) == MIRROR_FREE &&
            __atomic_load_n(&mirrors[i].users, __ATOMIC_ACQUIRE) == 0)
            slot = i;
    uint64_t end = host + size, first = host & ~(mirror_page - 1), last = (end + mirror_page - 1) & ~(mirror_page - 1);
    uint64_t page_lo = owned ? first : (host + mirror_page - 1) & ~(mirror_page - 1);
    uint64_t page_hi = owned ? last : end & ~(mirror_page - 1);
    if (page_hi < page_lo)
        page_hi = page_lo; /* within one page: no protected page, one edge */
    uint64_t pages = (page_hi - page_lo) / mirror_page;
    size_t words = (pages + 63) / 64;
    uint64_t *bits = slot >= 0 ? calloc(3 * (words ? words : 1), sizeof *bits) : NULL; /* dirty, fresh, stale */
    /* msync fails (ENOMEM) for a range that is not mapped. */
    if (!bits || msync((void *)first, last - first, MS_ASYNC) != 0) {
        free(bits);
        pthread_mutex_unlock(&mirrors_lock);
        return -1;
    }
    struct mirror *m = &mirrors[slot];
    m->edge_count = 0;
    if (page_lo == page_hi) { /* all of it on shared pages */
        m->edges[m->edge_count++] = (struct mirror_edge){.address = host, .size = size, .unsent = dirty};
    } else {
        if (host < page_lo)
            m->edges[m->edge_count++] = (struct mirror_edge){.address = host, .size = page_lo - host, .unsent = dirty};
        if (end > page_hi)
            m->edges[m->edge_count++] = (struct mirror_edge){.address = page_hi, .size = end - page_hi, .unsent = dirty};
    }
    for (int i = 0; i < m->edge_count; i++) {
        struct mirror_edge *e = &m->edges[i];
        e->sent = malloc(2 * e->size); /* sent, then base */
        if (!e->sent) {
            for (int j = 0; j < i; j++)
                free(m->edges[j].sent);
            free(bits);
            pthread_mutex_unlock(&mirrors_lock);
            return -1;
        }
        e->base = e->sent + e->size;
        memcpy(e->sent, (const void *)(uintptr_t)e->address, e->size);
    }
    if (dirty)
        for (uint64_t p = 0; p < pages; p++)
            bits[p / 64] |= 1ull << (p % 64);
    pthread_mutex_init(&m->edge_lock, NULL);
    pthread_mutex_init(&m->refresh_lock, NULL);
    m->alias = alias;
    m->writing = 0;
    m->device = device;
    m->no_refresh = no_refresh;
    m->guarded = guarded && alias && mirror_start_settler();
    m->host = host;
    m->size = size;
    m->device_ptr = device_ptr;
    m->page_lo = page_lo;
    m->page_hi = page_hi;
    m->dirty = bits;
    m->fresh = bits + (words ? words : 1);
    m->stale_bits = bits + 2 * (words ? words : 1);
    m->stale = 0;
    m->next_part = UINT64_MAX;
    m->prefetch_lo = m->prefetch_hi = 0;
    m->words = words;
    mirror_install_handler();
    struct mirror_device *md = &mirror_devices[device];
    pthread_mutex_lock(&md->lock);
    if (__atomic_load_n(&md->mirrors, __ATOMIC_ACQUIRE) == 0) { /* earlier work wrote no mirror */
        md->covered = md->written;
        md->mixed = 0;
    }
    __atomic_add_fetch(&md->mirrors, 1, __ATOMIC_SEQ_CST);
    if (m->edge_count)
        __atomic_add_fetch(&md->edges, 1, __ATOMIC_SEQ_CST);
    if (m->guarded)
        md->guarded++; /* a busy device's new mirror is the host's until the next one: nothing wrote it yet */
    pthread_mutex_unlock(&md->lock);
    __atomic_store_n(&m->state, MIRROR_ACTIVE, __ATOMIC_SEQ_CST);
    if (slot + 1 > __atomic_load_n(&mirrors_high, __ATOMIC_ACQUIRE))
        __atomic_store_n(&mirrors_high, slot + 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&mirrors_active, 1, __ATOMIC_SEQ_CST);
    if (dirty)
        __atomic_store_n(&md->maybe_dirty, 1, __ATOMIC_SEQ_CST);
    else if (page_hi > page_lo)
        mprotect((void *)page_lo, page_hi - page_lo, PROT_READ);
    pthread_mutex_unlock(&mirrors_lock);
    return slot;
}

/* With mirrors_lock held: slot `m` stops being a mirror; its pages are
 * plain writable memory again. */
static void mirror_retire(struct mirror *m)
{
    __atomic_store_n(&m->state, MIRROR_RETIRING, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&m->users, __ATOMIC_SEQ_CST))
        sched_yield(); /* a flush sending its bytes, a refresh */
    if (m->page_hi > m->page_lo)
        mprotect((void *)m->page_lo, m->page_hi - m->page_lo, PROT_READ | PROT_WRITE);
    struct mirror_device *md = &mirror_devices[m->device];
    __atomic_sub_fetch(&md->mirrors, 1, __ATOMIC_SEQ_CST);
    if (m->edge_count)
        __atomic_sub_fetch(&md->edges, 1, __ATOMIC_SEQ_CST);
    if (m->guarded) {
        pthread_mutex_lock(&md->lock);
        if (--md->guarded == 0)
            mirror_unbusy(m->device);
        pthread_mutex_unlock(&md->lock);
    }
    __atomic_sub_fetch(&mirrors_active, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&m->state, MIRROR_FREE, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&m->users, __ATOMIC_SEQ_CST))
        sched_yield(); /* a handler that found it before it was free */
    free(m->dirty);
    for (int i = 0; i < m->edge_count; i++)
        free(m->edges[i].sent);
    m->dirty = m->fresh = m->stale_bits = NULL;
    m->edge_count = 0;
    pthread_mutex_destroy(&m->edge_lock);
    pthread_mutex_destroy(&m->refresh_lock);
}

static void rcuda_mirror_remove(int slot)
{
    if (slot < 0 || slot >= MIRROR_SLOTS)
        return;
    pthread_mutex_lock(&mirrors_lock);
    if (__atomic_load_n(&mirrors[slot].state, __ATOMIC_ACQUIRE) == MIRROR_ACTIVE)
        mirror_retire(&mirrors[slot]);
    pthread_mutex_unlock(&mirrors_lock);
}

/* Every mirror of `device` (-1: of all devices) stops being one
 * (cudaDeviceReset, the end of the session). */
static void rcuda_mirrors_forget(int device)
{
    pthread_mutex_lock(&mirrors_lock);
    for (int i = 0; i < MIRROR_SLOTS; i++)
        if (__atomic_load_n(&mirrors[i].state, __ATOMIC_ACQUIRE) == MIRROR_ACTIVE &&
            (device < 0 || mirrors[i].device == device))
            mirror_retire(&mirrors[i]);
    pthread_mutex_unlock(&mirrors_lock);
}

/* Whether slot `slot`'s managed memory is kept from the host while its
 * device is busy: not while the program attached it to the host
 * (cudaStreamAttachMemAsync with cudaMemAttachHost), which may then use it. */
static void rcuda_mirror_guard(int slot, int guarded)
{
    if (slot < 0 || slot >= MIRROR_SLOTS)
        return;
    struct mirror *m = &mirrors[slot];
    if (!mirror_enter(m))
        return;
    struct mirror_device *md = &mirror_devices[m->device];
    if (!guarded && m->guarded) /* the host's from now on: what the device wrote first */
        mirror_freshen_all(m, link_at(__atomic_load_n(&devices[m->device].link, __ATOMIC_ACQUIRE)));
    pthread_mutex_lock(&md->lock);
    guarded = guarded && m->alias && __atomic_load_n(&settler_pid, __ATOMIC_ACQUIRE) == getpid();
    if (guarded != m->guarded) {
        m->guarded = guarded;
        md->guarded += guarded ? 1 : -1;
        if (m->page_hi > m->page_lo && (md->busy || !guarded))
            mprotect((void *)m->page_lo, m->page_hi - m->page_lo, guarded ? PROT_NONE : PROT_READ);
        if (!md->guarded)
            mirror_unbusy(m->device);
    }
    pthread_mutex_unlock(&md->lock);
    mirror_leave(m);
}

/* The program prefetched [offset, offset + size) of slot `slot`'s managed
 * memory to the host (cudaMemPrefetchAsync): the next synchronisation
 * refreshes it at once, as CUDA migrates it, instead of at its first touch. */
static void rcuda_mirror_prefetch(int slot, uint64_t offset, uint64_t size)
{
    if (slot < 0 || slot >= MIRROR_SLOTS)
        return;
    struct mirror *m = &mirrors[slot];
    if (!mirror_enter(m))
        return;
    if (m->guarded && __atomic_load_n(&mirror_on_touch, __ATOMIC_SEQ_CST) && offset < m->size && size) {
        uint64_t end = size < m->size - offset ? offset + size : m->size;
        struct mirror_device *md = &mirror_devices[m->device];
        pthread_mutex_lock(&md->lock);
        if (m->prefetch_hi <= m->prefetch_lo) {
            m->prefetch_lo = offset;
            m->prefetch_hi = end;
        } else {
            m->prefetch_lo = offset < m->prefetch_lo ? offset : m->prefetch_lo;
            m->prefetch_hi = end > m->prefetch_hi ? end : m->prefetch_hi;
        }
        pthread_mutex_unlock(&md->lock);
    }
    mirror_leave(m);
}

static void rcuda_mirror_written(int device, uint64_t stream)
{
    mirror_note_write(device, stream);
}

static void rcuda_mirror_before_sync(int device, int scope, uint64_t stream, struct mirror_sync *token)
{
    mirror_before_sync(device, scope, stream, token);
}

/* Python's synchronisation on a lane (`handle`) got its reply: refresh as
 * mirror_after_sync.  0, a link failure, or -1 with the refusal in *reply
 * (free it with rcuda_link_free). */
static int rcuda_mirror_refresh(int device, int handle, const struct mirror_sync *token, struct link_reply *reply)
{
    memset(reply, 0, sizeof *reply);
    struct link *l = link_at(handle);
    if (!l)
        return reply->failure = LINK_SHUT;
    return mirror_after_sync(device, l, token, reply);
}

/* For a ZeroMQ link, which Python drives: the mirrors of `device` to
 * refresh (up to `max`: their slots, device addresses and sizes). */
static int rcuda_mirror_slots(int device, int *slots, uint64_t *device_ptrs, uint64_t *sizes, int max)
{
    int high = __atomic_load_n(&mirrors_high, __ATOMIC_ACQUIRE), count = 0;
    for (int i = 0; i < high && count < max; i++) {
        struct mirror *m = &mirrors[i];
        if (m->device != device || !mirror_enter(m))
            continue;
        if (m->device == device && !m->no_refresh) {
            slots[count] = i;
            device_ptrs[count] = m->device_ptr;
            sizes[count++] = m->size;
        }
        mirror_leave(m);
    }
    return count;
}

/* A mirror's device bytes (`size` of them, downloaded by Python) into its
 * host copy, unless the slot is no longer that mirror. */
static void rcuda_mirror_store(int slot, uint64_t device_ptr, const char *data, uint64_t size)
{
    if (slot < 0 || slot >= MIRROR_SLOTS)
        return;
    struct mirror *m = &mirrors[slot];
    if (!mirror_enter(m))
        return;
    if (m->device_ptr == device_ptr && m->size == size) {
        pthread_mutex_lock(&m->refresh_lock);
        mirror_store_span(m, 0, m->size, data);
        pthread_mutex_unlock(&m->refresh_lock);
    }
    mirror_leave(m);
}

/* As rcuda_mirror_store, for a reply that brought only what changed:
 * `count` runs, then their bytes (`size` in all).  -1 if they do not fit. */
static int rcuda_mirror_store_runs(int slot, uint64_t device_ptr, const char *payload, uint64_t size, uint64_t count)
{
    if (slot < 0 || slot >= MIRROR_SLOTS)
        return 0;
    struct mirror *m = &mirrors[slot];
    if (!mirror_enter(m))
        return 0;
    int result = 0;
    if (m->device_ptr == device_ptr) {
        pthread_mutex_lock(&m->refresh_lock);
        result = mirror_store_runs(m, payload, size, count);
        pthread_mutex_unlock(&m->refresh_lock);
    }
    mirror_leave(m);
    return result;
}

/* Python's ZeroMQ link is about to send a `mirror_dtoh` of `device`'s
 * mirror at `device_ptr` (as mirror_download_sent). */
static void rcuda_mirror_download_sent(int device, uint64_t device_ptr)
{
    int high = __atomic_load_n(&mirrors_high, __ATOMIC_ACQUIRE);
    for (int i = 0; i < high; i++) {
        struct mirror *m = &mirrors[i];
        if (m->device != device || !mirror_enter(m))
            continue;
        if (m->device == device && m->device_ptr == device_ptr)
            mirror_download_sent(m);
        mirror_leave(m);
    }
}

static void rcuda_mirror_covered(int device, const struct mirror_sync *token)
{
    mirror_covered(device, token);
}

/* Runs collected for Python's ZeroMQ link, their bytes copied (the program
 * may free its memory once this returns). */
struct mirror_taken {
    char *data;
    uint64_t *runs; /* dst, size pairs */
    uint32_t count, capacity;
    uint64_t used, room;
};

static int mirror_emit_copy(void *context, struct mirror_run *runs, int count)
{
    struct mirror_taken *t = context;
    for (int i = 0; i < count; i++) {
        if (t->count == t->capacity) {
            uint32_t capacity = t->capacity ? 2 * t->capacity : 16;
            uint64_t *grown = realloc(t->runs, 2 * capacity * sizeof *grown);
            if (!grown)
                return LINK_NO_MEMORY;
            t->runs = grown;
            t->capacity = capacity;
        }
        if (t->used + runs[i].size > t->room) {
            uint64_t room = t->room ? 2 * t->room : (1u << 20);
            while (room < t->used + runs[i].size)
                room *= 2;
            char *grown = realloc(t->data, room);
            if (!grown)
                return LINK_NO_MEMORY;
            t->data = grown;
            t->room = room;
        }
        memcpy(t->data + t->used, runs[i].data, runs[i].size);
        t->used += runs[i].size;
        t->runs[2 * t->count] = runs[i].dst;
        t->runs[2 * t->count + 1] = runs[i].size;
        t->count++;
    }
    return 0;
}

/* The dirty pages of `device`'s mirrors, made clean: *count runs (dst,
 * size pairs in *runs) whose bytes lie back to back in *data (free both
 * with rcuda_fast_free).  Returns the byte count. */
static uint64_t rcuda_mirror_take(int device, char **data, uint64_t **runs, uint32_t *count)
{
    struct mirror_taken taken;
    memset(&taken, 0, sizeof taken);
    if (mirror_flush_device(device, mirror_emit_copy, &taken)) /* out of memory: the rest another time */
        __atomic_store_n(&mirror_devices[device].maybe_dirty, 1, __ATOMIC_SEQ_CST);
    *data = taken.data;
    *runs = taken.runs;
    *count = taken.count;
    return taken.used;
}

/* In a forked child: the parent's mirrors are not the child's (its CUDA
 * calls start a session of their own).  Their pages become plain memory. */
static void mirror_after_fork(void)
{
    pthread_mutex_init(&mirrors_lock, NULL);
    if (mirror_self_mem >= 0)
        close(mirror_self_mem); /* the parent's memory, not ours */
    mirror_self_mem = -1;
    for (int i = 0; i < MIRROR_SLOTS; i++) {
        struct mirror *m = &mirrors[i];
        if (m->state != MIRROR_FREE && m->page_hi > m->page_lo) {
            uint64_t size = m->page_hi - m->page_lo;
            mprotect((void *)m->page_lo, size, PROT_READ | PROT_WRITE);
            /* cudaHostAlloc's pages are shared with the parent (the alias's
             * memory file): the child gets a private copy in their place. */
            void *copy = m->alias ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                                  : MAP_FAILED;
            if (copy != MAP_FAILED) {
                memcpy(copy, (void *)m->page_lo, size);
                if (mmap((void *)m->page_lo, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                         -1, 0) != MAP_FAILED)
                    memcpy((void *)m->page_lo, copy, size);
                munmap(copy, size);
            }
            if (m->alias)
                munmap((void *)m->alias, size);
        }
        m->state = MIRROR_FREE;
        m->users = 0;
    }
    mirrors_high = mirrors_active = 0;
    for (int i = 0; i < FAST_MAX_DEVICES; i++) {
        pthread_mutex_init(&mirror_devices[i].lock, NULL);
        mirror_devices[i].mirrors = mirror_devices[i].maybe_dirty = mirror_devices[i].edges = 0;
        mirror_devices[i].guarded = mirror_devices[i].busy = 0;
        mirror_devices[i].settle_address = 0;
        mirror_devices[i].mixed = 0;
        mirror_devices[i].written = mirror_devices[i].covered = 0;
    }
}
