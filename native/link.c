/* The link: a device's one connection to its server, owned here.
 *
 * Where the server offers it (no --auth), each device's traffic travels on
 * one TCP connection, the lane (framing in rcuda/wire.py).  This file owns
 * it: every byte that goes out, from the program's threads through C (the
 * fast paths) or through Python (client/transport/lane.py calls in here with the
 * GIL released), and every reply that comes back.
 *
 * Sending.  Whoever sends takes `send` and writes the whole message itself,
 * after the launches the device recorded (launch_fast_path.c's batch), so a
 * thread's launches and its next call keep program order.  Two things make
 * a message wait in the link's queue instead, sent later in order by the
 * link's service thread (a Python thread parked in rcuda_link_service):
 * a closed gate ahead of it (a host function in a stream holds back what
 * follows it, client/callbacks.py), and a large asynchronous upload from the
 * program's pinned memory (the program must not wait for it).
 *
 * Receiving.  Replies come back in any order (a server answers a stream
 * synchronisation when the stream is done, and serves other requests
 * meanwhile), each naming its request's `seq`.  One thread at a time is
 * the reader: a caller waiting for its reply takes the role if it is free,
 * reads whatever arrives and hands each reply to its waiter, until its own
 * comes; then it passes the role on.  So a single-threaded program reads
 * its own replies with no thread hand-off, and a thread waiting for a long
 * kernel never holds up another thread's calls.  Replies that Python
 * awaits asynchronously (a download into pinned memory, a host function's
 * marker) and unsolicited notices go to the link's inbox, which the
 * service thread empties; it also reads when nobody else does.  A thread
 * blocked writing (the server is not reading) reads too when the role is
 * free: the server may be blocked writing to us.
 *
 * Locks: `send` (held for a whole write), then `lock` (the state below),
 * then a device's batch lock; never in the other order.  `changed` tells
 * waiting callers that a reply arrived or the reader role is free.
 *
 * A failure (the connection broke, a malformed message, a server silent for
 * longer than the timeout) fails the link: every waiting and later call
 * gets the failure; Python explains it and fails the device.
 *
 * Included into the cffi module after launch_fast_path.c and msgpack_lite.c.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#define LINK_SLOTS 256
/* How long a blocking wait lasts before it looks at the server's liveness. */
#define LINK_SLICE_MS 200
#define LINK_SPIN_SLOTS 32
/* An asynchronous post of at least this many borrowed bytes is written by
 * the service thread, so the program returns at once (cudaMemcpyAsync from
 * pinned memory). */
#define LINK_ASYNC_SEND_MIN (256u << 10)
/* The reader reads ahead into a buffer of this size: a small reply (prefix,
 * frame lengths, header, a few bytes) costs one recv, not four.  Larger
 * payloads are read straight where they land. */
#define LINK_READ_AHEAD (64u << 10)

enum link_failure {
    LINK_IO_ERROR = 1, LINK_CLOSED, LINK_BAD_MESSAGE, LINK_SERVER_SILENT, LINK_SHUT, LINK_NO_MEMORY,
    LINK_BAD_SEAL /* a sealed record failed its check (or the cipher failed) */
};

/* How a part of a message is held while it waits in the queue. */
enum part_kind { PART_COPY = 0, PART_BORROWED = 1, PART_ADOPTED = 2 };

/* A message's part, as Python hands it over: the header is parts[0]. */
struct link_part {
    const void *data;
    uint64_t size;
    int borrowed; /* program memory that stays valid until the message is sent (pinned memory) */
};

/* A reply, as Python receives it (its header and payload are malloc'ed:
 * rcuda_link_free). */
struct link_reply {
    uint64_t seq;
    int failure, error_number;
    int solicited; /* 0: an unsolicited message (a notice), or a reply nobody awaited */
    char *header;
    uint32_t header_size;
    char *payload; /* the payload frames back to back, unless they landed in `into` */
    uint64_t payload_size;
    uint32_t frame_count;
    uint64_t frame_sizes[WIRE_MAX_FRAMES];
    int landed;
};

struct waiter {
    struct link_reply reply;
    void *into; /* where a payload of exactly into_size bytes in one frame lands */
    uint64_t into_size;
    int done;
    int for_python; /* its reply goes to the inbox */
    int registered; /* counted in python_awaited */
    void (*on_send)(void *); /* called with `send` held just before the request is written (its place in the
                                link's order), for a request written at once (LINK_SEND_BYPASS) */
    void *on_send_context;
    struct waiter *next;
};

struct queued {
    struct queued *next;
    uint64_t gate; /* nonzero: a gate, not a message */
    int opened;
    int count;
    struct iovec *parts;
    void *adopted[2]; /* buffers handed over with the message (a launch batch) */
};

struct link {
    pthread_mutex_t send;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int in_use, fd, wake_fd;
    int device; /* whose launch batch goes out first (-1: none) */
    int closing, reading, notices;
    int failure, error_number;
    unsigned char *ahead;  /* bytes read past what was asked (the reader's; opened ones on a sealed link) */
    struct sealed *sealed; /* NULL: a plain lane */
    size_t ahead_start, ahead_end;
    struct waiter *waiting;
    struct waiter *inbox, *inbox_tail;
    int python_awaited;
    struct queued *queue, *queue_tail;
    uint64_t next_gate;
    long long alive_until_ns;
    long long spin_max_ns, spin_ns[LINK_SPIN_SLOTS];
    uint64_t calls_in_c;       /* synchronous calls C made (sync_fast_path.c) */
    uint64_t records_shipped;  /* launches (and other records) sent from the batch */
};

static struct link links[LINK_SLOTS];

/* How link_send sends. */
#define LINK_SEND_HAND_OVER 1 /* the service thread writes it (a large asynchronous upload) */
#define LINK_SEND_BYPASS 2    /* now, ahead of the queue and of the recorded launches, without flushing
                                 mirrors (a mirror's download, which a host function's gate may wait for) */
static pthread_mutex_t links_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t next_c_seq = WIRE_C_SEQ_BASE;

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static struct link *link_at(int handle)
{
    if (handle < 0 || handle >= LINK_SLOTS || !links[handle].in_use)
        return NULL;
    return &links[handle];
}

static void wake(struct link *l)
{
    uint64_t one = 1;
    ssize_t ignored = write(l->wake_fd, &one, sizeof one);
    (void)ignored;
}

/* ------------------------------------------------------------ waiters */

/* With `lock` held: a waiter's reply is complete (or failed). */
static void complete(struct link *l, struct waiter *w)
{
    if (w->for_python) {
        w->next = NULL;
        if (l->inbox_tail)
            l->inbox_tail->next = w;
        else
            l->inbox = w;
        l->inbox_tail = w;
        if (w->registered)
            l->python_awaited--;
        wake(l);
    }
    __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&l->changed);
}

/* With `lock` held: the waiter registered for `seq`, taken off the list. */
static struct waiter *take_waiter(struct link *l, uint64_t seq)
{
    for (struct waiter **at = &l->waiting; *at; at = &(*at)->next) {
        if ((*at)->reply.seq == seq) {
            struct waiter *w = *at;
            *at = w->next;
            return w;
        }
    }
    return NULL;
}

/* With `lock` held: the link cannot go on.  Every waiting call fails. */
static void link_fail(struct link *l, int failure, int error_number)
{
    if (l->failure)
        return;
    l->failure = failure;
    l->error_number = error_number;
    if (l->fd >= 0)
        shutdown(l->fd, SHUT_RDWR); /* ends the reads and writes of other threads */
    while (l->waiting) {
        struct waiter *w = l->waiting;
        l->waiting = w->next;
        w->reply.failure = failure;
        w->reply.error_number = error_number;
        complete(l, w);
    }
    wake(l);
}

/* With `lock` held: take the reader role if it is free. */
static int take_reading(struct link *l)
{
    if (l->reading || l->failure)
        return 0;
    l->reading = 1;
    return 1;
}

/* With `lock` held: give it back; a waiting caller or the service thread takes over. */
static void give_reading(struct link *l, int wake_service)
{
    l->reading = 0;
    pthread_cond_broadcast(&l->changed);
    if (wake_service && (l->python_awaited || l->notices))
        wake(l);
}

static int spin_slot(const char *op)
{
    unsigned hash = 5381;
    for (const char *c = op; *c; c++)
        hash = hash * 33 + (unsigned char)*c;
    return (int)(hash % LINK_SPIN_SLOTS);
}

/* As rcuda/lane.py's SpinPolicy: an answer within the window keeps it
 * whole, a later one halves it, down to none. */
static void learn_spin(struct link *l, int slot, long long waited)
{
    long long spin = __atomic_load_n(&l->spin_ns[slot], __ATOMIC_RELAXED);
    long long next = waited <= l->spin_max_ns ? l->spin_max_ns
                                               : (spin / 2 >= l->spin_max_ns / (long long)WIRE_SPIN_SHRINK_BELOW ? spin / 2 : 0);
    __atomic_store_n(&l->spin_ns[slot], next, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------ reading */

/* Whether the server has been heard from recently enough (Python's
 * heartbeat moves alive_until_ns on). */
static int server_silent(struct link *l)
{
    return now_ns() > __atomic_load_n(&l->alive_until_ns, __ATOMIC_RELAXED);
}

/* One read of at most `max` bytes into `target`: how many came, or 0 with
 * *failure set, or 0 and no failure when nothing came yet (try again).
 * `spinning`: the read does not sleep (the server may share our CPU, so
 * it yields); otherwise it sleeps a LINK_SLICE_MS slice at most and looks
 * at the server's liveness. */
static size_t receive_some(struct link *l, void *target, size_t max, int spinning, int *failure, int *error_number)
{
    ssize_t got = recv(l->fd, target, max, spinning ? MSG_DONTWAIT : 0);
    if (got > 0)
        return (size_t)got;
    if (got == 0)
        *failure = LINK_CLOSED;
    else if (errno == EINTR)
        ;
    else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        *error_number = errno;
        *failure = __atomic_load_n(&l->closing, __ATOMIC_RELAXED) ? LINK_SHUT : LINK_IO_ERROR;
    } else if (spinning)
        sched_yield();
    else if (__atomic_load_n(&l->closing, __ATOMIC_RELAXED))
        *failure = LINK_SHUT;
    else if (server_silent(l))
        *failure = LINK_SERVER_SILENT;
    return 0;
}

/* (A sealed link's reader:) at least `needed` bytes of ciphertext read from
 * raw_start on.  A large record is read to its end only; small ones read
 * ahead. */
static int fill_raw(struct link *l, size_t needed, long long spin_until, int *error_number)
{
    struct sealed *s = l->sealed;
    if (s->raw_end - s->raw_start >= needed)
        return 0;
    if (s->raw_start + needed > SEALED_RAW_SIZE) { /* make room: what is left goes to the front */
        memmove(s->raw, s->raw + s->raw_start, s->raw_end - s->raw_start);
        s->raw_end -= s->raw_start;
        s->raw_start = 0;
    }
    size_t limit = needed <= SEALED_READ_AHEAD ? SEALED_RAW_SIZE : s->raw_start + needed;
    while (s->raw_end - s->raw_start < needed) {
        int spinning = spin_until && s->raw_end == s->raw_start && now_ns() < spin_until, failure = 0;
        s->raw_end += receive_some(l, s->raw + s->raw_end, limit - s->raw_end, spinning, &failure, error_number);
        if (failure)
            return failure;
    }
    return 0;
}

/* (A sealed link's reader:) open the next record into `into` when it wants
 * all of it, else into the read-ahead buffer, from which `into` gets its
 * `want` bytes.  *got: the bytes `into` received. */
static int read_record(struct link *l, char *into, size_t want, long long spin_until, size_t *got, int *error_number)
{
    struct sealed *s = l->sealed;
    int failure = fill_raw(l, WIRE_RECORD_HEAD_SIZE, spin_until, error_number);
    if (failure)
        return failure;
    uint32_t size;
    memcpy(&size, s->raw + s->raw_start, sizeof size);
    if (size == 0 || size > WIRE_RECORD_MAX)
        return LINK_BAD_SEAL;
    size_t total = WIRE_RECORD_HEAD_SIZE + size + WIRE_SEAL_TAG;
    if ((failure = fill_raw(l, total, 0, error_number)))
        return failure;
    unsigned char *record = s->raw + s->raw_start;
    unsigned char *target = want >= size ? (unsigned char *)into : l->ahead;
    if (!open_record(&s->in, record, record + WIRE_RECORD_HEAD_SIZE, size, target))
        return LINK_BAD_SEAL;
    s->raw_start += total;
    if (s->raw_start == s->raw_end)
        s->raw_start = s->raw_end = 0;
    if (target == l->ahead) {
        memcpy(into, l->ahead, want);
        l->ahead_start = want;
        l->ahead_end = size;
        *got = want;
    } else {
        *got = size;
    }
    return 0;
}

/* Read exactly `size` bytes.  Until `spin_until` (for the first byte) the
 * reads do not sleep; then blocking reads in LINK_SLICE_MS slices, looking
 * at the server's liveness in between. */
static int read_exactly(struct link *l, void *into, size_t size, long long spin_until, int *error_number)
{
    size_t have = l->ahead_end - l->ahead_start;
    if (have > size)
        have = size;
    memcpy(into, l->ahead + l->ahead_start, have);
    l->ahead_start += have;
    while (have < size) {
        long long spin = have == 0 ? spin_until : 0;
        int failure = 0;
        if (l->sealed) {
            size_t got = 0;
            failure = read_record(l, (char *)into + have, size - have, spin, &got, error_number);
            have += got;
            if (failure)
                return failure;
            continue;
        }
        int spinning = spin && now_ns() < spin;
        /* Small reads go through the read-ahead buffer, large ones straight in. */
        int ahead = size - have < LINK_READ_AHEAD / 2;
        char *target = ahead ? (char *)l->ahead : (char *)into + have;
        size_t got = receive_some(l, target, ahead ? LINK_READ_AHEAD : size - have, spinning, &failure, error_number);
        if (failure)
            return failure;
        if (ahead) {
            size_t use = got < size - have ? got : size - have;
            memcpy((char *)into + have, l->ahead, use);
            l->ahead_start = use;
            l->ahead_end = got;
            have += use;
        } else {
            have += got;
        }
    }
    return 0;
}

/* (The reader's:) whether bytes were read already that poll() cannot see. */
static int read_already(struct link *l)
{
    return l->ahead_end > l->ahead_start || (l->sealed && l->sealed->raw_end > l->sealed->raw_start);
}

/* (The reader's:) whether a read would find bytes, read ahead or waiting. */
static int readable_now(struct link *l)
{
    if (read_already(l))
        return 1;
    struct pollfd p = {l->fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
}

/* Read one whole message and hand it to its waiter (or the inbox).  The
 * caller holds the reader role.  0, or a failure. */
static int read_message(struct link *l, long long spin_until, int *error_number)
{
    uint32_t prefix[2];
    int failure = read_exactly(l, prefix, sizeof prefix, spin_until, error_number);
    if (failure)
        return failure;
    uint32_t header_size = prefix[0], count = prefix[1];
    if (header_size == 0 || header_size > WIRE_MAX_HEADER || count > WIRE_MAX_FRAMES)
        return LINK_BAD_MESSAGE;
    uint64_t sizes[WIRE_MAX_FRAMES], total = 0;
    if (count && (failure = read_exactly(l, sizes, count * sizeof(uint64_t), 0, error_number)))
        return failure;
    for (uint32_t i = 0; i < count; i++) {
        if (sizes[i] > (1ull << 48) - total)
            return LINK_BAD_MESSAGE;
        total += sizes[i];
    }
    char *header = malloc(header_size);
    if (!header)
        return LINK_NO_MEMORY;
    if ((failure = read_exactly(l, header, header_size, 0, error_number))) {
        free(header);
        return failure;
    }
    uint64_t seq = 0;
    int has_seq = mp_header_seq((const unsigned char *)header, header_size, &seq);
    if (has_seq < 0) {
        free(header);
        return LINK_BAD_MESSAGE;
    }

    pthread_mutex_lock(&l->lock);
    struct waiter *w = has_seq ? take_waiter(l, seq) : NULL;
    pthread_mutex_unlock(&l->lock);
    int solicited = w != NULL;
    if (!w) { /* a notice, or a reply nobody waits for: Python says what it is */
        w = calloc(1, sizeof *w);
        if (!w) {
            free(header);
            return LINK_NO_MEMORY;
        }
        w->for_python = 1;
        w->reply.seq = seq;
    }
    struct link_reply *r = &w->reply;
    r->header = header;
    r->header_size = header_size;
    r->solicited = solicited;
    r->frame_count = count;
    memcpy(r->frame_sizes, sizes, count * sizeof(uint64_t));
    if (count == 1 && w->into && sizes[0] == w->into_size) {
        failure = read_exactly(l, w->into, sizes[0], 0, error_number);
        r->landed = 1;
    } else if (total) {
        r->payload = malloc(total);
        r->payload_size = total;
        failure = r->payload ? read_exactly(l, r->payload, total, 0, error_number) : LINK_NO_MEMORY;
    }
    pthread_mutex_lock(&l->lock);
    if (failure) {
        r->failure = failure;
        r->error_number = *error_number;
        link_fail(l, failure, *error_number);
    }
    complete(l, w);
    pthread_mutex_unlock(&l->lock);
    return failure;
}

/* Read whatever has arrived (whole messages) while holding the reader role. */
static int read_available(struct link *l, int *error_number)
{
    int failure = 0;
    while (!failure && readable_now(l))
        failure = read_message(l, 0, error_number);
    return failure;
}

/* Wait until `w` is answered: as the reader when the role is free, else
 * until the reader hands the reply over. */
static void await_reply(struct link *l, struct waiter *w, const char *op)
{
    int slot = spin_slot(op);
    long long started = now_ns(), spin = __atomic_load_n(&l->spin_ns[slot], __ATOMIC_RELAXED);
    long long spin_until = spin ? started + spin : 0;
    pthread_mutex_lock(&l->lock);
    while (!w->done) {
        if (take_reading(l)) {
            pthread_mutex_unlock(&l->lock);
            int failure = 0, error_number = 0;
            while (!failure && !__atomic_load_n(&w->done, __ATOMIC_ACQUIRE))
                failure = read_message(l, spin_until, &error_number);
            pthread_mutex_lock(&l->lock);
            if (failure)
                link_fail(l, failure, error_number);
            give_reading(l, 1);
            continue;
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += LINK_SLICE_MS * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        if (pthread_cond_timedwait(&l->changed, &l->lock, &until) == ETIMEDOUT && !w->done && server_silent(l))
            link_fail(l, LINK_SERVER_SILENT, 0);
    }
    pthread_mutex_unlock(&l->lock);
    if (!w->reply.failure)
        learn_spin(l, slot, now_ns() - started);
}

/* ------------------------------------------------------------ writing */

/* With `send` held, `lock` not: wait until the connection takes more,
 * reading replies meanwhile if nobody else does. */
static int wait_writable(struct link *l, int *error_number)
{
    pthread_mutex_lock(&l->lock);
    int reading = take_reading(l);
    pthread_mutex_unlock(&l->lock);
    struct pollfd p = {l->fd, POLLOUT | (reading ? POLLIN : 0), 0};
    int ahead = reading && read_already(l);
    int ready = poll(&p, 1, ahead ? 0 : LINK_SLICE_MS);
    int failure = 0;
    if (reading && (ahead || (ready > 0 && (p.revents & POLLIN))))
        failure = read_available(l, error_number);
    if (reading) {
        pthread_mutex_lock(&l->lock);
        if (failure)
            link_fail(l, failure, *error_number);
        give_reading(l, 1);
        pthread_mutex_unlock(&l->lock);
    }
    if (failure)
        return failure;
    if (ready < 0 && errno != EINTR) {
        *error_number = errno;
        return LINK_IO_ERROR;
    }
    if (ready == 0) {
        if (__atomic_load_n(&l->closing, __ATOMIC_RELAXED))
            return LINK_SHUT;
        if (server_silent(l))
            return LINK_SERVER_SILENT;
    }
    return 0;
}

/* With `send` held: write all of `parts` (modified as they go out). */
static int write_plain(struct link *l, struct iovec *parts, int count, int *error_number)
{
    while (count) {
        struct msghdr message = {0};
        message.msg_iov = parts;
        message.msg_iovlen = (size_t)count;
        ssize_t sent = sendmsg(l->fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                *error_number = errno;
                return __atomic_load_n(&l->closing, __ATOMIC_RELAXED) ? LINK_SHUT : LINK_IO_ERROR;
            }
            int failure = wait_writable(l, error_number);
            if (failure)
                return failure;
            continue;
        }
        while (count && (size_t)sent >= parts->iov_len) {
            sent -= (ssize_t)parts->iov_len;
            parts++;
            count--;
        }
        if (count) {
            parts->iov_base = (char *)parts->iov_base + sent;
            parts->iov_len -= (size_t)sent;
        }
    }
    return 0;
}

/* With `send` held: write all of `parts` (modified as they go out), in
 * sealed records on a sealed link. */
static int write_all(struct link *l, struct iovec *parts, int count, int *error_number)
{
    if (!l->sealed)
        return write_plain(l, parts, count, error_number);
    for (;;) {
        while (count && !parts->iov_len) {
            parts++;
            count--;
        }
        if (!count)
            return 0;
        struct iovec record = {l->sealed->record, seal_record(&l->sealed->out, &parts, &count, l->sealed->record)};
        if (!record.iov_len)
            return LINK_BAD_SEAL;
        int failure = write_plain(l, &record, 1, error_number);
        if (failure)
            return failure;
    }
}

/* A message's framing: u32 header length, u32 frame count, u64 per frame. */
struct framing {
    unsigned char bytes[WIRE_PREFIX_SIZE + WIRE_FRAME_LENGTH_SIZE * WIRE_MAX_FRAMES];
    size_t size;
};

/* parts[0] is the header, the rest the payload frames. */
static int frame(struct framing *f, const struct iovec *parts, int count)
{
    if (count < 1 || count - 1 > (int)WIRE_MAX_FRAMES)
        return 0;
    uint32_t prefix[2] = {(uint32_t)parts[0].iov_len, (uint32_t)(count - 1)};
    memcpy(f->bytes, prefix, sizeof prefix);
    f->size = sizeof prefix;
    for (int i = 1; i < count; i++) {
        uint64_t length = parts[i].iov_len;
        memcpy(f->bytes + f->size, &length, sizeof length);
        f->size += sizeof length;
    }
    return 1;
}

/* The device's recorded launches as a `launches` message, detached from
 * the batch: its header into `head` (64 bytes), its parts into `parts`
 * (2: header, records); the records buffer in *batch (free it).  0 parts
 * when nothing was recorded. */
static int batch_message(struct link *l, unsigned char *head, struct iovec *parts, char **batch)
{
    *batch = NULL;
    if (l->device < 0)
        return 0;
    struct fast_device *d = &devices[l->device];
    uint32_t records;
    pthread_mutex_lock(&d->lock);
    size_t size = detach_batch(d, batch, &records);
    pthread_mutex_unlock(&d->lock);
    if (!size)
        return 0;
    __atomic_add_fetch(&l->records_shipped, records, __ATOMIC_RELAXED);
    struct mp_writer w = {head, head + 64};
    mp_map(&w, 3);
    mp_str(&w, "op");
    mp_str(&w, "launches");
    mp_str(&w, "seq");
    mp_uint(&w, __atomic_fetch_add(&next_c_seq, 1, __ATOMIC_RELAXED));
    mp_str(&w, "count");
    mp_uint(&w, records);
    parts[0] = (struct iovec){head, (size_t)(w.at - head)};
    parts[1] = (struct iovec){*batch, size};
    return 2;
}

/* With `lock` held: a message joins the queue.  Parts are copied unless
 * borrowed (program memory, read when sent) or adopted (freed when sent). */
static int enqueue(struct link *l, const struct iovec *parts, const unsigned char *kinds, int count)
{
    struct framing f;
    if (!frame(&f, parts, count))
        return LINK_BAD_MESSAGE;
    size_t copied = f.size;
    for (int i = 0; i < count; i++)
        if (kinds[i] == PART_COPY)
            copied += parts[i].iov_len;
    struct queued *q = calloc(1, sizeof *q + (count + 1) * sizeof(struct iovec) + copied);
    if (!q)
        return LINK_NO_MEMORY;
    q->parts = (struct iovec *)(q + 1);
    char *store = (char *)(q->parts + count + 1);
    memcpy(store, f.bytes, f.size);
    q->parts[0] = (struct iovec){store, f.size};
    store += f.size;
    int adopted = 0;
    for (int i = 0; i < count; i++) {
        if (kinds[i] == PART_COPY) {
            memcpy(store, parts[i].iov_base, parts[i].iov_len);
            q->parts[i + 1] = (struct iovec){store, parts[i].iov_len};
            store += parts[i].iov_len;
        } else {
            q->parts[i + 1] = parts[i];
            if (kinds[i] == PART_ADOPTED && adopted < 2)
                q->adopted[adopted++] = parts[i].iov_base;
        }
    }
    q->count = count + 1;
    if (l->queue_tail)
        l->queue_tail->next = q;
    else
        l->queue = q;
    l->queue_tail = q;
    return 0;
}

/* With `lock` held: the launches recorded so far join the queue. */
static int enqueue_batch(struct link *l)
{
    unsigned char head[64];
    struct iovec parts[2];
    char *batch;
    if (!batch_message(l, head, parts, &batch))
        return 0;
    static const unsigned char kinds[2] = {PART_COPY, PART_ADOPTED};
    int failure = enqueue(l, parts, kinds, 2);
    if (failure)
        free(batch);
    return failure;
}

static void free_queued(struct queued *q)
{
    free(q->adopted[0]);
    free(q->adopted[1]);
    free(q);
}

/* With `send` and `lock` held (`lock` is let go while writing): send the
 * queue up to the first closed gate. */
static void send_queue(struct link *l)
{
    struct queued *q;
    while (!l->failure && (q = l->queue) && (!q->gate || q->opened)) {
        l->queue = q->next;
        if (!l->queue)
            l->queue_tail = NULL;
        if (q->gate) {
            free_queued(q);
            continue;
        }
        pthread_mutex_unlock(&l->lock);
        int error_number = 0;
        int failure = mirror_flush(l); /* what the program wrote before it (or a host function) */
        if (!failure)
            failure = write_all(l, q->parts, q->count, &error_number);
        free_queued(q);
        pthread_mutex_lock(&l->lock);
        if (failure)
            link_fail(l, failure, error_number);
    }
}

/* Send a message (parts[0] its header), after the device's dirty mirror
 * pages and the recorded launches; `w` (may be NULL) is registered for its
 * reply first.  Queued instead when something waits in the queue, or with
 * LINK_SEND_HAND_OVER (the service thread then writes it); LINK_SEND_BYPASS
 * writes it alone, now.  0, or the link's failure. */
static int link_send(struct link *l, struct iovec *parts, const unsigned char *kinds, int count, struct waiter *w,
                     int mode)
{
    int hand_over = mode & LINK_SEND_HAND_OVER, bypass = mode & LINK_SEND_BYPASS;
    pthread_mutex_lock(&l->send);
    pthread_mutex_lock(&l->lock);
    int failure = l->failure;
    if (!failure && w) {
        w->next = l->waiting;
        l->waiting = w;
        if (w->for_python) {
            w->registered = 1;
            l->python_awaited++;
        }
    }
    if (!failure && !bypass && (l->queue || hand_over)) {
        failure = enqueue_batch(l);
        if (!failure)
            failure = enqueue(l, parts, kinds, count);
        if (failure)
            link_fail(l, failure, 0);
        else
            wake(l);
    }
    int sent = failure || (!bypass && l->queue);
    pthread_mutex_unlock(&l->lock);
    if (!sent) {
        if (w && w->on_send)
            w->on_send(w->on_send_context);
        unsigned char head[64];
        struct iovec all[8 + WIRE_MAX_FRAMES];
        struct framing batch_framing, message_framing;
        char *batch = NULL;
        int n = 0, batch_parts = bypass ? 0 : batch_message(l, head, all + 1, &batch);
        if (batch_parts) {
            frame(&batch_framing, all + 1, batch_parts);
            all[0] = (struct iovec){batch_framing.bytes, batch_framing.size};
            n = 1 + batch_parts;
        }
        /* After the batch is detached: the pages written before its launches. */
        if (!bypass && (failure = mirror_flush(l))) {
            /* the link failed */
        } else if (!frame(&message_framing, parts, count)) {
            failure = LINK_BAD_MESSAGE;
        } else {
            all[n++] = (struct iovec){message_framing.bytes, message_framing.size};
            memcpy(all + n, parts, count * sizeof *parts);
            n += count;
            int error_number = 0;
            failure = write_all(l, all, n, &error_number);
            if (failure) {
                pthread_mutex_lock(&l->lock);
                link_fail(l, failure, error_number);
                pthread_mutex_unlock(&l->lock);
            }
        }
        free(batch);
    }
    pthread_mutex_unlock(&l->send);
    return failure;
}

/* Send what the service thread must: the queue, or the launches recorded
 * since the last message. */
static void flush(struct link *l)
{
    pthread_mutex_lock(&l->send);
    pthread_mutex_lock(&l->lock);
    if (l->failure) {
        /* nothing goes out any more */
    } else if (l->queue) {
        if (enqueue_batch(l) == 0)
            send_queue(l);
    } else {
        pthread_mutex_unlock(&l->lock);
        unsigned char head[64];
        struct iovec parts[3];
        struct framing f;
        char *batch;
        int n = batch_message(l, head, parts + 1, &batch);
        if (n) {
            frame(&f, parts + 1, n);
            parts[0] = (struct iovec){f.bytes, f.size};
            int error_number = 0;
            int failure = mirror_flush(l); /* the pages written before those launches */
            if (!failure)
                failure = write_all(l, parts, n + 1, &error_number);
            free(batch);
            if (failure) {
                pthread_mutex_lock(&l->lock);
                link_fail(l, failure, error_number);
                pthread_mutex_unlock(&l->lock);
            }
        }
        pthread_mutex_unlock(&l->send);
        return;
    }
    pthread_mutex_unlock(&l->lock);
    pthread_mutex_unlock(&l->send);
}

/* ------------------------------------------------------------ Python's side */

/* Take over a connected lane (`fd`, whose ownership passes here); its
 * launches are device `device`'s (-1: none).  Returns the link's handle,
 * or -1 when none is free. */
static int rcuda_link_open(int fd, int device, long long spin_max_ns, long long alive_until_ns)
{
    pthread_mutex_lock(&links_lock);
    int handle = -1;
    for (int i = 0; i < LINK_SLOTS && handle < 0; i++)
        if (!links[i].in_use)
            handle = i;
    if (handle >= 0) {
        struct link *l = &links[handle];
        memset(l, 0, sizeof *l);
        pthread_mutex_init(&l->send, NULL);
        pthread_mutex_init(&l->lock, NULL);
        pthread_cond_init(&l->changed, NULL);
        l->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        l->ahead = malloc(LINK_READ_AHEAD);
        l->fd = fd;
        l->device = device;
        l->alive_until_ns = alive_until_ns;
        l->spin_max_ns = spin_max_ns;
        for (int i = 0; i < LINK_SPIN_SLOTS; i++)
            l->spin_ns[i] = spin_max_ns;
        int one = 1;
        struct timeval slice = {0, LINK_SLICE_MS * 1000};
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &slice, sizeof slice);
        l->in_use = l->wake_fd >= 0 && l->ahead;
        if (!l->in_use) {
            free(l->ahead);
            handle = -1;
        }
    }
    pthread_mutex_unlock(&links_lock);
    return handle;
}

/* Seal a link Python has just opened, whose lane's handshake and hello
 * Python made (rcuda/sealed.py): from now on every byte goes in records
 * sealed with these keys, from these record numbers.  0, or -1 when
 * libcrypto is missing or failed. */
static int rcuda_link_seal(int handle, const unsigned char *send_key, uint64_t send_number,
                           const unsigned char *receive_key, uint64_t receive_number)
{
    struct link *l = link_at(handle);
    if (!l || l->sealed)
        return -1;
    unsigned char *ahead = realloc(l->ahead, WIRE_RECORD_MAX); /* a whole record opens into it */
    if (!ahead)
        return -1;
    l->ahead = ahead;
    l->sealed = sealed_new(send_key, send_number, receive_key, receive_number);
    return l->sealed ? 0 : -1;
}

/* The eventfd that wakes the link's service thread (launch_fast_path.c
 * writes it when a device's batch of launches starts). */
static int rcuda_link_wake_fd(int handle)
{
    struct link *l = link_at(handle);
    return l ? l->wake_fd : -1;
}

/* Python's heartbeat heard the server: calls wait until this monotonic time. */
static void rcuda_link_alive_until(int handle, long long deadline_ns)
{
    struct link *l = link_at(handle);
    if (l)
        __atomic_store_n(&l->alive_until_ns, deadline_ns, __ATOMIC_RELAXED);
}

/* Whether unsolicited messages (notices) are read even when no reply is awaited. */
static void rcuda_link_watch_notices(int handle, int watch)
{
    struct link *l = link_at(handle);
    if (l) {
        __atomic_store_n(&l->notices, watch, __ATOMIC_RELAXED);
        wake(l);
    }
}

static int python_parts(const struct link_part *given, uint32_t count, struct iovec *parts, unsigned char *kinds,
                        uint64_t *borrowed)
{
    if (count < 1 || count > WIRE_MAX_FRAMES + 1)
        return 0;
    *borrowed = 0;
    for (uint32_t i = 0; i < count; i++) {
        parts[i] = (struct iovec){(void *)given[i].data, given[i].size};
        kinds[i] = given[i].borrowed ? PART_BORROWED : PART_COPY;
        if (given[i].borrowed)
            *borrowed += given[i].size;
    }
    return 1;
}

/* Python's message, whose reply goes to `w` (NULL: none is awaited); many
 * borrowed bytes are handed to the service thread to write. */
static int python_send(struct link *l, const struct link_part *given, uint32_t count, struct waiter *w)
{
    struct iovec parts[WIRE_MAX_FRAMES + 1];
    unsigned char kinds[WIRE_MAX_FRAMES + 1];
    uint64_t borrowed;
    if (!python_parts(given, count, parts, kinds, &borrowed))
        return LINK_BAD_MESSAGE;
    return link_send(l, parts, kinds, (int)count, w, borrowed >= LINK_ASYNC_SEND_MIN ? LINK_SEND_HAND_OVER : 0);
}

/* A message that gets no reply.  0, or the link's failure. */
static int rcuda_link_post(int handle, const struct link_part *given, uint32_t count)
{
    struct link *l = link_at(handle);
    return l ? python_send(l, given, count, NULL) : LINK_SHUT;
}

/* A request whose reply goes to the inbox (rcuda_link_service hands it to
 * Python); a payload of exactly into_size bytes in one frame lands in `into`. */
static int rcuda_link_post_awaited(int handle, uint64_t seq, const struct link_part *given, uint32_t count,
                                   void *into, uint64_t into_size)
{
    struct link *l = link_at(handle);
    if (!l)
        return LINK_SHUT;
    struct waiter *w = calloc(1, sizeof *w);
    if (!w)
        return LINK_NO_MEMORY;
    w->reply.seq = seq;
    w->for_python = 1;
    w->into = into;
    w->into_size = into_size;
    int failure = python_send(l, given, count, w);
    if (failure) {
        pthread_mutex_lock(&l->lock);
        if (!w->registered) /* never registered: nobody else has it */
            free(w);
        pthread_mutex_unlock(&l->lock);
    }
    return failure;
}

/* A request and its reply (into *reply; free its buffers with
 * rcuda_link_free).  Returns the reply's failure (0: a reply came). */
static int link_call(struct link *l, uint64_t seq, const char *op, struct iovec *parts, const unsigned char *kinds,
                     int count, void *into, uint64_t into_size, struct link_reply *reply)
{
    struct waiter w;
    memset(&w, 0, sizeof w);
    w.reply.seq = seq;
    w.into = into;
    w.into_size = into_size;
    int failure = link_send(l, parts, kinds, count, &w, 0);
    if (failure && !w.done) { /* not registered: the link had failed already */
        memset(reply, 0, sizeof *reply);
        reply->failure = failure;
        reply->error_number = l->error_number;
        return failure;
    }
    await_reply(l, &w, op);
    *reply = w.reply;
    return w.reply.failure;
}

static int rcuda_link_call(int handle, uint64_t seq, const char *op, const struct link_part *given, uint32_t count,
                           void *into, uint64_t into_size, struct link_reply *reply)
{
    struct link *l = link_at(handle);
    struct iovec parts[WIRE_MAX_FRAMES + 1];
    unsigned char kinds[WIRE_MAX_FRAMES + 1];
    uint64_t borrowed;
    memset(reply, 0, sizeof *reply);
    if (!l)
        return reply->failure = LINK_SHUT;
    if (!python_parts(given, count, parts, kinds, &borrowed))
        return reply->failure = LINK_BAD_MESSAGE;
    return link_call(l, seq, op, parts, kinds, (int)count, into, into_size, reply);
}

static void rcuda_link_free(struct link_reply *reply)
{
    free(reply->header);
    free(reply->payload);
    reply->header = reply->payload = NULL;
}

/* A payload handed to Python keeps living in its buffer: freed by Python's
 * garbage collector (ffi.gc) when the last view of it goes. */
static void rcuda_link_free_payload(char *payload)
{
    free(payload);
}

/* Hold back everything sent from now on until the gate opens.  Launches
 * recorded before it go out first.  Returns the gate's id (0: the link failed). */
static uint64_t rcuda_link_gate(int handle)
{
    struct link *l = link_at(handle);
    if (!l)
        return 0;
    flush(l);
    pthread_mutex_lock(&l->send);
    pthread_mutex_lock(&l->lock);
    uint64_t id = 0;
    struct queued *q = l->failure ? NULL : calloc(1, sizeof *q);
    if (q && enqueue_batch(l) == 0) {
        q->gate = id = ++l->next_gate;
        if (l->queue_tail)
            l->queue_tail->next = q;
        else
            l->queue = q;
        l->queue_tail = q;
    } else {
        free(q);
    }
    pthread_mutex_unlock(&l->lock);
    pthread_mutex_unlock(&l->send);
    return id;
}

static void rcuda_link_open_gate(int handle, uint64_t id)
{
    struct link *l = link_at(handle);
    if (!l)
        return;
    pthread_mutex_lock(&l->send);
    pthread_mutex_lock(&l->lock);
    for (struct queued *q = l->queue; q; q = q->next)
        if (q->gate == id)
            q->opened = 1;
    if (!l->failure && enqueue_batch(l) == 0)
        send_queue(l);
    pthread_mutex_unlock(&l->lock);
    pthread_mutex_unlock(&l->send);
}

/* The service thread's wait: for a reply Python awaits (returns 1, the
 * reply in *delivery), for the timeout (0) or for the link's end (-1).
 * Meanwhile it sends what the queue and the launch batch hold, and reads
 * when Python awaits replies and nobody else reads. */
static int rcuda_link_service(int handle, int timeout_ms, struct link_reply *delivery)
{
    struct link *l = link_at(handle);
    if (!l)
        return -1;
    long long deadline = now_ns() + (long long)timeout_ms * 1000000LL;
    for (;;) {
        pthread_mutex_lock(&l->lock);
        if (l->inbox) {
            struct waiter *w = l->inbox;
            l->inbox = w->next;
            if (!l->inbox)
                l->inbox_tail = NULL;
            pthread_mutex_unlock(&l->lock);
            *delivery = w->reply;
            free(w);
            return 1;
        }
        if (l->closing) {
            pthread_mutex_unlock(&l->lock);
            return -1;
        }
        int reading = (l->python_awaited || l->notices) && take_reading(l);
        pthread_mutex_unlock(&l->lock);

        long long left = deadline - now_ns();
        int wait_ms = left <= 0 ? 0 : (int)(left / 1000000LL) + 1;
        int ahead = reading && read_already(l); /* poll() cannot see those */
        struct pollfd p[2] = {{l->wake_fd, POLLIN, 0}, {reading ? l->fd : -1, POLLIN, 0}};
        int ready = poll(p, 2, ahead ? 0 : wait_ms < LINK_SLICE_MS ? wait_ms : LINK_SLICE_MS);
        if (ahead) {
            p[1].revents |= POLLIN;
            ready = ready > 0 ? ready : 1;
        }
        if (ready > 0 && (p[0].revents & POLLIN)) {
            uint64_t count;
            ssize_t ignored = read(l->wake_fd, &count, sizeof count);
            (void)ignored;
        }
        int failure = 0, error_number = 0;
        if (reading && ready > 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
            failure = read_available(l, &error_number);
        pthread_mutex_lock(&l->lock);
        if (failure)
            link_fail(l, failure, error_number);
        if (reading)
            give_reading(l, 0);
        if (l->python_awaited && !l->failure && server_silent(l))
            link_fail(l, LINK_SERVER_SILENT, 0);
        pthread_mutex_unlock(&l->lock);
        /* Not holding the reader role: a writer blocked meanwhile must be
         * able to read (the server may be blocked writing to us). */
        flush(l);
        if (now_ns() >= deadline)
            return 0;
    }
}

/* The link's failure (0: none), and the errno behind it. */
static int rcuda_link_failure(int handle, int *error_number)
{
    struct link *l = link_at(handle);
    if (!l)
        return LINK_SHUT;
    pthread_mutex_lock(&l->lock);
    int failure = l->failure;
    *error_number = l->error_number;
    pthread_mutex_unlock(&l->lock);
    return failure;
}

/* Fail what waits and end the service thread's wait (rcuda_link_release
 * follows once that thread has ended). */
static void rcuda_link_close(int handle)
{
    struct link *l = link_at(handle);
    if (!l)
        return;
    pthread_mutex_lock(&l->lock);
    l->closing = 1;
    link_fail(l, LINK_SHUT, 0);
    wake(l);
    pthread_mutex_unlock(&l->lock);
}

static void rcuda_link_release(int handle)
{
    struct link *l = link_at(handle);
    if (!l)
        return;
    pthread_mutex_lock(&links_lock);
    close(l->fd);
    close(l->wake_fd);
    free(l->ahead);
    sealed_free(l->sealed);
    while (l->queue) {
        struct queued *q = l->queue;
        l->queue = q->next;
        free_queued(q);
    }
    while (l->inbox) {
        struct waiter *w = l->inbox;
        l->inbox = w->next;
        rcuda_link_free(&w->reply);
        free(w);
    }
    l->in_use = 0;
    pthread_mutex_unlock(&links_lock);
}

static uint64_t rcuda_link_records_shipped(int handle)
{
    struct link *l = link_at(handle);
    return l ? __atomic_load_n(&l->records_shipped, __ATOMIC_RELAXED) : 0;
}

/* How long a call of `op` spins for its reply now (learnt, see learn_spin). */
static long long rcuda_link_spin_window(int handle, const char *op)
{
    struct link *l = link_at(handle);
    return l ? __atomic_load_n(&l->spin_ns[spin_slot(op)], __ATOMIC_RELAXED) : 0;
}

static uint64_t rcuda_link_calls_in_c(int handle)
{
    struct link *l = link_at(handle);
    return l ? __atomic_load_n(&l->calls_in_c, __ATOMIC_RELAXED) : 0;
}

/* In a forked child: the parent's connections are not the child's. */
static void link_after_fork(void)
{
    pthread_mutex_init(&links_lock, NULL);
    for (int i = 0; i < LINK_SLOTS; i++) {
        if (!links[i].in_use)
            continue;
        close(links[i].fd);
        close(links[i].wake_fd);
        memset(&links[i], 0, sizeof links[i]);
    }
}
