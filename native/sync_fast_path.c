/* Small synchronous calls in C: cudaDeviceSynchronize, cudaStreamSynchronize,
 * cudaMemGetInfo and cudaMemcpy between the program's memory and a device
 * (and cudaMemcpyAsync into pageable memory, which CUDA makes synchronous),
 * on the device's lane (rcuda/lane.py), without Python.
 *
 * Through the Python client such a call costs about twice what a C loop on
 * the same lane costs (benchmarks/README.md, "What a fast path in C would
 * buy"): Python's share is encoding, locks and the wake-up of a thread that
 * holds the GIL.  Here the calling thread encodes the request (a few msgpack
 * fields), sends it with the launches C recorded before it (and a copy's
 * bytes from where the program keeps them), busy-polls for the reply as the
 * Python client does, and reads it (a copy's bytes straight into the
 * program's buffer).  Which device a copy's pointer belongs to, C looks up
 * in its copy of the allocation map (native/allocation_table.c).
 *
 * The Python client stays in charge; C takes a call only while
 *   - the lane is attached (Python connected it) and C holds its `use` lock,
 *     which the Python client takes too whenever it uses the lane;
 *   - Python said the channel is `open`: no reply awaited on the ZeroMQ
 *     socket (an asynchronous copy's reply must reach the program before a
 *     later synchronisation returns), nothing queued there, no gate (a host
 *     function) holding it; sealing recorded launches into Python's queue
 *     closes it too, under the batch's lock, so C never overtakes them;
 *   - the device is `clean`: no sticky error, no asynchronous error to report,
 *     no tracing or statistics (those are Python's).
 * Order with the socket is kept as in rcuda/lane.py: both message counts
 * live here, under `order`, so a lane message's `after` and a socket
 * message's `lane_after` are taken in one order whoever sends.
 *
 * Anything unusual goes to Python: a reply with an error or device output
 * (rcuda_py_lane_reply explains it and records it as the thread's last
 * error), a broken lane or a silent server (rcuda_py_lane_failed drops the
 * lane and fails the device, as the Python lane call does).  A call that
 * cannot be taken here is simply made by Python.
 *
 * Included into the cffi module after launch_fast_path.c.
 */
#include <sys/socket.h>
#include <sys/uio.h>
#include <sched.h>
#include <time.h>

/* C's request numbers: never the Python client's, which count up from 1. */
#define SYNC_SEQ_BASE (1ull << 48)
#define SYNC_REPLY_MAX 4096 /* a reply header read on the stack: a few fields, unless device output came */
#define SYNC_REPLY_HEADER_MAX (1u << 20) /* rcuda/lane.py's MAX_HEADER: a longer one is not a reply */
/* rcuda/lane.py's LANE_MAX_PAYLOAD: a server refuses more in one lane message
 * (and closes the lane).  A longer train of launches takes the socket, which
 * pipelines it: Python's call does that. */
#define SYNC_LANE_MAX_PAYLOAD (1u << 20)

enum sync_op { SYNC_DEVICE, SYNC_STREAM, SYNC_MEM_INFO, SYNC_HTOD, SYNC_DTOH, SYNC_OPS };
static const char *const sync_op_names[SYNC_OPS] = {"sync", "stream_sync", "mem_info", "htod", "dtoh"};

/* How a call on the lane went wrong (rcuda_py_lane_failed explains it). */
enum lane_failure { LANE_IO_ERROR = 1, LANE_CLOSED, LANE_BAD_REPLY, LANE_WRONG_SEQ, LANE_SERVER_SILENT };

struct sync_lane {
    pthread_mutex_t use;   /* whoever talks on the lane: a call here, or the Python client */
    pthread_mutex_t order; /* the two counts, and taking the launch batch with them */
    int fd;                /* the lane's descriptor (Python's socket); -1: none */
    int open, clean;       /* Python's word: see the top of this file */
    uint64_t socket_sent;  /* messages sent on the ZeroMQ socket: a lane message's `after` */
    uint64_t lane_sent;    /* messages sent on the lane: a socket message's `lane_after` */
    uint64_t next_seq;
    uint64_t calls;        /* calls made here (RCUDA_LOG=info reports them at exit) */
    long long spin_max_ns;
    long long spin_ns[SYNC_OPS]; /* learnt per op, as rcuda/lane.py's SpinPolicy */
};

static struct sync_lane lanes[FAST_MAX_DEVICES];
static pthread_once_t lanes_once = PTHREAD_ONCE_INIT;

static void init_lanes(void)
{
    for (int i = 0; i < FAST_MAX_DEVICES; i++) {
        pthread_mutex_init(&lanes[i].use, NULL);
        pthread_mutex_init(&lanes[i].order, NULL);
        lanes[i].fd = -1;
        lanes[i].next_seq = SYNC_SEQ_BASE;
    }
}

static struct sync_lane *lane_of(int device)
{
    if (device < 0 || device >= FAST_MAX_DEVICES)
        return NULL;
    pthread_once(&lanes_once, init_lanes);
    return &lanes[device];
}

/* ------------------------------------------------------------ Python's side */

/* The lane's descriptor (fd -1: none), and how long to busy-poll for a reply.
 * Called with `use` held. */
static void rcuda_lane_attach(int device, int fd, long long spin_max_ns)
{
    struct sync_lane *l = lane_of(device);
    if (!l)
        return;
    l->fd = fd;
    l->spin_max_ns = spin_max_ns;
    for (int i = 0; i < SYNC_OPS; i++)
        l->spin_ns[i] = spin_max_ns;
}

/* The lane's `use` lock: 1 when taken (wait: block until it is). */
static int rcuda_lane_take(int device, int wait)
{
    struct sync_lane *l = lane_of(device);
    if (!l)
        return 1;
    return wait ? pthread_mutex_lock(&l->use) == 0 : pthread_mutex_trylock(&l->use) == 0;
}

static void rcuda_lane_give(int device)
{
    struct sync_lane *l = lane_of(device);
    if (l)
        pthread_mutex_unlock(&l->use);
}

static void rcuda_lane_open(int device, int open)
{
    struct sync_lane *l = lane_of(device);
    if (l)
        __atomic_store_n(&l->open, open, __ATOMIC_SEQ_CST);
}

static void rcuda_lane_clean(int device, int clean)
{
    struct sync_lane *l = lane_of(device);
    if (l)
        __atomic_store_n(&l->clean, clean, __ATOMIC_SEQ_CST);
}

/* A message goes out on the socket: its `lane_after`. */
static uint64_t rcuda_count_socket_message(int device)
{
    struct sync_lane *l = lane_of(device);
    if (!l)
        return 0;
    pthread_mutex_lock(&l->order);
    uint64_t lane_after = l->lane_sent;
    l->socket_sent++;
    pthread_mutex_unlock(&l->order);
    return lane_after;
}

/* `count` messages go out on the lane: their `after`. */
static uint64_t rcuda_count_lane_messages(int device, uint64_t count)
{
    struct sync_lane *l = lane_of(device);
    if (!l)
        return 0;
    pthread_mutex_lock(&l->order);
    uint64_t after = l->socket_sent;
    l->lane_sent += count;
    pthread_mutex_unlock(&l->order);
    return after;
}

static uint64_t rcuda_lane_calls_in_c(int device)
{
    struct sync_lane *l = lane_of(device);
    return l ? __atomic_load_n(&l->calls, __ATOMIC_RELAXED) : 0;
}

/* Called by rcuda_fast_take (launch_fast_path.c) with the batch's lock held,
 * when Python seals a batch into its queue: C must not overtake it. */
static void sync_lane_batch_sealed(int device)
{
    struct sync_lane *l = lane_of(device);
    if (l)
        __atomic_store_n(&l->open, 0, __ATOMIC_SEQ_CST);
}

/* In a forked child: the parent's lanes are not the child's. */
static void sync_path_after_fork(void)
{
    pthread_once(&lanes_once, init_lanes);
    for (int i = 0; i < FAST_MAX_DEVICES; i++) {
        pthread_mutex_init(&lanes[i].use, NULL);
        pthread_mutex_init(&lanes[i].order, NULL);
        lanes[i].fd = -1;
        lanes[i].open = lanes[i].clean = 0;
        lanes[i].socket_sent = lanes[i].lane_sent = 0;
    }
}

/* The slow paths: client/entrypoints.py. */
static int rcuda_py_lane_alive(int device, const char *call);
static cudaError_t rcuda_py_lane_failed(int device, const char *call, int failure, int error_number);
static cudaError_t rcuda_py_lane_reply(int device, const char *call, const char *op, uint64_t seq,
                                       const char *header, size_t size);

/* ------------------------------------------------------------ msgpack */

/* Requests are maps of short string keys to unsigned integers and one
 * string (the op); replies are read only as far as maps of string keys to
 * integers or nil.  Anything else in a reply sends it to Python. */

struct writer {
    unsigned char *at, *end;
};

static void put_byte(struct writer *w, unsigned char byte)
{
    if (w->at < w->end)
        *w->at++ = byte;
}

static void put_big_endian(struct writer *w, uint64_t value, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--)
        put_byte(w, (unsigned char)(value >> (8 * i)));
}

static void put_str(struct writer *w, const char *text)
{
    size_t length = strlen(text); /* keys and ops: under 32 bytes */
    put_byte(w, 0xa0 | (unsigned char)length);
    for (size_t i = 0; i < length; i++)
        put_byte(w, (unsigned char)text[i]);
}

static void put_uint(struct writer *w, uint64_t value)
{
    if (value < 0x80) {
        put_byte(w, (unsigned char)value);
    } else if (value <= 0xff) {
        put_byte(w, 0xcc);
        put_big_endian(w, value, 1);
    } else if (value <= 0xffff) {
        put_byte(w, 0xcd);
        put_big_endian(w, value, 2);
    } else if (value <= 0xffffffffull) {
        put_byte(w, 0xce);
        put_big_endian(w, value, 4);
    } else {
        put_byte(w, 0xcf);
        put_big_endian(w, value, 8);
    }
}

struct reader {
    const unsigned char *at, *end;
    int ok;
};

static uint64_t get_big_endian(struct reader *r, int bytes)
{
    if (r->end - r->at < bytes) {
        r->ok = 0;
        return 0;
    }
    uint64_t value = 0;
    for (int i = 0; i < bytes; i++)
        value = value << 8 | *r->at++;
    return value;
}

/* A value: an integer (returned), nil (*kind 1), a string (skipped, *kind 2);
 * anything else clears r->ok.  *kind is 0 for an integer. */
static int64_t get_value(struct reader *r, int *kind)
{
    *kind = 0;
    if (r->at >= r->end) {
        r->ok = 0;
        return 0;
    }
    unsigned char tag = *r->at++;
    if (tag < 0x80)
        return tag;
    if (tag >= 0xe0)
        return (int8_t)tag;
    size_t skip;
    switch (tag) {
    case 0xc0: *kind = 1; return 0;
    case 0xcc: return (int64_t)get_big_endian(r, 1);
    case 0xcd: return (int64_t)get_big_endian(r, 2);
    case 0xce: return (int64_t)get_big_endian(r, 4);
    case 0xcf: return (int64_t)get_big_endian(r, 8);
    case 0xd0: return (int8_t)get_big_endian(r, 1);
    case 0xd1: return (int16_t)get_big_endian(r, 2);
    case 0xd2: return (int32_t)get_big_endian(r, 4);
    case 0xd3: return (int64_t)get_big_endian(r, 8);
    case 0xd9: skip = (size_t)get_big_endian(r, 1); break;
    case 0xda: skip = (size_t)get_big_endian(r, 2); break;
    case 0xdb: skip = (size_t)get_big_endian(r, 4); break;
    default:
        if ((tag & 0xe0) != 0xa0) {
            r->ok = 0;
            return 0;
        }
        skip = tag & 0x1f;
    }
    *kind = 2;
    if (!r->ok || (size_t)(r->end - r->at) < skip)
        r->ok = 0;
    else
        r->at += skip;
    return 0;
}

/* A short string key: its bytes and length (fixstr or str8). */
static const unsigned char *get_key(struct reader *r, size_t *length)
{
    if (r->at >= r->end) {
        r->ok = 0;
        return NULL;
    }
    unsigned char tag = *r->at++;
    if ((tag & 0xe0) == 0xa0)
        *length = tag & 0x1f;
    else if (tag == 0xd9)
        *length = (size_t)get_big_endian(r, 1);
    else {
        r->ok = 0;
        return NULL;
    }
    if (!r->ok || (size_t)(r->end - r->at) < *length) {
        r->ok = 0;
        return NULL;
    }
    const unsigned char *key = r->at;
    r->at += *length;
    return key;
}

static int key_is(const unsigned char *key, size_t length, const char *name)
{
    return length == strlen(name) && memcmp(key, name, length) == 0;
}

/* What a reply says, as far as C reads it. */
struct sync_reply {
    int simple;          /* only known integer fields, err 0: C can finish the call */
    int readable;        /* a map of the kinds of values C reads */
    int has_seq;
    uint64_t seq;
    uint64_t free, total;
};

static void read_reply(const unsigned char *header, size_t size, struct sync_reply *reply)
{
    struct reader r = {header, header + size, 1};
    memset(reply, 0, sizeof *reply);
    reply->simple = 1;
    size_t fields = 0;
    unsigned char tag = size ? *r.at++ : 0;
    if ((tag & 0xf0) == 0x80)
        fields = tag & 0x0f;
    else if (tag == 0xde)
        fields = (size_t)get_big_endian(&r, 2);
    else
        r.ok = 0;
    for (size_t i = 0; i < fields && r.ok; i++) {
        size_t length = 0;
        const unsigned char *key = get_key(&r, &length);
        int kind = 0;
        int64_t value = r.ok ? get_value(&r, &kind) : 0;
        if (!r.ok)
            break;
        if (key_is(key, length, "seq")) {
            reply->has_seq = kind == 0;
            reply->seq = (uint64_t)value;
        } else if (kind != 0) {
            reply->simple = 0; /* a string or nil: "msg", "out" (device printf output) */
        } else if (key_is(key, length, "err")) {
            if (value != 0)
                reply->simple = 0;
        } else if (key_is(key, length, "free")) {
            reply->free = (uint64_t)value;
        } else if (key_is(key, length, "total")) {
            reply->total = (uint64_t)value;
        } else {
            reply->simple = 0; /* an integer field C does not know */
        }
    }
    reply->readable = r.ok && r.at == r.end;
    if (!reply->readable || !reply->has_seq)
        reply->simple = 0; /* Python reads it, and checks its seq */
}

/* ------------------------------------------------------------ the call */

static long long monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Write all of `parts` (MSG_NOSIGNAL: a closed lane is an error, not a
 * SIGPIPE), asking Python between the lane's SO_SNDTIMEO slices whether a
 * server that reads nothing is alive (it reads its lane between requests:
 * behind a long kernel a large copy waits).  0, or an enum lane_failure. */
static int send_parts(int device, const char *call, int fd, struct iovec *parts, int count, int *error_number)
{
    while (count) {
        struct msghdr message = {0};
        message.msg_iov = parts;
        message.msg_iovlen = (size_t)count;
        ssize_t sent = sendmsg(fd, &message, MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (!rcuda_py_lane_alive(device, call))
                    return LANE_SERVER_SILENT;
                continue;
            }
            *error_number = errno;
            return LANE_IO_ERROR;
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

/* Read exactly `size` bytes, busy-polling until `spin_until` (then blocking
 * reads in the lane's SO_RCVTIMEO slices, asking Python between them
 * whether the server is alive).  0, or an enum lane_failure. */
static int receive_exactly(int device, const char *call, int fd, unsigned char *into, size_t size,
                           long long spin_until, int *error_number)
{
    size_t have = 0;
    while (have < size) {
        int spinning = spin_until && monotonic_ns() < spin_until;
        ssize_t got = recv(fd, into + have, size - have, spinning ? MSG_DONTWAIT : 0);
        if (got > 0) {
            have += (size_t)got;
            continue;
        }
        if (got == 0)
            return LANE_CLOSED;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            *error_number = errno;
            return LANE_IO_ERROR;
        }
        if (spinning)
            sched_yield(); /* lets the server run first when it shares our CPU */
        else if (!rcuda_py_lane_alive(device, call))
            return LANE_SERVER_SILENT;
    }
    return 0;
}

/* What C sends and receives for one call. */
struct sync_call {
    enum sync_op op;
    uint64_t stream;      /* stream_sync and the copies */
    uint64_t address;     /* the copies: the device address (dst of an htod, src of a dtoh) */
    uint64_t size;        /* the copies' bytes */
    const void *outgoing; /* htod: the program's bytes, sent from where they are */
    void *incoming;       /* dtoh: where the bytes land */
    size_t free, total;   /* mem_info's answer */
};

/* The request's header (rcuda/protocol.py's fields for `op`). */
static void write_request(struct writer *w, const struct sync_call *call, uint64_t seq, uint64_t after)
{
    int copy = call->op == SYNC_HTOD || call->op == SYNC_DTOH;
    put_byte(w, copy ? 0x86 : call->op == SYNC_STREAM ? 0x84 : 0x83);
    put_str(w, "op");
    put_str(w, sync_op_names[call->op]);
    put_str(w, "seq");
    put_uint(w, seq);
    put_str(w, "after");
    put_uint(w, after);
    if (copy) {
        put_str(w, call->op == SYNC_HTOD ? "dst" : "src");
        put_uint(w, call->address);
        put_str(w, "size");
        put_uint(w, call->size);
    }
    if (copy || call->op == SYNC_STREAM) {
        put_str(w, "stream");
        put_uint(w, call->stream);
    }
}

/* The reply (u32 header length, u32 frame count, u64 per frame, header,
 * frames): its header into `*header` (the stack's `small` buffer, or one
 * malloc'ed when longer: device output can be long), a dtoh's bytes into
 * the program's buffer.  0, or an enum lane_failure. */
static int read_lane_reply(int device, const char *name, int fd, struct sync_call *call, long long spin_until,
                           unsigned char *small, unsigned char **header, uint32_t *header_size, int *error_number)
{
    uint32_t prefix[2];
    int failure = receive_exactly(device, name, fd, (unsigned char *)prefix, sizeof prefix, spin_until, error_number);
    if (failure)
        return failure;
    /* One frame only in a dtoh's answer, of the bytes asked for; none in an error's. */
    uint64_t frame = 0;
    if (prefix[1] > 1 || (prefix[1] == 1 && call->op != SYNC_DTOH) || prefix[0] == 0 ||
        prefix[0] > SYNC_REPLY_HEADER_MAX)
        return LANE_BAD_REPLY;
    if (prefix[1] == 1) {
        failure = receive_exactly(device, name, fd, (unsigned char *)&frame, sizeof frame, 0, error_number);
        if (failure)
            return failure;
        if (frame != call->size)
            return LANE_BAD_REPLY;
    }
    *header = prefix[0] <= SYNC_REPLY_MAX ? small : malloc(prefix[0]);
    if (!*header)
        return LANE_BAD_REPLY;
    *header_size = prefix[0];
    failure = receive_exactly(device, name, fd, *header, prefix[0], 0, error_number);
    if (!failure && frame)
        failure = receive_exactly(device, name, fd, call->incoming, frame, 0, error_number);
    if (!failure && call->op == SYNC_DTOH && !frame)
        call->incoming = NULL; /* nothing landed: an error reply (Python reads it), else a bad one */
    return failure;
}

/* One synchronous request on the lane, with the launches recorded before
 * it.  Returns 0 when C cannot take the call (Python makes it); else 1 with
 * *status set, and the call's answer in *call. */
static int lane_call(int device, const char *name, struct sync_call *call, cudaError_t *status)
{
    struct sync_lane *l = lane_of(device);
    if (!l || !__atomic_load_n(&l->open, __ATOMIC_ACQUIRE) || !__atomic_load_n(&l->clean, __ATOMIC_ACQUIRE) ||
        !__atomic_load_n(&devices[device].usable, __ATOMIC_ACQUIRE))
        return 0;
    if (pthread_mutex_trylock(&l->use) != 0)
        return 0; /* a call or Python's launches are on it: Python knows how to wait */
    int fd = l->fd;
    if (fd < 0) {
        pthread_mutex_unlock(&l->use);
        return 0;
    }

    /* Take the recorded launches and count both messages in one step, so
     * that no socket message that follows them in any thread is counted
     * before them (rcuda_fast_take would close `open` if Python had sealed them). */
    struct fast_device *d = &devices[device];
    pthread_mutex_lock(&l->order);
    pthread_mutex_lock(&d->lock);
    if (!__atomic_load_n(&l->open, __ATOMIC_ACQUIRE) || d->used > SYNC_LANE_MAX_PAYLOAD) {
        pthread_mutex_unlock(&d->lock);
        pthread_mutex_unlock(&l->order);
        pthread_mutex_unlock(&l->use);
        return 0;
    }
    char *batch;
    uint32_t batch_count;
    size_t batch_size = detach_batch(d, &batch, &batch_count);
    pthread_mutex_unlock(&d->lock);
    uint64_t after = l->socket_sent;
    l->lane_sent += batch_size ? 2 : 1;
    uint64_t launches_seq = batch_size ? l->next_seq++ : 0;
    uint64_t seq = l->next_seq++;
    pthread_mutex_unlock(&l->order);

    /* [launches: prefix, frame length, header, batch] [request: prefix, (frame length), header, (bytes)]
     * (rcuda/lane.py's framing) */
    unsigned char launches_head[96], request_head[128];
    struct writer w = {launches_head, launches_head + sizeof launches_head};
    uint32_t launches_prefix[2], request_prefix[2];
    uint64_t launches_frame = batch_size, request_frame = call->size;
    struct iovec parts[8];
    int count = 0;
    if (batch_size) {
        put_byte(&w, 0x84);
        put_str(&w, "op");
        put_str(&w, "launches");
        put_str(&w, "count");
        put_uint(&w, batch_count);
        put_str(&w, "seq");
        put_uint(&w, launches_seq);
        put_str(&w, "after");
        put_uint(&w, after);
        launches_prefix[0] = (uint32_t)(w.at - launches_head);
        launches_prefix[1] = 1;
        parts[count++] = (struct iovec){launches_prefix, 8};
        parts[count++] = (struct iovec){&launches_frame, 8};
        parts[count++] = (struct iovec){launches_head, launches_prefix[0]};
        parts[count++] = (struct iovec){batch, batch_size};
    }
    w = (struct writer){request_head, request_head + sizeof request_head};
    write_request(&w, call, seq, after);
    int sends_bytes = call->op == SYNC_HTOD;
    request_prefix[0] = (uint32_t)(w.at - request_head);
    request_prefix[1] = sends_bytes;
    parts[count++] = (struct iovec){request_prefix, 8};
    if (sends_bytes)
        parts[count++] = (struct iovec){&request_frame, 8};
    parts[count++] = (struct iovec){request_head, request_prefix[0]};
    if (sends_bytes)
        parts[count++] = (struct iovec){(void *)call->outgoing, call->size};

    __atomic_add_fetch(&l->calls, 1, __ATOMIC_RELAXED);
    long long started = monotonic_ns();
    int error_number = 0;
    int failure = send_parts(device, name, fd, parts, count, &error_number);
    free(batch);

    unsigned char small_header[SYNC_REPLY_MAX], *header = NULL;
    uint32_t header_size = 0;
    if (!failure) {
        long long spin = l->spin_ns[call->op];
        failure = read_lane_reply(device, name, fd, call, spin ? started + spin : 0, small_header, &header,
                                  &header_size, &error_number);
        /* As SpinPolicy: an answer within the window keeps it whole; a later one halves it. */
        long long waited = monotonic_ns() - started;
        if (waited <= l->spin_max_ns)
            l->spin_ns[call->op] = l->spin_max_ns;
        else
            l->spin_ns[call->op] = spin / 2 >= l->spin_max_ns / 16 ? spin / 2 : 0;
    }
    struct sync_reply reply;
    if (!failure) {
        read_reply(header, header_size, &reply);
        if (reply.readable && (!reply.has_seq || reply.seq != seq))
            failure = LANE_WRONG_SEQ;
        else if (reply.simple && call->op == SYNC_DTOH && !call->incoming)
            failure = LANE_BAD_REPLY; /* a dtoh's success without its bytes */
    }
    if (failure) {
        if (header != small_header)
            free(header);
        l->fd = -1; /* out of step: no call here uses it again; Python closes it */
        pthread_mutex_unlock(&l->use);
        *status = rcuda_py_lane_failed(device, name, failure, error_number);
        return 1;
    }
    pthread_mutex_unlock(&l->use);
    *status = cudaSuccess;
    if (!reply.simple) /* an error, device output, or a reply C cannot read */
        *status = rcuda_py_lane_reply(device, name, sync_op_names[call->op], seq, (const char *)header, header_size);
    if (header != small_header)
        free(header);
    if (*status == cudaSuccess && call->op == SYNC_MEM_INFO) {
        call->free = (size_t)reply.free;
        call->total = (size_t)reply.total;
    }
    return 1;
}

/* ------------------------------------------------------------ the exports' C side */

/* Each returns 1 with *status set when C made the call; 0 sends it to Python
 * (native/generated/cudart_exports.c). */

static int rcuda_c_cudaDeviceSynchronize(cudaError_t *status)
{
    struct sync_call call = {.op = SYNC_DEVICE};
    return lane_call(current_device, "cudaDeviceSynchronize", &call, status);
}

static int stream_synchronize(cudaStream_t stream, int per_thread, const char *name, cudaError_t *status)
{
    int device;
    struct sync_call call = {.op = SYNC_STREAM};
    if (!resolve_stream(stream, per_thread, &device, &call.stream))
        return 0;
    return lane_call(device, name, &call, status);
}

static int rcuda_c_cudaStreamSynchronize(cudaStream_t stream, cudaError_t *status)
{
    return stream_synchronize(stream, 0, "cudaStreamSynchronize", status);
}

static int rcuda_c_cudaStreamSynchronize_ptsz(cudaStream_t stream, cudaError_t *status)
{
    return stream_synchronize(stream, 1, "cudaStreamSynchronize", status);
}

static int rcuda_c_cudaMemGetInfo(size_t *free, size_t *total, cudaError_t *status)
{
    if (free == NULL || total == NULL)
        return 0; /* Python names the NULL */
    struct sync_call call = {.op = SYNC_MEM_INFO};
    if (!lane_call(current_device, "cudaMemGetInfo", &call, status))
        return 0;
    if (*status == cudaSuccess) {
        *free = call.free;
        *total = call.total;
    }
    return 1;
}

/* cudaMemcpy between the program's memory and one device's, in the legacy
 * stream as client/api_memory.py's memcpy makes it (the _ptds export too).
 * Only the plain cases: both pointers set, the device side inside one
 * allocation C knows, the host side outside all of them; or a copy within
 * one device, recorded as an asynchronous one.  Anything else (host to
 * host, between devices, a pointer Python must explain) is Python's. */
static int memcpy_in_c(const char *name, void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                       cudaError_t *status)
{
    if (count == 0 || dst == NULL || src == NULL)
        return 0;
    int dst_device = device_holding((uintptr_t)dst, count), src_device = device_holding((uintptr_t)src, count);
    kind = copy_kind(kind, dst_device, src_device);
    struct sync_call call = {.size = count};
    int device;
    if (kind == cudaMemcpyHostToDevice && dst_device >= 0 && src_device < 0) {
        call.op = SYNC_HTOD;
        call.address = (uintptr_t)dst;
        call.outgoing = src;
        device = dst_device;
    } else if (kind == cudaMemcpyDeviceToHost && src_device >= 0 && dst_device < 0) {
        call.op = SYNC_DTOH;
        call.address = (uintptr_t)src;
        call.incoming = dst;
        device = src_device;
    } else if (kind == cudaMemcpyDeviceToDevice && dst_device >= 0 && dst_device == src_device) {
        /* within one device CUDA does not wait either: recorded (async_fast_path.c) */
        *status = cudaSuccess;
        return record_dtod(dst_device, 0, dst, src, count);
    } else {
        return 0;
    }
    return lane_call(device, name, &call, status);
}

/* cudaMemcpyAsync into pageable memory, in `stream` (async_fast_path.c). */
static int download_on_lane(int device, const char *name, uint64_t stream, void *dst, const void *src, size_t count,
                            cudaError_t *status)
{
    struct sync_call call = {.op = SYNC_DTOH, .stream = stream, .address = (uintptr_t)src, .size = count,
                             .incoming = dst};
    return lane_call(device, name, &call, status);
}

static int rcuda_c_cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaError_t *status)
{
    return memcpy_in_c("cudaMemcpy", dst, src, count, kind, status);
}

static int rcuda_c_cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                   cudaError_t *status)
{
    return memcpy_in_c("cudaMemcpy_ptds", dst, src, count, kind, status); /* named as Python names it */
}
